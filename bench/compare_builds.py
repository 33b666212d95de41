"""Cold ingest of one corpus by two builds of session-index, alternated in one run.

    python bench/compare_builds.py OLD_SESSION_INDEX [NEW_SESSION_INDEX] [--size-mb 40]
        [--records N] [--tool-result-kb KB] [--corpus DIR] [--repeat 3] [--no-search]
        [--on-off] [--sqlite-utils]

OLD/NEW are ``session-index`` executables (e.g. one installed from an earlier commit in
another venv; NEW defaults to the one beside this Python). Makes a corpus with
bench/make_corpus.py in a temp dir (--size-mb, --records, --tool-result-kb as there; the
1M-shaped corpus of issue 29 is ``--records 60000 --tool-result-kb 0.3``), or takes one
with --corpus, then runs ``ingest CORPUS --db X --silent --json`` (``--no-search`` with
--no-search) with each build, alternating, ``--repeat`` times, each into a new index; with
--on-off each build both with search on and with ``--no-search`` (issue 29's target: on
costs at most 1.3x the CPU and disk of off), and each build's on/off ratios; with
--sqlite-utils also ``sqlite-utils insert DB lines ALL.jsonl --lines`` of the same lines
(concatenated first, not timed), in the same rotation. Prints each one's median wall time,
CPU time (the process's and its worker processes') and index size, NEW/OLD of each, each
build's over sqlite-utils', the index over the transcripts' size, and the load average
before and after. The machine is shared and noisy: only the ratio of medians measured side
by side means anything.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ingest_floor import timed  # noqa: E402

SQLITE_UTILS = str(Path(sys.executable).parent / "sqlite-utils")
OFF = " --no-search"   # (--on-off: a build's runs without search)


def cold(binary, corpus, db, no_search):
    """(wall s, CPU s of the process and the workers it waited for, records)"""
    wall, cpu, out = timed([binary, "ingest", corpus, "--db", db, "--silent", "--json",
                            *(["--no-search"] if no_search else [])])
    return wall, cpu, json.loads(out)["new_records"]


def lines_insert(all_lines, db):
    """sqlite-utils' floor for the same bytes: each raw line stored unparsed."""
    wall, cpu, _ = timed([SQLITE_UTILS, "insert", db, "lines", all_lines, "--lines"])
    return wall, cpu, None


def transcripts(corpus):
    return sorted(p for p in Path(corpus).rglob("*.jsonl"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new", nargs="?", default=str(Path(sys.executable).parent / "session-index"))
    ap.add_argument("--size-mb", type=float, default=40)
    ap.add_argument("--records", type=int, default=0)
    ap.add_argument("--tool-result-kb", type=float, default=2)
    ap.add_argument("--corpus", help="an existing projects/ tree to ingest instead")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-search", action="store_true", help="ingest --no-search")
    ap.add_argument("--on-off", action="store_true",
                    help="each build with search on and with --no-search, in the same rotation")
    ap.add_argument("--sqlite-utils", action="store_true",
                    help="also time sqlite-utils insert --lines of the same lines")
    args = ap.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus or str(Path(tmp, "projects"))
        if not args.corpus:
            subprocess.run([sys.executable, str(HERE / "make_corpus.py"), corpus,
                            "--size-mb", str(args.size_mb), "--records", str(args.records),
                            "--tool-result-kb", str(args.tool_result_kb)],
                           check=True, capture_output=True)
        files = transcripts(corpus)
        corpus_bytes = sum(p.stat().st_size for p in files)
        all_lines = Path(tmp, "ALL.jsonl")
        names = ["old", "new"]
        if args.on_off:
            names = ["old", f"old{OFF}", "new", f"new{OFF}"]
        if args.sqlite_utils:
            with open(all_lines, "wb") as out:
                for p in files:
                    data = p.read_bytes()
                    out.write(data if data.endswith(b"\n") or not data else data + b"\n")
            names.append("sqlite-utils")
        runs = {name: [] for name in names}
        for i in range(args.repeat):
            for name in names[i % len(names):] + names[:i % len(names)]:
                db = Path(tmp, f"{name.replace(OFF, '-off')}-{i}.db")
                if name == "sqlite-utils":
                    wall, cpu, records = lines_insert(all_lines, db)
                else:
                    build = name.removesuffix(OFF)
                    wall, cpu, records = cold(getattr(args, build), corpus, db,
                                              args.no_search or name != build)
                size = sum(p.stat().st_size for p in Path(tmp).glob(f"{db.name}*"))
                runs[name].append((wall, records, cpu, size))
                for part in Path(tmp).glob(f"{db.name}*"):   # (and its -wal, -shm)
                    os.remove(part)
        print(f"corpus: {corpus_bytes / 2**20:.1f} MB in {len(files)} files, "
              f"{runs['new'][0][1]:,} records; {args.repeat} cold runs each, rotated"
              f"{', --no-search' if args.no_search else ''}")
        med = {name: [statistics.median(r[i] for r in runs[name]) for i in (0, 2, 3)]
               for name in names}
        for name in names:
            walls = [r[0] for r in runs[name]]
            cpus = [r[2] for r in runs[name]]
            print(f"{name}: median wall {med[name][0]:.2f} s "
                  f"(runs {', '.join(f'{w:.2f}' for w in walls)}), median CPU "
                  f"{med[name][1]:.2f} s (runs {', '.join(f'{c:.2f}' for c in cpus)}; "
                  f"its workers' too), index {med[name][2] / 1e6:.1f} MB "
                  f"({med[name][2] / corpus_bytes:.2f}x the transcripts)")
        for i, what in enumerate(("wall", "CPU", "index size")):
            print(f"new/old {what}: {med['new'][i] / med['old'][i]:.3f}")
        if args.on_off:
            for name in ("old", "new"):
                on, off = runs[name], runs[f"{name}{OFF}"]
                print(f"{name} search on / off: CPU {med[name][1] / med[name + OFF][1]:.3f}x "
                      f"(each rotation: {', '.join(f'{a[2] / b[2]:.3f}' for a, b in zip(on, off))}), "
                      f"wall {med[name][0] / med[name + OFF][0]:.3f}x, "
                      f"index {med[name][2] / med[name + OFF][2]:.3f}x")
        if args.sqlite_utils:
            for name in ("old", "new"):
                print(f"{name}/sqlite-utils: wall {med[name][0] / med['sqlite-utils'][0]:.2f}x, "
                      f"CPU {med[name][1] / med['sqlite-utils'][1]:.2f}x")
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")


if __name__ == "__main__":
    main()
