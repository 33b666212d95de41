"""A fleet's central against bad input, forged messages and losses on the
stream, through a real nats-server (as tests/test_fleet.py): the central
never stops, stores every good line of every host once, and keeps and
reports what it could not use."""

import asyncio
import json
import signal
import sqlite3
import subprocess
import time

import pytest

from test_fleet import (CLI, Server, Transcript, drain, exported, exported_or_none, run,
                        ship_once)

pytest.importorskip("nats", reason="the fleet extra (nats-py) is not installed")
from indexer.ingest import fleet_nats, fleet_wire   # noqa: E402  (after the skip)
from test_fleet import pytestmark   # noqa: E402,F401  (nats-server, the timing group)


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "jetstream")
    s.start()
    yield s
    s.kill()


def publish_raw(url, messages=(), heartbeats=()):
    """Publish ``messages`` ((subject, payload, NATS headers or None)) on the
    stream and put ``heartbeats`` ((key, value)) in the heartbeat bucket, as
    anyone with the server's credentials could."""
    import nats

    async def main():
        nc = await nats.connect(url)
        js = nc.jetstream()
        await fleet_nats.ensure_stream(js)
        for subject, payload, headers in messages:
            ack = await js.publish(subject, payload, headers=headers, stream=fleet_wire.STREAM)
            assert not ack.duplicate, (subject, payload[:80])
        kv = await fleet_nats.heartbeats(js)
        for key, value in heartbeats:
            await kv.put(key, value)
        await nc.close()

    asyncio.run(main())


def good(host_, path_, offset_, body, **fields):
    """(header, body) of a shipper's lines message, with ``fields`` changed
    (a field set to ... is left out)."""
    header = {"kind": "lines", "host": host_, "path": str(path_), "generation": 1,
              "offset": offset_, "end": offset_ + len(body), "line": 1, "sent_at": 1.0}
    header.update(fields)
    return {k: v for k, v in header.items() if v is not ...}, body


def as_sent(header, body, subject=None, msg_id=None):
    """(subject, payload, headers) as a shipper would send the message
    (its own subject and message id unless given)."""
    if subject is None:
        subject = fleet_wire.subject(str(header.get("host", "x")), str(header.get("kind", "x")))
    if msg_id is None:
        try:
            msg_id = fleet_wire.message_id(header)
        except (KeyError, TypeError):
            msg_id = None
    payload = header if isinstance(header, bytes) else fleet_wire.encode(header, body)
    return subject, payload, ({"Nats-Msg-Id": msg_id} if msg_id else None)


def malformed(path):
    """The 27 kinds of message a central cannot use, each (name, (subject,
    payload, headers), a word of its quarantine reason): after the header
    field named, by what is wrong."""
    line = b'{"type":"user","uuid":"u-forged"}\n'
    subj = fleet_wire.subject("h1", "lines")

    def raw(payload, n):
        return subj, payload, {"Nats-Msg-Id": f"raw-{n}"}

    def bad(n, **fields):
        header, body = good("h1", path, 0, line, **fields)
        subject, payload, _ = as_sent(header, body, subject=subj)
        return subject, payload, {"Nats-Msg-Id": f"bad-{n}"}

    big = b"x" * (fleet_wire.MESSAGE_BYTES + 10) + b"\n"
    return [
        ("no header line", raw(b"just bytes", 1), "no header line"),
        ("header not JSON", raw(b"{not json\n" + line, 2), "not JSON"),
        ("header not UTF-8", raw(b'{"kind":"lines","host":"h1\xff"}\n' + line, 3), "not UTF-8"),
        ("header a list", raw(b"[1,2]\n" + line, 4), "not a JSON object"),
        ("no kind", bad(5, kind=...), "unknown kind"),
        ("unknown kind", bad(6, kind="rename"), "unknown kind"),
        ("no host", bad(7, host=...), "host is missing"),
        ("host a number", bad(8, host=7), "host is not a name"),
        ("host with a NUL", bad(9, host="h1\x00"), "control characters"),
        ("no path", bad(10, path=...), "path is missing"),
        ("path a list", bad(11, path=["/a"]), "path is not a name"),
        ("path relative", bad(12, path="relative/x.jsonl"), "not absolute"),
        ("path with ..", bad(25, path=f"{path.parent}/../{path.parent.name}/{path.name}"),
         "not in normal form"),
        ("path with an empty part", bad(26, path=f"{path.parent}//{path.name}"),
         "not in normal form"),
        ("path with //", bad(27, path=f"/{path}"), "not in normal form"),
        ("no generation", bad(13, generation=...), "generation is missing"),
        ("generation a string", bad(14, generation="1"), "generation is str"),
        ("generation 0", bad(15, generation=0), "generation 0 is below 1"),
        ("generation true", bad(16, generation=True), "generation is bool"),
        ("offset negative", bad(17, offset=-5), "offset -5 is below 0"),
        ("offset a float", bad(18, offset=1.5), "offset is float"),
        ("end before offset", bad(19, offset=40, end=40), "not past offset"),
        ("no line number", bad(20, line=...), "line is missing"),
        ("body shorter than its range", bad(21, end=len(line) + 9), "bytes for offsets"),
        ("lines without a newline", raw(fleet_wire.encode(
            good("h1", path, 0, line[:-1])[0], line[:-1]), 22), "do not end with a newline"),
        ("a piece outside its line", raw(fleet_wire.encode(
            {"kind": "part", "host": "h1", "path": str(path), "generation": 1, "offset": 0,
             "end": 100, "line": 1, "at": 120}, b"abc"), 23), "outside its line"),
        ("oversize", raw(fleet_wire.encode(good("h1", path, 0, big)[0], big), 24),
         "a body of"),
    ]


def test_the_central_quarantines_every_malformed_message_and_goes_on(server, tmp_path):
    """27 kinds of malformed message, forged ones a decode cannot see (no
    message id, another's, a generation past SQLite's integers, a host and
    path that name another file) and hostile heartbeats (4e12, 1e300,
    -1e12, NaN, another host's key) among two hosts' lines: a following
    central never stops, stores every good line once, keeps each bad one
    once with why, and a drain into a new index does the same."""
    db = tmp_path / "central.db"
    hosts = {h: Transcript(tmp_path / h) for h in ("h1", "h2")}
    for h, t in hosts.items():
        t.append(3)
        ship_once(server, h, tmp_path / h, tmp_path)
    central = subprocess.Popen([*CLI, "ingest", "--from", server.url, "--watch", "--db", db],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        t1 = hosts["h1"]
        cases = malformed(t1.path)
        line = b'{"type":"user","uuid":"u-late"}\n'
        end = len(t1.complete())
        huge, body = good("h1", t1.path, end, line, generation=2 ** 70)
        forged = [
            ("no message id", as_sent(*good("h1", t1.path, end, line))[:2] + (None,),
             "no Nats-Msg-Id"),
            ("another message's id", as_sent(*good("h1", t1.path, end, line),
                                             msg_id="h1-something-else"), "is not this"),
            ("a generation past SQLite's", as_sent(huge, body), "cannot be stored"),
        ]
        # Two hosts whose host and path make the same fleet:// path: the
        # second cannot be stored (both on their own subjects).
        first = good("a/b", "/c.jsonl", 0, line)
        clash = good("a", "/b/c.jsonl", 0, line)
        forged.append(("another file's fleet:// path", as_sent(*clash), "cannot be stored"))
        beats = [("bad1", {"host": "bad1", "at": 4e12}), ("bad2", {"host": "bad2", "at": 1e300}),
                 ("bad3", {"host": "bad3", "at": -1e12}), ("bad4", {"host": "bad4", "at": "NaN"}),
                 ("bad5", {"host": "bad5", "at": "2026"})]
        hostile = [(k, json.dumps(v).replace('"NaN"', "NaN").encode()) for k, v in beats]
        hostile.append(("h3", json.dumps({"host": "h1", "at": time.time()}).encode()))
        publish_raw(server.url, [m for _, m, _ in cases] + [as_sent(*first)]
                    + [m for _, m, _ in forged], hostile)
        for t in hosts.values():   # the hosts go on writing
            t.append(2)
        for h in hosts:
            ship_once(server, h, tmp_path / h, tmp_path)
        deadline = time.monotonic() + 60
        while any(exported_or_none(db, t.session_id) != t.complete() for t in hosts.values()):
            assert central.poll() is None, central.stderr.read().decode()
            assert time.monotonic() < deadline, "the hosts' lines"
            time.sleep(0.3)
        while sqlite3.connect(db).execute("SELECT count(*) FROM fleet_quarantine").fetchone()[
                0] < len(cases) + len(forged) + len(hostile):
            assert central.poll() is None and time.monotonic() < deadline, "the heartbeats"
            time.sleep(0.3)
        time.sleep(2.5)   # heartbeats read again: each kept once
        assert central.poll() is None
        central.send_signal(signal.SIGTERM)
        assert central.wait(timeout=30) == 0
        err = central.stderr.read().decode()
        assert "Traceback" not in err and "Error" not in err, err
    finally:
        if central.poll() is None:
            central.kill()
    conn = sqlite3.connect(db)
    kept = conn.execute("SELECT subject, reason, data, headers FROM fleet_quarantine "
                        "WHERE subject NOT LIKE '$KV.%' ORDER BY stream_seq").fetchall()
    messages = [(n, m, word) for n, m, word in cases + forged]
    assert len(kept) == len(messages)
    for (name, (subject, payload, headers), word), row in zip(messages, kept):
        assert (row[0], row[2]) == (subject, payload), name
        assert json.loads(row[3]) == dict(headers or {}, **{
            "Nats-Expected-Stream": fleet_wire.STREAM}), name
        assert word in row[1], (name, row[1])
    beat_rows = dict(conn.execute("SELECT subject, reason FROM fleet_quarantine "
                                  "WHERE subject LIKE '$KV.%'"))
    kept = conn.execute("SELECT reason FROM fleet_quarantine ORDER BY id").fetchall()
    assert set(beat_rows) == {f"$KV.{fleet_nats.HEARTBEAT_BUCKET}.{k}" for k, _ in hostile}
    assert "under another host's key" in beat_rows[f"$KV.{fleet_nats.HEARTBEAT_BUCKET}.h3"]
    assert all("out of range" in beat_rows[f"$KV.{fleet_nats.HEARTBEAT_BUCKET}.bad{i}"]
               for i in (1, 2, 3))
    assert all("not a finite number" in beat_rows[f"$KV.{fleet_nats.HEARTBEAT_BUCKET}.bad{i}"]
               for i in (4, 5))
    # Every good line once: the hosts' and the one first of the clashing pair.
    lines = sum(t.complete().count(b"\n") for t in hosts.values())
    assert conn.execute("SELECT count(*) FROM records").fetchone() == (lines + 1,)
    assert conn.execute("SELECT host FROM fleet_hosts ORDER BY host").fetchall() == [
        ("a/b",), ("h1",), ("h2",)]
    assert conn.execute("SELECT count(*) FROM fleet_hosts WHERE last_heartbeat_at "
                        "IS NOT NULL").fetchone() == (2,)
    # Shown: the listing (exit 1), status, the health page.
    p = run("quarantined", "--db", db, "--json", check=False)
    assert p.returncode == 1
    assert [r["reason"] for r in json.loads(p.stdout)] == [r for (r,) in kept]
    assert (f"quarantined messages: {len(kept)} (see quarantined)"
            in run("status", "--db", db).stdout.decode())
    from indexer.cli import web

    page = asyncio.run(web.make_datasette(db).client.get("/-/session-health")).text
    assert f'class="si-fleet-quarantined">{len(kept)}</a>' in page
    # A drain into a new index meets them all again: exit 0, the same.
    summary = drain(server, tmp_path / "second.db")
    assert summary["bad_messages"] == len(messages)
    assert summary["bad_heartbeats"] == len(hostile)
    assert summary["new_lines"] == lines + 1


def host_permissions(token: str) -> str:
    """A host's NATS permissions as the fleet guide (docs/guides/fleet.md) gives them: its
    own subject, its own heartbeat key, the two stream look-ups and its
    replies; nothing else."""
    return (f'{{ publish: {{ allow: ["session-index.{token}.>", '
            f'"$KV.session_index_hosts.{token}", "$JS.API.STREAM.INFO.SESSION_INDEX", '
            f'"$JS.API.STREAM.INFO.KV_session_index_hosts"] }}, '
            f'subscribe: {{ allow: ["_INBOX.>", "session-index-resend.{token}"] }} }}')


def publish_as(url, subject, payload, headers=None) -> str:
    """Publish once with ``url``'s user; what came of it: 'stored', or the
    server's refusal."""
    import nats

    async def main():
        refused = []

        async def on_error(exc):
            refused.append(str(exc))

        nc = await nats.connect(url, error_cb=on_error)
        try:
            await nc.jetstream().publish(subject, payload, headers=headers, timeout=2)
            return "stored"
        except Exception as exc:   # noqa: BLE001  (nats-py: a timeout after the refusal)
            await asyncio.sleep(0.2)
            return refused[0] if refused else f"{type(exc).__name__}: {exc}"
        finally:
            await nc.close()

    return asyncio.run(main())


def test_a_host_writes_only_its_own_data(tmp_path):
    """Each host's NATS user may publish only on its own subject (docs/guides/fleet.md):
    the server refuses h1 publishing on h2's subject or h2's heartbeat key;
    what a host sends on its own subject under another host's name, or what
    anyone sends on a host's subject with another host's header, the
    central refuses (quarantined), also a central that takes only h2
    (--hosts)."""
    users = "\n".join(f"      {{ user: {h}, password: pw-{h}, permissions: "
                      f"{host_permissions(h)} }}" for h in ("h1", "h2"))
    conf = tmp_path / "fleet.conf"
    conf.write_text("accounts: {\n  FLEET: {\n    jetstream: enabled\n    users: [\n"
                    f"{users}\n      {{ user: central, password: pw-central }}\n    ]\n  }}\n}}\n")
    s = Server(tmp_path / "jetstream")
    s.start("-c", conf)
    as_user = {u: s.url.replace("nats://", f"nats://{u}:pw-{u}@") for u in ("h1", "h2",
                                                                             "central")}
    try:
        db, h2_only = tmp_path / "central.db", tmp_path / "h2.db"
        assert drain_as(as_user["central"], db)["messages"] == 0   # makes the stream
        hosts = {h: Transcript(tmp_path / h) for h in ("h1", "h2")}
        for h, t in hosts.items():
            t.append(2)
            run("ship", tmp_path / h, "--to", as_user[h], "--host", h,
                "--ledger", tmp_path / f"ledger-{h}.db", "--once")
        line = b'{"type":"user","uuid":"u-forged"}\n'
        t2 = hosts["h2"]
        onto_h2 = as_sent(*good("h2", t2.path, len(t2.complete()), line, line=3))
        # The server refuses h1 on h2's subject, and h1's heartbeat under h2's key.
        assert 'permissions violation for publish to "session-index.h2.lines"' in publish_as(
            as_user["h1"], *onto_h2).lower()
        assert 'permissions violation for publish to "$kv.session_index_hosts.h2"' in \
            publish_as(as_user["h1"], "$KV.session_index_hosts.h2",
                       json.dumps({"host": "h2", "at": time.time()}).encode()).lower()
        # What reaches the stream the central refuses: h1 naming h2 on its
        # own subject; a user allowed every subject writing h2's with h1's
        # name.
        as_h1 = good("h2", t2.path, len(t2.complete()), line, line=3)
        assert publish_as(as_user["h1"], *as_sent(*as_h1, subject="session-index.h1.lines")) \
            == "stored"
        h1_on_h2 = good("h1", hosts["h1"].path, len(hosts["h1"].complete()), line, line=3)
        assert publish_as(as_user["central"], *as_sent(*h1_on_h2,
                                                       subject="session-index.h2.lines")) \
            == "stored"
        for target, only in ((db, None), (h2_only, "h2")):
            summary = drain_as(as_user["central"], target, *(["--hosts", only] if only else []))
            assert summary["bad_messages"] == (2 if only is None else 1), summary
            conn = sqlite3.connect(target)
            assert [r for (r,) in conn.execute("SELECT reason FROM fleet_quarantine "
                                               "ORDER BY stream_seq")] == (
                ["host 'h2' on subject 'session-index.h1.lines', not its own "
                 "(session-index.h2.lines)"] if only is None else []) + [
                "host 'h1' on subject 'session-index.h2.lines', not its own "
                "(session-index.h1.lines)"]
            for h, t in hosts.items():
                if only in (None, h):
                    assert exported(target, t.session_id) == t.complete(), (target, h)
            assert [h for (h,) in conn.execute("SELECT host FROM files ORDER BY host")] == (
                ["h1", "h2"] if only is None else ["h2"])
    finally:
        s.kill()


def drain_as(url, db, *args):
    return json.loads(run("ingest", "--from", url, "--db", db, "--json", *args).stdout)


def make_stream(url, **limits):
    """The lines stream made before any shipper or central, with ``limits``
    (an operator's; ensure_stream leaves a stream that is there as it is)."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    async def main():
        nc = await nats.connect(url)
        await nc.jetstream().add_stream(StreamConfig(
            name=fleet_wire.STREAM, subjects=fleet_wire.STREAM_SUBJECTS,
            storage=StorageType.FILE, duplicate_window=fleet_wire.DUPLICATE_WINDOW_S, **limits))
        await nc.close()

    asyncio.run(main())


def wait_for(what, deadline, *procs):
    while not what():
        for p in procs:
            assert p.poll() is None, p.stderr.read().decode()
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_loss_in_the_stream_is_a_recorded_gap_or_sent_again(server, tmp_path):
    """A stream that keeps 3 messages a subject (discard old) drops the
    first messages of two hosts before a central reads them. The host whose
    shipper follows sends the bytes again when the central asks: its file is
    whole, no gap. The host that ships no more gets a recorded gap after
    --gap-wait, and its file goes on after it. A host that lost nothing is
    in the index within seconds, not after the wait. The central never
    stops; status, fleet-gaps, the health page and the log say so."""
    make_stream(server.url, max_msgs_per_subject=3)
    db = tmp_path / "central.db"
    hosts = {h: Transcript(tmp_path / h) for h in ("keeper", "gone", "calm")}
    for _ in range(6):   # 6 messages each: the stream keeps the last 3
        for h in ("keeper", "gone"):
            hosts[h].append(1)
            ship_once(server, h, tmp_path / h, tmp_path)
    lost = sum(len(x) + 1 for x in hosts["gone"].complete().split(b"\n")[:3])   # 3 lines
    hosts["calm"].append(2)
    ship_once(server, "calm", tmp_path / "calm", tmp_path)
    keeper = subprocess.Popen([*CLI, "ship", tmp_path / "keeper", "--to", server.url,
                               "--host", "keeper", "--ledger", tmp_path / "ledger-keeper.db"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    started = time.monotonic()
    central = subprocess.Popen([*CLI, "ingest", "--from", server.url, "--watch", "--db", db,
                                "--gap-wait", "12"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        calm = hosts["calm"]
        wait_for(lambda: exported_or_none(db, calm.session_id) == calm.complete(),
                 started + 8, central)   # not held back by the others' trouble
        keep = hosts["keeper"]
        wait_for(lambda: exported_or_none(db, keep.session_id) == keep.complete(),
                 started + 40, central, keeper)
        gone = hosts["gone"]
        wait_for(lambda: exported_or_none(db, gone.session_id) == gone.complete()[lost:],
                 started + 60, central, keeper)
        gone.append(2)   # it goes on after the gap
        ship_once(server, "gone", tmp_path / "gone", tmp_path)
        keep.append(1)
        wait_for(lambda: exported_or_none(db, gone.session_id) == gone.complete()[lost:]
                 and exported_or_none(db, keep.session_id) == keep.complete(),
                 time.monotonic() + 30, central, keeper)
    finally:
        for p in (central, keeper):
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=30) for p in (central, keeper)]
    central_log, keeper_log = (p.stderr.read().decode() for p in (central, keeper))
    assert codes == [0, 0], (central_log, keeper_log)
    assert "Traceback" not in central_log + keeper_log
    assert "the central asked for bytes 0-" in keeper_log, keeper_log
    conn = sqlite3.connect(db)
    gaps = conn.execute("SELECT host, remote_path, generation, start, end, reason "
                        "FROM fleet_gaps").fetchall()
    assert [g[:5] for g in gaps] == [("gone", str(gone.path), 1, 0, lost)]
    assert "not in the stream (it holds #" in gaps[0][5], gaps[0][5]
    assert f"gap: host gone {gone.path} generation 1: bytes 0-{lost} never came" in central_log
    assert conn.execute("SELECT count(*) FROM fleet_held").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM fleet_quarantine").fetchone() == (0,)
    p = run("fleet-gaps", "--db", db, "--json", check=False)
    assert p.returncode == 1
    assert [(r["host"], r["start"], r["end"], r["bytes"]) for r in json.loads(p.stdout)] == [
        ("gone", 0, lost, lost)]
    assert "gaps: 1 (see fleet-gaps); files waiting for earlier bytes: 0" in run(
        "status", "--db", db).stdout.decode()
    from indexer.cli import web

    page = asyncio.run(web.make_datasette(db).client.get("/-/session-health")).text
    assert f'class="si-fleet-gaps">1</a> ({lost} bytes)' in page
    verdict = json.loads(run("check", gone.session_id, "--db", db, "--json",
                             check=False).stdout)
    assert (verdict["details"]["fleet"]["gaps"], verdict["details"]["fleet"]["gap_bytes"]) == (
        1, lost)
    assert f"host gone's transcript lacks {lost} bytes the fleet's stream lost" in \
        " ".join(verdict["warnings"])


def stream_op(url, op):
    """Run ``op(jetstream)`` against the server (an operator's action)."""
    import nats

    async def main():
        nc = await nats.connect(url)
        try:
            return await op(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(main())


def test_a_lost_message_and_a_purged_stream(server, tmp_path):
    """A message the server lost (deleted from the middle of the stream): a
    drain with --gap-wait 0 records the gap at once and stores the lines
    after it. The stream purged, then the host moved to a new central: the
    new central asks the host (its shipper following) for what it lacks,
    and gets the whole file again, no gap."""
    t = Transcript(tmp_path / "h")
    for _ in range(3):
        t.append(1)
        ship_once(server, "h", tmp_path / "h", tmp_path)
    second = stream_op(server.url, lambda js: js.get_msg(fleet_wire.STREAM, 2))
    assert json.loads(second.data.split(b"\n", 1)[0])["offset"] > 0
    assert stream_op(server.url, lambda js: js.delete_msg(fleet_wire.STREAM, 2))
    db = tmp_path / "first.db"
    summary = json.loads(run("ingest", "--from", server.url, "--db", db, "--json",
                             "--gap-wait", "0").stdout)
    assert (summary["recorded_gaps"], summary["new_lines"]) == (1, 2)
    lines = t.complete().split(b"\n")
    start = len(lines[0]) + 1
    assert sqlite3.connect(db).execute("SELECT start, end, reason FROM fleet_gaps").fetchone() \
        == (start, start + len(lines[1]) + 1,
            "not in the stream (it holds #1-#3, 1 deleted: trimmed by its limits, purged, or "
            "lost by the server); not sent again by the host within 0 s")
    assert exported(db, t.session_id) == lines[0] + b"\n" + lines[2] + b"\n"

    assert stream_op(server.url, lambda js: js.purge_stream(fleet_wire.STREAM))
    t.append(2)
    ship_once(server, "h", tmp_path / "h", tmp_path)
    moved = tmp_path / "moved.db"
    shipper = subprocess.Popen([*CLI, "ship", tmp_path / "h", "--to", server.url, "--host", "h",
                                "--ledger", tmp_path / "ledger-h.db"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    central = subprocess.Popen([*CLI, "ingest", "--from", server.url, "--watch", "--db", moved,
                                "--consumer", "another-central", "--gap-wait", "30"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: exported_or_none(moved, t.session_id) == t.complete(),
                 time.monotonic() + 40, central, shipper)
    finally:
        for p in (central, shipper):
            p.send_signal(signal.SIGTERM)
        assert [p.wait(timeout=30) for p in (central, shipper)] == [0, 0]
    assert sqlite3.connect(moved).execute("SELECT count(*) FROM fleet_gaps").fetchone() == (0,)


def test_the_central_answers_as_a_local_index_for_every_corpus_session(server, tmp_path):
    """Every transcript of ../shared/corpus shipped (its last lines without a
    newline, its `claude -p` logs) and drained into a central index, and
    ingested locally: per session the same check verdict and reason, the
    same conversation from show, the same leaves, orphans, failed runs,
    record kinds and usage; show, status and the health page's last ingest
    work on the central."""
    from conftest import CORPUS

    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is not here")
    from indexer.index.db import open_db
    from indexer.repair import check as checkmod, show as showmod
    from indexer.sql import dict_rows

    central, local = tmp_path / "central.db", tmp_path / "local.db"
    ship_once(server, "hx", CORPUS, tmp_path)
    drain(server, central)
    run("ingest", CORPUS, "--db", local)
    c, here = open_db(str(central)), open_db(str(local))
    sessions = [s for (s,) in here.conn.execute("SELECT session_id FROM sessions ORDER BY 1")]
    assert len(sessions) > 40
    assert [s for (s,) in c.conn.execute("SELECT session_id FROM sessions ORDER BY 1")] == \
        sessions
    for sql in ("SELECT kind, count(*), sum(records), sum(line_count), sum(ingested_offset), "
                "sum(unterminated_tail) FROM files GROUP BY kind ORDER BY kind",
                "SELECT count(*) FROM bad_lines",
                "SELECT session_id, kind, resume_leaf_uuid, sdk_leaf_uuid, resume_rule FROM leaves "
                "ORDER BY 1, 2, 3, 4",
                "SELECT session_id, uuid, cause FROM orphans ORDER BY 1, 2, 3",
                "SELECT session_id, line_no, subtype, error_class FROM failed_executions "
                "ORDER BY 1, 2",
                "SELECT kind, records FROM record_types ORDER BY kind",
                "SELECT session_id, calls, cost_usd, executions FROM usage_reported "
                "ORDER BY 1"):
        assert c.conn.execute(sql).fetchall() == here.conn.execute(sql).fetchall(), sql
    for sid in sessions:
        mine, theirs = (checkmod.check(db, sid, config_dir=tmp_path / "no-config", host=h)
                        for db, h in ((here, ""), (c, "hx")))
        assert (theirs.verdict, theirs.reason.removeprefix("on host hx: ").replace(
            "fleet://hx/", "/")) == (mine.verdict, mine.reason), sid
        if here.conn.execute("SELECT 1 FROM session_hosts WHERE session_id = ? AND "
                             "main_file_id IS NOT NULL", [sid]).fetchone():
            assert showmod.recovered_conversation(c, sid, "hx") == \
                showmod.recovered_conversation(here, sid), sid
    sid = sessions[0]
    assert run("show", sid, "--db", central).stdout == run("show", sid, "--db", local).stdout
    status = run("status", "--db", central).stdout.decode()
    assert "last ingest: never" not in status and "fleet: 1 host, " in status
    assert dict_rows(c.conn, "SELECT value FROM index_meta WHERE key = 'last_ingest_at'")


def test_a_last_line_without_its_newline_is_stored_as_locally_then_settled(server, tmp_path):
    """A whole record without its newline is stored (as local ingest stores
    it); once its newline comes the line is not stored twice; one that then
    went on (more bytes, no newline first) is taken back and read again as
    the line it became. At each step the central holds what a local index
    of the same file holds."""
    t = Transcript(tmp_path / "h")
    t.append(2)
    t.append(1, newline=False)
    db, local = tmp_path / "central.db", tmp_path / "local.db"

    def same():
        ship_once(server, "h", tmp_path / "h", tmp_path)
        drain(server, db)
        run("ingest", t.path, "--db", local)
        rows = "SELECT line_no, byte_offset, uuid FROM records ORDER BY line_no"
        bad = "SELECT line_no, byte_offset, CAST(raw AS BLOB) FROM bad_lines ORDER BY line_no"
        files = "SELECT line_count, ingested_offset, unterminated_tail, records FROM files"
        for sql in (rows, bad, files):
            assert sqlite3.connect(db).execute(sql).fetchall() == \
                sqlite3.connect(local).execute(sql).fetchall(), sql
        assert exported(db, t.session_id) == exported(local, t.session_id)
        return sqlite3.connect(db).execute(files).fetchone()

    assert same()[:3] == (3, len(t.path.read_bytes()), len(t.path.read_bytes()) -
                          len(t.complete()))
    t.append_bytes(b"\n")
    t.append(1, newline=False)
    assert same()[2] > 0
    t.append_bytes(b' "went on"\n')   # the stored last record went on: a bad line now
    t.append(1)
    assert same()[2] == 0
    assert exported(db, t.session_id) == t.path.read_bytes()


def ship_two_lose_the_first(server, t, tmp_path) -> None:
    """Host h ships a line of ``t``, then another; the first one's message
    is deleted from the stream (lost, as a stream past its limits loses it)."""
    t.append(1)
    ship_once(server, "h", tmp_path / "h", tmp_path)
    lost = stream_op(server.url, lambda js: js.stream_info(fleet_wire.STREAM)).state.last_seq
    t.append(1)
    ship_once(server, "h", tmp_path / "h", tmp_path)
    assert stream_op(server.url, lambda js: js.delete_msg(fleet_wire.STREAM, lost))


def test_check_says_a_file_waits_for_earlier_bytes(server, tmp_path):
    """A message lost from the stream, one after it stored: the central holds
    that one (no gap yet), and check on the host's copy says the copy stops
    before it, where it said nothing until the gap was recorded."""
    t = Transcript(tmp_path / "h")
    t.append(2)
    ship_once(server, "h", tmp_path / "h", tmp_path)
    db = tmp_path / "central.db"
    drain(server, db)
    stored = len(t.complete())
    ship_two_lose_the_first(server, t, tmp_path)
    drain(server, db)
    p = run("check", t.session_id, "--db", db, "--host", "h", "--json", check=False)
    verdict = json.loads(p.stdout)
    fleet = verdict["details"]["fleet"]
    assert (fleet["held_messages"], fleet["gaps"]) == (1, 0)
    lines = t.complete().split(b"\n")
    assert fleet["held_from"] == sum(len(x) + 1 for x in lines[:3])   # the 4th line's
    assert any(w.startswith(f"host h's transcript waits for earlier bytes: 1 message(s) from "
                            f"byte {fleet['held_from']} on are held since ")
               for w in verdict["warnings"]), verdict["warnings"]
    assert exported(db, t.session_id) == t.complete()[:stored]


def test_a_lost_message_after_a_last_line_without_its_newline_is_sent_again(server, tmp_path):
    """The last line was stored without its newline; the message that
    brought its newline (and a line after it) is lost from the stream: the
    central asks the host from where that last line starts, the following
    shipper sends it again, and the file is whole, no gap."""
    t = Transcript(tmp_path / "h")
    t.append(2)
    t.append(1, newline=False)
    ship_once(server, "h", tmp_path / "h", tmp_path)
    db = tmp_path / "central.db"
    drain(server, db)
    assert sqlite3.connect(db).execute("SELECT unterminated_tail > 0 FROM files").fetchone() \
        == (1,)
    t.append_bytes(b"\n")
    ship_two_lose_the_first(server, t, tmp_path)
    shipper = subprocess.Popen([*CLI, "ship", tmp_path / "h", "--to", server.url, "--host", "h",
                                "--ledger", tmp_path / "ledger-h.db"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    central = subprocess.Popen([*CLI, "ingest", "--from", server.url, "--watch", "--db", db,
                                "--gap-wait", "30"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: exported_or_none(db, t.session_id) == t.complete(),
                 time.monotonic() + 40, central, shipper)
    finally:
        for p in (central, shipper):
            p.send_signal(signal.SIGTERM)
        assert [p.wait(timeout=30) for p in (central, shipper)] == [0, 0]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM fleet_gaps").fetchone() == (0,)
    assert conn.execute("SELECT line_count, unterminated_tail FROM files").fetchone() == (5, 0)
    assert "the central asked for bytes " in shipper.stderr.read().decode()


def test_a_drain_says_what_it_held_recorded_and_quarantined(server, tmp_path):
    """The drain's summary line names the messages held, the gaps recorded
    and the messages quarantined."""
    publish_raw(server.url, [("session-index.h.lines", b"not ours", None)])
    p = run("ingest", "--from", server.url, "--db", tmp_path / "c.db")
    line = p.stdout.decode()
    assert line.startswith("0 messages from 0 hosts: 0 new lines (0 duplicates skipped, "
                           "0 held for earlier bytes, 0 gaps recorded, 1 quarantined) in "), line


def test_a_server_that_lost_what_it_acknowledged(server, tmp_path):
    """A crash of the server's machine inside its fsync window: the store on
    disk is as it was before the last acknowledged messages (done here by
    putting back a copy of the store taken before them). The hosts' ledgers
    say those were sent. The host whose shipper follows sends them again
    when the central asks; the other's are a recorded gap; lines after
    them are stored; the central never stops."""
    import shutil

    hosts = {h: Transcript(tmp_path / h) for h in ("keeper", "gone")}
    for h, t in hosts.items():
        t.append(2)
        ship_once(server, h, tmp_path / h, tmp_path)
    server.kill()
    shutil.copytree(server.store, tmp_path / "before")   # what the disk will hold
    server.start()
    for h, t in hosts.items():   # acknowledged, then lost with the machine
        t.append(2)
        ship_once(server, h, tmp_path / h, tmp_path)
    lost = {h: sum(len(x) + 1 for x in t.complete().split(b"\n")[:2])   # where it starts
            for h, t in hosts.items()}
    server.kill()
    shutil.rmtree(server.store)
    shutil.copytree(tmp_path / "before", server.store)
    server.start()
    for h, t in hosts.items():
        t.append(1)
        ship_once(server, h, tmp_path / h, tmp_path)
    db = tmp_path / "central.db"
    keeper = subprocess.Popen([*CLI, "ship", tmp_path / "keeper", "--to", server.url,
                               "--host", "keeper", "--ledger", tmp_path / "ledger-keeper.db"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    central = subprocess.Popen([*CLI, "ingest", "--from", server.url, "--watch", "--db", db,
                                "--gap-wait", "15"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    gone, keep = hosts["gone"], hosts["keeper"]
    end = len(gone.complete())
    try:
        wait_for(lambda: exported_or_none(db, keep.session_id) == keep.complete(),
                 time.monotonic() + 40, central, keeper)
        gone_lines = gone.complete().split(b"\n")
        expected = b"".join(x + b"\n" for x in gone_lines[:2] + gone_lines[4:5])
        wait_for(lambda: exported_or_none(db, gone.session_id) == expected,
                 time.monotonic() + 40, central, keeper)
    finally:
        for p in (central, keeper):
            p.send_signal(signal.SIGTERM)
        assert [p.wait(timeout=30) for p in (central, keeper)] == [0, 0]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT host, start, end FROM fleet_gaps").fetchall() == [
        ("gone", lost["gone"], end - len(gone_lines[4]) - 1)]


def test_clients_starting_at_once_all_find_the_stream(tmp_path):
    """A central and its shippers starting at once each look for the stream
    and make it when it is missing; the server can refuse an add made while
    another is in flight ("subjects overlap with an existing stream"), and
    ensure_stream then uses the stream the other made: 15 fresh servers, 16
    clients at once on each, none fails (without the look after a refused
    add, one fresh server in ten or so refused one)."""
    import nats

    async def main(url):
        ncs = [await nats.connect(url) for _ in range(16)]
        try:
            # (30 s for the server's answers, not nats-py's 5: on a loaded
            # machine a fresh server's JetStream answered 16 requests at once
            # later than that; ship and the central retry a timeout)
            results = await asyncio.gather(
                *(fleet_nats.ensure_stream(nc.jetstream(timeout=30)) for nc in ncs),
                return_exceptions=True)
            info = await ncs[0].jetstream().stream_info(fleet_wire.STREAM)
            return [repr(r) for r in results if r is not None], info.config.subjects
        finally:
            for nc in ncs:
                await nc.close()

    for n in range(15):
        s = Server(tmp_path / f"jetstream-{n}")
        s.start()
        try:
            failures, subjects = asyncio.run(main(s.url))
        finally:
            s.kill()
        assert failures == [], n
        assert subjects == list(fleet_wire.STREAM_SUBJECTS)
