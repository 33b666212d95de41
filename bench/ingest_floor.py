"""Where a cold ingest's time goes, beside ``sqlite-utils insert --lines`` (issue 10's bulk figure).

    python bench/ingest_floor.py [--workdir DIR] [--repeat 3]

Uses the corpus of bench/ingest_speed.py (made there, or here with the same arguments)
and runs, alternated --repeat times, each in a fresh process:
- ``sqlite-utils insert DB lines ALL.jsonl --lines`` (wall, and its CPU from os.wait4);
- a cold ingest of the corpus into a new index, as ``session-index ingest --no-search``
  builds it (fresh_build.ingest; wall, this process's CPU, and its worker processes' CPU:
  preload.py's), and again in one process (no preload workers: what the second core costs
  in CPU for the wall time it saves);
- the index's SQLite writes alone: the records and cache rows of that index inserted into
  a new one with the same schema, with executemany (None bound as ingest binds it,
  rows.bindable), a commit every 8 MB (the serial floor
  of this schema: one writer, the records' 17 indexes);
- those writes split: the records with every index, the records with only their unique
  (file_id, byte_offset) key (what the other record indexes cost), the cache rows alone.
Prints medians, each one's wall time as a ratio to sqlite-utils' (their time / ours, so
more than 1 is faster than sqlite-utils), and its CPU with its workers' over sqlite-utils'
CPU (issue 29's target for a cold ingest: at most 1.5x). Figures only; the exit status is 0 unless a run fails.
"""
import argparse, os, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ingest_speed import SQLITE_UTILS, ensure_corpus  # noqa: E402

CHILD = r"""
import os, sys, time
mode, corpus, db, src = sys.argv[1:5]
from indexer.index import db as dbm
conn = None
if mode.startswith("writes"):
    import sqlite3
    from indexer.chain.walk import CACHE_COLUMNS, CACHE_TABLES
    conn = dbm.open_index(db, create=True).conn
    old = sqlite3.connect(src)
    tables = ([] if mode == "writes-caches" else ["records"]) + (
        [] if mode.startswith("writes-records") else [CACHE_TABLES[n] for n in CACHE_COLUMNS])
    data = {}
    for t in tables:
        cols = [r[1] for r in old.execute(f"PRAGMA table_info({t})") if r[1] != "id"]
        data[t] = (cols, old.execute(f"SELECT {', '.join(cols)} FROM {t}").fetchall())
    conn.execute("DELETE FROM files")
    if mode == "writes-records-key":   # every record index but the unique key dropped
        for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'records' "
                "AND sql IS NOT NULL AND name <> 'records_file_offset'").fetchall():
            conn.execute(f"DROP INDEX {name}")
elif mode == "real-one-process":
    from indexer.ingest import derive_worker
    derive_worker.MIN_BYTES = 1 << 62   # no ingest is big enough for the workers
t0, c0 = time.perf_counter(), time.process_time()
if conn is not None:
    from indexer.transcripts.rows import bindable
    for t, (cols, rows) in data.items():
        sql = f"INSERT INTO {t} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        raw = cols.index("raw") if "raw" in cols else None
        conn.execute("BEGIN IMMEDIATE")
        pending = 0
        for i in range(0, len(rows), 500):
            batch = rows[i:i + 500]
            conn.executemany(sql, bindable(batch))   # None as NaN, as ingest binds
            pending += sum(len(r[raw]) for r in batch) if raw is not None else 0
            if pending >= 8 << 20:
                conn.execute("COMMIT")
                conn.execute("BEGIN IMMEDIATE")
                pending = 0
        conn.execute("COMMIT")
else:
    from indexer.ingest import files, fresh_build
    fresh_build.ingest(db, lambda index: files.ingest(index, [corpus]))
import resource
workers = resource.getrusage(resource.RUSAGE_CHILDREN)   # the preload workers
print(time.perf_counter() - t0, time.process_time() - c0, workers.ru_utime + workers.ru_stime)
"""


def timed(cmd):
    """(wall s, CPU s of the child and the children it waited for)"""
    t0 = time.perf_counter()
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    out, err = p.stdout.read(), p.stderr.read()
    if os.waitstatus_to_exitcode(status):
        shown = " ".join(str(c) for c in cmd if c is not CHILD)
        sys.exit(f"{shown} failed:\n{err.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, out.decode()


def fresh(path):
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="/tmp/session-index-bench-ingest")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    corpus, _ = ensure_corpus(workdir, ["--size-mb", args.size_mb, "--seed", args.seed])
    scratch = Path(tempfile.mkdtemp(prefix="floor-", dir=workdir))
    try:
        lines = scratch / "all.jsonl"
        with open(lines, "wb") as out:
            for d, _, names in sorted(os.walk(corpus)):
                for name in sorted(names):
                    out.write((Path(d) / name).read_bytes())
        runs = (("ingest", "real"), ("  in one process", "real-one-process"),
                ("SQLite writes alone", "writes"), ("  records, every index", "writes-records"),
                ("  records, unique key only", "writes-records-key"),
                ("  cache rows", "writes-caches"))
        figures = {k: [] for k in ["sqlite-utils"] + [name for name, _ in runs]}
        for _ in range(args.repeat):
            wall, cpu, _ = timed([SQLITE_UTILS, "insert", fresh(scratch / "su.db"), "lines", lines, "--lines"])
            figures["sqlite-utils"].append((wall, cpu, 0.0))
            for name, mode in runs:
                db = fresh(scratch / f"{mode}.db")
                _, process_cpu, out = timed([sys.executable, "-c", CHILD, mode, corpus, db,
                                             scratch / "real.db"])
                wall, cpu, workers = map(float, out.split())
                if mode.startswith("real"):   # the whole process, start-up included, as sqlite-utils'
                    cpu = process_cpu - workers
                figures[name].append((wall, cpu, workers))
        floor = statistics.median(w for w, _, _ in figures["sqlite-utils"])
        floor_cpu = statistics.median(c for _, c, _ in figures["sqlite-utils"])
        print(f"ingest_floor: corpus {corpus}, {args.repeat} alternated runs, medians\n")
        print(f"{'what':28} {'wall s':>8} {'CPU s':>8} {'workers':>8} {'their wall / ours':>18} "
              f"{'CPU / theirs':>13}")
        for name, runs in figures.items():
            wall = statistics.median(w for w, _, _ in runs)
            cpu = statistics.median(c for _, c, _ in runs)
            workers = statistics.median(c for _, _, c in runs)
            print(f"{name:28} {wall:8.2f} {cpu:8.2f} {workers:8.2f} {floor / wall:17.2f}x "
                  f"{(cpu + workers) / floor_cpu:12.2f}x")
        print("\nCPU: sqlite-utils' process; the ingests' main process (start-up included, as "
              "sqlite-utils'), workers: its worker processes' (preload.py); the writes: the "
              "writes alone. Wall: the ingests' and the writes' from their start, after imports.")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
