"""Ingest speed and memory of ``session-index ingest``, beside ``sqlite-utils insert``.

    python bench/ingest_speed.py [--workdir DIR] [--keep] [--size-mb 200] [--seed 1]

Makes a corpus with bench/make_corpus.py (kept and reused in --workdir if its arguments
match; else in a temp dir, removed unless --keep), copies it to a scratch tree and times,
each command a subprocess (wall time; that child's peak RSS from os.wait4):
- cold ``session-index ingest CORPUS --db X --silent --json`` vs ``sqlite-utils insert
  DB lines ALL.jsonl --nl --alter`` of the same lines (concatenated first, not timed);
- a no-op re-ingest of the unchanged corpus (time, % of cold, bytes_read);
- an incremental ingest after appending ~1% new lines to 10 main files;
- one 50 MB line appended to one file: its incremental ingest, and a second cold
  ingest of the whole corpus into a new index (memory is bounded by the largest line);
- in-process decode of every line, best of 3: ``json.loads`` vs ``indexer.lines.parse_line``.
Prints a table and each target's pass/fail. Targets never set the exit status (0); only a
command that fails to run does. MB = 2**20 bytes. The page cache is warm for every run.
"""
import argparse, statistics, json, os, random, shutil, subprocess, sys, tempfile, time, uuid
from collections import deque
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
SESSION_INDEX, SQLITE_UTILS = str(BIN / "session-index"), str(BIN / "sqlite-utils")
MB = 1 << 20


def run(cmd):
    """Run ``cmd``: (wall seconds, peak RSS MB of that child, stdout)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if p.returncode:
            sys.exit(f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{err.read().decode()[-3000:]}")
        return wall, usage.ru_maxrss / 1024, out.read().decode()


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", help="keep the corpus here and reuse it on the next run")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (no --workdir)")
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="cold runs of each, alternated")
    args = ap.parse_args()
    started = time.perf_counter()
    workdir, temp = setup_workdir(args, "bench-ingest-")
    pristine, info = ensure_corpus(workdir, ["--size-mb", f"{args.size_mb:g}", "--seed", args.seed])
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
    row = lambda *r: rows.append(r)
    # Cold ingest and sqlite-utils, alternated --repeat times on fresh files;
    # the medians are compared (one run on a shared machine can be off by 30%).
    colds, sus = [], []
    for i in range(args.repeat):
        for name in ("ours.db", "su.db"):
            for suffix in ("", "-wal", "-shm"):
                Path(f"{scratch / name}{suffix}").unlink(missing_ok=True)
        colds.append(ingest(corpus, scratch / "ours.db"))
        sus.append(run([SQLITE_UTILS, "insert", scratch / "su.db", "lines", all_jsonl, "--nl", "--alter"]))
    cold_s = statistics.median(c[0] for c in colds)
    cold_rss = max(c[1] for c in colds)
    cold = colds[-1][2]
    cold["seconds"] = statistics.median(c[2]["seconds"] for c in colds)
    su_s = statistics.median(r[0] for r in sus)
    su_rss = max(r[1] for r in sus)
    runs = ", ".join(f"{c[0]:.1f}/{r[0]:.1f}" for c, r in zip(colds, sus))
    row(f"cold ingest (session-index), median of {args.repeat}", cold_s, size / MB / cold_s,
        cold_rss, f"{cold['new_records']:,} records, {cold['bytes_read'] / MB:.1f} MB read")
    row("sqlite-utils insert --nl --alter, median", su_s, size / MB / su_s, su_rss,
        f"same lines, one file; runs ours/theirs s: {runs}")
    noop_s, noop_rss, noop = ingest(corpus, scratch / "ours.db")
    row("no-op re-ingest", noop_s, None, noop_rss,
        f"{100 * noop_s / cold_s:.2f}% of cold, bytes_read={noop['bytes_read']}")
    from indexer import db as dbmod, ingest as ingestmod
    lib = dbmod.open_db(scratch / "ours.db")
    lib_s, lib_bytes = clock(lambda: ingestmod.ingest(lib, [str(corpus)]).bytes_read)
    lib.conn.close()
    row("no-op re-ingest, in-process", lib_s, None, None,
        f"{100 * lib_s / cold_s:.2f}% of cold, bytes_read={lib_bytes} (ingest() call, db already open)")
    start_s, start_rss, _ = run([SESSION_INDEX, "--help"])
    row("CLI start-up: session-index --help", start_s, None, start_rss, "interpreter + imports, no work")

    rng = random.Random(args.seed)
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

    from indexer.lines import parse_line
    lines = all_jsonl.read_bytes().split(b"\n")[:-1]
    js_s = min(clock(lambda: deque(map(json.loads, lines), 0))[0] for _ in range(3))
    pl_s = min(clock(lambda: deque(map(parse_line, lines), 0))[0] for _ in range(3))
    row("decode: json.loads (best of 3)", js_s, size / MB / js_s, None, f"{len(lines):,} lines")
    row("decode: parse_line (best of 3)", pl_s, size / MB / pl_s, None, f"{js_s / pl_s:.1f}x json.loads")

    ratio = su_s / cold_s
    targets = [
        (size >= 200 * MB, f"corpus >= 200 MB: {size / MB:.1f} MB"),
        (ratio >= 2, f"cold ingest >= 2x sqlite-utils insert: {ratio:.2f}x"),
        (lib_s / cold["seconds"] < 0.02,
         f"no-op re-ingest < 2% of cold, both as ingest() time without interpreter start-up: "
         f"{lib_s:.3f} s / {cold['seconds']:.3f} s = {100 * lib_s / cold['seconds']:.2f}%"),
        (None, f"no-op re-ingest as a fresh CLI process: {noop_s:.3f} s "
               f"({100 * noop_s / cold_s:.2f}% of the cold CLI run; start-up alone {start_s:.3f} s)"),
        (noop["bytes_read"] == 0, f"no-op re-ingest bytes_read == 0: {noop['bytes_read']}"),
        (cold_rss < 200, f"cold ingest peak RSS < 200 MB: {cold_rss:.0f} MB"),
        (None, f"cold ingest with a 50 MB line: {bc_rss:.0f} MB peak, {bc_rss - cold_rss:+.0f} MB "
               f"= {(bc_rss - cold_rss) / (big_bytes / MB):.1f} x the line over the plain cold ingest"),
    ]
    print(f"\ningest_speed: corpus {size / MB:.1f} MB, {nfiles:,} files, {nlines:,} lines "
          f"(make_corpus {' '.join(info['args'])}; {'reused' if info['reused'] else 'made in %ss' % info['seconds']})")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, workdir {workdir}\n")
    print(f"{'measurement':<36}{'wall s':>9}{'MB/s':>9}{'peak RSS MB':>13}  note")
    print("-" * 110)
    for name, wall, mbs, rss, note in rows:
        print(f"{name:<36}{wall:>9.3f}{'' if mbs is None else f'{mbs:.1f}':>9}"
              f"{'' if rss is None else f'{rss:.0f}':>13}  {note}")
    print("\ntargets")
    for ok, text in targets:
        print(f"  {'INFO' if ok is None else 'PASS' if ok else 'FAIL'}  {text}")
    finish(workdir, temp, args.keep, started)


if __name__ == "__main__":
    main()
