"""A fleet through one NATS server into one index, on this machine (issue 14).

    python bench/fleet_sim.py [--hosts 20] [--sessions 50] [--seconds 60] [--rate 5]
                              [--outage 60] [--workdir DIR]

Starts ``nats-server -js`` on a loopback port, --hosts folders of --sessions transcripts
each, one ``session-index ship`` process per host (following its folder) and one central
``session-index ingest --from --watch``. A writer appends user/assistant records to random
sessions of every host at --rate lines/s per host on average (Poisson arrivals; bodies of
0.3-3 KB, one in 20 a 30-60 KB tool result), each record's timestamp its write time.
Phases: warm-up, --seconds of steady writing (lag sampled), the central stopped (SIGTERM)
for --outage seconds while writing goes on, the central started again (time until it has
caught up), writing stopped, and a final count.

Prints: lines/s and MB/s written and stored; p50/p99 lag from a line's write to its row in
the central index (a reader polls the index every 50 ms); the central's peak RSS; the
backlog after the outage and how long the restarted central took to drain it; lines
written vs stored (each exactly once: a count per (file, offset) would show doubles).
Figures only; exit 0 unless something fails to start.
"""
import argparse, json, os, random, shutil, signal, socket, sqlite3, subprocess
import sys, tempfile, threading, time, uuid
from datetime import datetime, timezone
from pathlib import Path

CLI = [sys.executable, "-m", "indexer"]
MB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iso(ts):
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def parse_iso(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Writer(threading.Thread):
    """Appends records to random sessions of random hosts at the given rate."""

    def __init__(self, root, hosts, sessions, rate, seed):
        super().__init__(daemon=True)
        self.rng = random.Random(seed)
        self.files = []
        for h in range(hosts):
            folder = root / f"host-{h:02d}" / "projects" / "-srv-agent"
            folder.mkdir(parents=True)
            for _ in range(sessions):
                sid = str(uuid.uuid4())
                self.files.append([folder / f"{sid}.jsonl", sid, None])
        self.rate = rate * hosts
        self.lines = self.bytes = 0
        self.running = threading.Event()
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            self.running.wait()
            time.sleep(self.rng.expovariate(self.rate))
            if not self.running.is_set():
                continue
            entry = self.rng.choice(self.files)
            path, sid, parent = entry
            size = self.rng.randint(30_000, 60_000) if self.rng.random() < 0.05 else \
                self.rng.randint(300, 3000)
            now = time.time()
            rec = {"type": self.rng.choice(["user", "assistant"]), "uuid": str(uuid.uuid4()),
                   "parentUuid": parent, "sessionId": sid, "timestamp": iso(now),
                   "cwd": "/srv/agent", "message": {"role": "user", "content": "w" * size}}
            data = json.dumps(rec).encode() + b"\n"
            with open(path, "ab") as f:
                f.write(data)
            entry[2] = rec["uuid"]
            self.lines += 1
            self.bytes += len(data)


class LagProbe(threading.Thread):
    """Polls the central index for new records; lag = seen - written."""

    def __init__(self, db):
        super().__init__(daemon=True)
        self.db, self.last, self.lags, self.sampling = db, 0, [], False
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            time.sleep(0.05)
            if not os.path.exists(self.db):
                continue
            try:
                conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=1)
                rows = conn.execute("SELECT id, timestamp FROM records WHERE id > ? ORDER BY id",
                                    [self.last]).fetchall()
                conn.close()
            except sqlite3.Error:
                continue
            now = time.time()
            for rid, ts in rows:
                self.last = rid
                if self.sampling and ts:
                    self.lags.append(now - parse_iso(ts))

    def stored(self):
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute("SELECT count(*), count(DISTINCT file_id || ':' || byte_offset) "
                                "FROM records").fetchone()
        finally:
            conn.close()


def peak_rss_mb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--rate", type=float, default=5.0, help="lines/s per host, on average")
    ap.add_argument("--outage", type=int, default=60)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    nats_server = shutil.which("nats-server") or "/usr/sbin/nats-server"
    root = Path(args.workdir or tempfile.mkdtemp(prefix="fleet-sim-"))
    if root.exists() and args.workdir:
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    db = root / "central.db"
    procs = []

    def spawn(cmd, **kw):
        p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL,
                             stderr=open(root / f"log-{len(procs)}.txt", "wb"), **kw)
        procs.append(p)
        return p

    started = time.perf_counter()
    try:
        spawn([nats_server, "-js", "-a", "127.0.0.1", "-p", port, "-sd", root / "jetstream"])
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        writer = Writer(root, args.hosts, args.sessions, args.rate, args.seed)
        writer.start()
        for h in range(args.hosts):
            spawn([*CLI, "ship", root / f"host-{h:02d}", "--to", url, "--host", f"host-{h:02d}",
                   "--ledger", root / f"ledger-{h:02d}.db"])
        central = spawn([*CLI, "ingest", "--from", url, "--watch", "--db", db])
        probe = LagProbe(str(db))
        probe.start()
        writer.running.set()
        time.sleep(10)                                   # warm-up
        lines0, bytes0, t0 = writer.lines, writer.bytes, time.perf_counter()
        probe.sampling = True
        time.sleep(args.seconds)
        probe.sampling = False
        steady_s = time.perf_counter() - t0
        steady_lines, steady_bytes = writer.lines - lines0, writer.bytes - bytes0
        lags = list(probe.lags)
        rss_before = peak_rss_mb(central.pid)
        central.send_signal(signal.SIGTERM)
        central.wait(timeout=60)
        outage_start_lines = writer.lines
        time.sleep(args.outage)
        backlog = writer.lines - outage_start_lines
        central = spawn([*CLI, "ingest", "--from", url, "--watch", "--db", db])
        t1 = time.perf_counter()
        target = outage_start_lines + backlog
        drained = None
        while time.perf_counter() - t1 < 600:
            time.sleep(0.2)
            if probe.stored()[0] >= target:
                drained = time.perf_counter() - t1
                break
        writer.running.clear()
        writer.stopped.set()
        time.sleep(1)
        total_lines, total_bytes = writer.lines, writer.bytes
        deadline = time.perf_counter() + 300
        while time.perf_counter() < deadline and probe.stored()[0] < total_lines:
            time.sleep(0.5)
        stored, distinct = probe.stored()
        rss = max(rss_before, peak_rss_mb(central.pid))
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    print(f"fleet_sim: {args.hosts} hosts x {args.sessions} sessions, {args.rate} lines/s per "
          f"host, {args.seconds} s steady, {args.outage} s central outage; "
          f"{os.cpu_count()} CPUs, nats-server {nats_server}\n")
    print(f"written, steady      {steady_lines / steady_s:10.1f} lines/s "
          f"{steady_bytes / steady_s / MB:8.3f} MB/s")
    print(f"lag write -> central p50 {pct(lags, 0.5):.3f} s  p99 {pct(lags, 0.99):.3f} s  "
          f"max {max(lags) if lags else float('nan'):.3f} s  ({len(lags)} lines)")
    print(f"central peak RSS     {rss:10.1f} MB")
    print(f"outage backlog       {backlog:10d} lines; drained in "
          f"{drained if drained is not None else float('nan'):.2f} s after the restart"
          + (f" ({backlog / drained:.0f} lines/s)" if drained else ""))
    print(f"lines written        {total_lines:10d} ({total_bytes / MB:.1f} MB)")
    print(f"rows stored          {stored:10d} ({distinct} distinct (file, offset)); "
          f"{'nothing lost or doubled' if stored == distinct == total_lines else 'MISMATCH'}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s; work dir {root}")


if __name__ == "__main__":
    main()
