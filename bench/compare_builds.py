"""Cold ingest of one corpus by two builds of session-index, alternated in one run.

    python bench/compare_builds.py OLD_SESSION_INDEX [NEW_SESSION_INDEX] [--size-mb 40] [--repeat 3]

OLD/NEW are ``session-index`` executables (e.g. one installed from an earlier commit in
another venv; NEW defaults to the one beside this Python). Makes a corpus with
bench/make_corpus.py in a temp dir, then runs ``ingest CORPUS --db X --silent --json`` with
each build, alternating, ``--repeat`` times, each into a new index. Prints each build's
median wall time, CPU time (the process's and its worker processes') and index size, and
NEW/OLD of each. The machine is shared
and noisy: only the ratio of medians measured side by side means anything.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ingest_floor import timed  # noqa: E402


def cold(binary, corpus, db):
    """(wall s, CPU s of the process and the workers it waited for, its summary)"""
    wall, cpu, out = timed([binary, "ingest", corpus, "--db", db, "--silent", "--json"])
    return wall, cpu, json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new", nargs="?", default=str(Path(sys.executable).parent / "session-index"))
    ap.add_argument("--size-mb", type=float, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp, "projects")
        subprocess.run([sys.executable, str(HERE / "make_corpus.py"), str(corpus),
                        "--size-mb", str(args.size_mb)], check=True, capture_output=True)
        runs = {"old": [], "new": []}
        for i in range(args.repeat):
            for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
                db = Path(tmp, f"{name}-{i}.db")
                wall, cpu, summary = cold(getattr(args, name), corpus, db)
                size = sum(p.stat().st_size for p in Path(tmp).glob(f"{db.name}*"))
                runs[name].append((wall, summary["seconds"], summary["new_records"], cpu, size))
                for part in Path(tmp).glob(f"{db.name}*"):   # (and its -wal, -shm)
                    os.remove(part)
        print(f"corpus: {args.size_mb:g} MB, {runs['new'][0][2]:,} records; {args.repeat} cold "
              f"ingests each, alternated")
        for name in ("old", "new"):
            walls = [r[0] for r in runs[name]]
            print(f"{name}: median wall {statistics.median(walls):.2f} s "
                  f"(runs {', '.join(f'{w:.2f}' for w in walls)}), median CPU "
                  f"{statistics.median(r[3] for r in runs[name]):.2f} s (its workers' too), "
                  f"index {statistics.median(r[4] for r in runs[name]) / 1e6:.1f} MB")
        for i, what in ((0, "wall"), (3, "CPU"), (4, "index size")):
            ratio = (statistics.median(r[i] for r in runs["new"])
                     / statistics.median(r[i] for r in runs["old"]))
            print(f"new/old {what}: {ratio:.3f}")


if __name__ == "__main__":
    main()
