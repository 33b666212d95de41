"""The central's cost per batch, not per message (issue 28, item 6): a fetched
batch is written in one transaction without a savepoint per message (a
message that cannot be stored sends the batch round again, each message in a
savepoint of its own), each host's row once a batch; the caches are derived
once per window, a derive stops at its budget and goes on after the next
batch, and a window grows with what the last derive took. The batch tests
write Incoming messages straight into a real index (no server); the
consume tests run a real nats-server."""

import asyncio
import json
import time

import pytest

from indexer.index.db import open_db
from indexer.ingest import derive, fleet_central, fleet_wire
from indexer.sql import write_lock

HOST_ROWS_SQL = "SELECT host, messages FROM fleet_hosts ORDER BY host"


def line(session_id: str, uuid: str, parent: str | None) -> bytes:
    return json.dumps({"type": "user", "uuid": uuid, "parentUuid": parent,
                       "sessionId": session_id, "timestamp": "2026-12-01T00:00:00.000Z",
                       "message": {"role": "user", "content": "x"}},
                      separators=(",", ":")).encode() + b"\n"


def message(seq: int, host: str, session_id: str, body: bytes, offset: int = 0,
            number: int = 1, generation: int = 1) -> fleet_central.Incoming:
    """A shipper's ``lines`` message of the session's transcript on ``host``."""
    header = {"kind": "lines", "host": host, "generation": generation, "offset": offset,
              "end": offset + len(body), "line": number,
              "path": f"/home/a/.claude/projects/-w/{session_id}.jsonl"}
    return fleet_central.Incoming(fleet_wire.encode(header, body), seq,
                                  fleet_wire.subject(host, "lines"),
                                  {"Nats-Msg-Id": fleet_wire.message_id(header)})


SESSIONS = [f"{n:08d}-0000-4000-8000-000000000000" for n in range(1, 5)]


def statements(db) -> list[str]:
    """Every statement the index's connection runs from now on."""
    seen = []
    db.conn.set_trace_callback(seen.append)
    return seen


def test_a_clean_batch_has_no_savepoints_and_writes_each_host_row_once(tmp_path):
    db = open_db(str(tmp_path / "central.db"))
    batch = [message(1, "h1", SESSIONS[0], line(SESSIONS[0], "a1", None)),
             message(2, "h1", SESSIONS[1], line(SESSIONS[1], "b1", None)),
             message(3, "h2", SESSIONS[2], line(SESSIONS[2], "c1", None))]
    first = line(SESSIONS[0], "a1", None)
    batch.append(message(4, "h1", SESSIONS[0], line(SESSIONS[0], "a2", "a1"),
                         offset=len(first), number=2))
    seen = statements(db)
    summary = fleet_central.Summary()
    fleet_central.apply_batch(db, batch, "c", summary)
    db.conn.set_trace_callback(None)
    assert [s for s in seen if "SAVEPOINT" in s.upper()] == []
    assert sum("INTO fleet_hosts" in s for s in seen) == 2   # one per host
    assert sum(s.startswith("BEGIN") for s in seen) == 1
    assert db.conn.execute(HOST_ROWS_SQL).fetchall() == [("h1", 3), ("h2", 1)]
    assert (summary.messages, summary.new_lines, summary.bad_messages) == (4, 4, 0)
    assert db.conn.execute("SELECT count(*) FROM records").fetchone() == (4,)


def test_a_message_that_cannot_be_stored_is_quarantined_alone(tmp_path):
    """A generation past SQLite's integers: that message only is kept in
    quarantine; the batch's other messages are stored once, its host's row
    counts what was stored."""
    db = open_db(str(tmp_path / "central.db"))
    batch = [message(1, "h1", SESSIONS[0], line(SESSIONS[0], "a1", None)),
             message(2, "h1", SESSIONS[1], line(SESSIONS[1], "b1", None), generation=2 ** 63),
             message(3, "h2", SESSIONS[2], line(SESSIONS[2], "c1", None))]
    seen = statements(db)
    summary = fleet_central.Summary()
    fleet_central.apply_batch(db, batch, "c", summary)
    db.conn.set_trace_callback(None)
    assert sum(s.upper().startswith("SAVEPOINT") for s in seen) == 3   # the second round
    assert db.conn.execute("SELECT stream_seq, host, reason LIKE 'cannot be stored:%' "
                           "FROM fleet_quarantine").fetchall() == [(2, "h1", 1)]
    assert db.conn.execute("SELECT uuid FROM records ORDER BY uuid").fetchall() == [
        ("a1",), ("c1",)]
    assert db.conn.execute(HOST_ROWS_SQL).fetchall() == [("h1", 1), ("h2", 1)]
    assert (summary.messages, summary.new_lines, summary.bad_messages) == (2, 2, 1)
    assert summary.hosts == {"h1", "h2"}


def test_a_held_message_is_released_when_a_later_batch_brings_the_bytes_before_it(tmp_path):
    """Only files with held messages look for one; the hold is seen by the
    next batch."""
    db = open_db(str(tmp_path / "central.db"))
    first, second = line(SESSIONS[0], "a1", None), line(SESSIONS[0], "a2", "a1")
    summary = fleet_central.Summary()
    fleet_central.apply_batch(db, [message(2, "h1", SESSIONS[0], second, offset=len(first),
                                           number=2)], "c", summary)
    assert db.conn.execute("SELECT count(*) FROM fleet_held").fetchone() == (1,)
    fleet_central.apply_batch(db, [message(1, "h1", SESSIONS[0], first)], "c", summary)
    assert db.conn.execute("SELECT count(*) FROM fleet_held").fetchone() == (0,)
    assert db.conn.execute("SELECT uuid FROM records ORDER BY byte_offset").fetchall() == [
        ("a1",), ("a2",)]


FILE_ROW_SQL = """
SELECT ingested_offset, line_count, records, first_timestamp, last_timestamp, deleted_at
FROM files WHERE path LIKE '%' || ?
""".strip()


def deleted(seq: int, host: str, session_id: str) -> fleet_central.Incoming:
    header = {"kind": "deleted", "host": host, "generation": 1,
              "path": f"/home/a/.claude/projects/-w/{session_id}.jsonl"}
    return fleet_central.Incoming(fleet_wire.encode(header), seq,
                                  fleet_wire.subject(host, "deleted"),
                                  {"Nats-Msg-Id": fleet_wire.message_id(header)})


def lines_of(session_id: str, count: int, host: str = "h1", seq: int = 1):
    """``count`` one-line messages of the session's file, in order, and
    where each line starts."""
    out, offsets, offset, parent = [], [], 0, None
    for i in range(count):
        data = json.dumps({"type": "user", "uuid": f"{session_id}-{i}", "parentUuid": parent,
                           "sessionId": session_id,
                           "timestamp": f"2026-12-01T00:00:{i:02d}.000Z",
                           "message": {"role": "user", "content": "x"}},
                          separators=(",", ":")).encode() + b"\n"
        out.append(message(seq + i, host, session_id, data, offset=offset, number=i + 1))
        offsets.append(offset)
        offset, parent = offset + len(data), f"{session_id}-{i}"
    return out, offsets


def test_a_batch_reads_and_writes_each_file_row_once(tmp_path):
    """Two messages of one file and one of another in a batch: the files'
    rows are read with one query and each written once, with what all its
    messages added (offset, lines, records, first and last times); the
    records are those of the messages written one by one."""
    db = open_db(str(tmp_path / "central.db"))
    three, at = lines_of(SESSIONS[0], 3)
    two, at2 = lines_of(SESSIONS[1], 2, seq=4)
    fleet_central.apply_batch(db, [three[0], two[0]], "c", fleet_central.Summary())
    seen = statements(db)
    summary = fleet_central.Summary()
    fleet_central.apply_batch(db, [three[1], two[1], three[2]], "c", summary)
    db.conn.set_trace_callback(None)
    assert sum(s.lstrip().startswith("SELECT ff.remote_path, f.id") for s in seen) == 1
    assert sum(s.lstrip().startswith("SELECT f.id, f.ingested_offset") for s in seen) == 0
    assert sum(s.lstrip().startswith("UPDATE files SET ingested_offset") for s in seen) == 2
    body = [m.data.split(b"\n", 1)[1] for m in (three[2], two[1])]
    assert db.conn.execute(FILE_ROW_SQL, [f"{SESSIONS[0]}.jsonl"]).fetchone() == (
        at[2] + len(body[0]), 3, 3, "2026-12-01T00:00:00.000Z", "2026-12-01T00:00:02.000Z",
        None)
    assert db.conn.execute(FILE_ROW_SQL, [f"{SESSIONS[1]}.jsonl"]).fetchone() == (
        at2[1] + len(body[1]), 2, 2, "2026-12-01T00:00:00.000Z", "2026-12-01T00:00:01.000Z",
        None)
    assert db.conn.execute("SELECT file_id, line_no, byte_offset, uuid FROM records "
                           "ORDER BY id").fetchall() == [
        (1, 1, 0, f"{SESSIONS[0]}-0"), (2, 1, 0, f"{SESSIONS[1]}-0"),
        (1, 2, at[1], f"{SESSIONS[0]}-1"), (2, 2, at2[1], f"{SESSIONS[1]}-1"),
        (1, 3, at[2], f"{SESSIONS[0]}-2")]
    assert summary.new_lines == 3


def test_a_file_deleted_within_a_batch_is_deleted_after_its_earlier_lines_only(tmp_path):
    """Lines, then the file's deletion, in one batch: it is deleted; lines
    after a deletion in one batch: it is not (as when each message is a
    batch of its own)."""
    db = open_db(str(tmp_path / "central.db"))
    first, _ = lines_of(SESSIONS[0], 2)
    fleet_central.apply_batch(db, [first[0], deleted(3, "h1", SESSIONS[0])], "c",
                              fleet_central.Summary())
    assert db.conn.execute(FILE_ROW_SQL, [f"{SESSIONS[0]}.jsonl"]).fetchone()[5] is not None
    fleet_central.apply_batch(db, [deleted(4, "h1", SESSIONS[0]), first[1]], "c",
                              fleet_central.Summary())
    row = db.conn.execute(FILE_ROW_SQL, [f"{SESSIONS[0]}.jsonl"]).fetchone()
    assert row[1:3] == (2, 2) and row[5] is None


# The index's count of ingest runs (record_kinds: one more at each run's end).
RUNS_SQL = "SELECT CAST(value AS INTEGER) FROM index_meta WHERE key = 'ingest_runs'"


def three_files_stored(tmp_path):
    """A central's index with one line of each of three sessions stored (not
    derived), and its ingest runs so far."""
    db = open_db(str(tmp_path / "central.db"))
    fleet_central.apply_batch(db, [message(n + 1, "h1", s, line(s, f"u{n}", None))
                                   for n, s in enumerate(SESSIONS[:3])], "c",
                              fleet_central.Summary())
    return db, db.conn.execute(RUNS_SQL).fetchone()


def test_a_derive_step_stops_at_its_budget_and_the_next_window_waits(tmp_path, monkeypatch):
    """CatchUp with a budget spent at once derives one transaction's files a
    call, says files are left until this window's are done, and counts the
    record kinds (one run) only then; a file marked meanwhile is the next
    window's."""
    monkeypatch.setattr(fleet_central, "DERIVE_STEP_FILES", 2)
    db, runs_before = three_files_stored(tmp_path)
    marked = "SELECT count(*) FROM files WHERE needs_derive"
    step = fleet_central.CatchUp(db, budget_s=0)
    assert step() is True
    assert db.conn.execute(marked).fetchone() == (1,)
    assert db.conn.execute(RUNS_SQL).fetchone() == runs_before   # (kinds not counted yet)
    last = SESSIONS[3]
    fleet_central.apply_batch(db, [message(9, "h1", last, line(last, "u9", None))], "c",
                              fleet_central.Summary())
    assert step() is False   # this window's last file; the new one waits
    assert db.conn.execute(marked).fetchone() == (1,)
    assert db.conn.execute(RUNS_SQL).fetchone() != runs_before
    assert db.conn.execute("SELECT records FROM record_types WHERE kind = 'user'"
                           ).fetchone() == (4,)
    assert step() is False   # the next window: the new file
    assert db.conn.execute(marked).fetchone() == (0,)
    assert db.conn.execute("SELECT count(*) FROM leaves").fetchone() == (4,)


def test_the_record_kinds_are_counted_a_step_at_a_time_too(tmp_path, monkeypatch):
    """Once a window's files are derived, CatchUp counts their record kinds
    within its budget too (here spent at once: one file a call, COUNT_FILES
    1), says so until all are counted, and ends the run (ingest_runs) only
    then: at 10,000 agents one count of a window's files held the central
    for 1.9 s. Each kind is counted once."""
    from indexer.index import record_kinds

    monkeypatch.setattr(record_kinds, "COUNT_FILES", 1)
    db, runs_before = three_files_stored(tmp_path)
    users = "SELECT records FROM record_types WHERE kind = 'user'"
    step = fleet_central.CatchUp(db, budget_s=0)
    calls = [step()]   # every file derived (one transaction), one file counted
    assert db.conn.execute("SELECT count(*) FROM files WHERE needs_derive").fetchone() == (0,)
    while calls[-1]:
        assert db.conn.execute(RUNS_SQL).fetchone() == runs_before   # (the run not ended yet)
        calls.append(step())
    assert calls == [True, True, False]
    assert db.conn.execute(RUNS_SQL).fetchone() != runs_before
    assert db.conn.execute(users).fetchone() == (3,)
    assert record_kinds.pending_files(db) == []


def test_derive_some_without_a_budget_derives_them_all(tmp_path, monkeypatch):
    monkeypatch.setattr(derive, "DERIVE_BATCH", 1)
    db = open_db(str(tmp_path / "central.db"))
    fleet_central.apply_batch(db, [message(n + 1, "h1", s, line(s, f"u{n}", None))
                                   for n, s in enumerate(SESSIONS)], "c", fleet_central.Summary())
    assert derive.derive_some(db, derive.pending_files(db)) == []
    assert derive.pending_files(db) == []


def turn(session_id: str, n: int, parent: str | None) -> list[bytes]:
    """A prompt, an assistant tool call and its result, an assistant answer:
    compact JSON lines as Claude Code writes them (``n`` names the uuids)."""
    at = iter(range(4))

    def rec(kind, uuid, parent_uuid, **fields):
        return json.dumps({"parentUuid": parent_uuid, "isSidechain": False,
                           "userType": "external", "cwd": "/w", "sessionId": session_id,
                           "version": "2.1.332", "gitBranch": "main", "type": kind,
                           "uuid": uuid,
                           "timestamp": f"2026-12-01T00:{n:02d}:{next(at):02d}.000Z",
                           **fields},
                          separators=(",", ":")).encode() + b"\n"
    tool = f"toolu_{n:04d}"
    return [
        rec("user", f"p{n}", parent, message={"role": "user", "content": "go"}),
        rec("assistant", f"c{n}", f"p{n}", message={
            "id": f"msg_c{n}", "role": "assistant", "content": [
                {"type": "tool_use", "id": tool, "name": "Bash", "input": {"command": "ls"}}]}),
        rec("user", f"r{n}", f"c{n}", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool, "content": "ok"}]}),
        rec("assistant", f"a{n}", f"r{n}", message={
            "id": f"msg_a{n}", "role": "assistant",
            "content": [{"type": "text", "text": "done, tool_use or not"}]}),
    ]


def test_a_window_reads_what_its_files_appended_with_a_query_for_all_of_them(index):
    """Three sessions, each derived, then a turn appended to each: the
    derive asks the leaves rows, the appended records and whether an older
    record knows an appended uuid once for the three files (not once a
    file), extends each, and the caches equal their definitions."""
    db, seq, offsets = index.db, 0, {}
    for n, s in enumerate(SESSIONS[:3]):
        body = b"".join(turn(s, n, None))
        seq += 1
        fleet_central.apply_batch(db, [message(seq, "h1", s, body, number=1)], "c",
                                  fleet_central.Summary())
        offsets[s] = (len(body), 5)
    derive.derive_some(db, derive.pending_files(db))
    batch = []
    for n, s in enumerate(SESSIONS[:3]):
        body = b"".join(turn(s, 10 + n, f"a{n}"))
        seq += 1
        batch.append(message(seq, "h1", s, body, offset=offsets[s][0], number=offsets[s][1]))
    fleet_central.apply_batch(db, batch, "c", fleet_central.Summary())
    appended = derive.STATS["appended"]
    seen = statements(db)
    derive.derive_some(db, derive.pending_files(db))
    db.conn.set_trace_callback(None)
    assert derive.STATS["appended"] - appended == 3
    for fragment in ("CROSS JOIN records r ON r.file_id = j.value ->> 0",   # APPENDED_SQL
                     "WITH appended AS MATERIALIZED",                       # CLASH_SQL
                     "FROM leaves_cache\nWHERE file_id IN"):                # PREVIOUS_OF_FILES_SQL
        assert sum(fragment in s for s in seen) == 1, fragment
    assert not any("FROM leaves_cache WHERE file_id = " in s for s in seen)
    assert index.value("SELECT count(*) FROM records") == 24
    index.assert_caches_match_definitions()


KIND_TABLES = ("record_kinds", "record_kind_files", "record_kind_scans")


def test_counting_many_files_at_once_writes_what_counting_each_does(tmp_path):
    """record_kinds.count_many over files never counted, counted up to an
    earlier line, counted to their end, rewritten since (a new generation:
    counted again whole), and an id that is no transcript: the same rows as
    count_file a file at a time, with three reads for all the files."""
    from indexer.index import record_kinds

    db = open_db(str(tmp_path / "central.db"))
    bodies = {s: turn(s, n, None) + turn(s, 10 + n, f"a{n}") for n, s in enumerate(SESSIONS)}

    def send(s, first, last, seq, generation=1):
        lines = bodies[s][first:last]
        offset = sum(len(x) for x in bodies[s][:first])
        fleet_central.apply_batch(db, [message(seq, "h1", s, b"".join(lines), offset=offset,
                                               number=first + 1, generation=generation)],
                                  "c", fleet_central.Summary())

    for n, s in enumerate(SESSIONS):
        send(s, 0, 4, n + 1)
    record_kinds.after_ingest(db)   # each counted to its fourth line
    send(SESSIONS[1], 4, 8, 11)     # counted up to an earlier line
    send(SESSIONS[2], 0, 6, 12, generation=2)   # rewritten
    send(SESSIONS[3], 4, 8, 13)
    # SESSIONS[0]: counted to its end; a fifth session: never counted
    fifth = "00000005-0000-4000-8000-000000000000"
    bodies[fifth] = turn(fifth, 5, None)
    send(fifth, 0, 4, 14)
    ids = [i for (i,) in db.conn.execute("SELECT id FROM files ORDER BY id")] + [999]
    twin = open_db(str(tmp_path / "twin.db"))
    db.conn.backup(twin.conn)
    run, now = 7, "2026-12-04T00:00:00.000Z"
    with write_lock(twin) as conn:
        one_by_one = sum(record_kinds.count_file(conn, i, run=run, now=now) for i in ids)
    seen = statements(db)
    with write_lock(db) as conn:
        counted = record_kinds.count_many(conn, ids, run=run, now=now)
    db.conn.set_trace_callback(None)
    assert counted == (one_by_one, len(ids)) == (18, 6)
    for table in KIND_TABLES:
        rows = f"SELECT * FROM {table} ORDER BY 1, 2, 3"
        assert db.conn.execute(rows).fetchall() == twin.conn.execute(rows).fetchall(), table
    reads = [s for s in seen if s.lstrip().upper().startswith(("SELECT", "WITH"))]
    assert sum("json_each" in s for s in reads) == 3   # the reads for all the files
    # count_file's own, for the rewritten file and the id that is no transcript only
    assert sum("SELECT generation, ingested_offset FROM files WHERE id = " in s
               for s in seen) == 2


def test_a_messages_stream_sequence_is_read_from_its_reply_subject():
    """As nats-py's metadata reads it, without and with a domain."""
    Msg = pytest.importorskip("nats.aio.msg", reason="the fleet extra (nats-py)").Msg
    for reply in ("$JS.ACK.SESSION_INDEX.c.1.42.7.1764806400000000000.3",
                  "$JS.ACK.hub.ACCHASH.SESSION_INDEX.c.1.42.7.1764806400000000000.3.x1"):
        m = Msg(None, subject="session-index.h.lines", reply=reply, data=b"")
        assert fleet_central.stream_seq(m) == m.metadata.sequence.stream == 42


# -- the consume loop, against a real nats-server ------------------------------------------

nats = pytest.importorskip("nats", reason="the fleet extra (nats-py) is not installed")
from test_fleet import pytestmark, server   # noqa: E402,F401  (nats-server, the timing group)


async def publish_lines(url: str, count: int, every: float, session_id: str = SESSIONS[0],
                        connected=None):
    """One line a message, ``every`` seconds apart (live traffic); with
    ``connected`` (an asyncio.Event), set once connected, before the first."""
    from indexer.ingest import fleet_nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    await fleet_nats.ensure_stream(js)
    if connected is not None:
        connected.set()
    offset, parent = 0, None
    for i in range(count):
        data = line(session_id, f"u-{i}", parent)
        m = message(i + 1, "h", session_id, data, offset=offset, number=i + 1)
        for attempt in range(5):   # (as ship does: a resend is deduplicated by its Nats-Msg-Id)
            try:
                await js.publish(m.subject, m.data, headers=m.headers)
                break
            except fleet_nats.TRANSIENT:   # (no answer from the stream in time, under load)
                if attempt == 4:
                    raise
                await asyncio.sleep(0.2)
        offset, parent = offset + len(data), f"u-{i}"
        await asyncio.sleep(every)
    await nc.close()


def test_a_drain_goes_on_deriving_while_files_are_left(server, tmp_path):   # noqa: F811 (the fixture imported from test_fleet)
    """after_batch says files are left (its budget spent): the central calls
    it again after its next fetch, and a drain ends only once none is."""
    from indexer.ingest import fleet_nats

    db = open_db(str(tmp_path / "central.db"))
    calls = []

    def after_batch(summary):
        calls.append(summary.new_lines)
        return len(calls) < 4   # files left, three times

    async def main():
        await publish_lines(server.url, 5, 0)
        return await fleet_central.consume(db, fleet_nats.ConnectOptions(server.url),
                                           after_batch=after_batch)

    summary = asyncio.run(main())
    assert summary.new_lines == 5
    assert len(calls) == 4 and calls[-1] == 5


def test_the_central_keeps_its_temporary_btrees_in_memory(server, tmp_path):   # noqa: F811 (the fixture imported from test_fleet)
    """The central's connection sorts and materializes in memory (a sessions
    row's refresh makes several temporary b-trees; in temporary files each
    cost more than the rest of the refresh)."""
    from indexer.ingest import fleet_nats

    db = open_db(str(tmp_path / "central.db"))
    assert db.conn.execute("PRAGMA temp_store").fetchone() == (0,)   # (SQLite's default)

    async def main():
        await publish_lines(server.url, 2, 0)
        return await fleet_central.consume(db, fleet_nats.ConnectOptions(server.url),
                                           after_batch=lambda summary: fleet_central.catch_up(db))

    assert asyncio.run(main()).new_lines == 2
    assert db.conn.execute("PRAGMA temp_store").fetchone() == (2,)   # MEMORY
    assert db.conn.execute("SELECT records FROM sessions").fetchall() == [(2,)]


def test_a_window_grows_with_what_the_last_derive_took(server, tmp_path, monkeypatch):   # noqa: F811 (the fixture imported from test_fleet)
    """A derive that takes 0.25 s with DERIVE_GROWTH 10: the next window is
    2.5 s, not DERIVE_WINDOW_S (0.5 s here), while one-line messages keep
    coming every 20 ms for 4 s (a fixed 0.5 s window would derive about 6
    times)."""
    from indexer.ingest import fleet_nats

    monkeypatch.setattr(fleet_central, "DERIVE_GROWTH", 10.0)
    monkeypatch.setattr(fleet_central, "DERIVE_WINDOW_S", 0.5)   # (below 2.5 s: the growth shows)
    db = open_db(str(tmp_path / "central.db"))
    derives = []

    def after_batch(summary):
        derives.append(time.monotonic())
        time.sleep(0.25)
        return derive.derive_pending(db) and False

    async def main():
        stop = asyncio.Event()
        central = asyncio.ensure_future(fleet_central.consume(
            db, fleet_nats.ConnectOptions(server.url), watch=True, stop=stop,
            after_batch=after_batch))
        await publish_lines(server.url, 200, 0.02)
        for _ in range(100):
            if db.conn.execute("SELECT count(*) FROM records").fetchone()[0] == 200:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(fleet_central.IDLE_S + 0.5)
        stop.set()
        return await central

    summary = asyncio.run(main())
    assert summary.new_lines == 200
    gaps = [b - a for a, b in zip(derives, derives[1:])]
    assert len(derives) <= summary.seconds / 2.5 + 2, gaps
    assert all(g >= 2.5 for g in gaps[:-1]), gaps   # (the last: when the lines stopped)
    assert db.conn.execute("SELECT count(*) FROM files WHERE needs_derive").fetchone() == (0,)


@pytest.mark.parametrize("behind_bytes, first_batch", [(16 << 20, 80), (1, 20)])
def test_a_central_behind_its_hosts_stores_first_and_derives_once_caught_up(server, tmp_path,   # noqa: F811 (the fixture imported from test_fleet)
                                                                            monkeypatch,
                                                                            behind_bytes,
                                                                            first_batch):
    """200 messages waiting, FETCH_BATCH 20 (so each fetch is whole: the
    central is behind), a window of 0 s (else a derive after every batch):
    a whole fetch is joined by what is waiting, up to BEHIND_FETCHES (4)
    fetches, 80 messages in one transaction (unless BEHIND_BYTES is reached
    first: 1 byte here, one fetch); while fetches are whole, nothing is
    derived (DERIVE_BEHIND_S, 60 s here, has not passed) and status counts
    the file as not derived; the first derive comes once the backlog is
    stored, and leaves the caches current."""
    from indexer.index import status
    from indexer.ingest import fleet_nats

    monkeypatch.setattr(fleet_central, "FETCH_BATCH", 20)
    monkeypatch.setattr(fleet_central, "BEHIND_BYTES", behind_bytes)
    monkeypatch.setattr(fleet_central, "DERIVE_WINDOW_S", 0.0)
    monkeypatch.setattr(fleet_central, "DERIVE_BEHIND_S", 60.0)
    db = open_db(str(tmp_path / "central.db"))
    stored_at_derive, batches, to_derive = [], [], []
    apply = fleet_central.apply_batch

    def counted(*args, **kwargs):
        apply(*args, **kwargs)
        batches.append(len(args[1]))
        to_derive.append(status.status(db)["files_to_derive"])

    monkeypatch.setattr(fleet_central, "apply_batch", counted)

    def after_batch(summary):
        stored_at_derive.append(summary.new_lines)
        return derive.derive_pending(db) and False

    async def main():
        await publish_lines(server.url, 200, 0)
        stop = asyncio.Event()
        central = asyncio.ensure_future(fleet_central.consume(
            db, fleet_nats.ConnectOptions(server.url), watch=True, stop=stop,
            after_batch=after_batch))
        for _ in range(100):
            if stored_at_derive:
                break
            await asyncio.sleep(0.1)
        stop.set()
        return await central

    summary = asyncio.run(main())
    assert summary.new_lines == sum(batches) == 200 and batches[0] == first_batch, batches
    assert stored_at_derive[0] == 200, (stored_at_derive, batches)
    assert to_derive == [1] * len(batches)
    assert status.status(db)["files_to_derive"] == 0
    assert db.conn.execute("SELECT resume_leaf_uuid FROM leaves").fetchone() == ("u-199",)


def test_a_following_central_checkpoints_its_wal_from_a_thread_of_its_own(server, tmp_path,   # noqa: F811 (the fixture imported from test_fleet)
                                                                          monkeypatch):
    """While it follows, the central's connection checkpoints only past the
    backstop (its commits do not stop for a checkpoint); a thread of its own
    checkpoints the WAL once it holds CHECKPOINT_BYTES (1 byte here), and the
    connection's autocheckpoint is put back when it stops. Every line is
    stored once."""
    from indexer.ingest import fleet_nats

    monkeypatch.setattr(fleet_central, "CHECKPOINT_BYTES", 1)
    monkeypatch.setattr(fleet_central, "CHECKPOINT_EVERY_S", 0.05)
    db = open_db(str(tmp_path / "central.db"))
    before = db.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    made, during = [], []
    real = fleet_central.Checkpointer
    monkeypatch.setattr(fleet_central, "Checkpointer",
                        lambda *args: made.append(real(*args)) or made[-1])

    def after_batch(summary):
        during.append(db.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        return derive.derive_pending(db) and False

    async def main():
        stop = asyncio.Event()
        central = asyncio.ensure_future(fleet_central.consume(
            db, fleet_nats.ConnectOptions(server.url), watch=True, stop=stop,
            after_batch=after_batch))
        await publish_lines(server.url, 40, 0.02)
        for _ in range(100):
            if db.conn.execute("SELECT count(*) FROM records").fetchone()[0] == 40 and \
                    made and made[0].checkpoints:
                break
            await asyncio.sleep(0.1)
        stop.set()
        return await central

    summary = asyncio.run(main())
    assert summary.new_lines == 40
    assert len(made) == 1 and made[0].checkpoints > 0 and not made[0].thread.is_alive()
    assert during and set(during) == {fleet_central.CHECKPOINT_BACKSTOP_PAGES}
    assert db.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == before
    assert db.conn.execute("SELECT count(DISTINCT byte_offset) FROM records").fetchone() == (40,)


async def _pull(url: str, durable: str):
    """(connection, fleet_nats.Pull) of a durable consumer of the whole stream,
    made as the central makes its own."""
    from nats.js.api import ConsumerConfig

    from indexer.ingest import fleet_nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    await fleet_nats.ensure_stream(js)
    await js.add_consumer(fleet_wire.STREAM, ConsumerConfig(
        durable_name=durable, filter_subject=fleet_wire.STREAM_SUBJECTS[0],
        max_ack_pending=fleet_central.MAX_ACK_PENDING))   # (the server's default: 1000)
    return nc, await fleet_nats.Pull(nc, fleet_wire.STREAM, durable,
                                     fleet_central.FETCH_BATCH).start()


def test_what_comes_while_a_batch_gathers_is_taken_with_one_pull(server, tmp_path):   # noqa: F811 (the fixture imported from test_fleet)
    """One message waiting, five more published one by one within GATHER_S:
    the batch holds all six, taken with two pull requests (the first
    message's, and one for what came while the batch gathered), not a
    request per message or two."""
    async def main():
        nc, pull = await _pull(server.url, "gather")
        await publish_lines(server.url, 1, 0)
        connected = asyncio.Event()   # (its connection made first: under load that takes a while)
        later = asyncio.ensure_future(publish_lines(server.url, 5, 0.01, SESSIONS[1], connected))
        await connected.wait()
        msgs = await fleet_central._fetch(pull, 1.0, gather=1.0)
        await later
        await nc.close()
        return msgs, pull.requests

    msgs, requests = asyncio.run(main())
    assert len(msgs) == 6
    assert [fleet_central.stream_seq(m) for m in msgs] == list(range(1, 7))
    assert requests == 2


def test_the_time_since_the_last_batch_counts_towards_gathering(server, tmp_path):   # noqa: F811 (the fixture imported from test_fleet)
    """A fetch gathers until ``gather`` seconds after the last batch was
    taken, not ``gather`` seconds more: a central that spent most of that
    time storing and deriving the last batch takes the next one sooner (at
    10,000 agents a whole GATHER_S after that work made each line wait for
    both)."""
    async def main():
        nc, pull = await _pull(server.url, "since")
        await publish_lines(server.url, 1, 0)
        first = await fleet_central._fetch(pull, 1.0, gather=0)
        await asyncio.sleep(2.0)   # (the central stores and derives the first)
        await publish_lines(server.url, 1, 0, SESSIONS[1])
        began = time.monotonic()
        second = await fleet_central._fetch(pull, 1.0, gather=3.0)
        took = time.monotonic() - began
        await nc.close()
        return first, second, took

    first, second, took = asyncio.run(main())
    assert [fleet_central.stream_seq(m) for m in first + second] == [1, 2]
    assert took < 2.5, took   # (what is left of the 3 s since the first, not 3 s more)


def test_a_burst_is_read_whole_however_long_it_takes_to_come(monkeypatch):
    """What a request delivers is waited for until PULL_ANSWER_S passes
    without a message, not PULL_ANSWER_S in all: on a loaded machine a
    backlog's burst can take longer to come than that, and cut short it
    made the fetch gather (a second request, GATHER_S more; a CI run of
    test_a_backlog_is_taken_a_whole_batch_at_once). Here ten messages come
    0.05 s apart against a PULL_ANSWER_S of 0.2 s (a bound on the whole
    burst read four)."""
    from types import SimpleNamespace

    from indexer.ingest import fleet_nats

    monkeypatch.setattr(fleet_nats, "PULL_ANSWER_S", 0.2)
    nc = SimpleNamespace(new_inbox=lambda: "_INBOX.test")

    async def main():
        pull = fleet_nats.Pull(nc, "s", "c", 1024)
        pull.asked = 10   # (a request's burst, still coming)

        async def deliver():
            for n in range(10):
                await asyncio.sleep(0.05)
                await pull._delivered(SimpleNamespace(reply=f"$JS.ACK.s.c.1.{n + 1}.1.0.0",
                                                      headers=None))

        delivering = asyncio.ensure_future(deliver())
        await pull._answered()
        got = len(pull.got)
        await delivering
        return got

    assert asyncio.run(main()) == 10


def test_a_backlog_is_taken_a_whole_batch_at_once(server, tmp_path):   # noqa: F811 (the fixture imported from test_fleet)
    """More than FETCH_BATCH messages waiting (a central behind its hosts):
    a fetch takes a whole batch with one pull request and does not wait
    GATHER_S (a wait a batch would cap what a central behind can catch up)."""
    async def main():
        nc, pull = await _pull(server.url, "backlog")
        await publish_lines(server.url, fleet_central.FETCH_BATCH + 10, 0)
        began = time.monotonic()
        msgs = await fleet_central._fetch(pull, 1.0, gather=2.0)
        took = time.monotonic() - began
        await nc.close()
        return msgs, took, pull.requests

    msgs, took, requests = asyncio.run(main())
    assert [fleet_central.stream_seq(m) for m in msgs] == list(
        range(1, fleet_central.FETCH_BATCH + 1))
    assert requests == 1
    assert took < 1.5, took   # (not the 2 s of gathering)


def test_a_message_delivered_after_a_fetch_returned_is_in_the_next_batch(server, tmp_path,   # noqa: F811 (the fixture imported from test_fleet)
                                                                         monkeypatch):
    """What a pull request delivers after the fetch that asked returned (the
    server slower than PULL_ANSWER_S: here 0) is kept for the next fetch,
    never dropped (it would wait ACK_WAIT_S to be delivered again)."""
    from indexer.ingest import fleet_nats

    monkeypatch.setattr(fleet_nats, "PULL_ANSWER_S", 0.0)

    async def main():
        nc, pull = await _pull(server.url, "late")
        await publish_lines(server.url, 1, 0)
        fetching = asyncio.ensure_future(fleet_central._fetch(pull, 1.0, gather=1.0))
        await asyncio.sleep(0.1)   # (the fetch has the first, and gathers)
        await publish_lines(server.url, 2, 0, SESSIONS[1])
        first = await fetching
        for _ in range(50):   # (delivered while nobody fetches)
            if len(pull.got) == 2:
                break
            await asyncio.sleep(0.05)
        held = len(pull.got)
        second = await fleet_central._fetch(pull, 1.0, gather=0)
        third = await fleet_central._fetch(pull, 0.2, gather=0)
        await nc.close()
        return first, held, second, third

    first, held, second, third = asyncio.run(main())
    assert [len(first), held, len(second), len(third)] == [1, 2, 2, 0]
    assert [fleet_central.stream_seq(m) for m in first + second] == [1, 2, 3]


def test_a_status_header_on_a_hosts_message_is_stored_not_taken_for_the_servers(server, tmp_path):   # noqa: F811 (the fixture imported from test_fleet)
    """The server ends a pull with a status message (no reply subject); a
    host's message that carries a header named Status (408: a pull's end)
    is a stream message like any other: stored once, not dropped (nats-py's
    fetch took it for the server's and never acknowledged it)."""
    from indexer.ingest import fleet_nats

    db = open_db(str(tmp_path / "central.db"))
    body = line(SESSIONS[0], "s1", None)
    m = message(1, "h", SESSIONS[0], body)

    async def main():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await fleet_nats.ensure_stream(js)
        await js.publish(m.subject, m.data, headers={**m.headers, "Status": "408",
                                                     "Description": "Request Timeout"})
        summary = await fleet_central.consume(db, fleet_nats.ConnectOptions(server.url))
        info = await js.consumer_info(fleet_wire.STREAM, fleet_wire.DEFAULT_CONSUMER)
        await nc.close()
        return summary, info

    summary, info = asyncio.run(main())
    assert (summary.new_lines, summary.bad_messages) == (1, 0)
    assert (info.num_ack_pending, info.num_pending, info.ack_floor.stream_seq) == (0, 0, 1)
    assert db.conn.execute("SELECT CAST(raw AS BLOB) FROM records").fetchall() == [
        (body.rstrip(b"\n"),)]
