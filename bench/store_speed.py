"""Speed of the session store (indexer/ingest/store.py): append latency with a reader
running, and appends per second with several writer processes.

    python bench/store_speed.py [--records 40000] [--writers 4] [--batch 100] [--seed 1] [--keep]

Makes a corpus with bench/make_corpus.py (``--records N``: sessions shaped like
real transcripts, tool results with a long-tailed size, 2 KB median) in a temp
dir, and mirrors its main transcripts through ``IndexSessionStore.append`` in
batches of ``--batch`` entries, each session under its own SessionKey, as the
Agent SDK's batcher would:

1. latency: this process appends every session in turn (one append call per
   batch, timed around the ``await``: thread hop, serialization, parsing, the
   ``BEGIN IMMEDIATE`` transaction with its derive step, commit) while another
   process reads the same index in a loop: ``load`` of the copy being written,
   its ``leaves`` and ``orphans`` rows and ``indexer.repair.check.check``. p50 / p99 /
   max over the full batches, overall and by how many entries the session
   already held (derive recomputes the whole copy's caches in the append's
   transaction: the cost grows with the session).
2. throughput: a fresh index, ``--writers`` processes each appending its share
   of the sessions as fast as it can; appends (batches) and entries per second
   over the wall time from a common start to the last writer done, and the
   per-append p50 / p99 under that contention.

Both phases end with ``PRAGMA integrity_check`` and a count of stored records
against the entries sent. Prints a markdown table.
"""
import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# Latency by how many entries the session held before the batch: derive
# recomputes the whole copy's caches in the append's transaction.
SIZE_BUCKETS = ((0, 1000), (1000, 3000), (3000, 10 ** 9))


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def ms(x):
    return f"{x * 1000:.1f} ms"


def sessions_of(corpus: Path) -> list[tuple[str, str, list[dict]]]:
    """(project_key, session_id, entries) of every main transcript, by path."""
    out = []
    for path in sorted(corpus.glob("*/*.jsonl")):
        entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out.append((path.parent.name, path.stem, entries))
    return out


async def append_sessions(store, sessions, batch, timings, big=None):
    """Append each session in batches; timings gets one (seconds, stored_before) per full batch."""
    for project_key, session_id, entries in sessions:
        key = {"project_key": project_key, "session_id": session_id}
        for i in range(0, len(entries), batch):
            chunk = entries[i:i + batch]
            t0 = time.perf_counter()
            await store.append(key, chunk)
            dt = time.perf_counter() - t0
            if len(chunk) == batch:
                timings.append((dt, i))


# --- child processes ----------------------------------------------------------

def reader(db: str, stop: str, out: str, config_dir: str):
    """Read the newest store copy in a loop until ``stop`` exists."""
    from indexer.repair import check
    from indexer.index.db import open_db
    from indexer.ingest.store import IndexSessionStore

    db_conn = open_db(db)
    store = IndexSessionStore(db)
    rounds, rows = 0, 0
    t0 = time.perf_counter()

    async def loop():
        nonlocal rounds, rows
        while not os.path.exists(stop):
            row = db_conn.conn.execute(
                "SELECT id, project_key, session_id FROM files WHERE origin = 'store' "
                "ORDER BY last_ingested_at DESC, id DESC LIMIT 1").fetchone()
            if row is None:
                await asyncio.sleep(0.01)
                continue
            file_id, project_key, session_id = row
            loaded = await store.load({"project_key": project_key, "session_id": session_id})
            rows += len(loaded or [])
            db_conn.conn.execute("SELECT * FROM leaves WHERE file_id = ?", [file_id]).fetchall()
            db_conn.conn.execute("SELECT * FROM orphans WHERE file_id = ?", [file_id]).fetchall()
            check.check(db_conn, session_id, config_dir=Path(config_dir))
            rounds += 1

    asyncio.run(loop())
    store.close()
    Path(out).write_text(json.dumps(
        {"rounds": rounds, "entries_loaded": rows, "seconds": time.perf_counter() - t0}))


def writer(db: str, sessions_file: str, batch: int, go: str, out: str):
    from indexer.ingest.store import IndexSessionStore

    sessions = json.loads(Path(sessions_file).read_text())
    store = IndexSessionStore(db)
    timings = []
    Path(out + ".ready").touch()
    while not os.path.exists(go):
        time.sleep(0.001)
    t0 = time.perf_counter()
    asyncio.run(append_sessions(store, sessions, batch, timings))
    elapsed = time.perf_counter() - t0
    store.close()
    Path(out).write_text(json.dumps({"timings": timings, "seconds": elapsed}))


# --- phases -------------------------------------------------------------------

def spawn(*args):
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *map(str, args)],
                            cwd=HERE.parent)


def verify(db: Path, sent: int) -> str:
    conn = sqlite3.connect(db)
    ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
    stored = conn.execute("SELECT count(*) FROM records").fetchone()[0] + \
        conn.execute("SELECT count(*) FROM bad_lines").fetchone()[0]
    conn.close()
    return f"integrity_check {ok}, {stored:,} of {sent:,} entries stored"


def latency_phase(work: Path, sessions, batch):
    from indexer.ingest.store import IndexSessionStore

    db = work / "latency.db"
    store = IndexSessionStore(db)
    stop, out = work / "stop-reader", work / "reader.json"
    config = work / "claude"
    config.mkdir(exist_ok=True)
    proc = spawn("--role", "reader", db, stop, out, config)
    time.sleep(1.0)  # the reader is up and polling
    timings = []
    t0 = time.perf_counter()
    asyncio.run(append_sessions(store, sessions, batch, timings))
    elapsed = time.perf_counter() - t0
    stop.touch()
    proc.wait(timeout=120)
    store.close()
    read = json.loads(out.read_text())
    sent = sum(len(e) for _, _, e in sessions)
    return timings, elapsed, read, verify(db, sent)


def throughput_phase(work: Path, sessions, batch, writers):
    from indexer.index.db import open_db

    db = work / "throughput.db"
    open_db(db).conn.close()  # create the schema before the writers race
    go = work / "go"
    shares = [sessions[w::writers] for w in range(writers)]
    procs = []
    for w, share in enumerate(shares):
        f = work / f"share-{w}.json"
        f.write_text(json.dumps(share))
        procs.append(spawn("--role", "writer", db, f, batch, go, work / f"writer-{w}.json"))
    while not all((work / f"writer-{w}.json.ready").exists() for w in range(writers)):
        time.sleep(0.01)  # every writer has imported and opened the index
    t0 = time.perf_counter()
    go.touch()
    for p in procs:
        p.wait(timeout=600)
    wall = time.perf_counter() - t0
    results = [json.loads((work / f"writer-{w}.json").read_text()) for w in range(writers)]
    sent = sum(len(e) for _, _, e in sessions)
    batches = sum(-(-len(e) // batch) for _, _, e in sessions)
    timings = [t for r in results for t in r["timings"]]
    return batches, sent, wall, timings, verify(db, sent)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=40000)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "reader":
        return reader(*a.args)
    if a.role == "writer":
        db, sessions_file, batch, go, out = a.args
        return writer(db, sessions_file, int(batch), go, out)

    work = Path(tempfile.mkdtemp(prefix="store-speed-"))
    try:
        corpus = work / "corpus"
        subprocess.run([sys.executable, str(HERE / "make_corpus.py"), str(corpus),
                        "--records", str(a.records), "--size-mb", "100000",
                        "--seed", str(a.seed)], check=True, stdout=subprocess.DEVNULL)
        sessions = sessions_of(corpus)
        entries = sum(len(e) for _, _, e in sessions)
        mb = sum(len(json.dumps(x)) for _, _, e in sessions for x in e) / 1e6
        print(f"corpus: {len(sessions)} main transcripts, {entries:,} entries, {mb:.0f} MB; "
              f"largest {max(len(e) for _, _, e in sessions):,} entries", file=sys.stderr)

        timings, elapsed, read, ok1 = latency_phase(work, sessions, a.batch)
        all_t = [t for t, _ in timings]
        batches, sent, wall, w_timings, ok2 = throughput_phase(work, sessions, a.batch, a.writers)
        w_t = [t for t, _ in w_timings]

        print(f"\n`python bench/store_speed.py --records {a.records}` "
              f"({len(sessions)} sessions, {entries:,} entries, {mb:.0f} MB, "
              f"batches of {a.batch}):\n")
        print("| measurement | figure |")
        print("|---|---|")
        print(f"| `append` of a {a.batch}-entry batch, another process reading: p50 / p99 / max "
              f"({len(all_t)} batches) | {ms(pct(all_t, .5))} / {ms(pct(all_t, .99))} / "
              f"{ms(max(all_t))} |")
        for lo, hi in SIZE_BUCKETS:
            t = [t for t, before in timings if lo <= before < hi]
            held = f"{lo:,}-{hi - 1:,}" if hi < 10 ** 9 else f">= {lo:,}"
            print(f"| ... into a session already holding {held} entries: p50 / p99 "
                  f"({len(t)} batches) | {ms(pct(t, .5))} / {ms(pct(t, .99))} |")
        all_batches = sum(-(-len(e) // a.batch) for _, _, e in sessions)
        print(f"| the same writer: appends/s, entries/s | {all_batches / elapsed:.0f}, "
              f"{entries / elapsed:,.0f} |")
        print(f"| the reader meanwhile (`load` + `leaves` + `orphans` + `check` of the copy "
              f"being written) | {read['rounds'] / read['seconds']:.0f} rounds/s |")
        print(f"| {a.writers} writer processes: appends/s, entries/s, MB/s | "
              f"**{batches / wall:.0f}**, {sent / wall:,.0f}, {mb / wall:.1f} |")
        print(f"| {a.writers} writer processes: `append` p50 / p99 | "
              f"{ms(pct(w_t, .5))} / {ms(pct(w_t, .99))} |")
        print(f"| after each phase | {ok1}; {ok2} |")
    finally:
        if a.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
