"""Running a fleet: the metrics endpoint and health probe of `serve`, `ingest
--from` and `ship` (scraped, and matched to the index), SIGTERM at any
moment, start-up calls that wait for JetStream, `ship` polling when the
kernel gives no more file notifications; through a real nats-server."""

import asyncio
import json
import random
import signal
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from test_fleet import (CLI, NATS_SERVER, Server, Transcript, exported_or_none, free_port,
                        ship_once)

pytest.importorskip("nats", reason="the fleet extra (nats-py) is not installed")
pytest.importorskip("prometheus_client", reason="the fleet extra (prometheus-client) is not "
                                                "installed")
from test_fleet import pytestmark   # noqa: E402,F401  (nats-server, the timing group)


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "jetstream")
    s.start()
    yield s
    s.kill()


def scrape(port: int) -> dict:
    """{(name, labels as a sorted tuple): value} of /metrics on loopback."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def listening_on(port: int) -> set[str]:
    """The addresses a TCP socket listens on at ``port`` (/proc/net/tcp)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if int(hex_port, 16) == port and state == "0A":
                found.add(addr)
    return found


def wait_until(what, seconds, *procs):
    deadline = time.monotonic() + seconds
    while not what():
        for p in procs:
            assert p.poll() is None, p.stderr.read().decode()
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_metrics_of_the_central_and_a_shipper_match_the_index(server, tmp_path):
    """ingest --from --watch --metrics and ship --metrics, scraped: the
    central's per-host lines, bytes, records, files, its sessions by
    verdict, gaps and quarantined equal the index's; the lines it stored
    and each host's lag are its own; the shipper's lines and bytes are what
    it sent; both on loopback only; /healthz answers 200; `serve --metrics`
    gives the index's figures too."""
    db = tmp_path / "central.db"
    a, b = Transcript(tmp_path / "a"), Transcript(tmp_path / "b")
    a.append(3)
    b.append(2)
    b.append(1, type="assistant", requestId="req_2", message={   # named: poisoned
        "id": "synthetic-1", "model": "<synthetic>", "role": "assistant",
        "content": [{"type": "text", "text": "No response"}]})
    ship_once(server, "b", tmp_path / "b", tmp_path)
    central_port, ship_port, serve_port, web_port = (free_port() for _ in range(4))
    central = subprocess.Popen([*CLI, "ingest", "--from", server.url, "--watch", "--db", db,
                                "--metrics", str(central_port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    shipper = subprocess.Popen([*CLI, "ship", tmp_path / "a", "--to", server.url, "--host", "a",
                                "--ledger", tmp_path / "ledger-a.db", "--metrics",
                                f"127.0.0.1:{ship_port}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    web = None
    try:
        wait_until(lambda: all(exported_or_none(db, t.session_id) == t.complete()
                               for t in (a, b)), 40, central, shipper)
        a.append(2)
        wait_until(lambda: exported_or_none(db, a.session_id) == a.complete(), 30, central,
                   shipper)
        conn = sqlite3.connect(db)
        wait_until(lambda: conn.execute(   # derived, and both hosts' heartbeats read
            "SELECT (SELECT count(*) FROM files WHERE needs_derive) = 0 AND (SELECT count(*) "
            "FROM fleet_hosts WHERE last_heartbeat_at IS NOT NULL) = 2").fetchone()[0], 20,
            central, shipper)
        got = scrape(central_port)
        for host, files, lines, size, records in conn.execute(
                "SELECT host, count(*), sum(line_count), sum(ingested_offset), sum(records) "
                "FROM files WHERE origin = 'fleet' GROUP BY host"):
            label = (("host", host),)
            assert got[("session_index_fleet_host_files", label)] == files
            assert got[("session_index_fleet_host_lines", label)] == lines
            assert got[("session_index_fleet_host_bytes", label)] == size
            assert got[("session_index_fleet_host_records", label)] == records
            assert 0 <= got[("session_index_fleet_heartbeat_age_seconds", label)] < 30
            assert 0 <= got[("session_index_fleet_lag_seconds", label)] < 30
        verdicts = dict(conn.execute(
            "SELECT v.verdict, count(*) FROM session_verdicts v JOIN sessions s "
            "ON s.session_id = v.session_id AND s.host = v.host GROUP BY v.verdict"))
        assert verdicts == {"poisoned": 1, "resumable": 1}
        assert {dict(k[1])["verdict"]: v for k, v in got.items()
                if k[0] == "session_index_sessions"} == verdicts
        assert got[("session_index_fleet_lines_total", ())] == \
            conn.execute("SELECT count(*) FROM records").fetchone()[0] == 8
        assert got[("session_index_fleet_quarantined", ())] == 0
        assert got[("session_index_fleet_held_messages", ())] == 0
        assert got[("session_index_files_to_derive", ())] == 0   # (derived: waited for above)
        assert not [k for k in got if k[0] == "session_index_fleet_gaps"]
        shipped = scrape(ship_port)
        assert shipped[("session_index_fleet_lines_total", ())] == 5
        assert shipped[("session_index_fleet_bytes_total", ())] == len(a.complete())
        for port in (central_port, ship_port):
            assert listening_on(port) == {"0100007F"}   # 127.0.0.1 only
            code, answer = health(port)
            assert code == 200 and answer["ok"] is True, answer
        web = subprocess.Popen([*CLI, "serve", "--db", db, "--port", str(web_port),
                                "--metrics", str(serve_port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_until(lambda: listening_on(serve_port), 20, web)
        served = scrape(serve_port)
        assert {k: v for k, v in served.items() if k[0].startswith("session_index_fleet_host")} \
            == {k: v for k, v in got.items() if k[0].startswith("session_index_fleet_host")}
        assert health(serve_port) == (200, {"ok": True, "role": "serve"})
    finally:
        for p in (central, shipper):
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=30) for p in (central, shipper)]
        if web is not None:
            web.kill()
            web.wait()
    assert codes == [0, 0], [p.stderr.read().decode() for p in (central, shipper)]


def catches_sigterm(pid: int) -> bool:
    """Has the process a SIGTERM handler yet (/proc's SigCgt mask)? Until
    the interpreter has started and run the entry point's first lines, the
    kernel's default ends any process on SIGTERM; under load that start
    takes longer than the shortest delays below."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except FileNotFoundError:
        pass
    return False


def test_sigterm_at_any_moment_exits_0(server, tmp_path):
    """ship and ingest --from --watch (and one with a server that never
    answers), SIGTERM 0 to 1.5 s after the process can take it: exit 0
    every time, no traceback."""
    (tmp_path / "h").mkdir()
    Transcript(tmp_path / "h").append(2)
    nowhere = f"nats://127.0.0.1:{free_port()}"
    rng = random.Random(28)
    for i in range(10):
        url = nowhere if i % 5 == 4 else server.url
        args = (["ship", tmp_path / "h", "--to", url, "--host", "h",
                 "--ledger", tmp_path / f"l{i}.db"] if i % 2 else
                ["ingest", "--from", url, "--watch", "--db", tmp_path / f"c{i}.db"])
        proc = subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        wait_until(lambda: catches_sigterm(proc.pid) or proc.poll() is not None, 30)
        time.sleep(rng.random() * 1.5)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        err = proc.stderr.read().decode()
        assert code == 0 and "Traceback" not in err, (args, code, err)


def test_a_shipper_waits_for_jetstream_then_ships(tmp_path):
    """A server that answers without JetStream: ship (following) logs the
    start-up call that failed and tries again until JetStream is there,
    then ships; --once says so in one line (exit 3). It exited 3."""
    server = Server(tmp_path / "jetstream")
    plain = subprocess.Popen([NATS_SERVER, "-a", "127.0.0.1", "-p", str(server.port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = Transcript(tmp_path / "h")
    t.append(2)
    shipper = None
    try:
        wait_until(lambda: listening_on(server.port), 10)
        p = subprocess.run([*CLI, "ship", tmp_path / "h", "--to", server.url, "--once",
                            "--ledger", tmp_path / "once.db"], capture_output=True, timeout=60)
        assert p.returncode == 3 and p.stderr.decode().startswith("Error: "), p.stderr
        shipper = subprocess.Popen([*CLI, "ship", tmp_path / "h", "--to", server.url,
                                    "--host", "h", "--ledger", tmp_path / "l.db"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(4)
        assert shipper.poll() is None, shipper.stderr.read().decode()
        plain.send_signal(signal.SIGKILL)
        plain.wait()
        server.start()
        db = tmp_path / "c.db"
        deadline = time.monotonic() + 60
        while exported_or_none(db, t.session_id) != t.complete():
            assert time.monotonic() < deadline and shipper.poll() is None
            subprocess.run([*CLI, "ingest", "--from", server.url, "--db", db],
                           capture_output=True, timeout=60)
        shipper.send_signal(signal.SIGTERM)
        assert shipper.wait(timeout=30) == 0
        err = shipper.stderr.read().decode()
        assert "ship h: NATS: starting: " in err and ": retrying" in err, err
        assert "Traceback" not in err
    finally:
        for proc in (shipper, plain):
            if proc is not None and proc.poll() is None:
                proc.kill()
        server.kill()


def test_ship_polls_when_the_kernel_gives_no_more_file_notifications(tmp_path, monkeypatch):
    """watchfiles' error when inotify instances run out (its words, as
    it raises them at the limit): the shipper logs it once and follows by
    polling (watchfiles' own poller), not exit 3."""
    import watchfiles
    from watchfiles._rust_notify import WatchfilesRustInternalError

    from indexer.ingest import ship as shipmod

    real, calls = watchfiles.awatch, []

    def awatch(*paths, force_polling=None, **kwargs):
        calls.append(force_polling)
        if not force_polling:
            raise WatchfilesRustInternalError(
                "Error creating recommended watcher: Too many open files (os error 24)")
        return real(*paths, force_polling=True, **kwargs)

    monkeypatch.setattr(watchfiles, "awatch", awatch)
    (tmp_path / "h").mkdir()

    class Passes:   # (a shipper's log and passes: what _follow calls)
        def __init__(self, stop):
            self.sources, self.stop = [str(tmp_path / "h")], stop
            self.log_lines, self.done = [], 0

        def log(self, line):
            self.log_lines.append(line)

        async def pass_(self):
            self.done += 1
            if self.done == 3:
                self.stop.set()

    async def main():
        stop = asyncio.Event()
        shipper = Passes(stop)
        await asyncio.wait_for(shipmod._follow(shipper, stop), 30)
        return shipper

    shipper = asyncio.run(main())
    assert calls[:2] == [None, True]
    assert shipper.log_lines == ["file notifications unavailable (Error creating recommended "
                                 "watcher: Too many open files (os error 24)); polling"]
    assert shipper.done == 3


def test_each_roles_systemd_unit_runs_a_command_the_cli_takes():
    """deploy/*.service: each session-index unit's ExecStart is a command
    and options the CLI accepts (click parses them: an option renamed
    would fail here), following until SIGTERM (exit 0)."""
    import configparser
    import shlex
    from pathlib import Path

    from indexer.cli.commands import cli
    from indexer.cli.entry import follows

    units = sorted((Path(__file__).resolve().parent.parent / "deploy").glob("*.service"))
    assert [u.name for u in units] == ["nats-server.service", "session-index-central.service",
                                       "session-index-ship.service"]
    for unit in units[1:]:
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.read(unit)
        exec_start = parser["Service"]["ExecStart"].replace("${NATS_URL}", "nats://nats:4222")
        args = shlex.split(exec_start.replace("%H", "build-7").replace("%h", "/home/u"))
        assert args[0].endswith("/.venv/bin/session-index"), unit
        command = cli.get_command(None, args[1])
        command.make_context(args[1], args[2:])   # raises on an option the CLI does not take
        assert follows(args[1:]), unit


def test_the_central_derives_once_per_window_not_per_batch(server, tmp_path, monkeypatch):
    """Live traffic: one line a message, one message every 20 ms for 3 s.
    The central commits many small batches but derives the caches about
    once per DERIVE_WINDOW_S (and once at the end): its cost per line does
    not depend on how the lines were batched. Every line is stored and the
    caches are current after it."""
    from indexer.index.db import open_db
    from indexer.ingest import derive, fleet_central, fleet_nats, fleet_wire

    import nats

    t = Transcript(tmp_path / "h")
    db = open_db(str(tmp_path / "central.db"))
    batches, derives = [], []
    apply = fleet_central.apply_batch
    monkeypatch.setattr(fleet_central, "apply_batch",
                        lambda *a, **k: batches.append(len(a[1])) or apply(*a, **k))

    async def main():
        stop = asyncio.Event()
        central = asyncio.ensure_future(fleet_central.consume(
            db, fleet_nats.ConnectOptions(server.url), watch=True, stop=stop,
            after_batch=lambda summary: derives.append(derive.derive_pending(db))))
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await fleet_nats.ensure_stream(js)
        offset, parent = 0, None
        for i in range(150):
            r = {"type": "user", "uuid": f"u-{i}", "parentUuid": parent, "sessionId": t.session_id,
                 "timestamp": "2026-12-01T00:00:00.000Z", "message": {"role": "user",
                                                                       "content": "x"}}
            line = json.dumps(r, separators=(",", ":")).encode() + b"\n"
            header = {"kind": "lines", "host": "h", "path": str(t.path), "generation": 1,
                      "offset": offset, "end": offset + len(line), "line": i + 1}
            await js.publish(fleet_wire.subject("h", "lines"), fleet_wire.encode(header, line),
                             headers={"Nats-Msg-Id": fleet_wire.message_id(header)})
            offset, parent = offset + len(line), r["uuid"]
            await asyncio.sleep(0.02)
        await nc.close()
        for _ in range(100):
            if db.conn.execute("SELECT count(*) FROM records").fetchone()[0] == 150:
                break
            await asyncio.sleep(0.1)
        stop.set()
        return await central

    summary = asyncio.run(main())
    assert summary.new_lines == sum(batches) == 150
    # live traffic: many small batches (one per GATHER_S or so), far more than derives
    assert len(batches) > 3 / fleet_central.GATHER_S / 2, batches
    assert len(batches) > 2 * len(derives), (batches, derives)
    elapsed = summary.seconds
    assert len(derives) <= elapsed / fleet_central.DERIVE_WINDOW_S + 3, (len(derives), elapsed)
    assert db.conn.execute("SELECT count(*) FROM files WHERE needs_derive").fetchone() == (0,)
    assert db.conn.execute("SELECT resume_leaf_uuid FROM leaves").fetchone() == ("u-149",)


def test_a_shipper_says_when_the_server_goes_and_comes_back(server, tmp_path):
    """A server restarted in a few seconds, sooner than any publish gives up:
    the shipper says so (it said nothing: no step failed), and its stop at
    the end is no disconnection to report."""
    t = Transcript(tmp_path / "h")
    t.append(2)
    err_path = tmp_path / "ship.err"
    with open(err_path, "w") as err:
        shipper = subprocess.Popen([*CLI, "ship", tmp_path / "h", "--to", server.url,
                                    "--host", "h", "--ledger", tmp_path / "l.db"],
                                   stdout=subprocess.DEVNULL, stderr=err)
    said = err_path.read_text
    try:
        wait_until(lambda: (tmp_path / "l.db").exists(), 30, shipper)
        time.sleep(2)   # (connected, and its first pass sent)
        server.kill()
        wait_until(lambda: f"ship h: NATS: disconnected from {server.url}: reconnecting"
                   in said(), 30, shipper)
        server.start()
        wait_until(lambda: f"ship h: NATS: reconnected to {server.url}" in said(), 30, shipper)
    finally:
        shipper.send_signal(signal.SIGTERM)
        assert shipper.wait(timeout=30) == 0, said()
    assert said().count("disconnected") == 1 and "Traceback" not in said(), said()
