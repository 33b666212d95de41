"""Speed of the web UI on a large index, through Datasette's own client.

    python bench/web_speed.py [--db /tmp/bq/index.db] [--runs 20] [--session-records 5000]
                              [--q WORD] [--only SUBSTRING]

The index is the one bench/query_speed.py builds (``python bench/query_speed.py
--workdir /tmp/bq``: 1,000,004 records in 10,473 files). Through
``Datasette(...).client`` (httpx, no server, the same Datasette that
``session-index serve`` makes), the median and 95th percentile of --runs
requests of: the health page; every canned query, as HTML and as .json, with
a session's id where it takes one (search_transcripts searches --q); the
session page of the session whose record count is nearest
--session-records, and of the largest session, and the largest's page
searching --q (``?q=``); the sessions list (the sessions table, newest
first) and the usage view's table page. The machine's load average is
printed beside the figures. Target (issue 29): every median under 200 ms.
"""
import argparse
import asyncio
import os
import statistics
import sqlite3
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexer.cli import web
from session_index_web import metadata as web_metadata  # noqa: E402

TARGET_S = 0.2
# A value for each canned query's named parameters ("" means "any").
PARAMS = {"cause": "", "since": "", "reason": "", "days": "7", "min_orphaned": "",
          "error_class": "", "new": "", "more_than": ""}

# The session nearest a record count, and the largest (main transcript records).
SESSION_NEAR_SQL = """
SELECT session_id, records FROM sessions ORDER BY abs(records - :n), session_id LIMIT 1
""".strip()
LARGEST_SQL = "SELECT session_id, records FROM sessions ORDER BY records DESC LIMIT 1"


def p95(values):
    values = sorted(values)
    return values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]


async def timed(ds, path, runs):
    """Median and p95 seconds of ``runs`` requests, the answer's bytes and
    the first status other than 200 (None: all 200)."""
    times, size, status = [], 0, None
    for _ in range(runs):
        t0 = time.perf_counter()
        response = await ds.client.get(path)
        times.append(time.perf_counter() - t0)
        if response.status_code != 200 and status is None:
            status = response.status_code
        size = len(response.content)
    return statistics.median(times), p95(times), size, status


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default="/tmp/bq/index.db")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--session-records", type=int, default=5000)
    ap.add_argument("--q", default="index", help="the word the search cases search for")
    ap.add_argument("--only", default="", help="run only the cases whose label holds this")
    args = ap.parse_args()
    db = Path(args.db)
    if not db.exists():
        raise SystemExit(f"{db} is missing: python bench/query_speed.py --workdir {db.parent}")
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    records = conn.execute("SELECT count(*) FROM records").fetchone()[0]
    near = conn.execute(SESSION_NEAR_SQL, {"n": args.session_records}).fetchone()
    largest = conn.execute(LARGEST_SQL).fetchone()
    conn.close()

    web.prepare_index(db)  # as `session-index serve` does: schema and views up to date
    ds = web.make_datasette(db)
    await ds.invoke_startup()
    name = db.stem
    cases = [("health page", "/-/session-health")]
    for query in web_metadata.QUERIES:
        sql = web_metadata.QUERIES[query][1]
        params = {k: v for k, v in PARAMS.items() if f":{k}" in sql}
        if ":session_id" in sql:
            params["session_id"] = near[0]
        if ":q" in sql:
            params["q"] = args.q
        query_string = urlencode(params)
        cases.append((f"{query}", f"/{name}/{query}?{query_string}"))
        cases.append((f"{query}.json", f"/{name}/{query}.json?{query_string}"))
    for sid, n in (near, largest):
        cases.append((f"session page, {n:,} records", "/-/sessions/" + quote(sid, safe="")))
    cases.append((f"session page, {largest[1]:,} records, ?q={args.q}",
                  "/-/sessions/" + quote(largest[0], safe="") + "?" + urlencode({"q": args.q})))
    cases.append(("sessions list, newest first", f"/{name}/sessions?_sort_desc=last_timestamp"))
    cases.append(("sessions list.json, newest first",
                  f"/{name}/sessions.json?_sort_desc=last_timestamp"))
    cases.append(("usage (table page)", f"/{name}/usage"))
    cases.append(("usage.json", f"/{name}/usage.json"))
    cases = [c for c in cases if args.only in c[0]]

    print(f"{db}: {records:,} records; median and p95 of {args.runs} requests through "
          "Datasette.client")
    print("| page | median | p95 | bytes | load average |\n|---|---|---|---|---|")
    slow = 0
    for label, path in cases:
        await ds.client.get(path)  # warm the page cache once
        median, high, size, status = await timed(ds, path, args.runs)
        flag = "" if median < TARGET_S else f"  **over {TARGET_S * 1000:.0f} ms**"
        flag += f"  **HTTP {status}**" if status else ""
        slow += median >= TARGET_S or bool(status)
        load = os.getloadavg()[0]
        print(f"| {label} | {median * 1000:.0f} ms | {high * 1000:.0f} ms | {size:,} | "
              f"{load:.2f} |{flag}", flush=True)
    print(f"\n{len(cases) - slow} of {len(cases)} under {TARGET_S * 1000:.0f} ms median (and HTTP 200)")


if __name__ == "__main__":
    asyncio.run(main())
