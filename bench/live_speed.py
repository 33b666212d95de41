"""The index as a live service: what one append costs, by session size.

    python bench/live_speed.py [--sizes 200,2000,20000,100000] [--appends 20]
                               [--store-sizes 200,2000,20000] [--watch-n 100]
                               [--skip-watch] [--skip-startup] [--seed 1] [--json]

1. One-line append, in-process ``indexer.ingest.files.ingest`` of the session's folder
   after appending one record to a main session of N records (shaped like a
   live session: prompts, split assistant messages, parallel tool calls and
   their results, progress, hooks, last-prompt checkpoints): median / p90 of
   --appends appends, and how derive took each (``appended``: extended by
   derive_append.py; ``recomputed``). Beside it, the same append with the
   file's extension state dropped, which makes derive recompute the whole
   file (what every append cost before): the ratio is measured side by side.
   Twice: the session written as Claude Code writes it (compact JSON), and
   written with spaces after colons and commas (another tool's, or a
   person's). Target, for both: the 20,000 case at most 2x the 200 case.
2. Store appends (``IndexSessionStore.append`` of 5 entries) to copies of
   --store-sizes entries: p50 / p99 by size (target: flat).
3. Write-to-visible latency under ``ingest --watch`` (bench/watch_latency.py,
   --watch-n appends): p50 / p99 (target: p99 under 1 s).
4. With --startup-workdir DIR (an index built by bench/query_speed.py there):
   ``session-index check`` as a fresh process, median of --startup-runs
   (bench/startup_speed.measure; target < 100 ms).
5. With --bulk-workdir DIR (bench/ingest_speed.py's corpus there, made if
   missing): a no-op ingest process vs a cold one (target < 2%) and cold
   ingest vs ``sqlite-utils insert --lines`` side by side (target >= 1x)
   (bench/ingest_speed.measure).
Targets never set the exit status.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def percentile(values, q):
    values = sorted(values)
    if not values:
        return None
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


class Session:
    """Records of one live-shaped session, generated as they are written."""

    def __init__(self, rng: random.Random, session_id: str):
        self.rng, self.session_id = rng, session_id
        self.n, self.clock, self.leaf, self.turn = 0, 1_760_000_000_000, None, 0

    def _rec(self, type_, parent, **fields):
        self.n += 1
        self.clock += self.rng.randrange(5, 1500)
        t = self.clock
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t // 1000)) + ".%03dZ" % (t % 1000)
        uuid = f"{self.session_id[:8]}-{self.n:07d}-4000-8000-000000000000"
        return {"parentUuid": parent, "isSidechain": False, "userType": "external",
                "cwd": "/home/user/proj", "sessionId": self.session_id, "version": "2.1.332",
                "type": type_, "uuid": uuid, "timestamp": stamp, **fields}

    def text(self, n):
        return " ".join(self.rng.choice(("index", "leaf", "chain", "parent", "tool", "file",
                                         "session", "record", "the", "a")) for _ in range(n))

    def reply(self):
        """One assistant text record chained on the leaf (the appended line)."""
        r = self._rec("assistant", self.leaf, message={
            "id": f"msg_{self.n}", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": self.text(60)}]})
        self.leaf = r["uuid"]
        return r

    def turn_records(self):
        rng, out = self.rng, []
        self.turn += 1
        u = self._rec("user", self.leaf, message={"role": "user", "content": self.text(20)})
        out.append(u)
        leaf = u["uuid"]
        for step in range(rng.randrange(1, 4)):
            mid = f"msg_{self.turn}_{step}"
            a = self._rec("assistant", leaf, message={"id": mid, "role": "assistant", "content": [
                {"type": "text", "text": self.text(40)}]})
            out.append(a)
            leaf = a["uuid"]
            uses = []
            for c in range(rng.choice([1, 1, 2, 3])):
                t = self._rec("assistant", leaf, message={"id": mid, "role": "assistant", "content": [
                    {"type": "tool_use", "id": f"tu{self.n}", "name": "Bash", "input": {}}]})
                out.append(t)
                uses.append(t)
                leaf = t["uuid"]
            for t in uses:
                if rng.random() < 0.5:
                    out.append(self._rec("progress", t["uuid"], data={"type": "bash_progress"}))
                r = self._rec("user", t["uuid"], message={"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": t["message"]["content"][0]["id"],
                     "content": self.text(rng.randrange(20, 300))}]})
                out.append(r)
                leaf = r["uuid"]
        s = self._rec("system", leaf, subtype="stop_hook_summary")
        out.append(s)
        out.append({"type": "last-prompt", "lastPrompt": "p", "leafUuid": leaf,
                    "sessionId": self.session_id})
        self.leaf = s["uuid"]
        return out

    def records(self, n):
        out = []
        while len(out) < n:
            out += self.turn_records()
        return out


# How a session's lines are written: compact, as Claude Code writes them, or
# with spaces after colons and commas, as another tool (or a person) may.
SEPARATORS = {"compact": (",", ":"), "spaced": (", ", ": ")}


def _write(path: Path, records, mode="w", spacing="compact"):
    with open(path, mode) as f:
        f.writelines(json.dumps(r, separators=SEPARATORS[spacing]) + "\n" for r in records)


def one_line_appends(sizes, appends, seed, spacing="compact") -> list[dict]:
    from indexer.ingest import derive
    from indexer.index.db import open_db
    from indexer.ingest.files import ingest

    rows = []
    for size in sizes:
        base = Path(tempfile.mkdtemp(prefix="live-speed-"))
        try:
            rng = random.Random(seed + size)
            folder = base / "projects" / "-home-user-proj"
            folder.mkdir(parents=True)
            session = Session(rng, f"{size:08d}-5555-4000-8000-000000000000")
            path = folder / f"{session.session_id}.jsonl"
            _write(path, session.records(size), spacing=spacing)
            db = open_db(base / "index.db")
            t0 = time.perf_counter()
            ingest(db, [str(folder)])
            cold = time.perf_counter() - t0
            records = db.conn.execute("SELECT count(*) FROM records").fetchone()[0]
            timings = {"extended": [], "recomputed": []}
            paths = {"extended": Counter(), "recomputed": Counter()}
            for i in range(appends * 2):
                how = "extended" if i % 2 == 0 else "recomputed"
                if how == "recomputed":  # drop the extension state: derive recomputes the file
                    db.conn.execute("UPDATE leaves_cache SET derive_state = NULL")
                _write(path, [session.reply()], "a", spacing=spacing)
                before = dict(derive.STATS)
                t0 = time.perf_counter()
                ingest(db, [str(folder)])
                timings[how].append(time.perf_counter() - t0)
                for k in ("appended", "recomputed"):
                    paths[how][k] += derive.STATS[k] - before.get(k, 0)
            db.conn.close()
            rows.append({"records": records, "cold_ingest_s": round(cold, 3),
                         **{f"{how}_{q}_ms": round(1000 * f(t), 1)
                            for how, t in timings.items()
                            for q, f in (("p50", statistics.median),
                                         ("p90", lambda v: percentile(v, 90)))},
                         "derive_paths": {how: dict(c) for how, c in paths.items()}})
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return rows


def store_appends(sizes, seed, appends=40) -> list[dict]:
    from indexer.ingest.store import IndexSessionStore

    async def run(base):
        rows = []
        store = IndexSessionStore(base / "index.db")
        try:
            for size in sizes:
                rng = random.Random(seed + size)
                session = Session(rng, f"{size:08d}-6666-4000-8000-000000000000")
                key = {"project_key": "-home-user-proj", "session_id": session.session_id}
                records = session.records(size)
                for i in range(0, len(records), 500):   # the copy, untimed
                    await store.append(key, records[i:i + 500])
                times = []
                for _ in range(appends):
                    batch = [session.reply() for _ in range(5)]
                    t0 = time.perf_counter()
                    await store.append(key, batch)
                    times.append(time.perf_counter() - t0)
                rows.append({"entries": len(records), "p50_ms": round(1000 * statistics.median(times), 1),
                             "p99_ms": round(1000 * percentile(times, 99), 1)})
        finally:
            store.close()
        return rows

    base = Path(tempfile.mkdtemp(prefix="live-store-"))
    try:
        return asyncio.run(run(base))
    finally:
        shutil.rmtree(base, ignore_errors=True)


# The --json keys of the one-line appends, by spacing.
APPEND_KEYS = {"compact": "one_line_append", "spaced": "one_line_append_spaced_json"}


def print_appends(rows, spacing):
    print(f"## One-line append ({spacing} JSON): in-process ingest of the session's folder")
    print("| records | extended p50 | p90 | whole-file recompute p50 | p90 | recompute / extend |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['records']:,} | {r['extended_p50_ms']} ms | {r['extended_p90_ms']} ms | "
              f"{r['recomputed_p50_ms']} ms | {r['recomputed_p90_ms']} ms | "
              f"{r['recomputed_p50_ms'] / r['extended_p50_ms']:.1f}x |")
    small = next((r for r in rows if r["records"] < 1000), None)
    for r in rows:
        print(f"  {r['records']:,}: derive paths {r['derive_paths']}")
    mid = next((r for r in rows if 15000 <= r["records"] <= 30000), None)
    if small and mid:
        ratio = mid["extended_p50_ms"] / small["extended_p50_ms"]
        print(f"20,000 vs 200 records ({spacing} JSON): {ratio:.2f}x (target <= 2x: "
              f"{'pass' if ratio <= 2 else 'FAIL'})")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="200,2000,20000,100000")
    ap.add_argument("--appends", type=int, default=20)
    ap.add_argument("--store-sizes", default="200,2000,20000")
    ap.add_argument("--watch-n", type=int, default=100)
    ap.add_argument("--skip-watch", action="store_true")
    ap.add_argument("--startup-workdir", help="bench/query_speed.py's workdir (the 1M index)")
    ap.add_argument("--startup-runs", type=int, default=30)
    ap.add_argument("--bulk-workdir", help="bench/ingest_speed.py's workdir")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    out = {APPEND_KEYS[spacing]: one_line_appends(sizes, args.appends, args.seed, spacing)
           for spacing in SEPARATORS}
    out["store_append"] = store_appends([int(s) for s in args.store_sizes.split(",") if s],
                                        args.seed)
    if not args.skip_watch:
        import watch_latency
        w = watch_latency.measure(n=args.watch_n, seed=args.seed)
        out["watch"] = {k: w[k] for k in ("n", "p50", "p99", "max", "mode")}
    if args.startup_workdir:
        import sqlite3

        import startup_speed
        index = Path(args.startup_workdir) / "index.db"
        conn = sqlite3.connect(index)
        sid = conn.execute("SELECT session_id FROM sessions ORDER BY records DESC LIMIT 1"
                           ).fetchone()[0]
        conn.close()
        m = startup_speed.measure(index, sid, runs=args.startup_runs)
        out["startup"] = {k: m[k] for k in ("runs", "check_median_s", "check_p90_s",
                                            "python_median_s")}
    if args.bulk_workdir:
        import ingest_speed
        figures = ingest_speed.measure(Path(args.bulk_workdir))["figures"]   # (one run: its
        out["bulk"] = {k: figures[k] for k in (                             # figures agree)
            "cold_s", "sqlite_utils_lines_s", "cold_vs_sqlite_utils_lines", "noop_process_s",
            "noop_process_pct_of_cold")}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return
    for spacing in SEPARATORS:
        print_appends(out[APPEND_KEYS[spacing]], spacing)
    print("\n## Store append (5 entries) by copy size")
    print("| entries | p50 | p99 |\n|---:|---:|---:|")
    for r in out["store_append"]:
        print(f"| {r['entries']:,} | {r['p50_ms']} ms | {r['p99_ms']} ms |")
    if "watch" in out:
        w = out["watch"]
        print(f"\n## ingest --watch, write to visible ({w['n']} appends, {w['mode']})")
        print(f"p50 {w['p50'] * 1000:.0f} ms, p99 {w['p99'] * 1000:.0f} ms, max {w['max'] * 1000:.0f} ms"
              f" (target p99 < 1 s: {'pass' if w['p99'] < 1 else 'FAIL'})")
    if "startup" in out:
        m = out["startup"]
        print(f"\n## session-index check, fresh process ({m['runs']} runs)")
        print(f"median {m['check_median_s'] * 1000:.0f} ms, p90 {m['check_p90_s'] * 1000:.0f} ms; "
              f"python -c pass {m['python_median_s'] * 1000:.0f} ms (target median < 100 ms: "
              f"{'pass' if m['check_median_s'] < 0.1 else 'FAIL'})")
    if "bulk" in out:
        b = out["bulk"]
        print("\n## Bulk")
        print(f"no-op ingest process {b['noop_process_s']:.3f} s = "
              f"{b['noop_process_pct_of_cold']:.2f}% of cold {b['cold_s']:.2f} s (target < 2%: "
              f"{'pass' if b['noop_process_pct_of_cold'] < 2 else 'FAIL'})")
        print(f"cold ingest {b['cold_s']:.2f} s vs sqlite-utils insert --lines "
              f"{b['sqlite_utils_lines_s']:.2f} s: {b['cold_vs_sqlite_utils_lines']:.2f}x "
              f"(target >= 1x: {'pass' if b['cold_vs_sqlite_utils_lines'] >= 1 else 'FAIL'})")


if __name__ == "__main__":
    main()
