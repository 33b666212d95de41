"""Speed of the usage view, and what keeping usage costs, on a big index and at ingest.

    python bench/usage_speed.py INDEX.db [--copy DIR] [--runs 5]
    python bench/usage_speed.py --ingest CORPUS --against CHECKOUT [--repeat 5]

With --ingest: what usage costs a cold ingest, side by side in one run: a cold
in-process ingest (``open_db`` + ``ingest()``, derive_pending included) of CORPUS (a
folder of transcripts: ``/work/bench-ingest/corpus``, 200 MB, 84k lines, which
bench/ingest_speed.py makes) by the code of CHECKOUT (e.g. ``/work/main``, before usage)
and by this checkout's, each in a child process of this interpreter with that checkout
first on sys.path, into a new index in a temp dir; alternated --repeat times. Prints
each run's wall time (open_db to the end of ingest) and CPU time (user + sys of the
child process and its children, interpreter start-up included: steadier than wall time
on a shared machine), then the median and the best of each and the difference in
percent (the target: under 3% slower).

Without --ingest:
INDEX.db is an index bench/query_speed.py built (``/work/bench-1m/index.db``: 1,000,004
records). It is never changed: with --copy DIR (default: a temp dir, removed after) it is
copied there first and the copy is opened with this checkout's code, so migration m022_prices
runs on it (timed: reading the usage columns of every assistant line from raw, building the
records_usage index and loading the prices).
Then, through Python's sqlite3 on the copy, the median of --runs runs (fetchall) of:
``SELECT count(*), sum(cost_usd) FROM usage`` (every call, deduped and priced), the
``usage --by project`` and ``--by day`` sums (usage.summary), the same since a week before
the newest call, ``usage_reported`` (cost-state and claude -p figures) and the health page's
usage panel queries (its totals and its comparison, for the week before the newest call).
Last, what the records_usage index costs at insert: every assistant line of the copy
inserted again into ``records`` with and without it (in one transaction, rolled back). Prints a table; the target (1 s for a whole-index summary) never sets the exit
status.
"""
import argparse, os, shutil, sqlite3, statistics, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexer.index import db as dbmod, usage
from session_index_web import health as web_health  # noqa: E402


# A child's cold in-process ingest: argv checkout, corpus, index; prints seconds.
COLD_INGEST = """
import sys, time
sys.path.insert(0, sys.argv[1])
import indexer.index.db, indexer.ingest.files, indexer.transcripts.lines
assert indexer.transcripts.lines.__file__.startswith(sys.argv[1]), indexer.transcripts.lines.__file__
from indexer.index import db as dbmod
from indexer.ingest import files as ingestmod
t0 = time.perf_counter()
index = dbmod.open_db(sys.argv[3])
ingestmod.ingest(index, [sys.argv[2]])
index.conn.close()
wall = time.perf_counter() - t0
print(wall)
"""


def compare_ingest(corpus, against, repeat):
    import resource, subprocess

    here = str(Path(__file__).resolve().parent.parent)
    checkouts = {"against": str(Path(against).resolve()), "this": here}
    times = {name: [] for name in checkouts}
    cpu = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory(prefix="usage-ingest-") as temp:
        for run in range(repeat):
            for name, checkout in checkouts.items():
                db = Path(temp) / f"{name}-{run}.db"
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                out = subprocess.run([sys.executable, "-c", COLD_INGEST, checkout, corpus, str(db)],
                                     capture_output=True, text=True)
                if out.returncode:
                    sys.exit(f"{name} ingest failed:\n{out.stderr[-3000:]}")
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                out = out.stdout
                times[name].append(float(out.split()[-1]))
                cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime
                                 - before.ru_stime)
                print(f"run {run + 1}: {name:<8} {checkout:<40} {times[name][-1]:7.2f} s wall "
                      f"{cpu[name][-1]:7.2f} s CPU", flush=True)
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{db}{suffix}").unlink(missing_ok=True)
    print()
    for what, figures in (("wall", times), ("CPU", cpu)):
        for label, pick in (("median", statistics.median), ("best", min)):
            a, b = pick(figures["against"]), pick(figures["this"])
            print(f"{what:<5}{label:<7} {checkouts['against']}: {a:.2f} s   this checkout: "
                  f"{b:.2f} s   {100 * (b - a) / a:+.1f}%  {'PASS' if b < a * 1.03 else 'MISS'} +3%")


def timed(conn, sql, params=(), runs=5):
    times, rows = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        rows = conn.execute(sql, params).fetchall()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("index", nargs="?")
    ap.add_argument("--copy", help="copy the index into this folder (kept)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ingest", metavar="CORPUS", help="time cold ingests of CORPUS instead")
    ap.add_argument("--against", metavar="CHECKOUT", help="with --ingest: the code to compare with")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if args.ingest:
        if not args.against:
            ap.error("--ingest needs --against CHECKOUT")
        return compare_ingest(args.ingest, args.against, args.repeat)
    if not args.index:
        ap.error("give INDEX.db, or --ingest CORPUS --against CHECKOUT")
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
        lines = conn.execute("SELECT count(*) FROM records WHERE has_usage").fetchone()[0]
        newest = conn.execute("SELECT max(timestamp) FROM records WHERE has_usage"
                              ).fetchone()[0] or ""
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
            ("health page usage panel: totals", web_health.USAGE_PANEL_SQL, {"since": week}),
            ("health page usage panel: comparison", web_health.panel_comparison_sql(),
             {"since": week}),
        ]
        for label, sql, params in queries:
            sec, rows = timed(conn, sql, params, args.runs)
            ok = sec < 1.0
            print(f"{label:<44}{sec * 1000:>10.0f}{len(rows):>9}  {'PASS' if ok else 'MISS'} 1 s")
        sec, rows = timed(conn, "SELECT count(*), sum(lines) FROM usage", (), 1)
        print(f"\ncalls {rows[0][0]:,} from {rows[0][1]:,} lines")
        # The records_usage index's cost at insert: the assistant lines again.
        n = conn.execute("SELECT count(*) FROM records WHERE type = 'assistant'").fetchone()[0]
        columns = ("file_id, line_no, byte_offset, session_id, uuid, type, message_id, model, "
                   "request_id, timestamp, raw, has_usage, input_tokens, output_tokens, "
                   "cache_read_tokens, cache_creation_tokens, cache_5m_tokens, "
                   "cache_1h_tokens, speed, service_tier")
        results = {}
        for with_index in (False, True, False, True):
            conn.execute("BEGIN")
            if not with_index:
                conn.execute("DROP INDEX records_usage")
            t0 = time.perf_counter()
            conn.execute(
                f"INSERT INTO records ({columns}) SELECT {columns.replace('byte_offset', 'byte_offset + 1000000000000')} "
                "FROM records WHERE type = 'assistant'")
            results.setdefault(with_index, []).append(time.perf_counter() - t0)
            conn.execute("ROLLBACK")
        plain, kept = min(results[False]), min(results[True])
        print(f"inserting {n:,} assistant lines again: {plain:.2f} s without records_usage, "
              f"{kept:.2f} s with it (+{kept - plain:.2f} s, "
              f"{(kept - plain) / n * 1e6:.1f} us a line)")
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main()
