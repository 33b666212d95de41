"""A fleet through one NATS server into one index, on this machine (issues 14, 28).

    python bench/fleet_sim.py [--hosts 20] [--sessions 5] [--seconds 60] [--rate 0.26]
                              [--outage 60] [--workdir DIR]
    python bench/fleet_sim.py --generate 10000 [--sessions 1] [--rate 0.26]
                              [--lines-per-message 1[,50]] [--seconds 60] [--profile FILE]

Starts ``nats-server -js`` on a loopback port and one central ``session-index ingest
--from --watch``. By default: --hosts folders of --sessions live transcripts each, one
``session-index ship`` process per host (following its folder), and a writer that
appends to every session at --rate lines/s on average (Poisson arrivals): what Claude
Code writes (compact JSON, one record a line: a prompt, then assistant replies with text
or a tool call and its usage, each tool call's result as a user record, now and then a
system record), a line's size drawn around 2.6 KB (log-normal, one in 40 a 30-200 KB tool
result), its timestamp its write time. Real sessions write a median 0.26 lines per active
second. Phases: warm-up, --seconds of steady writing (lag sampled), the central stopped
(SIGTERM) for --outage seconds while writing goes on, the central started again (time
until it has caught up), writing stopped, and a final count.

With --generate N, no files and no shippers: a load generator in this process publishes
the wire format (fleet_wire) for N hosts of --sessions sessions each at --rate lines/s a
session, --lines-per-message lines a message (a shipper's batching), so that the central
is measured alone; no outage phase. Its records are Shapes' rendered ahead with their ids
and timestamps as slots (Templates: about 7 us a line, not 75), published a 10 ms tick at
a time, so that at 10,000 agents it takes less of the machine from what it measures. Several --lines-per-message values (1,50) run one
after the other, each with its own server and index, and the last line gives the
central's CPU per line at each and their ratio (measured in one invocation, under the
same load on the machine: compare ratios, not absolute figures, on a shared machine).
--profile FILE runs the central under cProfile (FILE.N, N the lines a message).

Prints: lines/s and MB/s written; p50/p99 lag from a line's write to its row in the
central index (a reader polls the index every 50 ms); the central's CPU per line stored in
the steady phase (its user+system time from /proc); its peak RSS; (not --generate) the
backlog after the outage and how long the restarted central took to drain it; the CPU
of this process (the generator or writer, and the lag probe) and of nats-server in the
steady phase, and the load average; lines written vs stored (each exactly once: a count per (file, offset) would show doubles).
Figures only; exit 0 unless something fails to start.
"""
import argparse, asyncio, json, os, random, re, shutil, signal, socket, sqlite3, subprocess
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


class Shapes:
    """What Claude Code writes, one record at a time per session: a prompt,
    then assistant replies (text, or a tool call with its result as a user
    record next), now and then a system record; compact JSON (as it writes
    it), sizes around 2.6 KB a line."""

    MODEL = "claude-sonnet-4-5-20250929"

    def __init__(self, rng):
        self.rng = rng

    def size(self):
        if self.rng.random() < 0.025:                  # a big tool result
            return self.rng.randint(30_000, 200_000)
        return max(80, min(60_000, int(self.rng.lognormvariate(7.6, 0.9))))   # median ~2 KB text

    def record(self, sid, parent, state, now):
        """The next record of a session (``state``: what it wrote last)."""
        rng, base = self.rng, {"parentUuid": parent, "isSidechain": False, "userType": "external",
                               "cwd": "/srv/agent", "sessionId": sid, "version": "2.1.332",
                               "gitBranch": "main", "uuid": str(uuid.uuid4()),
                               "timestamp": iso(now)}
        pending = state.get("tool")
        text = "w" * self.size()
        if pending:                                    # the tool call's result
            state["tool"] = None
            return dict(base, type="user", message={"role": "user", "content": [
                {"tool_use_id": pending, "type": "tool_result", "content": text}]},
                toolUseResult={"stdout": text[:200], "stderr": "", "interrupted": False})
        kind = rng.random()
        if state.get("last") in (None, "system") or kind < 0.12:
            state["last"] = "user"
            return dict(base, type="user", message={"role": "user", "content": text})
        if kind < 0.15:
            state["last"] = "system"
            return dict(base, type="system", subtype="informational", content=text[:400],
                        level="info", isMeta=False)
        state["last"] = "assistant"
        usage = {"input_tokens": rng.randint(3, 40), "cache_creation_input_tokens":
                 rng.randint(0, 4000), "cache_read_input_tokens": rng.randint(1000, 90000),
                 "output_tokens": rng.randint(20, 800), "service_tier": "standard"}
        if rng.random() < 0.5:
            tool = "toolu_" + uuid.uuid4().hex[:24]
            state["tool"] = tool
            content = [{"type": "tool_use", "id": tool, "name": "Bash",
                        "input": {"command": text[:300], "description": "run"}}]
        else:
            content = [{"type": "text", "text": text}]
        return dict(base, type="assistant", requestId="req_" + uuid.uuid4().hex[:24],
                    message={"id": "msg_" + uuid.uuid4().hex[:24], "type": "message",
                             "role": "assistant", "model": self.MODEL, "content": content,
                             "stop_reason": None, "stop_sequence": None, "usage": usage})

    @staticmethod
    def line(rec) -> bytes:
        return json.dumps(rec, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class Templates:
    """Shapes' records, rendered ahead (a pool of each kind, compact JSON) with
    their ids and timestamp left as slots, so that the load generator's cost
    a line is a join, not a json.dumps and four uuid4 (75 us a line: at
    10,000 agents a fifth of a core of the two this machine has, beside what
    it measures). The kinds follow one another as Shapes has them (a tool
    call's result next, a prompt after a system record, ...); ids are unique
    a file and line, the tool result names its call's id."""

    SLOTS = {"uuid": b"@U@", "parentUuid": b"@P@", "timestamp": b"@T@", "sessionId": b"@S@"}
    MESSAGE, REQUEST, TOOL = b"@M@", b"@R@", b"@K@"
    SPLIT = re.compile(rb'"(@[UPTSMRK]@)"')

    def __init__(self, rng, per_kind=1024):
        self.rng = rng
        self.pool = {k: [] for k in ("prompt", "system", "text", "call", "result")}
        shapes, state, made = Shapes(rng), {}, 0
        while min(map(len, self.pool.values())) < per_kind and made < 100 * per_kind:
            made += 1
            rec = shapes.record("s", "p", state, 0.0)
            kind = self.kind(rec)
            if len(self.pool[kind]) >= per_kind:
                continue
            for name, slot in self.SLOTS.items():
                rec[name] = slot.decode()
            if rec["type"] == "assistant":
                rec["requestId"] = self.REQUEST.decode()
                rec["message"]["id"] = self.MESSAGE.decode()
            for block in rec.get("message", {}).get("content", []) \
                    if isinstance(rec.get("message", {}).get("content"), list) else []:
                if block.get("type") == "tool_use":
                    block["id"] = self.TOOL.decode()
                if block.get("type") == "tool_result":
                    block["tool_use_id"] = self.TOOL.decode()
            self.pool[kind].append(self.SPLIT.split(Shapes.line(rec)))

    @staticmethod
    def kind(rec) -> str:
        if rec["type"] == "system":
            return "system"
        content = rec["message"]["content"]
        if rec["type"] == "user":
            return "prompt" if isinstance(content, str) else "result"
        return "call" if content[0]["type"] == "tool_use" else "text"

    def line(self, number, file_no, sid, parent, state, stamp) -> tuple[bytes, str]:
        """(the line, its uuid): the next line of a session (``state``: what
        it wrote last, as Shapes.record keeps it), its timestamp ``stamp``."""
        rng, tool = self.rng, state.get("tool")
        if tool:
            kind, state["tool"] = "result", None
        else:
            draw = rng.random()
            if state.get("last") in (None, "system") or draw < 0.12:
                kind = state["last"] = "prompt"
            elif draw < 0.15:
                kind = state["last"] = "system"
            else:
                state["last"] = "assistant"
                kind = "call" if rng.random() < 0.5 else "text"
        key = f"{file_no:012x}{number:012x}"
        if kind == "call":
            tool = state["tool"] = "toolu_" + key
        me = f"{number:08x}-0000-4000-8000-{file_no:012x}"
        values = {b"@U@": f'"{me}"', b"@P@": f'"{parent}"' if parent else "null",
                  b"@T@": f'"{stamp}"', b"@S@": f'"{sid}"', b"@M@": f'"msg_{key}"',
                  b"@R@": f'"req_{key}"', b"@K@": f'"{tool}"'}
        parts = rng.choice(self.pool[kind])
        return b"".join(p if i % 2 == 0 else values[p].encode()
                        for i, p in enumerate(parts)), me


class Writer(threading.Thread):
    """Appends records to every session of every host at --rate lines/s a
    session (Poisson arrivals)."""

    def __init__(self, root, hosts, sessions, rate, seed):
        super().__init__(daemon=True)
        self.rng = random.Random(seed)
        self.shapes = Shapes(self.rng)
        self.files = []
        for h in range(hosts):
            folder = root / f"host-{h:02d}" / "projects" / "-srv-agent"
            folder.mkdir(parents=True)
            for _ in range(sessions):
                sid = str(uuid.uuid4())
                self.files.append([folder / f"{sid}.jsonl", sid, None, {}])
        self.rate = rate * hosts * sessions
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
            path, sid, parent, state = entry
            rec = self.shapes.record(sid, parent, state, time.time())
            data = Shapes.line(rec)
            with open(path, "ab") as f:
                f.write(data)
            entry[2] = rec["uuid"]
            self.lines += 1
            self.bytes += len(data)


class Generator(threading.Thread):
    """The load generator: publishes what N hosts' shippers would (the wire
    format, their subjects and message ids) straight to NATS, --lines-per-
    message lines a message, without files or shipper processes."""

    def __init__(self, url, hosts, sessions, rate, per_message, seed):
        super().__init__(daemon=True)
        self.url, self.per_message = url, per_message
        self.rng = random.Random(seed)
        self.files = [[f"gen-{h:05d}", f"/home/agent/.claude/projects/-srv-agent/{sid}.jsonl",
                       sid, None, {}, 0, 1]
                      for h in range(hosts) for sid in (str(uuid.uuid4())
                                                        for _ in range(sessions))]
        self.rate = rate * hosts * sessions
        self.lines = self.bytes = self.messages = 0
        self.running = threading.Event()
        self.stopped = threading.Event()
        self.error = None

    TICK_S = 0.01

    def run(self):
        try:
            asyncio.run(self.publish())
        except Exception as exc:   # noqa: BLE001  (a bench: said in the figures)
            self.error = exc

    async def publish(self):
        """Poisson arrivals, published a tick (TICK_S) at a time: each tick
        sends the messages due by then, their records stamped with the
        tick's time (an asyncio sleep a message cost as much as making it)."""
        import nats

        from indexer.ingest import fleet_nats, fleet_wire

        templates = Templates(self.rng)
        nc = await nats.connect(self.url)
        await fleet_nats.ensure_stream(nc.jetstream())
        next_at = time.monotonic()
        rate = self.rate / self.per_message   # messages/s: each brings per_message lines at once
        while not self.stopped.is_set():
            if not self.running.is_set():
                await nc.flush()
                await asyncio.sleep(0.05)
                next_at = time.monotonic()
                continue
            await asyncio.sleep(max(self.TICK_S, next_at - time.monotonic()))
            now = time.time()
            stamp, due = iso(now), time.monotonic()
            while next_at <= due:
                next_at += self.rng.expovariate(rate)
                file_no = self.rng.randrange(len(self.files))
                entry = self.files[file_no]
                host, path, sid, parent, state, offset, line = entry
                lines = []
                for n in range(self.per_message):
                    data, parent = templates.line(line + n, file_no, sid, parent, state, stamp)
                    lines.append(data)
                body = b"".join(lines)
                for fields, piece in fleet_wire.cut(body, offset, line):   # as ship cuts them
                    header = dict(fields, host=host, path=path, generation=1, sent_at=now)
                    await nc.publish(fleet_wire.subject(host, header["kind"]),
                                     fleet_wire.encode(header, piece),
                                     headers={"Nats-Msg-Id": fleet_wire.message_id(header)})
                    self.messages += 1
                entry[3], entry[5], entry[6] = parent, offset + len(body), line + len(lines)
                self.lines += len(lines)
                self.bytes += len(body)
        await nc.flush()
        await nc.close()

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


def cpu_seconds(pid):
    """A process's user + system time so far (/proc/PID/stat)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=5, help="live sessions per host")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--rate", type=float, default=0.26,
                    help="lines/s per session, on average (real sessions: median 0.26)")
    ap.add_argument("--outage", type=int, default=60)
    ap.add_argument("--generate", type=int, default=0, metavar="HOSTS",
                    help="no files or shippers: publish the wire format for HOSTS hosts")
    ap.add_argument("--lines-per-message", default="1",
                    help="with --generate: lines a message; several (1,50): a run each, one "
                         "after the other, and the ratio of the central's CPU per line")
    ap.add_argument("--workdir", default=None,
                    help="keep the run's work dir here (DIR-N, N the lines a message); "
                         "default: a temp dir, removed at the end")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", default=None, metavar="FILE",
                    help="run the central under cProfile, its stats written to FILE.N "
                         "(N: lines a message)")
    args = ap.parse_args()
    batchings = [int(n) for n in args.lines_per_message.split(",")]
    if not args.generate and batchings != [1]:
        ap.error("--lines-per-message is for --generate")
    per_line = {n: simulate(args, n) for n in batchings}
    if len(per_line) > 1:
        low, high = min(per_line.values()), max(per_line.values())
        print("central CPU per line: " + ", ".join(
            f"{per_line[n]:.3f} ms at {n} lines a message" for n in batchings)
            + f"; highest/lowest {high / low:.2f}x; load {os.getloadavg()[0]:.1f}")


def simulate(args, per_message: int) -> float:
    """One run (a work dir, nats-server and central of its own); prints its
    figures and returns the central's CPU per line stored (ms). The work dir
    (the index, the stream: 2-3 GB at 10,000 agents) is kept with --workdir,
    else removed once the run is over."""
    root = Path(f"{args.workdir}-{per_message}" if args.workdir
                else tempfile.mkdtemp(prefix="fleet-sim-"))
    if root.exists() and args.workdir:
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    try:
        return _simulate(args, per_message, root)
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)


def _simulate(args, per_message: int, root: Path) -> float:
    nats_server = shutil.which("nats-server") or "/usr/sbin/nats-server"
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    db = root / "central.db"
    procs = []
    hosts = args.generate or args.hosts

    def spawn(cmd, **kw):
        p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL,
                             stderr=open(root / f"log-{len(procs)}.txt", "wb"), **kw)
        procs.append(p)
        return p

    started = time.perf_counter()
    backlog = drained = probe = None
    try:
        server = spawn([nats_server, "-js", "-a", "127.0.0.1", "-p", port, "-sd",
                        root / "jetstream"])
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        if args.generate:
            writer = Generator(url, args.generate, args.sessions, args.rate,
                               per_message, args.seed)
        else:
            writer = Writer(root, args.hosts, args.sessions, args.rate, args.seed)
        writer.start()
        if not args.generate:
            for h in range(args.hosts):
                spawn([*CLI, "ship", root / f"host-{h:02d}", "--to", url, "--host",
                       f"host-{h:02d}", "--ledger", root / f"ledger-{h:02d}.db"])
        profiled = [sys.executable, "-m", "cProfile", "-o", f"{args.profile}.{per_message}",
                    "-m", "indexer"] if args.profile else CLI
        central = spawn([*profiled, "ingest", "--from", url, "--watch", "--db", db])
        probe = LagProbe(str(db))
        probe.start()
        writer.running.set()
        time.sleep(10)                                   # warm-up
        lines0, bytes0, t0 = writer.lines, writer.bytes, time.perf_counter()
        stored0, cpu0 = probe.stored()[0] if db.exists() else 0, cpu_seconds(central.pid)
        own0, server0 = cpu_seconds(os.getpid()), cpu_seconds(server.pid)
        load0 = os.getloadavg()[0]
        probe.sampling = True
        time.sleep(args.seconds)
        probe.sampling = False
        steady_s = time.perf_counter() - t0
        steady_lines, steady_bytes = writer.lines - lines0, writer.bytes - bytes0
        cpu = cpu_seconds(central.pid) - cpu0
        own_cpu = cpu_seconds(os.getpid()) - own0    # the generator (or writer) and the probe
        server_cpu = cpu_seconds(server.pid) - server0
        load1 = os.getloadavg()[0]
        stored_steady = probe.stored()[0] - stored0
        lags = list(probe.lags)
        rss_before = peak_rss_mb(central.pid)
        if not args.generate:
            central.send_signal(signal.SIGTERM)
            central.wait(timeout=60)
            outage_start_lines = writer.lines
            time.sleep(args.outage)
            backlog = writer.lines - outage_start_lines
            central = spawn([*CLI, "ingest", "--from", url, "--watch", "--db", db])
            t1 = time.perf_counter()
            target = outage_start_lines + backlog
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
        if probe is not None:   # (it polls the index: not while the work dir goes)
            probe.stopped.set()
            probe.join(timeout=5)
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    mode = (f"load generator: {args.generate} hosts, {per_message} lines a message"
            if args.generate else f"{args.hosts} hosts with a shipper each")
    print(f"fleet_sim: {mode}; {hosts * args.sessions} sessions at {args.rate} lines/s each, "
          f"{args.seconds} s steady" + ("" if args.generate else
                                        f", {args.outage} s central outage")
          + f"; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, nats-server {nats_server}\n")
    print(f"written, steady      {steady_lines / steady_s:10.1f} lines/s "
          f"{steady_bytes / steady_s / MB:8.3f} MB/s")
    print(f"lag write -> central p50 {pct(lags, 0.5):.3f} s  p99 {pct(lags, 0.99):.3f} s  "
          f"max {max(lags) if lags else float('nan'):.3f} s  ({len(lags)} lines)")
    print(f"central CPU, steady  {cpu:10.2f} s for {stored_steady} lines stored: "
          f"{cpu / stored_steady * 1000 if stored_steady else float('nan'):.3f} ms a line "
          f"({cpu / steady_s * 100:.0f}% of a core)")
    print(f"central peak RSS     {rss:10.1f} MB")
    print(f"other CPU, steady    {own_cpu / steady_s * 100:.0f}% of a core this process (the "
          f"{'generator' if args.generate else 'writer'} and the lag probe), "
          f"{server_cpu / steady_s * 100:.0f}% nats-server; load {load0:.1f} -> {load1:.1f}")
    if not args.generate:
        print(f"outage backlog       {backlog:10d} lines; drained in "
              f"{drained if drained is not None else float('nan'):.2f} s after the restart"
              + (f" ({backlog / drained:.0f} lines/s)" if drained else ""))
    if getattr(writer, "error", None) is not None:
        print(f"load generator stopped: {writer.error!r}")
    print(f"lines written        {total_lines:10d} ({total_bytes / MB:.1f} MB)")
    print(f"rows stored          {stored:10d} ({distinct} distinct (file, offset)); "
          f"{'nothing lost or doubled' if stored == distinct == total_lines else 'MISMATCH'}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s; work dir {root}"
          f"{'' if args.workdir else ' (removed)'}\n")
    return cpu / stored_steady * 1000 if stored_steady else float("nan")


if __name__ == "__main__":
    main()
