"""What format-drift tracking costs on an index of >= 1,000,000 records.

    python bench/record_types_speed.py [--index /work/bench-1m/index.db] [--workdir DIR]

The index (default: the one bench/query_speed.py keeps in /work/bench-1m) is
copied first (SQLite's backup API, from a read-only connection), so the
original is never upgraded or written. On the copy, once each:

- the upgrade to migration m023: counting every transcript record's kind
  (migrations._m023_count_kinds), what a cold ingest of the same records adds at
  its end (record_kinds.after_ingest counts them the same way);
- counting the largest transcript again from its first record (a rewrite);

then the median of 5 runs of: the record_types view (all rows), the new
kinds (status, the health page), the record-types listing, and
record_kinds.after_ingest with nothing to count (what every ingest run, a
plain no-op one included, pays). Targets: the view and the listings under
100 ms, a no-op after_ingest under 10 ms. Targets never set the exit status.

With ``--corpus-mb N`` (default 200; 0 skips it) it also makes a
bench/make_corpus.py corpus of N MB (seed 1) and ingests it cold, in this
process, timing record_kinds.after_ingest inside the run (its share of the
cold ingest), then appends 10 records to each of 10 sessions and ingests
again (after_ingest's time in that run).
"""
import argparse, json, os, shutil, sqlite3, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from indexer.index import db as dbmod, record_kinds
from indexer.sql import write_lock  # noqa: E402
from indexer.ingest import files as ingestmod  # noqa: E402

RUNS = 5


def median_ms(fn):
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def copy_index(source: str, target: str) -> float:
    t0 = time.perf_counter()
    src = sqlite3.connect(dbmod.readonly_uri(source), uri=True)
    dst = sqlite3.connect(target)
    src.backup(dst)
    dst.close()
    src.close()
    return time.perf_counter() - t0


def cold_ingest_share(workdir: str, size_mb: float) -> None:
    """A cold in-process ingest of a fresh corpus, after_ingest timed inside it."""
    corpus = os.path.join(workdir, "corpus")
    shutil.rmtree(corpus, ignore_errors=True)
    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "make_corpus.py"),
                    corpus, "--size-mb", str(size_mb), "--seed", "1"], check=True,
                   capture_output=True)
    spent = []
    original = record_kinds.after_ingest

    def timed_after_ingest(db):
        t0 = time.perf_counter()
        original(db)
        spent.append(time.perf_counter() - t0)

    record_kinds.after_ingest = timed_after_ingest
    try:
        path = os.path.join(workdir, "cold.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        db = dbmod.open_db(path)
        t0 = time.perf_counter()
        summary = ingestmod.ingest(db, [corpus])
        total = time.perf_counter() - t0
        print(f"cold ingest of {size_mb:g} MB ({summary.new_records:,} records): {total:.2f} s, "
              f"after_ingest {spent[-1]:.2f} s = {spent[-1] / total:.1%} of it")
        sessions = sorted(
            (os.path.join(root, name) for root, _, names in os.walk(corpus) for name in names
             if name.endswith(".jsonl") and "subagents" not in root))[:10]
        for path in sessions:
            with open(path, "a") as f:
                for n in range(10):
                    f.write(json.dumps({"type": "mode", "mode": f"m{n}", "sessionId": "x"}) + "\n")
        t0 = time.perf_counter()
        ingestmod.ingest(db, [corpus])
        total = time.perf_counter() - t0
        print(f"appending 10 records to 10 sessions: ingest {total * 1000:.1f} ms, "
              f"after_ingest {spent[-1] * 1000:.1f} ms")
        db.conn.close()
    finally:
        record_kinds.after_ingest = original


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", default="/work/bench-1m/index.db")
    ap.add_argument("--workdir", default=None, help="where the copy goes (default: a temp dir, "
                                                    "removed at the end)")
    ap.add_argument("--corpus-mb", type=float, default=200)
    args = ap.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="record-types-bench-")
    os.makedirs(workdir, exist_ok=True)
    copy = os.path.join(workdir, "index.db")
    try:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(copy + suffix):
                os.remove(copy + suffix)
        print(f"copy of {args.index}: {copy_index(args.index, copy):.1f} s")
        conn = sqlite3.connect(copy)
        records = conn.execute("SELECT count(*) FROM records").fetchone()[0]
        files = conn.execute("SELECT count(*) FROM files").fetchone()[0]
        applied = conn.execute("SELECT 1 FROM _sqlite_migrations WHERE name = ?",
                               ["m023_record_kinds"]).fetchone()
        conn.close()
        print(f"index: {records:,} records in {files:,} files")

        t0 = time.perf_counter()
        db = dbmod.open_db(copy)   # the upgrade: m023 counts every record
        upgrade = time.perf_counter() - t0
        print(f"{'upgrade to m023 (counts every record)':<52}"
              f"{upgrade:>9.2f} s" + ("  (m023 was applied already)" if applied else ""))
        conn = db.conn
        kinds = conn.execute("SELECT count(*) FROM record_types").fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM record_kind_files").fetchone()[0]
        print(f"  {kinds} kinds; record_kind_files: {rows:,} rows")

        largest, n = conn.execute(
            "SELECT file_id, count(*) AS n FROM records GROUP BY file_id "
            "ORDER BY n DESC LIMIT 1").fetchone()
        with write_lock(db) as c:
            record_kinds.forget_file(c, largest)
            t0 = time.perf_counter()
            record_kinds.count_file(c, largest, run=None, now=None)
            whole = time.perf_counter() - t0
        print(f"{f'count the largest file again ({n:,} records)':<52}{whole * 1000:>9.1f} ms")

        misses = 0
        for label, sql, params, target in (
                ("SELECT * FROM record_types", "SELECT * FROM record_types", (), 100),
                ("new kinds (status, health page)", record_kinds.NEW_KINDS_SQL, (), 100),
                ("record-types listing", record_kinds.LIST_SQL, {"new": 0, "since": ""}, 100)):
            ms = median_ms(lambda: conn.execute(sql, params).fetchall())
            ok = ms < target
            misses += not ok
            print(f"{label:<52}{ms:>9.1f} ms  (target < {target} ms) {'PASS' if ok else 'FAIL'}")
        ms = median_ms(lambda: record_kinds.after_ingest(db))
        ok = ms < 10
        misses += not ok
        print(f"{'after_ingest, nothing to count (every ingest run)':<52}{ms:>9.1f} ms  "
              f"(target < 10 ms) {'PASS' if ok else 'FAIL'}")
        conn.close()
        print("every figure within its target" if not misses else f"{misses} missed")
        if args.corpus_mb:
            cold_ingest_share(workdir, args.corpus_mb)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
