"""Query speed of the contract views on an index of >= 1,000,000 records.

    python bench/query_speed.py [--workdir DIR] [--keep] [--records 1000000] [--seed 1]

Makes a corpus with bench/make_corpus.py (``--records N --tool-result-kb 0.3
--size-mb 100000``: the record target stops it) and indexes it with a cold
``session-index ingest`` (timed, as a subprocess). With --workdir both are kept and
reused by the next run (the ingest figure is then the one stored when it was built);
without, they go in a temp dir, removed unless --keep.

Then, through Python's sqlite3 on the index file, the median of 5 runs (fetchall) of:
per session (the largest and a median-size one, by records) ``leaf_ancestry`` and
``orphans`` (target < 50 ms) and ``leaves`` (< 1 s); whole-index ``orphans`` by cause,
``count(*)`` of ``api_error_splices``, ``chain_breaks`` and ``duplicate_uuids``
(< 1 s). Once, with a 60 s limit (conn.interrupt from a timer thread),
``orphans_definition`` for the median session's main file: the slow definition the
caches stand in for, reported only. A query that misses its target gets its
EXPLAIN QUERY PLAN printed. Targets never set the exit status.
"""
import argparse, json, os, sqlite3, statistics, subprocess, sys, threading, time

from ingest_speed import MB, ensure_corpus, finish, ingest, setup_workdir

RUNS, RECURSIVE_TIMEOUT = 5, 60.0


def timed(conn, sql, params=()):
    times, rows = [], None
    for _ in range(RUNS):
        t0 = time.perf_counter()
        rows = conn.execute(sql, params).fetchall()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), rows


def timed_once(conn, sql, params, limit):
    """One run, interrupted after ``limit`` seconds: (seconds, rows or None)."""
    timer = threading.Timer(limit, conn.interrupt)
    timer.start()
    t0 = time.perf_counter()
    try:
        rows = conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "interrupt" not in str(exc):
            raise
        rows = None
    finally:
        timer.cancel()
    return time.perf_counter() - t0, rows


def plan(conn, sql, params):
    depth, out = {0: 0}, []
    for node, parent, _, detail in conn.execute("EXPLAIN QUERY PLAN " + sql, params):
        depth[node] = depth.get(parent, 0) + 1
        out.append("      " + "  " * depth[node] + detail)
    return "\n".join(out)


def checks(db, conn, largest, median, misses):
    """The operator signals over the whole index, and `check` for one session
    (target < 100 ms from the index; the CLI's interpreter start-up is shown
    apart). Session references: every indexed id plus 100 unknown ones."""
    from indexer.repair import check as checkmod
    from indexer.index import db as dbmod
    from indexer.ingest import refs as refsmod
    refs = db.parent / "refs.jsonl"
    ids = [r[0] for r in conn.execute("SELECT session_id FROM sessions")]
    refs.write_text("".join(json.dumps({"session_id": i, "source": "bench"}) + "\n"
                            for i in ids + [f"unknown-{n}" for n in range(100)]))
    index = dbmod.open_db(db)
    refsmod.import_refs(index, str(refs))
    for view in ("poisoned_sessions", "stale_session_refs", "expired_transcripts",
                 "failed_executions"):
        sql = f"SELECT count(*) FROM {view}"
        sec, rows = timed(conn, sql)
        ok = sec < 1.0
        print(f"{'count(*) ' + view:<38}{sec * 1000:>11.1f}{rows[0][0]:>10,}{1000:>7.0f}ms  "
              f"{'PASS' if ok else 'FAIL'}")
        if not ok:
            misses.append((view, sql, []))
    for label, (sid, _, _) in (("largest", largest), ("median", median)):
        times = []
        for _ in range(RUNS):
            t0 = time.perf_counter()
            verdict = checkmod.check(index, sid)
            times.append(time.perf_counter() - t0)
        sec = statistics.median(times)
        ok = sec < 0.1
        print(f"{'check, ' + label + ' session':<38}{sec * 1000:>11.1f}{verdict.verdict:>10}"
              f"{100:>7.0f}ms  {'PASS' if ok else 'FAIL'}")
        if not ok:
            misses.append((f"check {label}", checkmod.POISONED_SQL, [sid]))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "indexer", "check", largest[0], "--db", str(db)],
                   capture_output=True)
    print(f"{'check as a CLI process, largest':<38}{(time.perf_counter() - t0) * 1000:>11.1f}"
          f"{'':>10}{'report':>9}  (includes interpreter start-up and imports)")
    index.conn.close()


def build(workdir, records, seed):
    corpus, info = ensure_corpus(workdir, ["--records", records, "--tool-result-kb", "0.3",
                                           "--size-mb", "100000", "--seed", seed])
    db, meta_path = workdir / "index.db", workdir / "index.json"
    if db.exists() and meta_path.exists() and json.loads(meta_path.read_text())["corpus"] == info["args"]:
        # A no-op re-ingest brings an index built by an older version up to
        # date (migrations, views, caches whose definitions changed).
        wall, _, summary = ingest(corpus, db)
        print(f"reused index: re-ingest (upgrade, no new lines) took {wall:.1f} s")
        return db, info, dict(json.loads(meta_path.read_text()), reused=True)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{db}{suffix}"):
            os.remove(f"{db}{suffix}")
    wall, rss, summary = ingest(corpus, db)
    meta = {"corpus": info["args"], "seconds": wall, "rss_mb": rss, "summary": summary}
    meta_path.write_text(json.dumps(meta))
    return db, info, dict(meta, reused=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", help="keep the corpus and index here and reuse them")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (no --workdir)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    started = time.perf_counter()
    workdir, temp = setup_workdir(args, "bench-query-")
    db, info, meta = build(workdir, args.records, args.seed)
    conn = sqlite3.connect(db)
    n_records, n_files, n_sessions = conn.execute(
        "SELECT (SELECT count(*) FROM records), (SELECT count(*) FROM files), "
        "(SELECT count(*) FROM sessions)").fetchone()
    by_size = conn.execute("SELECT session_id, records, main_file_id FROM sessions "
                           "ORDER BY records DESC, session_id").fetchall()
    largest, median = by_size[0], by_size[len(by_size) // 2]
    s = meta["summary"]
    print(f"\nquery_speed: {n_records:,} records in {n_files:,} files, {n_sessions:,} sessions; "
          f"index {os.path.getsize(db) / MB:,.0f} MB at {db}")
    print(f"corpus: make_corpus {' '.join(info['args'])} ({'reused' if info['reused'] else 'made in %ss' % info['seconds']})")
    print(f"cold ingest of this index: {meta['seconds']:.1f} s, {s['bytes_read'] / MB:,.0f} MB at "
          f"{s['bytes_read'] / MB / meta['seconds']:.1f} MB/s, {s['new_records'] / meta['seconds']:,.0f} records/s, "
          f"peak RSS {meta['rss_mb']:.0f} MB{' (stored when the index was built)' if meta['reused'] else ''}")
    print(f"sessions: largest {largest[0]} ({largest[1]:,} records), "
          f"median {median[0]} ({median[1]:,} records); median of {RUNS} runs each\n")

    q = "SELECT * FROM {} WHERE session_id = ?"
    cases = []
    for label, (sid, _, _) in (("largest", largest), ("median", median)):
        cases += [(f"leaf_ancestry, {label} session", q.format("leaf_ancestry"), [sid], 0.05),
                  (f"orphans, {label} session", q.format("orphans"), [sid], 0.05),
                  (f"leaves, {label} session", q.format("leaves"), [sid], 1.0)]
    cases += [("orphans by cause, whole index", "SELECT cause, count(*) FROM orphans GROUP BY cause", [], 1.0)]
    cases += [(f"count(*) {v}", f"SELECT count(*) FROM {v}", [], 1.0)
              for v in ("api_error_splices", "chain_breaks", "duplicate_uuids")]
    print(f"{'query':<38}{'median ms':>11}{'rows':>10}{'target':>9}  result")
    print("-" * 80)
    misses, by_cause = [], None
    for name, sql, params, target in cases:
        sec, rows = timed(conn, sql, params)
        ok = sec < target
        shown = rows[0][0] if name.startswith("count") else len(rows)
        print(f"{name:<38}{sec * 1000:>11.1f}{shown:>10,}{target * 1000:>7.0f}ms  {'PASS' if ok else 'FAIL'}")
        by_cause = rows if name.startswith("orphans by cause") else by_cause
        if not ok:
            misses.append((name, sql, params))
    checks(db, conn, largest, median, misses)
    sec, rows = timed_once(conn, "SELECT * FROM orphans_definition WHERE file_id = ?", [median[2]],
                           RECURSIVE_TIMEOUT)
    cached = conn.execute("SELECT count(*) FROM orphans WHERE file_id = ?", [median[2]]).fetchone()[0]
    print(f"{'orphans_definition, median main file':<38}{sec * 1000:>11.1f}"
          f"{'-' if rows is None else f'{len(rows):,}':>10}{'report':>9}  "
          + (f"interrupted after {RECURSIVE_TIMEOUT:.0f} s" if rows is None else
             f"{'same count as' if len(rows) == cached else 'DIFFERS from'} the cache ({cached})")
          + f" (file_id {median[2]}, run once)")
    print("\norphans by cause: " + ", ".join(f"{c} {n:,}" for c, n in by_cause))
    print(f"\ntargets\n  {'PASS' if n_records >= args.records else 'FAIL'}  index of >= {args.records:,} "
          f"records: {n_records:,}")
    print(f"  {'PASS' if not misses else 'FAIL'}  every timed query within its target"
          + (f" ({len(misses)} missed)" if misses else ""))
    for name, sql, params in misses:
        print(f"\nEXPLAIN QUERY PLAN ({name}): {sql}\n{plan(conn, sql, params)}")
    conn.close()
    finish(workdir, temp, args.keep, started)


if __name__ == "__main__":
    sys.exit(main())
