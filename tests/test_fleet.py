"""A fleet in one index: `ship` on each host, `ingest --from` on the central,
through a real nats-server with JetStream on a loopback port (.ci/run
installs the Debian package). Every test runs the real commands as
processes and compares the central index with each host's files byte for
byte (`export SESSION --out -`)."""

import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("nats", reason="the fleet extra (nats-py) is not installed")
NATS_SERVER = shutil.which("nats-server") or (
    "/usr/sbin/nats-server" if os.path.exists("/usr/sbin/nats-server") else None)
# Restarts, kills and waits with deadlines: in the serial xdist group (conftest.py).
pytestmark = [pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed"),
              pytest.mark.xdist_group("timing")]

CLI = [sys.executable, "-m", "indexer"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """nats-server -js on loopback, its store in a folder; restartable."""

    def __init__(self, store):
        self.store, self.port, self.proc = store, free_port(), None
        self.url = f"nats://127.0.0.1:{self.port}"

    def start(self, *extra):
        self.proc = subprocess.Popen(
            [NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store),
             *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start")

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "jetstream")
    s.start()
    yield s
    s.kill()


def record(session_id, parent, text, **extra):
    r = {"type": "user", "uuid": str(uuid.uuid4()), "parentUuid": parent, "sessionId": session_id,
         "timestamp": "2026-11-30T10:00:00.000Z", "cwd": "/work/app",
         "message": {"role": "user", "content": text}}
    r.update(extra)
    return r


class Transcript:
    """A growing transcript file of one session."""

    def __init__(self, folder, session_id=None):
        self.session_id = session_id or str(uuid.uuid4())
        self.path = folder / "projects" / "-work-app" / f"{self.session_id}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.parent = None

    def append(self, n=1, text="hello", newline=True, **extra):
        with open(self.path, "ab") as f:
            for _ in range(n):
                r = record(self.session_id, self.parent, text, **extra)
                self.parent = r["uuid"]
                f.write(json.dumps(r).encode() + (b"\n" if newline else b""))

    def append_bytes(self, data: bytes):
        with open(self.path, "ab") as f:
            f.write(data)

    def complete(self) -> bytes:
        data = self.path.read_bytes()
        return data[:data.rfind(b"\n") + 1]


def run(*args, check=True, timeout=120):
    p = subprocess.run([*CLI, *map(str, args)], capture_output=True, timeout=timeout)
    assert b"Traceback" not in p.stderr, p.stderr.decode()
    if check:
        assert p.returncode == 0, (args, p.stdout.decode(), p.stderr.decode())
    return p


def ship_once(server, host, folder, tmp_path):
    return run("ship", folder, "--to", server.url, "--host", host,
               "--ledger", tmp_path / f"ledger-{host}.db", "--once")


def drain(server, db):
    p = run("ingest", "--from", server.url, "--db", db, "--json")
    return json.loads(p.stdout)


def exported(db, session_id) -> bytes:
    return run("export", session_id, "--out", "-", "--db", db).stdout


def test_three_hosts_reach_one_index_byte_exact(server, tmp_path):
    db = tmp_path / "central.db"
    hosts = {name: tmp_path / name for name in ("web-1", "web-2.example.com", "gpu 3")}
    files = {}
    for name, folder in hosts.items():
        t = Transcript(folder)
        t.append(5)
        t.append_bytes(b"\xff not json\n")                          # a bad line travels too
        t.append(1, text="x" * (1_300_000))                          # longer than a message
        t.append(1, text="<script>alert(1)</script> \u00e9\u4e2d")
        t.append(1, newline=False)          # no newline yet: stored as local ingest does
        files[name] = t
        ship_once(server, name, folder, tmp_path)
    summary = drain(server, db)
    assert summary["hosts"] == sorted(hosts)
    assert summary["duplicates"] == summary["gaps"] == 0
    for name, t in files.items():   # (issue 28: the last record, as a local index has it)
        run("ingest", t.path, "--db", tmp_path / f"local-{name}.db")
        assert exported(db, t.session_id) == t.path.read_bytes() == exported(
            tmp_path / f"local-{name}.db", t.session_id)
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT host, origin, path, line_count FROM files ORDER BY host").fetchall()
    assert rows == [(name, "fleet", f"fleet://{name}{files[name].path}", 9)
                    for name in sorted(hosts)]
    assert conn.execute("SELECT count(*) FROM bad_lines").fetchone() == (3,)
    assert conn.execute("SELECT count(*) FROM fleet_parts").fetchone() == (0,)

    # The unterminated line completed, more appended; shipped again (twice:
    # the second sends nothing), drained again: nothing doubled.
    for name, t in files.items():
        t.append_bytes(b"\n")
        t.append(3)
        ship_once(server, name, hosts[name], tmp_path)
        ship_once(server, name, hosts[name], tmp_path)
    summary = drain(server, db)
    assert summary["new_lines"] == 3 * 3   # (its newline taken: the line was stored)
    for name, t in files.items():
        assert exported(db, t.session_id) == t.complete()
    assert sqlite3.connect(db).execute("SELECT sum(line_count), sum(unterminated_tail) "
                                       "FROM files").fetchone() == (3 * 12, 0)
    assert drain(server, db)["messages"] == 0


def test_rewrite_and_deletion_travel_as_events(server, tmp_path):
    db = tmp_path / "central.db"
    folder = tmp_path / "host"
    t, gone = Transcript(folder), Transcript(folder)
    t.append(4)
    gone.append(2)
    ship_once(server, "h", folder, tmp_path)
    drain(server, db)
    # Rewritten shorter (a new file at the same path), and another deleted.
    t.path.unlink()
    t.parent = None
    t.append(2, text="rewritten")
    gone.path.unlink()
    ship_once(server, "h", folder, tmp_path)
    summary = drain(server, db)
    assert (summary["new_generations"], summary["deleted_files"]) == (1, 1)
    assert exported(db, t.session_id) == t.complete()
    conn = sqlite3.connect(db)
    assert conn.execute(
        "SELECT generation, rewrites FROM files WHERE session_id = ?", [t.session_id]
    ).fetchone() == (2, 1)
    assert conn.execute("SELECT count(*) FROM superseded_lines").fetchone() == (4,)
    assert conn.execute(
        "SELECT deleted_at IS NOT NULL FROM files WHERE session_id = ?", [gone.session_id]
    ).fetchone() == (1,)


def test_check_answers_for_another_host_with_its_heartbeat(server, tmp_path):
    db = tmp_path / "central.db"
    t = Transcript(tmp_path / "host")
    t.append(2)
    t.append(1, type="assistant", message={"id": "msg_01", "model": "claude-x", "role": "assistant",
                                           "content": [{"type": "text", "text": "hi"}]})
    ship_once(server, "build-7", tmp_path / "host", tmp_path)
    drain(server, db)
    p = run("check", t.session_id, "--db", db, "--json", check=False)
    verdict = json.loads(p.stdout)
    assert (p.returncode, verdict["verdict"]) == (0, "resumable")
    assert verdict["details"]["fleet"]["host"] == "build-7"
    assert 0 <= verdict["details"]["fleet"]["heartbeat_age_s"] < 60
    assert verdict["warnings"] == []
    # An hour later with no heartbeat since: the answer says how old it is.
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    verdict = json.loads(run("check", t.session_id, "--db", db, "--json", "--now", later,
                             check=False).stdout)
    assert any("last heartbeat was" in w for w in verdict["warnings"])


def test_a_new_index_under_an_old_consumer_gets_everything(server, tmp_path):
    t = Transcript(tmp_path / "host")
    t.append(3)
    ship_once(server, "h", tmp_path / "host", tmp_path)
    drain(server, tmp_path / "first.db")
    assert drain(server, tmp_path / "second.db")["new_lines"] == 3
    assert exported(tmp_path / "second.db", t.session_id) == t.complete()


def test_no_server_is_one_line_exit_3(tmp_path):
    t = Transcript(tmp_path / "host")
    t.append(1)
    url = f"nats://127.0.0.1:{free_port()}"
    for args in (["ship", tmp_path / "host", "--to", url, "--once", "--ledger", tmp_path / "l.db"],
                 ["ingest", "--from", url, "--db", tmp_path / "c.db"]):
        p = run(*args, check=False)
        assert p.returncode == 3
        assert p.stderr.decode().startswith("Error: cannot connect to nats://127.0.0.1:")
        assert len(p.stderr.decode().strip().splitlines()) == 1
    # Nothing was sent or received: the ledger and the index it made are gone
    # (they were left behind, empty).
    assert sorted(f.name for f in tmp_path.iterdir()) == ["host"]
    # An index that was there is kept.
    run("ingest", tmp_path / "host", "--db", tmp_path / "c.db")
    before = (tmp_path / "c.db").stat().st_size
    p = run("ingest", "--from", url, "--db", tmp_path / "c.db", check=False)
    assert p.returncode == 3 and (tmp_path / "c.db").stat().st_size == before


@pytest.mark.parametrize("url", ["http://x", "https://central:4222", "nats://", "nats://h:99999"])
def test_a_url_that_is_no_nats_servers_is_a_usage_error(tmp_path, url):
    # http://x was tried as a host named http (exit 3, the index or ledger made).
    t = Transcript(tmp_path / "host")
    t.append(1)
    for args in (["ship", tmp_path / "host", "--to", url, "--once", "--ledger", tmp_path / "l.db"],
                 ["ingest", "--from", url, "--db", tmp_path / "c.db"]):
        p = run(*args, check=False)
        assert p.returncode == 2, p.stderr
        assert p.stderr.decode().strip().splitlines()[-1].startswith(
            f"Error: Invalid value for '{'--to' if args[0] == 'ship' else '--from'}': {url!r}")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["host"]


def test_a_central_waits_for_jetstream_then_consumes(tmp_path):
    """A server that answers but has no JetStream yet (one still starting,
    or restarted without it; the chaos test below met it as "nats: timeout"
    at a restart): a drain says so in one line (exit 3); ingest --from --watch
    keeps trying, consumes once JetStream is there, and SIGTERM stops it
    (exit 0). It exited 3 at once."""
    server = Server(tmp_path / "jetstream")
    plain = subprocess.Popen([NATS_SERVER, "-a", "127.0.0.1", "-p", str(server.port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = tmp_path / "central.db"
    central = None
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", server.port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "nats-server did not start"
                time.sleep(0.05)
        one_line_error(run("ingest", "--from", server.url, "--db", db, check=False),
                       server.url)
        central = subprocess.Popen([*CLI, "ingest", "--from", server.url, "--watch", "--db", db],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(3)
        assert central.poll() is None, central.stderr.read().decode()
        plain.send_signal(signal.SIGKILL)
        plain.wait()
        server.start()
        t = Transcript(tmp_path / "host")
        t.append(3)
        ship_once(server, "h1", tmp_path / "host", tmp_path)
        deadline = time.monotonic() + 60
        while exported_or_none(db, t.session_id) != t.complete():
            assert time.monotonic() < deadline and central.poll() is None
            time.sleep(0.2)
        central.send_signal(signal.SIGTERM)
        err = central.stderr.read().decode() if central.wait(timeout=30) else ""
        assert central.returncode == 0, err
    finally:
        for proc in (central, plain):
            if proc is not None and proc.poll() is None:
                proc.kill()
        server.kill()


@pytest.mark.slow
def test_kills_of_shippers_central_and_server_lose_and_double_nothing(server, tmp_path):
    """3 shippers following their folders, a central `ingest --from --watch`,
    appends all along; SIGKILL of a shipper, the central and the NATS server
    at random points, each restarted; at the end every complete line of every
    host is in the index once, byte-exact, and integrity_check is ok."""
    rng = random.Random(14)
    db = tmp_path / "central.db"
    hosts = [f"host-{i}" for i in range(3)]
    transcripts = {h: [Transcript(tmp_path / h) for _ in range(2)] for h in hosts}
    for ts in transcripts.values():
        for t in ts:
            t.append_bytes(b'{"type":"summary"}\n')   # a short first line: the head grows
            t.append(2)

    def start_shipper(h):
        return subprocess.Popen([*CLI, "ship", tmp_path / h, "--to", server.url, "--host", h,
                                 "--ledger", tmp_path / f"ledger-{h}.db"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start_central():
        return subprocess.Popen([*CLI, "ingest", "--from", server.url, "--watch", "--db", db],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    shippers = {h: start_shipper(h) for h in hosts}
    central = start_central()
    try:
        for round_ in range(12):
            for _ in range(rng.randint(5, 15)):
                t = rng.choice(rng.choice(list(transcripts.values())))
                t.append(rng.randint(1, 3), text="y" * rng.choice([10, 1000, 700_000]))
                time.sleep(rng.random() * 0.05)
            victim = rng.choice(["shipper", "shipper", "central", "server"])
            time.sleep(rng.random() * 0.5)
            if victim == "shipper":
                h = rng.choice(hosts)
                shippers[h].kill()
                shippers[h].wait()
                shippers[h] = start_shipper(h)
            elif victim == "central":
                central.kill()
                central.wait()
                central = start_central()
            else:
                server.kill()
                time.sleep(rng.random())
                server.start()
        time.sleep(3)
        for h in hosts:   # a clean stop: SIGTERM, exit 0
            shippers[h].send_signal(signal.SIGTERM)
            assert shippers[h].wait(timeout=30) == 0, shippers[h].stderr.read().decode()
        central.send_signal(signal.SIGTERM)
        assert central.wait(timeout=30) == 0, central.stderr.read().decode()
        for proc in [central, *shippers.values()]:
            assert b"Traceback" not in proc.stderr.read()
    finally:
        for proc in [central, *shippers.values()]:
            if proc.poll() is None:
                proc.kill()
    for h in hosts:   # what was still in flight
        ship_once(server, h, tmp_path / h, tmp_path)
    drain(server, db)
    for h, ts in transcripts.items():
        for t in ts:
            assert exported(db, t.session_id) == t.complete(), (h, t.path)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    lines = sum(t.complete().count(b"\n") for ts in transcripts.values() for t in ts)
    assert conn.execute("SELECT count(*) FROM records").fetchone() == (lines,)
    # Appends only: no file was ever taken for rewritten (a new generation).
    assert conn.execute("SELECT max(generation), max(remote_generation) FROM files "
                        "JOIN fleet_files ON file_id = id").fetchone() == (1, 1)


def test_serve_watch_from_shows_what_hosts_ship(server, tmp_path):
    """serve --watch --from: Datasette and the fleet consumer in one process;
    a shipped transcript is on its pages within seconds; SIGTERM: exit 0.
    With --hosts, another host's transcript never comes."""
    import urllib.request

    db = tmp_path / "central.db"
    port = free_port()
    proc = subprocess.Popen([*CLI, "serve", "--watch", "--from", server.url, "--db", db,
                             "--port", str(port), "--hosts", "edge-9"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        Transcript(tmp_path / "other").append(2)
        ship_once(server, "other", tmp_path / "other", tmp_path)
        t = Transcript(tmp_path / "host")
        t.append(3)
        ship_once(server, "edge-9", tmp_path / "host", tmp_path)
        url = f"http://127.0.0.1:{port}/central/files.json?_shape=array&host=edge-9"
        rows, deadline = [], time.monotonic() + 20
        while not rows and time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                rows = json.load(urllib.request.urlopen(url, timeout=2))
            except OSError:
                continue
        assert [(r["origin"], r["line_count"], r["session_id"]) for r in rows] == [
            ("fleet", 3, t.session_id)]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    err = proc.stderr.read().decode()
    assert code == 0, err
    assert "Traceback" not in err
    assert "batch: " in err
    assert sqlite3.connect(db).execute("SELECT DISTINCT host FROM files").fetchall() == [
        ("edge-9",)]
    p = run("serve", "--hosts", "edge-9", "--db", db, check=False)
    assert p.returncode == 2 and b"--hosts applies to --from" in p.stderr


def test_the_central_stops_cleanly_with_the_server_gone(server, tmp_path):
    proc = subprocess.Popen([*CLI, "ingest", "--from", server.url, "--watch",
                             "--db", tmp_path / "c.db"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    time.sleep(3)
    server.kill()
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert b"Traceback" not in proc.stderr.read()


def test_a_central_whose_index_is_deleted_stops_and_acks_nothing_into_it(server, tmp_path):
    db = tmp_path / "c.db"
    t = Transcript(tmp_path / "host")
    t.append(1)
    ship_once(server, "h", tmp_path / "host", tmp_path)
    proc = subprocess.Popen([*CLI, "ingest", "--from", server.url, "--watch", "--db", db],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while exported_or_none(db, t.session_id) != t.complete():
            assert time.monotonic() < deadline and proc.poll() is None, "the first line"
            time.sleep(0.1)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        t.append(1)
        ship_once(server, "h", tmp_path / "host", tmp_path)
        assert proc.wait(timeout=30) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read().decode()
    assert "Traceback" not in err
    assert err.splitlines()[-1] == (f"Error: {db} was deleted or replaced while in use; "
                                    "stopped (run again: a new index is built from the "
                                    "transcripts)")
    assert drain(server, db)["new_lines"] == 2
    assert exported(db, t.session_id) == t.complete()


def exported_or_none(db, session_id) -> bytes | None:
    if not Path(db).exists():
        return None
    p = subprocess.run([*CLI, "export", session_id, "--out", "-", "--db", str(db)],
                       capture_output=True, timeout=60)
    return p.stdout if p.returncode == 0 else None


def test_a_name_that_is_not_utf8_is_skipped_by_ship_and_its_watch_goes_on(server, tmp_path):
    t = Transcript(tmp_path / "host")
    t.append(1)
    odd = os.fsencode(t.path.parent.parent) + b"/-tmp-\xff\xfeodd"
    os.mkdir(odd)
    Path(os.fsdecode(odd + b"/x.jsonl")).write_bytes(b"{}\n")
    p = ship_once(server, "h", tmp_path / "host", tmp_path)
    note = "-tmp-\\xff\\xfeodd/x.jsonl: a file name that is not UTF-8: skipped"
    assert note in p.stderr.decode()
    db = tmp_path / "c.db"
    assert drain(server, db)["new_lines"] == 1
    proc = subprocess.Popen([*CLI, "ship", tmp_path / "host", "--to", server.url, "--host", "h",
                             "--ledger", tmp_path / "ledger-h.db"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1)                    # (a line before its watch starts is shipped too)
        t.append(1)
        deadline = time.monotonic() + 30
        got = 0
        while got < 1:
            assert time.monotonic() < deadline and proc.poll() is None, "the append"
            got = drain(server, db)["new_lines"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read().decode()
    assert "Traceback" not in err and "internal error" not in err
    assert err.count(note) == 1
    assert exported(db, t.session_id) == t.complete()


def test_a_shipper_and_a_central_whose_log_cannot_be_written_go_on(server, tmp_path):
    t = Transcript(tmp_path / "host")
    t.append(1)
    db = tmp_path / "c.db"
    with open("/dev/full", "wb") as full:
        procs = [subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=full)
                 for args in (["ship", tmp_path / "host", "--to", server.url, "--host", "h",
                               "--ledger", tmp_path / "ledger.db"],
                              ["ingest", "--from", server.url, "--watch", "--db", db])]
    try:
        time.sleep(1)
        t.append(2)
        deadline = time.monotonic() + 30
        while exported_or_none(db, t.session_id) != t.complete():
            assert time.monotonic() < deadline, "the lines"
            assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
            time.sleep(0.2)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        assert [p.wait(timeout=30) for p in procs] == [0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def test_a_ledger_is_one_shippers_and_never_another_database(server, tmp_path):
    import fcntl

    t = Transcript(tmp_path / "host")
    t.append(1)
    ledger = tmp_path / "ledger.db"
    with open(str(ledger) + ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        p = run("ship", tmp_path / "host", "--to", server.url, "--ledger", ledger, "--once",
                check=False)
    assert p.returncode == 3
    assert p.stderr.decode() == f"Error: {ledger}: another ship is using this ledger\n"
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE notes (x)")
    before = other.read_bytes()
    p = run("ship", tmp_path / "host", "--to", server.url, "--ledger", other, "--once",
            check=False)
    assert p.returncode == 3
    assert "is another SQLite database (its tables: notes), not a ship ledger" in p.stderr.decode()
    assert other.read_bytes() == before


def copies_of_one_session(tmp_path, records: int):
    """A transcript of ``records`` records in tmp_path/a, and a copy of it in
    tmp_path/b under the same session id that goes on from the same leaf."""
    a = Transcript(tmp_path / "a")
    a.append(records)
    b = Transcript(tmp_path / "b", session_id=a.session_id)
    b.append_bytes(a.path.read_bytes())
    b.parent = a.parent
    return a, b


def test_copies_of_one_session_on_two_hosts_side_by_side(server, tmp_path):
    db = tmp_path / "central.db"
    a, b = copies_of_one_session(tmp_path, 3)
    for host in ("a", "b"):
        ship_once(server, host, tmp_path / host, tmp_path)
    drain(server, db)
    run("ingest", a.path, "--db", db)   # and this machine's own copy
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT a_host, b_host, a_records, b_records, a_only, b_only, diverged "
                        "FROM host_copies WHERE session_id = ? ORDER BY a_file_id, b_file_id",
                        [a.session_id]).fetchall()
    assert rows == [("a", "b", 3, 3, 0, 0, 0), ("a", "", 3, 3, 0, 0, 0), ("b", "", 3, 3, 0, 0, 0)]
    b.parent = a.parent
    b.append(1, text="only on b")
    ship_once(server, "b", tmp_path / "b", tmp_path)
    drain(server, db)
    rows = conn.execute("SELECT a_host, b_host, a_only, b_only, diverged FROM host_copies "
                        "WHERE session_id = ? ORDER BY a_file_id, b_file_id",
                        [a.session_id]).fetchall()
    assert rows == [("a", "b", 0, 1, 1), ("a", "", 0, 0, 0), ("b", "", 1, 0, 1)]
    assert conn.execute("SELECT count(*) FROM files WHERE session_id = ?",
                        [a.session_id]).fetchone() == (3,)   # never merged
    out = run("status", "--db", db).stdout.decode()
    assert "fleet: 2 hosts, 2 files shipped" in out
    assert "sessions on several hosts: 1 (1 diverged, see host_copies)" in out


def test_a_token_is_passed_to_the_server(tmp_path):
    """A server that wants a token: ship and ingest --from with --token work,
    without it they exit 3 with one line."""
    s = Server(tmp_path / "jetstream")
    s.start("--auth", "s3cret")
    try:
        t = Transcript(tmp_path / "host")
        t.append(2)
        args = ["ship", tmp_path / "host", "--to", s.url, "--ledger", tmp_path / "l.db", "--once"]
        p = run(*args, check=False)
        assert p.returncode == 3 and len(p.stderr.decode().strip().splitlines()) == 1
        assert "authorization" in p.stderr.decode().lower()
        run(*args, "--token", "s3cret")
        db = tmp_path / "c.db"
        assert run("ingest", "--from", s.url, "--db", db, check=False).returncode == 3
        p = subprocess.run([*CLI, "ingest", "--from", s.url, "--db", str(db), "--json"],
                           capture_output=True, env=dict(os.environ, NATS_TOKEN="s3cret"))
        assert p.returncode == 0 and json.loads(p.stdout)["new_lines"] == 2
    finally:
        s.kill()


def test_the_health_and_session_pages_show_hosts_and_their_copies(server, tmp_path):
    import asyncio

    from indexer.cli import web

    db = tmp_path / "central.db"
    a, b = copies_of_one_session(tmp_path, 2)
    b.append(1)
    hostile = "<b>evil</b>"
    ship_once(server, "alpha", tmp_path / "a", tmp_path)
    ship_once(server, hostile, tmp_path / "b", tmp_path)
    drain(server, db)
    ds = web.make_datasette(db)
    health = asyncio.run(ds.client.get("/-/session-health")).text
    assert "<h2>Fleet</h2>" in health
    assert "&lt;b&gt;evil&lt;/b&gt;" in health and "<b>evil</b>" not in health
    assert 'class="si-fleet-diverged">1</a>' in health
    page = asyncio.run(ds.client.get(f"/-/sessions/{a.session_id}")).text
    assert "host alpha" in page and "host &lt;b&gt;evil&lt;/b&gt;" in page
    assert "<strong class=\"si-diverged\">differ</strong>, 0 uuid(s) only on the first, 1 only " \
           "on the second" in page


# TLS and credentials: throwaway keys made in tmp_path for each test.

def make_ca(folder, name):
    """A CA (name.pem, name.key) made with openssl."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", f"/CN={name}",
                    "-keyout", folder / f"{name}.key", "-out", folder / f"{name}.pem"],
                   check=True, capture_output=True)
    return folder / f"{name}.pem"


def make_server_cert(folder, ca):
    """server.pem/server.key for 127.0.0.1, signed by the CA ``ca``."""
    key, csr, cert, ext = (folder / n for n in ("server.key", "server.csr", "server.pem",
                                                  "ext.cnf"))
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey",
                    ca.with_suffix(".key"), "-CAcreateserial", "-days", "2", "-extfile", ext,
                    "-out", cert], check=True, capture_output=True)
    return cert, key


def one_line_error(p, *words):
    err = p.stderr.decode()
    assert p.returncode == 3, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("Error: "), err
    for word in words:
        assert word in err, err


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_tls_with_the_servers_ca_and_a_wrong_ca_refused(tmp_path):
    """A server that speaks TLS only: ship and ingest --from with --tls-ca
    (the CA that signed its certificate) carry the lines; another CA, or none,
    is refused at once, one line, exit 3, following or not."""
    ca = make_ca(tmp_path, "ca")
    cert, key = make_server_cert(tmp_path, ca)
    other = make_ca(tmp_path, "other-ca")
    conf = tmp_path / "tls.conf"
    conf.write_text(f'tls {{ cert_file: "{cert}", key_file: "{key}" }}\n')
    s = Server(tmp_path / "jetstream")
    s.start("-c", conf)
    url = s.url.replace("nats://", "tls://")
    try:
        t = Transcript(tmp_path / "host")
        t.append(3)
        p = run("ship", tmp_path / "host", "--to", url, "--tls-ca", ca, "--host", "h",
                "--ledger", tmp_path / "l.db", "--once")
        assert p.stderr.decode() == "ship h: 1 message, 3 lines, {:,} bytes sent\n".format(len(
            t.complete()))   # nothing else on stderr (asyncio's TLS warnings)
        db = tmp_path / "c.db"
        assert json.loads(run("ingest", "--from", url, "--tls-ca", ca, "--db", db,
                              "--json").stdout)["new_lines"] == 3
        assert exported(db, t.session_id) == t.complete()
        for args in (["--tls-ca", other], [], ["--tls-ca", other, "--watch"]):
            started = time.monotonic()
            p = run("ingest", "--from", url, *args, "--db", db, check=False, timeout=30)
            one_line_error(p, f"cannot connect to {url}: ", "certificate verify failed")
            assert time.monotonic() - started < 4   # at once, not after the 5 s wait
        p = run("ship", tmp_path / "host", "--to", url, "--tls-ca", other,
                "--ledger", tmp_path / "l.db", check=False, timeout=30)   # following
        one_line_error(p, "certificate verify failed")
        p = run("ingest", "--from", url, "--tls-ca", conf, "--db", db, check=False)
        one_line_error(p, f"--tls-ca {conf}: not a CA certificate file")
    finally:
        s.kill()


def _b64url(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def nkey(prefix):
    """(seed, public key, key pair) of a new nkey of this role."""
    import nkeys

    seed = nkeys.encode_seed(os.urandom(32), prefix)
    kp = nkeys.from_seed(bytearray(seed))
    return seed.decode(), kp.public_key.decode(), kp


def signed_jwt(issuer, subject, name, nats):
    """A NATS JWT: base64url header.claims, then the issuer's ed25519
    signature of those two."""
    import hashlib

    claims = {"iat": int(time.time()), "iss": issuer.public_key.decode(), "sub": subject,
              "name": name, "nats": dict(nats, version=2)}
    claims["jti"] = hashlib.sha256(json.dumps(claims).encode()).hexdigest()[:52].upper()
    head = _b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    return f"{head}.{body}.{_b64url(issuer.sign(f'{head}.{body}'.encode()))}"


def creds_file(path, account, name):
    """A user of ``account`` (its key pair) as a .creds file (JWT and seed)."""
    import nkeys

    seed, public, _ = nkey(nkeys.PREFIX_BYTE_USER)
    jwt = signed_jwt(account, public, name, {"type": "user", "pub": {}, "sub": {},
                                             "subs": -1, "data": -1, "payload": -1})
    path.write_text(f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
                    f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n")
    return path


def test_a_credentials_file_is_passed_to_the_server(tmp_path):
    """nats-server in operator mode (JWTs signed with nkeys, made here): ship
    and ingest --from with --creds carry the lines; without it, or with a
    user of an account the operator never signed, exit 3 with one line."""
    nkeys = pytest.importorskip("nkeys")
    _, op_public, operator = nkey(nkeys.PREFIX_BYTE_OPERATOR)
    _, acct_public, account = nkey(nkeys.PREFIX_BYTE_ACCOUNT)
    _, sys_public, _ = nkey(nkeys.PREFIX_BYTE_ACCOUNT)
    _, _, stranger = nkey(nkeys.PREFIX_BYTE_ACCOUNT)
    unlimited = {k: -1 for k in ("subs", "data", "payload", "imports", "exports", "conn", "leaf",
                                 "mem_storage", "disk_storage", "streams", "consumer")}
    (tmp_path / "operator.jwt").write_text(
        signed_jwt(operator, op_public, "test", {"type": "operator"}))
    acct_jwt = signed_jwt(operator, acct_public, "fleet",
                          {"type": "account", "limits": dict(unlimited, wildcards=True)})
    sys_jwt = signed_jwt(operator, sys_public, "SYS", {"type": "account"})
    conf = tmp_path / "operator.conf"
    conf.write_text(f'operator: "{tmp_path / "operator.jwt"}"\nresolver: MEMORY\n'
                    f"system_account: {sys_public}\n"
                    f'resolver_preload: {{ {acct_public}: "{acct_jwt}", {sys_public}: "{sys_jwt}" }}\n')
    creds = creds_file(tmp_path / "fleet.creds", account, "shipper")
    s = Server(tmp_path / "jetstream")
    s.start("-c", conf)
    try:
        t = Transcript(tmp_path / "host")
        t.append(2)
        args = ["ship", tmp_path / "host", "--to", s.url, "--ledger", tmp_path / "l.db", "--once"]
        one_line_error(run(*args, check=False), "Authorization Violation")
        one_line_error(run(*args, "--creds", creds_file(tmp_path / "x.creds", stranger, "x"),
                           check=False), "Authorization Violation")
        run(*args, "--creds", creds)
        db = tmp_path / "c.db"
        one_line_error(run("ingest", "--from", s.url, "--db", db, check=False),
                       "Authorization Violation")
        assert json.loads(run("ingest", "--from", s.url, "--creds", creds, "--db", db,
                              "--json").stdout)["new_lines"] == 2
        assert exported(db, t.session_id) == t.complete()
    finally:
        s.kill()


def test_a_signal_while_waiting_for_the_server_stops_at_once(tmp_path):
    """Following (ship, ingest --from --watch) with no server yet: they wait
    for it, and SIGTERM ends the wait (exit 0), nothing written."""
    (tmp_path / "host").mkdir()
    url = f"nats://127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
             for args in (["ship", tmp_path / "host", "--to", url, "--host", "h",
                           "--ledger", tmp_path / "l.db"],
                          ["ingest", "--from", url, "--watch", "--db", tmp_path / "c.db"])]
    time.sleep(2)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    errs = []
    for proc in procs:
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        errs.append(proc.stderr.read().decode())
        assert code == 0 and "Traceback" not in errs[-1], errs[-1]
    assert errs[0] == "ship h: stopped before the server answered: nothing sent\n"
    if (tmp_path / "c.db").exists():   # (under load the signal may come while it is made)
        conn = sqlite3.connect(tmp_path / "c.db")
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "files" not in tables or conn.execute("SELECT count(*) FROM files").fetchone() == (0,)


def test_a_shipped_file_has_its_host_in_the_views(server, tmp_path):
    """Each row of a host's file carries that host in the views (this
    machine's: ''), escaped where a page shows it."""
    import asyncio

    from indexer.cli import web

    db = tmp_path / "central.db"
    hostile = "<b>evil</b>"
    t = Transcript(tmp_path / "remote")
    t.append(1)
    t.append(1, type="assistant", requestId="req_1", message={
        "id": "msg_01", "model": "claude-x", "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "usage": {"input_tokens": 10, "output_tokens": 5}})
    t.append(1, type="assistant", requestId="req_2", message={   # named: poisoned
        "id": "synthetic-1", "model": "<synthetic>", "role": "assistant",
        "content": [{"type": "text", "text": "No response"}]})
    ship_once(server, hostile, tmp_path / "remote", tmp_path)
    drain(server, db)
    local = Transcript(tmp_path / "here")
    local.append(2)
    run("ingest", local.path, "--db", db)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT session_id, host FROM leaves ORDER BY host").fetchall() == [
        (local.session_id, ""), (t.session_id, hostile)]
    assert conn.execute("SELECT host, count(*) FROM leaf_ancestry WHERE rule = 'resume' "
                        "GROUP BY host ORDER BY host").fetchall() == [("", 2), (hostile, 3)]
    assert conn.execute("SELECT session_id, at_resume_tail, host FROM poisoned_sessions"
                        ).fetchall() == [(t.session_id, 1, hostile)]
    assert conn.execute("SELECT session_id, output_tokens, host FROM usage").fetchall() == [
        (t.session_id, 5, hostile)]
    assert conn.execute("SELECT session_id, generation, host FROM file_generations "
                        "ORDER BY host").fetchall() == [(local.session_id, 1, ""),
                                                         (t.session_id, 1, hostile)]
    ds = web.make_datasette(db)
    page = asyncio.run(ds.client.get("/central/leaves")).text
    assert "&lt;b&gt;evil&lt;/b&gt;" in page and hostile not in page


def test_two_centrals_each_take_only_their_hosts(server, tmp_path):
    """A partitioned fleet: `ingest --from --hosts` reads only those hosts'
    subjects, with a durable consumer per host; two centrals share the
    stream and each holds its own hosts, all of their lines and no other's."""
    hosts = ["a", "web-2.example.com", "c"]
    files = {}
    for h in hosts:
        files[h] = Transcript(tmp_path / h)
        files[h].append(2)
        ship_once(server, h, tmp_path / h, tmp_path)
    one, two = tmp_path / "one.db", tmp_path / "two.db"

    def take(db, hosts):
        p = run("ingest", "--from", server.url, "--hosts", hosts, "--db", db, "--json")
        return json.loads(p.stdout)

    assert take(one, "a,web-2.example.com")["hosts"] == ["a", "web-2.example.com"]
    assert take(two, "c")["hosts"] == ["c"]
    for h in ("a", "c"):
        files[h].append(3)
        ship_once(server, h, tmp_path / h, tmp_path)
    assert (take(one, "a,web-2.example.com")["new_lines"], take(two, "c")["new_lines"]) == (3, 3)
    for db, mine in ((one, ["a", "web-2.example.com"]), (two, ["c"])):
        conn = sqlite3.connect(db)
        assert [h for (h,) in conn.execute("SELECT host FROM files ORDER BY host")] == mine
        for h in mine:
            assert exported(db, files[h].session_id) == files[h].complete()
    assert [n for (n,) in sqlite3.connect(one).execute(
        "SELECT name FROM fleet_consumers ORDER BY name")] == [
        "session-index-central-a", "session-index-central-web-2_example_com"]
    # Without --hosts, another central takes every host's.
    assert json.loads(run("ingest", "--from", server.url, "--db", tmp_path / "all.db",
                          "--json").stdout)["hosts"] == sorted(hosts)
    for args in (["--from", server.url, "--hosts", "a,,b"], ["--hosts", "a", tmp_path / "a"]):
        p = run("ingest", *args, "--db", tmp_path / "x.db", check=False)
        assert p.returncode == 2 and b"--hosts" in p.stderr, p.stderr


def test_a_session_on_two_hosts_has_a_main_file_on_each(server, tmp_path):
    """Copies of one session on two hosts are never merged: each host has its
    own main transcript (session_hosts), the views judge each on its own,
    and check answers for the host asked about (--host; none named and
    several hosts, not this machine: exit 10, one line)."""
    db = tmp_path / "central.db"
    a, b = copies_of_one_session(tmp_path, 3)
    b.append(1, type="assistant", requestId="req_2", message={   # named: poisoned
        "id": "synthetic-1", "model": "<synthetic>", "role": "assistant",
        "content": [{"type": "text", "text": "No response"}]})
    for host in ("a", "b"):
        ship_once(server, host, tmp_path / host, tmp_path)
    drain(server, db)
    sid = a.session_id
    conn = sqlite3.connect(db)
    file_of = dict(conn.execute("SELECT host, id FROM files WHERE session_id = ?", [sid]))
    assert conn.execute("SELECT host, main_file_id, main_file_rule FROM session_hosts "
                        "WHERE session_id = ? ORDER BY host", [sid]).fetchall() == [
        ("a", file_of["a"], "only_named"), ("b", file_of["b"], "only_named")]
    # The sessions row is one host's (the last written; a tie: by name), never a sum.
    assert conn.execute("SELECT host, main_file_id, records FROM sessions WHERE session_id = ?",
                        [sid]).fetchone() == ("a", file_of["a"], 3)
    assert conn.execute("SELECT host, file_id, at_resume_tail FROM poisoned_sessions").fetchall() \
        == [("b", file_of["b"], 1)]
    assert conn.execute("SELECT host, chosen FROM session_main_copies WHERE session_id = ? "
                        "ORDER BY host", [sid]).fetchall() == [("a", 1), ("b", 1)]

    def check(*args):
        p = run("check", sid, "--db", db, "--json", *args, check=False)
        return p.returncode, (json.loads(p.stdout) if p.stdout else p.stderr.decode())

    assert check() == (10, f"Error: session {sid} is on 2 hosts (a, b) and not on this "
                           "machine: give --host\n")
    code, verdict = check("--host", "a")
    assert (code, verdict["verdict"], verdict["details"]["fleet"]["host"]) == (0, "resumable", "a")
    assert verdict["details"]["main_file"]["file_id"] == file_of["a"]
    code, verdict = check("--host", "b")
    assert (code, verdict["verdict"], verdict["details"]["main_file"]["file_id"]) == (
        5, "poisoned", file_of["b"])
    code, verdict = check("--host", "c")
    assert (code, verdict["verdict"]) == (4, "missing")
    assert verdict["reason"].startswith("on host c: no transcript with this id was ever seen")
    # This machine's own copy: the default answer is this machine's.
    run("ingest", a.path, "--db", db)
    code, verdict = check()
    assert (code, verdict["verdict"], verdict["path"]) == (0, "resumable", str(a.path))
    assert "fleet" not in verdict["details"]
    assert conn.execute("SELECT host FROM sessions WHERE session_id = ?", [sid]).fetchone() == ("",)
    assert [h for (h,) in conn.execute("SELECT host FROM session_hosts WHERE session_id = ? "
                                       "ORDER BY host", [sid])] == ["", "a", "b"]
