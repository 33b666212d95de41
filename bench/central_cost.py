"""The fleet central's own cost per line, without a server (issue 28, item 6).

    python bench/central_cost.py [--hosts 200] [--rate 2.6] [--seconds 30]
                                 [--lines-per-message 1,50] [--profile FILE] [--sql]

What fleet_sim.py --generate publishes (its Generator's records, the wire format, Poisson
arrivals at --rate lines/s a host, one session a host), fed straight to the central's
``apply_batch`` and its derive (``CatchUp``) on a virtual clock: a batch is what arrives
within fleet_central.GATHER_S, the caches are derived once per
fleet_central.DERIVE_WINDOW_S (each window's derive run to its end). No NATS client, no
lag: the central's storing and deriving only, deterministic (--seed), so two versions of
the code compare on the same messages. Prints, per batching: the process CPU seconds and
wall seconds of the batches and of the derives, per line; with --sql, the SQL statements
run per window and per touched file; the ratio of the CPU per line at the batchings.
--profile FILE writes cProfile stats of each run to FILE.N (N: lines a message).
"""
import argparse, cProfile, os, random, sys, tempfile, time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet_sim import Shapes   # noqa: E402  (the same records)

from indexer.index.db import open_db   # noqa: E402
from indexer.ingest import fleet_central, fleet_wire   # noqa: E402


PENDING_SQL = "SELECT count(*) FROM files WHERE needs_derive"


def messages(hosts: int, rate: float, seconds: float, per_message: int, seed: int):
    """[(virtual time, Incoming)] in arrival order."""
    rng = random.Random(seed)
    shapes = Shapes(rng)
    files = [[f"gen-{h:05d}", f"/home/agent/.claude/projects/-srv-agent/{sid}.jsonl",
              sid, None, {}, 0, 1]
             for h in range(hosts) for sid in [f"{h:08d}-0000-4000-8000-{seed:012d}"]]
    out, t, seq = [], 0.0, 0
    msg_rate = rate * hosts / per_message
    while True:
        t += rng.expovariate(msg_rate)
        if t >= seconds:
            return out
        entry = rng.choice(files)
        host, path, sid, parent, state, offset, line = entry
        lines = []
        for _ in range(per_message):
            rec = shapes.record(sid, parent, state, 1.8e9 + t)
            parent = rec["uuid"]
            lines.append(Shapes.line(rec))
        body = b"".join(lines)
        for fields, piece in fleet_wire.cut(body, offset, line):
            header = dict(fields, host=host, path=path, generation=1, sent_at=1.8e9 + t)
            seq += 1
            out.append((t, fleet_central.Incoming(
                fleet_wire.encode(header, piece), seq, fleet_wire.subject(host, header["kind"]),
                {"Nats-Msg-Id": fleet_wire.message_id(header)})))
        entry[3], entry[5], entry[6] = parent, offset + len(body), line + len(lines)


def run(args, per_message: int, workdir: Path) -> float:
    msgs = messages(args.hosts, args.rate, args.seconds, per_message, args.seed)
    lines = sum(fleet_wire.decode(m.data)[1].count(b"\n") for _, m in msgs)
    db = open_db(str(workdir / f"central-{per_message}.db"))
    db.conn.execute(fleet_central.TEMP_STORE_SQL)
    step = fleet_central.CatchUp(db, budget_s=None)
    summary = fleet_central.Summary()
    statements: list[str] = []
    if args.sql:
        db.conn.set_trace_callback(statements.append)
    windows = Counter()
    prof = cProfile.Profile(time.process_time) if args.profile else None
    cpu = {"batch": 0.0, "derive": 0.0}
    wall = {"batch": 0.0, "derive": 0.0}
    touched_files = 0

    def timed(kind, fn):
        c0, w0 = time.process_time(), time.perf_counter()
        if prof:
            prof.enable()
        fn()
        if prof:
            prof.disable()
        cpu[kind] += time.process_time() - c0
        wall[kind] += time.perf_counter() - w0

    def derive():
        nonlocal touched_files
        touched_files += db.conn.execute(PENDING_SQL).fetchone()[0]
        n0 = len(statements)
        timed("derive", lambda: [None for _ in iter(step, False)])
        windows["derive statements"] += len(statements) - n0
        windows["windows"] += 1

    i, derive_at = 0, fleet_central.DERIVE_WINDOW_S
    while i < len(msgs):
        t0 = msgs[i][0]
        end = t0 + fleet_central.GATHER_S   # what comes while the batch gathers
        batch = []
        while i < len(msgs) and msgs[i][0] <= end and len(batch) < fleet_central.FETCH_BATCH:
            batch.append(msgs[i][1])
            i += 1
        n0 = len(statements)
        timed("batch", lambda: fleet_central.apply_batch(db, batch, "bench", summary))
        windows["batch statements"] += len(statements) - n0
        windows["batches"] += 1
        if end >= derive_at:
            derive()
            derive_at = end + fleet_central.DERIVE_WINDOW_S
    derive()
    db.conn.set_trace_callback(None)
    stored = db.conn.execute("SELECT count(*), count(DISTINCT file_id || ':' || byte_offset) "
                             "FROM records").fetchone()
    if prof:
        prof.dump_stats(f"{args.profile}.{per_message}")
    total = cpu["batch"] + cpu["derive"]
    print(f"{per_message:3d} lines a message: {len(msgs)} messages, {lines} lines, "
          f"{windows['batches']} batches, {windows['windows']} derive windows, "
          f"{touched_files} files derived; stored {stored[0]} ({stored[1]} distinct)")
    for kind in ("batch", "derive"):
        print(f"    {kind:7s} CPU {cpu[kind]:7.2f} s  wall {wall[kind]:7.2f} s  "
              f"{cpu[kind] / lines * 1000:.3f} ms CPU a line")
    if args.sql:
        print(f"    SQL statements: {windows['batch statements'] / windows['batches']:.1f} a batch, "
              f"{windows['derive statements'] / windows['windows']:.1f} a derive window, "
              f"{windows['derive statements'] / max(1, touched_files):.1f} a derived file")
    print(f"    total   CPU {total:7.2f} s  {total / lines * 1000:.3f} ms CPU a line")
    return total / lines * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--rate", type=float, default=2.6, help="lines/s a host (one session)")
    ap.add_argument("--seconds", type=float, default=30, help="virtual seconds of traffic")
    ap.add_argument("--lines-per-message", default="1,50")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", default=None, metavar="FILE")
    ap.add_argument("--sql", action="store_true", help="count the SQL statements")
    ap.add_argument("--workdir", default=None, help="keep the indexes there")
    args = ap.parse_args()
    batchings = [int(n) for n in args.lines_per_message.split(",")]
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        per_line = {n: run(args, n, Path(args.workdir)) for n in batchings}
    else:
        with tempfile.TemporaryDirectory(prefix="central-cost-") as tmp:
            per_line = {n: run(args, n, Path(tmp)) for n in batchings}
    if len(per_line) > 1:
        low, high = min(per_line.values()), max(per_line.values())
        print("central CPU per line: " + ", ".join(
            f"{per_line[n]:.3f} ms at {n} lines a message" for n in batchings)
            + f"; highest/lowest {high / low:.2f}x; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
