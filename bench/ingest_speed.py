"""Ingest speed and memory of ``session-index ingest``, beside ``sqlite-utils insert``.

    python bench/ingest_speed.py [--workdir DIR] [--keep] [--size-mb 200] [--seed 1]
                                 [--repeat 3] [--with-nl] [--install VENV]

Makes a corpus with bench/make_corpus.py (kept and reused in --workdir if its arguments
match; else in a temp dir, removed unless --keep), copies it to a scratch tree and times,
each command a subprocess (wall time; CPU time, user + system, of that child and the
children it waited for (the preload and derive workers), and its peak RSS, from os.wait4;
the size of the index it leaves, its -wal and -shm included):
- cold ``session-index ingest CORPUS --db X --silent --json`` (search on, the default:
  the word index), the same with ``--no-search``, then with ``search --enable`` after it
  (the trigram index too: its time added) vs ``sqlite-utils insert DB lines ALL.jsonl
  --lines`` of the same lines (concatenated first, not timed; each raw line stored
  unparsed: the floor for writing these bytes to SQLite), alternated --repeat times,
  compared as ratios of medians in one run (others may load the machine: the load average
  is printed); with --with-nl also ``--nl --alter`` (each line's keys as columns);
- one more cold ingest in this process, timing derive_pending (the caches) apart;
- a no-op re-ingest of the unchanged corpus (time, % of cold, bytes_read), as a
  process (median of --repeat) and as an ingest() call;
- an incremental ingest after appending ~1% new lines to 10 main files;
- one 50 MB line appended to one file: its incremental ingest, and a second cold
  ingest of the whole corpus into a new index (memory is bounded by the largest line);
- in-process decode of every line, best of 3: ``json.loads`` vs ``indexer.transcripts.lines.parse_line``
  and ``parse_line_bytes`` (ingest's hot path).
The commands are those beside this interpreter, or with --install VENV those of a venv
the README's set-up command makes (``python3 -m venv VENV && VENV/bin/pip install .``;
an existing VENV gets this checkout installed again): a wheel install, as users have it
(an editable install adds about 25 ms of import finder to every process's start).
Prints a table and each target's pass/fail; ``measure()`` returns the figures as a dict.
Targets never set the exit status (0); only a command that fails to run does. MB = 2**20 bytes. The page cache is warm for every run.
"""
import argparse, statistics, json, os, random, shutil, subprocess, sys, tempfile, time, uuid
from collections import deque
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
SESSION_INDEX, SQLITE_UTILS = str(BIN / "session-index"), str(BIN / "sqlite-utils")
MB = 1 << 20


LAST_CPU = [0.0]   # the CPU seconds of the last run()


def run(cmd):
    """Run ``cmd``: (wall seconds, peak RSS MB of that child, stdout); its CPU
    seconds (user + system, with the children it waited for) in LAST_CPU[0]."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        LAST_CPU[0] = usage.ru_utime + usage.ru_stime
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if p.returncode:
            sys.exit(f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{err.read().decode()[-3000:]}")
        return wall, usage.ru_maxrss / 1024, out.read().decode()


def timed(cmd):
    """run(cmd) as (wall, CPU seconds, peak RSS MB, stdout)."""
    wall, rss, out = run(cmd)
    return wall, LAST_CPU[0], rss, out


def db_size(db) -> int:
    """Bytes of an index with its -wal and -shm."""
    return sum(os.path.getsize(f"{db}{suffix}") for suffix in ("", "-wal", "-shm")
               if os.path.exists(f"{db}{suffix}"))


def remove_db(db) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def install(venv) -> str:
    """The session-index of ``venv``, a wheel install of this checkout made
    by the README's set-up command (made, or this checkout installed again)."""
    venv = Path(venv)
    checkout = HERE.parent
    if not (venv / "bin" / "session-index").exists():
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(checkout)], check=True)
    else:
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps",
                        "--force-reinstall", str(checkout)], check=True, capture_output=True)
    return str(venv / "bin" / "session-index")


def ingest(corpus, db):
    wall, rss, out = run([SESSION_INDEX, "ingest", corpus, "--db", db, "--silent", "--json"])
    return wall, rss, json.loads(out)


def setup_workdir(args, prefix):
    """(the work dir, whether it is a temp dir of ours)"""
    if not args.workdir:
        return Path(tempfile.mkdtemp(prefix=prefix)), True
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    return Path(args.workdir).resolve(), False


def finish(workdir, temp, keep, started):
    print(f"\ntotal script time {time.perf_counter() - started:.1f} s")
    if temp and not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"kept {workdir}")


def ensure_corpus(workdir, gen_args):
    """workdir/corpus made by make_corpus.py with ``gen_args``, reused if it matches."""
    corpus, marker = workdir / "corpus", workdir / "corpus.json"
    gen_args = [str(a) for a in gen_args]
    if corpus.is_dir() and marker.exists() and json.loads(marker.read_text())["args"] == gen_args:
        return corpus, dict(json.loads(marker.read_text()), reused=True)
    shutil.rmtree(corpus, ignore_errors=True)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, HERE / "make_corpus.py", corpus, *gen_args],
                         check=True, capture_output=True, text=True).stdout.strip()
    info = {"args": gen_args, "make_corpus": out, "seconds": round(time.perf_counter() - t0, 1)}
    marker.write_text(json.dumps(info))
    return corpus, dict(info, reused=False)


def append_lines(paths, total, rng):
    """Append ``total`` new chain records, spread over ``paths``, each chained on the
    file's last record; bodies copied from the file's own user/assistant/progress lines."""
    lines = size = 0
    for k, path in enumerate(paths):
        recs = [json.loads(l) for l in path.read_bytes().splitlines()]
        chain = [r for r in recs if r.get("uuid") and r.get("type") in ("user", "assistant", "progress")]
        parent = [r for r in recs if r.get("uuid")][-1]["uuid"]
        t = max(datetime.fromisoformat(r["timestamp"]) for r in chain)
        new = []
        for i in range(total // len(paths) + (k < total % len(paths))):
            r = dict(rng.choice(chain), parentUuid=parent, uuid=str(uuid.UUID(int=rng.getrandbits(128), version=4)))
            r["timestamp"] = (t + timedelta(seconds=i + 1)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            parent = r["uuid"]
            new.append(json.dumps(r, separators=(",", ":"), ensure_ascii=False))
        data = ("\n".join(new) + "\n").encode()
        with open(path, "ab") as f:
            f.write(data)
        lines, size = lines + len(new), size + len(data)
    return lines, size


def append_big_line(path, mb):
    """Append one ~``mb`` MB user tool_result record to ``path``; its size in bytes."""
    last = [json.loads(l) for l in path.read_bytes().splitlines() if b'"uuid"' in l][-1]
    rec = {"parentUuid": last["uuid"], "isSidechain": False, "type": "user", "sessionId": last.get("sessionId"),
           "message": {"role": "user", "content": [{"tool_use_id": "toolu_bench", "type": "tool_result",
                                                    "content": ("big tool output line " * (mb * MB // 21))}]},
           "uuid": str(uuid.uuid4()), "timestamp": "2026-12-31T00:00:00.000Z"}
    data = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
    with open(path, "ab") as f:
        return f.write(data)


def clock(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def cold_in_process(corpus, db):
    """One cold ingest in this process: (seconds, of which derive_pending)."""
    from indexer.index import db as dbmod
    from indexer.ingest import derive, files as ingestmod
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    spent = []
    original = derive.derive_pending

    def timed_derive(index):
        t0 = time.perf_counter()
        try:
            return original(index)
        finally:
            spent.append(time.perf_counter() - t0)

    derive.derive_pending = timed_derive
    try:
        t0 = time.perf_counter()
        index = dbmod.open_db(db)
        ingestmod.ingest(index, [str(corpus)])
        total = time.perf_counter() - t0
        index.conn.close()
    finally:
        derive.derive_pending = original
    return total, sum(spent)


def measure(workdir, size_mb=200, seed=1, repeat=3, with_nl=False) -> dict:
    """Every figure (see the module docstring) for a corpus in ``workdir``:
    {"figures": {name: value}, "rows": table rows, "targets": [(ok, text)], ...}."""
    pristine, info = ensure_corpus(workdir, ["--size-mb", f"{size_mb:g}", "--seed", seed])
    scratch, corpus = workdir / "run", workdir / "run" / "corpus"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(pristine, corpus)
    files = sorted(corpus.rglob("*.jsonl"))
    all_jsonl, nfiles, nlines = scratch / "all.jsonl", len(files), 0
    with open(all_jsonl, "wb") as out:  # not timed
        for p in files:
            data = p.read_bytes().rstrip(b"\n") + b"\n"
            out.write(data)
            nlines += data.count(b"\n")
    size = all_jsonl.stat().st_size

    rows = []
    row = lambda name, wall, mbs, rss, note: rows.append((name, wall, None, mbs, rss, None, note))
    # Cold ingest and sqlite-utils, alternated --repeat times on fresh files;
    # the medians are compared (one run on a shared machine can be off by 30%).
    baselines = [("--lines", ["--lines"])] + ([("--nl", ["--nl", "--alter"])] if with_nl else [])
    colds, sus = [], {name: [] for name, _ in baselines}
    # (wall, CPU, size) of each: search on (default), --no-search, with the
    # trigram index too (search --enable after it), sqlite-utils --lines.
    sized = {name: [] for name in ("search", "no-search", "trigram", "--lines")}
    loads = []
    for i in range(repeat):
        for name in ("ours.db", "su.db", "off.db"):
            remove_db(scratch / name)
        loads.append(os.getloadavg()[0])
        colds.append(ingest(corpus, scratch / "ours.db"))
        sized["search"].append((colds[-1][0], LAST_CPU[0], db_size(scratch / "ours.db")))
        enable = timed([SESSION_INDEX, "search", "--enable", "--db", scratch / "ours.db"])
        sized["trigram"].append((colds[-1][0] + enable[0], sized["search"][-1][1] + enable[1],
                                 db_size(scratch / "ours.db")))
        off = timed([SESSION_INDEX, "ingest", corpus, "--db", scratch / "off.db", "--silent",
                     "--json", "--no-search"])
        sized["no-search"].append((off[0], off[1], db_size(scratch / "off.db")))
        for name, flags in baselines:
            remove_db(scratch / "su.db")
            sus[name].append(run([SQLITE_UTILS, "insert", scratch / "su.db", "lines", all_jsonl,
                                  *flags]))
            if name == "--lines":
                sized[name].append((sus[name][-1][0], LAST_CPU[0], db_size(scratch / "su.db")))
    loads.append(os.getloadavg()[0])
    med = {name: [statistics.median(r[k] for r in runs) for k in range(3)]
           for name, runs in sized.items()}
    remove_db(scratch / "ours.db")   # (the index the rest of the runs grow, as before: no trigram)
    colds[-1] = ingest(corpus, scratch / "ours.db")
    cold_s = statistics.median(c[0] for c in colds)
    cold_rss = max(c[1] for c in colds)
    cold = colds[-1][2]
    cold["seconds"] = statistics.median(c[2]["seconds"] for c in colds)
    su_s = {name: statistics.median(r[0] for r in runs) for name, runs in sus.items()}
    runs = ", ".join(f"{c[0]:.1f}/{r[0]:.1f}" for c, r in zip(colds, sus["--lines"]))
    su_cpu, su_size = med["--lines"][1], med["--lines"][2]
    for name, label in (("search", "cold ingest, search on (default)"),
                        ("no-search", "cold ingest --no-search"),
                        ("trigram", "cold ingest + search --enable")):
        wall, cpu, db_bytes = med[name]
        rows.append((f"{label}, median of {repeat}", wall, cpu, size / MB / wall,
                     cold_rss if name == "search" else None, db_bytes / MB,
                     f"CPU {cpu / su_cpu:.2f}x sqlite-utils, {cpu / med['no-search'][1]:.2f}x "
                     f"--no-search; index {db_bytes / size:.2f}x the transcripts, "
                     f"{db_bytes / med['no-search'][2]:.2f}x --no-search's"))
    rows.append(("sqlite-utils insert --lines, median", su_s["--lines"], su_cpu,
                 size / MB / su_s["--lines"], max(r[1] for r in sus["--lines"]), su_size / MB,
                 f"raw lines unparsed, one file; index {su_size / size:.2f}x the transcripts; "
                 f"runs ours/theirs s: {runs}; load average {min(loads):.1f}-{max(loads):.1f}"))
    row(f"cold ingest (session-index), median of {repeat}", cold_s, size / MB / cold_s,
        cold_rss, f"{cold['new_records']:,} records, {cold['bytes_read'] / MB:.1f} MB read")
    if with_nl:
        row("sqlite-utils insert --nl --alter, median", su_s["--nl"], size / MB / su_s["--nl"],
            max(r[1] for r in sus["--nl"]), "each line's JSON keys as columns")
    ip_s, derive_s = cold_in_process(corpus, scratch / "inproc.db")
    row("cold ingest, in-process: derive_pending", derive_s, None, None,
        f"{100 * derive_s / ip_s:.0f}% of that run's {ip_s:.1f} s (caches, sessions)")
    noops = [ingest(corpus, scratch / "ours.db") for _ in range(repeat)]
    noop_s = statistics.median(n[0] for n in noops)
    noop_rss = max(n[1] for n in noops)
    noop = max((n[2] for n in noops), key=lambda s: s["bytes_read"])   # (each must read 0)
    row(f"no-op re-ingest, median of {repeat}", noop_s, None, noop_rss,
        f"{100 * noop_s / cold_s:.2f}% of cold, bytes_read={noop['bytes_read']}; runs "
        + ", ".join(f"{n[0]:.3f}" for n in noops))
    from indexer.index import db as dbmod
    from indexer.ingest import files as ingestmod
    lib = dbmod.open_db(scratch / "ours.db")
    lib_s, lib_bytes = clock(lambda: ingestmod.ingest(lib, [str(corpus)]).bytes_read)
    lib.conn.close()
    row("no-op re-ingest, in-process", lib_s, None, None,
        f"{100 * lib_s / cold_s:.2f}% of cold, bytes_read={lib_bytes} (ingest() call, db already open)")
    start_s, start_rss, _ = run([SESSION_INDEX, "--help"])
    row("CLI start-up: session-index --help", start_s, None, start_rss, "interpreter + imports, no work")

    rng = random.Random(seed)
    mains = [p for p in files if "subagents" not in p.parts]
    picked = rng.sample(mains, min(10, len(mains)))
    touched = sum(p.stat().st_size for p in picked)
    app_lines, app_bytes = append_lines(picked, max(len(picked), nlines // 100), rng)
    inc_s, inc_rss, inc = ingest(corpus, scratch / "ours.db")
    row("append ~1% lines to 10 files", inc_s, app_bytes / MB / inc_s, inc_rss,
        f"+{app_lines:,} lines/{app_bytes / MB:.1f} MB to files of {touched / MB:.1f} MB; "
        f"read {inc['bytes_read'] / MB:.1f} MB, {inc['changed_files']} files")

    big = max(mains, key=lambda p: p.stat().st_size)
    big_size, big_bytes = big.stat().st_size, append_big_line(big, 50)
    bi_s, bi_rss, _ = ingest(corpus, scratch / "ours.db")
    row("incremental: one 50 MB line", bi_s, big_bytes / MB / bi_s, bi_rss,
        f"line of {big_bytes / MB:.1f} MB appended to a {big_size / MB:.1f} MB file")
    bc_s, bc_rss, bc = ingest(corpus, scratch / "big.db")
    row("cold ingest, corpus + 50 MB line", bc_s, bc["bytes_read"] / MB / bc_s, bc_rss,
        f"{bc['bytes_read'] / MB:.1f} MB read; RSS {bc_rss - cold_rss:+.0f} MB vs cold")

    from indexer.transcripts.lines import parse_line, parse_line_bytes
    lines = all_jsonl.read_bytes().split(b"\n")[:-1]
    js_s = min(clock(lambda: deque(map(json.loads, lines), 0))[0] for _ in range(3))
    pl_s = min(clock(lambda: deque(map(parse_line, lines), 0))[0] for _ in range(3))
    pb_s = min(clock(lambda: deque(map(parse_line_bytes, lines), 0))[0] for _ in range(3))
    row("decode: json.loads (best of 3)", js_s, size / MB / js_s, None, f"{len(lines):,} lines")
    row("decode: parse_line (best of 3)", pl_s, size / MB / pl_s, None, f"{js_s / pl_s:.1f}x json.loads")
    row("decode: parse_line_bytes (best of 3)", pb_s, size / MB / pb_s, None,
        f"{pl_s / pb_s:.2f}x parse_line (ingest's hot path)")

    ratio = su_s["--lines"] / cold_s
    figures = {
        "corpus_mb": size / MB, "files": nfiles, "lines": nlines, "cold_s": cold_s,
        "cold_rss_mb": cold_rss, "sqlite_utils_lines_s": su_s["--lines"],
        "sqlite_utils_nl_s": su_s.get("--nl"), "cold_vs_sqlite_utils_lines": ratio,
        "cold_in_process_s": ip_s, "derive_pending_s": derive_s,
        "noop_process_s": noop_s, "noop_process_pct_of_cold": 100 * noop_s / cold_s,
        "noop_in_process_s": lib_s, "noop_in_process_pct_of_cold": 100 * lib_s / cold_s,
        "help_process_s": start_s,
        "load_average": [min(loads), max(loads)],
        **{f"{name}_{k}": med[name][i] for name in med
           for i, k in enumerate(("wall_s", "cpu_s", "bytes"))},
    }
    ratios = {"cpu_vs_su": med["no-search"][1] / su_cpu,
              "size_vs_transcripts": med["no-search"][2] / size,
              "search_cpu": med["search"][1] / med["no-search"][1],
              "search_size": med["search"][2] / med["no-search"][2],
              "wall_vs_su": med["no-search"][0] / su_s["--lines"]}
    figures.update(ratios)
    targets = [
        (size >= 200 * MB, f"corpus >= 200 MB: {size / MB:.1f} MB"),
        (ratios["cpu_vs_su"] <= 1.5, f"cold ingest --no-search CPU <= 1.5x sqlite-utils insert "
                                     f"--lines: {ratios['cpu_vs_su']:.2f}x"),
        (ratios["size_vs_transcripts"] <= 1.4, f"index (--no-search) <= 1.4x the transcripts: "
                                               f"{ratios['size_vs_transcripts']:.2f}x"),
        (ratios["search_cpu"] <= 1.3, f"search on: cold ingest CPU <= 1.3x --no-search: "
                                      f"{ratios['search_cpu']:.2f}x"),
        (ratios["search_size"] <= 1.3, f"search on: index <= 1.3x --no-search's: "
                                       f"{ratios['search_size']:.2f}x"),
        (ratios["wall_vs_su"] <= 1, f"cold ingest --no-search wall <= sqlite-utils': "
                                    f"{ratios['wall_vs_su']:.2f}x"),
        (ratio >= 1, f"cold ingest at least as fast as sqlite-utils insert --lines "
                     f"(their time / ours): {ratio:.2f}x"),
        (noop_s / cold_s < 0.02,
         f"no-op re-ingest process < 2% of a cold ingest process: {noop_s:.3f} s / {cold_s:.3f} s "
         f"= {100 * noop_s / cold_s:.2f}% (start-up alone {start_s:.3f} s)"),
        (None, f"no-op re-ingest as ingest() time without interpreter start-up: "
               f"{lib_s:.3f} s / {cold['seconds']:.3f} s = {100 * lib_s / cold['seconds']:.2f}%"),
        (noop["bytes_read"] == 0, f"no-op re-ingest bytes_read == 0: {noop['bytes_read']}"),
        (cold_rss < 200, f"cold ingest peak RSS < 200 MB: {cold_rss:.0f} MB"),
        (None, f"cold ingest with a 50 MB line: {bc_rss:.0f} MB peak, {bc_rss - cold_rss:+.0f} MB "
               f"= {(bc_rss - cold_rss) / (big_bytes / MB):.1f} x the line over the plain cold ingest"),
        (None, f"derive_pending in a cold ingest: {derive_s:.2f} s of {ip_s:.2f} s "
               f"({100 * derive_s / ip_s:.0f}%)"),
    ]
    return {"figures": figures, "rows": rows, "targets": targets, "info": info,
            "workdir": str(workdir)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", help="keep the corpus here and reuse it on the next run")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (no --workdir)")
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="cold runs of each, alternated")
    ap.add_argument("--with-nl", action="store_true",
                    help="also time sqlite-utils insert --nl --alter (slow)")
    ap.add_argument("--install", metavar="VENV",
                    help="run the session-index and sqlite-utils of this venv, a wheel "
                         "install of this checkout (made if missing)")
    args = ap.parse_args()
    global SESSION_INDEX, SQLITE_UTILS
    if args.install:
        SESSION_INDEX = install(args.install)
        SQLITE_UTILS = str(Path(SESSION_INDEX).parent / "sqlite-utils")
    started = time.perf_counter()
    workdir, temp = setup_workdir(args, "bench-ingest-")
    r = measure(workdir, args.size_mb, args.seed, args.repeat, args.with_nl)
    f, info = r["figures"], r["info"]
    print(f"\ningest_speed: corpus {f['corpus_mb']:.1f} MB, {f['files']:,} files, {f['lines']:,} lines "
          f"(make_corpus {' '.join(info['args'])}; {'reused' if info['reused'] else 'made in %ss' % info['seconds']})")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, workdir {workdir}")
    if not args.install and os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # (an editable install then compiles its sources in every process:
        # about 0.1 s of CPU each, the main process and both workers)
        print("note: PYTHONDONTWRITEBYTECODE is set and no --install: session-index compiles "
              "its sources in each process (sqlite-utils' are compiled); use --install VENV")
    print()
    print(f"{'measurement':<46}{'wall s':>9}{'CPU s':>9}{'MB/s':>9}{'peak RSS MB':>13}"
          f"{'index MB':>10}  note")
    print("-" * 140)
    for name, wall, cpu, mbs, rss, index_mb, note in r["rows"]:
        print(f"{name:<46}{wall:>9.3f}{'' if cpu is None else f'{cpu:.2f}':>9}"
              f"{'' if mbs is None else f'{mbs:.1f}':>9}"
              f"{'' if rss is None else f'{rss:.0f}':>13}"
              f"{'' if index_mb is None else f'{index_mb:.1f}':>10}  {note}")
    print("\ntargets")
    for ok, text in r["targets"]:
        print(f"  {'INFO' if ok is None else 'PASS' if ok else 'FAIL'}  {text}")
    finish(workdir, temp, args.keep, started)


if __name__ == "__main__":
    main()
