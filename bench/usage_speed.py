"""Speed of the usage view, and what keeping record_usage costs, on a big index.

    python bench/usage_speed.py INDEX.db [--copy DIR] [--runs 5]

INDEX.db is an index bench/query_speed.py built (``/work/bench-1m/index.db``: 1,000,004
records). It is never changed: with --copy DIR (default: a temp dir, removed after) it is
copied there first and the copy is opened with this checkout's code, so migration m022_prices
runs on it (timed: filling record_usage from every assistant line and loading the prices).
Then, through Python's sqlite3 on the copy, the median of --runs runs (fetchall) of:
``SELECT count(*), sum(cost_usd) FROM usage`` (every call, deduped and priced), the
``usage --by project`` and ``--by day`` sums (usage.summary), the same since a week before
the newest call, ``usage_reported`` (cost-state and claude -p figures) and the health page's
usage panel query. Last, what the triggers cost at insert: every assistant line of the copy
inserted again into a scratch copy of ``records`` with and without them (in one transaction,
rolled back). Prints a table; the target (1 s for a whole-index summary) never sets the exit
status.
"""
import argparse, os, shutil, sqlite3, statistics, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexer import db as dbmod, usage, web_health  # noqa: E402


def timed(conn, sql, params=(), runs=5):
    times, rows = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        rows = conn.execute(sql, params).fetchall()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("index")
    ap.add_argument("--copy", help="copy the index into this folder (kept)")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    temp = None if args.copy else tempfile.mkdtemp(prefix="usage-speed-")
    folder = Path(args.copy or temp)
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / "index.db"
    try:
        t0 = time.perf_counter()
        shutil.copyfile(args.index, copy)
        print(f"copied {os.path.getsize(copy) / 2**20:,.0f} MB in "
              f"{time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        index = dbmod.open_db(copy)
        print(f"open (migrations, m022_prices on an older index) {time.perf_counter() - t0:.1f} s")
        conn = index.conn
        records = conn.execute("SELECT max(id) FROM records").fetchone()[0]
        lines = conn.execute("SELECT count(*) FROM record_usage").fetchone()[0]
        newest = conn.execute("SELECT max(timestamp) FROM record_usage").fetchone()[0] or ""
        week = sqlite3.connect(":memory:").execute(
            "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', ?, '-7 days')", [newest]).fetchone()[0]
        print(f"{records:,} records, {lines:,} assistant lines with usage; newest call {newest}")
        print(f"\n{'query':<44}{'ms':>10}{'rows':>9}  target")
        queries = [
            ("usage: count(*), sum(cost_usd)", "SELECT count(*), sum(cost_usd) FROM usage", {}),
            ("usage --by project", usage.summary_sql("project"), {"since": ""}),
            ("usage --by day", usage.summary_sql("day"), {"since": ""}),
            ("usage --by project --since (a week)", usage.summary_sql("project"),
             {"since": week}),
            ("usage_reported", "SELECT * FROM usage_reported", {}),
            ("health page usage panel", web_health.USAGE_PANEL_SQL, {"since": week}),
        ]
        for label, sql, params in queries:
            sec, rows = timed(conn, sql, params, args.runs)
            ok = sec < 1.0
            print(f"{label:<44}{sec * 1000:>10.0f}{len(rows):>9}  {'PASS' if ok else 'MISS'} 1 s")
        sec, rows = timed(conn, "SELECT count(*), sum(lines) FROM usage", (), 1)
        print(f"\ncalls {rows[0][0]:,} from {rows[0][1]:,} lines")
        # The triggers' cost at insert: the assistant lines again, into records.
        n = conn.execute("SELECT count(*) FROM records WHERE type = 'assistant'").fetchone()[0]
        results = {}
        for with_triggers in (False, True, False, True):
            conn.execute("BEGIN")
            if not with_triggers:
                for name in ("record_usage_insert", "record_usage_delete",
                             "record_usage_update"):
                    conn.execute(f"DROP TRIGGER {name}")
            t0 = time.perf_counter()
            conn.execute(
                "INSERT INTO records (file_id, line_no, byte_offset, session_id, uuid, type, "
                "message_id, model, request_id, timestamp, raw) "
                "SELECT file_id, line_no, byte_offset + 1000000000000, session_id, uuid, type, "
                "message_id, model, request_id, timestamp, raw FROM records "
                "WHERE type = 'assistant'")
            results.setdefault(with_triggers, []).append(time.perf_counter() - t0)
            conn.execute("ROLLBACK")
        plain, kept = min(results[False]), min(results[True])
        print(f"inserting {n:,} assistant lines again: {plain:.2f} s without the triggers, "
              f"{kept:.2f} s with them (+{kept - plain:.2f} s, "
              f"{(kept - plain) / n * 1e6:.1f} us a line)")
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main()
