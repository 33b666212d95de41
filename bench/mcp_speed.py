"""``check_session`` latency over MCP: ``session-index mcp`` on the 1M-record index.

    python bench/mcp_speed.py [--workdir DIR] [--index PATH] [--records 1000000] [--seed 1]
                              [--runs 50] [--keep]

The index is ``--index PATH`` (read as it is: the server opens it read-only and never
writes it; it must be at this code's schema), or the one ``bench/query_speed.py`` builds
(``--records``; with --workdir, built once and reused). ``session-index mcp --db INDEX`` (the
command beside this interpreter) runs as a subprocess over stdio, driven by the MCP SDK's own
client, as an agent would (CLAUDE_CONFIG_DIR an empty temp dir: no settings file or
projects/ folder of this machine takes part). For each of a few sessions (the largest, the
median, the smallest, and one of each non-resumable verdict the index has), one warm-up
call, then ``--runs`` calls of ``check_session``, each timed by the client from request to
answer: the median and p90 per session, the p50/p99 of all calls, and the server's own
``checked_in_ms`` (the check without the protocol). Prints the machine's load average
before and after: the machine is shared. Target: median under 100 ms on the 1M-record
index. Targets never set the exit status.
"""
import argparse, json, os, sqlite3, statistics, sys, tempfile, time
from pathlib import Path

from ingest_speed import SESSION_INDEX, finish, setup_workdir

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

TARGET_MS = 100.0
# The sessions timed: by size, and one per verdict that is not resumable.
SESSIONS_SQL = "SELECT session_id, records FROM sessions ORDER BY records DESC, session_id"
VERDICTS_SQL = """
SELECT verdict, min(session_id) FROM session_verdicts WHERE host = '' AND verdict != 'resumable'
GROUP BY verdict ORDER BY verdict
""".strip()


def pick(db):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        sessions = conn.execute(SESSIONS_SQL).fetchall()
        verdicts = conn.execute(VERDICTS_SQL).fetchall()
    finally:
        conn.close()
    picked = {}
    for label, (sid, records) in (("largest", sessions[0]), ("median", sessions[len(sessions) // 2]),
                                  ("smallest", sessions[-1])):
        picked.setdefault(sid, f"{label} ({records:,} records)")
    for verdict, sid in verdicts:
        picked.setdefault(sid, verdict)
    return picked


def q(values, n):
    return statistics.quantiles(values, n=100)[n - 1] if len(values) > 1 else values[0]


def measure(db, sessions, runs):
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    config = tempfile.mkdtemp(prefix="bench-mcp-config-")
    params = StdioServerParameters(command=SESSION_INDEX, args=["mcp", "--db", str(db)],
                                   env={"CLAUDE_CONFIG_DIR": config})
    results = {}

    async def main():
        started = time.perf_counter()
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                print(f"server up and initialized in {time.perf_counter() - started:.2f} s")
                for sid, label in sessions.items():
                    times, server = [], []
                    for i in range(runs + 1):
                        t0 = time.perf_counter()
                        res = await client.call_tool("check_session", {"session_id": sid})
                        wall = (time.perf_counter() - t0) * 1000
                        if res.is_error:
                            raise SystemExit(f"{sid}: {res.content[0].text}")
                        answer = json.loads(res.content[0].text)
                        if i:   # the first is the warm-up
                            times.append(wall)
                            server.append(answer["checked_in_ms"])
                    results[sid] = (label, answer["verdict"], times, server)

    anyio.run(main)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", help="keep the corpus and index here and reuse them")
    ap.add_argument("--index", help="an existing index to time (never written)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (no --workdir)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    started = time.perf_counter()
    workdir, temp = setup_workdir(args, "bench-mcp-")
    if args.index:
        db = Path(args.index).resolve()
    else:
        from query_speed import build
        db, _, _ = build(workdir, args.records, args.seed)
    records = sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute(
        "SELECT count(*) FROM records").fetchone()[0]
    print(f"index {db}: {records:,} records")
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    results = measure(db, pick(db), args.runs)
    print("load average after:  {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"\ncheck_session over MCP (stdio), {args.runs} calls each after one warm-up, ms:")
    print(f"{'session':38} {'verdict':10} {'median':>7} {'p90':>7} {'server':>7}  what")
    every = []
    for sid, (label, verdict, times, server) in results.items():
        every += times
        print(f"{sid[:38]:38} {verdict:10} {statistics.median(times):7.1f} {q(times, 90):7.1f} "
              f"{statistics.median(server):7.1f}  {label}")
    median = statistics.median(every)
    print(f"\nall calls: p50 {median:.1f} ms, p99 {q(every, 99):.1f} ms "
          f"(target: median < {TARGET_MS:.0f} ms: {'met' if median < TARGET_MS else 'NOT met'})")
    finish(workdir, temp, args.keep, started)   # (--index: the work dir is an empty temp dir)


if __name__ == "__main__":
    main()
