"""Incremental, exactly-once, lossless ingest; the bad-input matrix."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest

from conftest import Transcript, write_jsonl
from indexer.ingest.files import stored_bytes

SID = "11111111-2222-3333-4444-555555555555"


def rec(i, parent=None, **kw):
    r = {"type": "user", "uuid": f"u-{i}", "parentUuid": parent, "sessionId": SID,
         "timestamp": f"2026-09-01T00:00:{i:02d}.000Z",
         "message": {"role": "user", "content": f"line {i}"}}
    r.update(kw)
    return r


def line(i, parent=None, **kw) -> bytes:
    return json.dumps(rec(i, parent, **kw)).encode() + b"\n"


def rebuilt(index, path) -> bytes:
    return b"".join(stored_bytes(index.db.conn, index.file_id(path)))


def transcript(index, n=3):
    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line(i, f"u-{i-1}" if i > 1 else None) for i in range(1, n + 1)))
    return path


def test_unchanged_files_are_not_read(index):
    path = transcript(index)
    first = index.ingest()
    assert (first.new_records, first.bytes_read) == (3, path.stat().st_size)
    again = index.ingest()
    assert (again.files, again.changed_files, again.new_records, again.bytes_read) == (1, 0, 0, 0)


def test_appended_lines_are_read_from_the_offset(index):
    path = transcript(index)
    index.ingest()
    extra = line(4, "u-3") + line(5, "u-4")
    with open(path, "ab") as f:
        f.write(extra)
    s = index.ingest()
    assert (s.new_records, s.bytes_read, s.rewritten_files) == (2, len(extra), 0)
    assert index.rows("SELECT line_no, uuid FROM records ORDER BY line_no")[-2:] == [
        {"line_no": 4, "uuid": "u-4"}, {"line_no": 5, "uuid": "u-5"}]
    assert index.ancestry(index.file_id(path))[0] == "u-5"
    assert rebuilt(index, path) == path.read_bytes()


def test_partial_last_line_waits_for_its_newline(index):
    path = transcript(index, 2)
    whole = line(3, "u-2")
    with open(path, "ab") as f:
        f.write(whole[:20])
    s = index.ingest()
    assert (s.new_records, s.bad_lines) == (2, 0)
    assert index.value("SELECT ingested_offset FROM files") == path.stat().st_size - 20
    again = index.ingest()  # still partial: nothing new, no bad line
    assert (again.new_records, again.bad_lines) == (0, 0)
    with open(path, "ab") as f:
        f.write(whole[20:])
    s = index.ingest()
    assert (s.new_records, s.bad_lines) == (1, 0)
    assert index.value("SELECT count(*) FROM records WHERE uuid = 'u-3'") == 1
    assert rebuilt(index, path) == path.read_bytes()


def test_truncated_file_is_reread_and_stale_rows_replaced(index):
    path = transcript(index, 5)
    index.ingest()
    path.write_bytes(line(1) + line(9, "u-1"))
    s = index.ingest()
    assert (s.rewritten_files, s.new_records) == (1, 2)
    assert [r["uuid"] for r in index.rows("SELECT uuid FROM records ORDER BY line_no")] == ["u-1", "u-9"]
    assert index.value("SELECT rewrites FROM files") == 1
    assert index.ancestry(index.file_id(path)) == ["u-9", "u-1"]
    index.assert_caches_match_definitions()


def test_rewrite_that_grew_past_the_offset_is_detected(index):
    path = transcript(index, 3)
    index.ingest()
    # Same length prefix changed (u-2 -> u-X), then more lines: size grew.
    data = path.read_bytes().replace(b'"u-2"', b'"u-X"') + line(4, "u-3")
    path.write_bytes(data)
    s = index.ingest()
    assert s.rewritten_files == 1
    assert index.value("SELECT count(*) FROM records WHERE uuid = 'u-2'") == 0
    assert rebuilt(index, path) == data


def test_same_size_rewrite_in_the_middle_is_detected(index):
    path = transcript(index, 40)
    index.ingest()
    before = path.stat()
    data = path.read_bytes().replace(b'"line 20"', b'"line Z0"')
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert path.stat().st_size == before.st_size and path.stat().st_ino == before.st_ino
    s = index.ingest()
    assert s.rewritten_files == 1
    assert rebuilt(index, path) == data


def test_replaced_file_with_same_prefix_only_adds_new_lines(index):
    """A file restored or rewritten by rename (new inode) that still starts
    with the ingested bytes is not re-read: only the new lines are added."""
    path = transcript(index, 3)
    index.ingest()
    ids = [r["id"] for r in index.rows("SELECT id FROM records ORDER BY id")]
    data = path.read_bytes() + line(4, "u-3")
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    s = index.ingest()
    assert (s.rewritten_files, s.new_records) == (0, 1)
    assert [r["id"] for r in index.rows("SELECT id FROM records ORDER BY id")][:3] == ids


def test_replaced_file_with_other_content_is_reread(index):
    path = transcript(index, 3)
    index.ingest()
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(line(7) + line(8, "u-7") + line(9, "u-8") + line(10, "u-9"))
    os.replace(tmp, path)
    s = index.ingest()
    assert (s.rewritten_files, s.new_records) == (1, 4)
    assert [r["uuid"] for r in index.rows("SELECT uuid FROM records ORDER BY line_no")] == ["u-7", "u-8", "u-9", "u-10"]


def test_deleted_file_keeps_its_rows_and_comes_back(index):
    path = transcript(index, 3)
    index.ingest()
    data = path.read_bytes()
    path.unlink()
    s = index.ingest()
    assert s.deleted_files == 1
    [f] = index.rows("SELECT deleted_at FROM files")
    assert f["deleted_at"] is not None
    assert index.value("SELECT count(*) FROM records") == 3
    assert index.rows("SELECT deleted_at IS NOT NULL AS gone FROM sessions") == [{"gone": 1}]
    assert rebuilt(index, path) == data
    path.write_bytes(data)  # restored, same bytes
    s = index.ingest()
    assert (s.rewritten_files, s.new_records) == (0, 0)
    assert index.rows("SELECT deleted_at FROM files") == [{"deleted_at": None}]
    assert index.rows("SELECT deleted_at FROM sessions") == [{"deleted_at": None}]


def test_explicit_file_source_that_vanished_is_marked_deleted(index):
    path = transcript(index, 2)
    index.ingest(path)
    path.unlink()
    assert index.ingest(path).deleted_files == 1


def test_discovery_finds_transcripts_and_ignores_the_rest(index):
    proj = index.projects / "-home-u-proj"
    main = Transcript(SID)
    main.add("m1", None, "user")
    main.write(proj)
    sub = Transcript(SID)
    sub.add("s1", None, "user", isSidechain=True, agentId="a1")
    sub.write(proj / SID / "subagents", "agent-a1.jsonl")
    (proj / SID / "subagents" / "agent-a1.meta.json").write_text('{"agentType": "x"}')
    legacy = Transcript("44444444-2222-3333-4444-555555555555")
    legacy.add("l1", None, "user", isSidechain=True, agentId="b2")
    legacy.write(proj, "agent-b2.jsonl")
    write_jsonl(proj / SID / "subagents" / "workflows" / "w1" / "journal.jsonl", [{"type": "step"}])
    write_jsonl(proj / SID / "tool-results" / "big.jsonl", [{"type": "user"}])
    (proj / "notes.jsonl").write_text("this is not json\nnor this\n")
    (proj / "empty.jsonl").write_text("")
    s = index.ingest()
    assert (s.files, s.skipped_files) == (3, 1)
    assert index.rows("SELECT kind, session_id, agent_id, project_dir FROM files ORDER BY kind, agent_id") == [
        {"kind": "main", "session_id": SID, "agent_id": None, "project_dir": "-home-u-proj"},
        {"kind": "subagent", "session_id": SID, "agent_id": "a1", "project_dir": "-home-u-proj"},
        {"kind": "subagent", "session_id": "44444444-2222-3333-4444-555555555555",
         "agent_id": "b2", "project_dir": "-home-u-proj"}]
    assert index.rows("SELECT session_id, main_files, subagent_files, records FROM sessions ORDER BY session_id") == [
        {"session_id": SID, "main_files": 1, "subagent_files": 1, "records": 2},
        {"session_id": "44444444-2222-3333-4444-555555555555", "main_files": 0,
         "subagent_files": 1, "records": 1}]


def test_index_is_wal_and_readable_while_ingest_writes(index):
    assert index.value("PRAGMA journal_mode") == "wal"
    path = transcript(index, 3)
    index.ingest()
    reader = sqlite3.connect(index.path)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM records").fetchone()[0] == 3
    with open(path, "ab") as f:
        f.write(line(4, "u-3"))
    assert index.ingest().new_records == 1  # a reader's open snapshot does not block it
    assert reader.execute("SELECT count(*) FROM records").fetchone()[0] == 3
    reader.execute("COMMIT")
    assert reader.execute("SELECT count(*) FROM records").fetchone()[0] == 4


# The bad-input matrix of ../shared/reference/ingest-reliability.md: each bad
# line is recorded with its bytes, the good lines around it are stored, the
# run completes, and the file can be rebuilt byte for byte.
BAD_LINES = {
    "invalid_json": (b'{"type": "user", "uuid": ', "invalid JSON"),
    "not_an_object": (b'["a", "list"]', "not a JSON object"),
    "nul_bytes": (b'{"type": "user", "uuid": "n\x00ul"}', "NUL byte"),
    "invalid_utf8": (b'{"type": "user", "uuid": "\xff\xfe"}', "invalid UTF-8"),
    "deeply_nested": (b'{"type": "user", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                      "nested too deeply"),
    "blank": (b"   ", "blank line"),
}


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_bad_line_is_recorded_and_neighbours_kept(index, name):
    bad, error = BAD_LINES[name]
    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    data = line(1) + bad + b"\n" + line(2, "u-1")
    path.write_bytes(data)
    s = index.ingest()
    assert (s.new_records, s.bad_lines) == (2, 1)
    [b] = index.rows("SELECT line_no, byte_offset, error, raw FROM bad_lines")
    assert (b["line_no"], b["byte_offset"], b["raw"]) == (2, len(line(1)), bad)
    assert error in b["error"]
    assert index.ancestry(index.file_id(path)) == ["u-2", "u-1"]
    assert rebuilt(index, path) == data


# Lines that are odd but valid JSON objects: stored as records, raw kept.
ODD_RECORDS = {
    "lone_surrogate": (b'{"type": "user", "uuid": "u-2", "parentUuid": "u-1", "message": {"content": "\\ud800"}}',
                       {"uuid": "u-2", "parent_uuid": "u-1"}),
    "surrogate_in_id": (b'{"type": "user", "uuid": "\\udc80x", "parentUuid": "u-1"}',
                        {"uuid": "\\udc80x", "parent_uuid": "u-1"}),
    "big_integer": (b'{"type": "user", "uuid": "u-2", "parentUuid": "u-1", "n": 123456789012345678901234567890}',
                    {"uuid": "u-2", "parent_uuid": "u-1"}),
    "nan_infinity": (b'{"type": "user", "uuid": "u-2", "parentUuid": "u-1", "a": NaN, "b": -Infinity}',
                     {"uuid": "u-2", "parent_uuid": "u-1"}),
    "crlf": (b'{"type": "user", "uuid": "u-2", "parentUuid": "u-1"}\r', {"uuid": "u-2", "parent_uuid": "u-1"}),
    "wrong_types": (b'{"type": "user", "uuid": "u-2", "parentUuid": 5, "isSidechain": "yes", "message": "str"}',
                    {"uuid": "u-2", "parent_uuid": "5", "is_sidechain": 1}),
    "uuid_not_a_string": (b'{"type": "user", "uuid": 7, "parentUuid": "u-1"}', {"uuid": None}),
    "unknown_type": (b'{"type": "hologram", "uuid": "u-2", "parentUuid": "u-1", "beam": {"x": 1}}',
                     {"type": "hologram", "uuid": "u-2"}),
    "no_type": (b'{"just": "an object"}', {"type": None, "uuid": None}),
}


@pytest.mark.parametrize("name", sorted(ODD_RECORDS))
def test_odd_but_valid_records_are_stored(index, name):
    odd, expected = ODD_RECORDS[name]
    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    data = line(1) + odd + b"\n" + line(3, "u-1")
    path.write_bytes(data)
    s = index.ingest()
    assert (s.new_records, s.bad_lines) == (3, 0)
    [row] = index.rows(f"SELECT {', '.join(expected)} FROM records WHERE line_no = 2")
    assert row == expected
    assert rebuilt(index, path) == data
    index.assert_caches_match_definitions()


def test_bom_at_offset_zero(index):
    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    data = b"\xef\xbb\xbf" + line(1) + line(2, "u-1")
    path.write_bytes(data)
    assert index.ingest().bad_lines == 0
    assert index.ancestry(index.file_id(path)) == ["u-2", "u-1"]
    assert rebuilt(index, path) == data


def test_fifty_megabyte_line(index):
    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    big = json.dumps(rec(2, "u-1", message={"role": "user", "content": "x" * (50 << 20)})).encode()
    data = line(1) + big + b"\n" + line(3, "u-2")
    path.write_bytes(data)
    s = index.ingest()
    assert (s.new_records, s.bad_lines) == (3, 0)
    assert index.value("SELECT length(raw) FROM records WHERE uuid = 'u-2'") == len(big)
    assert index.ancestry(index.file_id(path)) == ["u-3", "u-2", "u-1"]


def test_duplicate_uuids_self_parent_and_cycles_are_stored(index):
    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    data = line(1) + line(2, "u-2") + line(3, "u-4") + line(4, "u-3") + line(1, "u-4")
    path.write_bytes(data)
    s = index.ingest()
    assert (s.new_records, s.bad_lines) == (5, 0)
    assert index.value("SELECT count(*) FROM duplicate_uuids") == 1
    assert rebuilt(index, path) == data
    index.assert_caches_match_definitions()


LARGE = b"y" * (5 << 20)  # past lines.LARGE_LINE_BYTES: parsed from bytes, stored by blob I/O
LARGE_LINES = {
    "record": (b'{"type": "user", "uuid": "u-2", "parentUuid": "u-1", "message": {"content": "'
               + LARGE + b'"}}', None),
    "odd_types": (b'{"type": "user", "uuid": "u-2", "parentUuid": 5, "x": NaN, "pad": "'
                  + LARGE + b'"}', None),
    "invalid_json": (b'{"type": "user", "uuid": "u-2", "pad": "' + LARGE, "invalid JSON"),
    "invalid_utf8": (b'{"type": "user", "pad": "' + LARGE + b'\xff"}', "invalid UTF-8"),
    "nul": (b'{"type": "user", "pad": "' + LARGE + b'\x00"}', "NUL byte"),
    "blank": (b" " * len(LARGE), "blank line"),
}


@pytest.mark.parametrize("name", sorted(LARGE_LINES))
def test_large_lines_are_stored_exactly(index, name):
    big, error = LARGE_LINES[name]
    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    data = line(1) + big + b"\n" + line(3, "u-1")
    path.write_bytes(data)
    s = index.ingest()
    assert (s.new_lines, s.bad_lines) == (3, 0 if error is None else 1)
    assert rebuilt(index, path) == data
    if error is None:
        row = index.rows("SELECT uuid, typeof(raw) AS t, length(CAST(raw AS BLOB)) AS n "
                         "FROM records WHERE line_no = 2")
        assert row == [{"uuid": "u-2", "t": "text", "n": len(big)}]
        assert index.value("SELECT json_valid(raw) FROM records WHERE line_no = 2") == (name == "record")
    else:
        [b] = index.rows("SELECT line_no, byte_offset, error, length(raw) AS n FROM bad_lines")
        assert (b["line_no"], b["byte_offset"], b["n"]) == (2, len(line(1)), len(big))
        assert error in b["error"]
    assert index.value("SELECT records FROM files") == 3 - (error is not None)
    index.assert_caches_match_definitions()


# --- a last record without its newline -----------------------------------------
# Claude Code reads a whole last record that has no newline yet, and writes the
# newline before its next append: the index takes it as a line, once.

def disk_lines(data: bytes) -> list[tuple[int, int]]:
    """(line_no, byte_offset) of every line of ``data``, a last one without a
    newline included when it is a JSON object (decided here with json)."""
    out, pos = [], 0
    pieces = data.split(b"\n")
    for i, piece in enumerate(pieces):
        if i == len(pieces) - 1:
            try:
                if not isinstance(json.loads(piece), dict):
                    break
            except ValueError:
                break
        out.append((i + 1, pos))
        pos += len(piece) + 1
    return out


def stored_lines(index) -> list[tuple[int, int]]:
    return [(r["line_no"], r["byte_offset"]) for r in index.rows(
        "SELECT line_no, byte_offset FROM records UNION ALL "
        "SELECT line_no, byte_offset FROM bad_lines ORDER BY line_no")]


def exported(index) -> bytes:
    from click.testing import CliRunner
    from indexer.cli.commands import cli

    result = CliRunner().invoke(cli, ["export", SID, "--out", "-", "--db", str(index.path)])
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


def file_end(index) -> dict:
    [row] = index.rows("SELECT ingested_offset, line_count, unterminated_tail, pending_tail "
                       "FROM files")
    return row


def test_whole_last_record_without_newline_is_stored_once(index):
    path = transcript(index, 2)
    with open(path, "ab") as f:
        f.write(line(3, "u-2")[:-1])
    s = index.ingest()
    data = path.read_bytes()
    assert (s.new_records, s.bad_lines) == (3, 0)
    assert file_end(index) == {"ingested_offset": len(data), "line_count": 3,
                               "unterminated_tail": len(line(3, "u-2")) - 1,
                               "pending_tail": None}
    assert stored_lines(index) == disk_lines(data) == [(1, 0), (2, len(line(1))),
                                                       (3, len(line(1)) + len(line(2, "u-1")))]
    assert index.ancestry(index.file_id(path))[0] == "u-3"
    assert exported(index) == data
    again = index.ingest()
    assert (again.changed_files, again.new_lines, again.bytes_read) == (0, 0, 0)

    # Its newline arrives with the next records, the last again without one.
    with open(path, "ab") as f:
        f.write(b"\n" + line(4, "u-3") + line(5, "u-4")[:-1])
    s = index.ingest()
    data = path.read_bytes()
    assert (s.new_records, s.rewritten_files) == (2, 0)
    assert stored_lines(index) == disk_lines(data) and len(disk_lines(data)) == 5
    assert [r["uuid"] for r in index.rows("SELECT uuid FROM records ORDER BY line_no")] == [
        "u-1", "u-2", "u-3", "u-4", "u-5"]
    assert file_end(index)["unterminated_tail"] == len(line(5, "u-4")) - 1
    assert exported(index) == data

    # Only the newline: nothing new, the record is now terminated.
    with open(path, "ab") as f:
        f.write(b"\n")
    s = index.ingest()
    data = path.read_bytes()
    assert (s.new_lines, s.rewritten_files) == (0, 0)
    assert file_end(index) == {"ingested_offset": len(data), "line_count": 5,
                               "unterminated_tail": 0, "pending_tail": None}
    assert exported(index) == data == rebuilt(index, path)
    with open(path, "ab") as f:
        f.write(line(6, "u-5"))
    assert index.ingest().new_records == 1
    assert stored_lines(index) == disk_lines(path.read_bytes()) and len(stored_lines(index)) == 6
    assert exported(index) == path.read_bytes()
    assert index.value("SELECT records FROM files") == 6
    index.assert_caches_match_definitions()


def test_a_new_file_of_one_record_without_newline(index):
    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(line(1)[:-1])
    assert index.ingest().new_records == 1
    assert index.rows("SELECT session_id, records FROM sessions") == [
        {"session_id": SID, "records": 1}]
    assert exported(index) == path.read_bytes()
    with open(path, "ab") as f:
        f.write(b"\n" + line(2, "u-1"))
    assert index.ingest().new_records == 1
    assert stored_lines(index) == [(1, 0), (2, len(line(1)))]
    assert exported(index) == path.read_bytes()


@pytest.mark.parametrize("tail", [b'["an", "array"]', b"42", b"   ", b'{"type": "user"'])
def test_a_tail_that_is_not_a_whole_object_stays_pending(index, tail):
    path = transcript(index, 2)
    with open(path, "ab") as f:
        f.write(tail)
    assert index.ingest().new_lines == 2
    assert file_end(index) == {"ingested_offset": len(line(1)) + len(line(2, "u-1")),
                               "line_count": 2, "unterminated_tail": 0, "pending_tail": tail}
    assert exported(index) == path.read_bytes()


# A last record that was whole, then went on without a newline first: the
# writer was still writing that line. Its row goes; it is read again as what
# it is now (a bad line, a record with a CR, a record with more whitespace).
GOES_ON = {
    "into_a_bad_line": (b" and more\n", "bad"),
    "into_crlf": (b"\r\n", "record"),
    "with_spaces_still_open": (b"  ", "record"),
}


@pytest.mark.parametrize("name", sorted(GOES_ON))
def test_a_last_record_that_goes_on_is_read_again(index, name):
    more, kind = GOES_ON[name]
    path = transcript(index, 2)
    last = line(3, "u-2", version="9.9.9", gitBranch="tail-branch",
                timestamp="2026-09-02T00:00:00.000Z")[:-1]
    with open(path, "ab") as f:
        f.write(last)
    index.ingest()
    assert index.value("SELECT version FROM files") == "9.9.9"
    with open(path, "ab") as f:
        f.write(more)
    s = index.ingest()
    data = path.read_bytes()
    assert s.rewritten_files == 0
    assert stored_lines(index) == disk_lines(data) and len(disk_lines(data)) == 3
    assert exported(index) == data
    assert index.value("SELECT count(*) FROM records WHERE uuid = 'u-3'") == (kind == "record")
    assert index.value("SELECT count(*) FROM bad_lines") == (kind == "bad")
    if kind == "record":
        assert index.value("SELECT CAST(raw AS BLOB) FROM records WHERE line_no = 3") == \
            last + more.rstrip(b"\n")
    # The running facts are those of the records the file holds now.
    [facts] = index.rows("SELECT records, first_timestamp, last_timestamp, version, git_branch "
                         "FROM files")
    assert facts == ({"records": 3, "first_timestamp": "2026-09-01T00:00:01.000Z",
                      "last_timestamp": "2026-09-02T00:00:00.000Z", "version": "9.9.9",
                      "git_branch": "tail-branch"} if kind == "record" else
                     {"records": 2, "first_timestamp": "2026-09-01T00:00:01.000Z",
                      "last_timestamp": "2026-09-01T00:00:02.000Z", "version": None,
                      "git_branch": None})
    index.assert_caches_match_definitions()
    with open(path, "ab") as f:
        f.write((b"" if data.endswith(b"\n") else b"\n") + line(4, "u-3"))
    assert index.ingest().new_lines == 1
    data = path.read_bytes()
    assert stored_lines(index) == disk_lines(data) and len(disk_lines(data)) == 4
    assert exported(index) == data
    index.assert_caches_match_definitions()


def test_a_large_last_record_without_newline(index):
    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    big = LARGE_LINES["record"][0]
    path.write_bytes(line(1) + big)
    assert index.ingest().new_records == 2
    assert index.rows("SELECT typeof(raw) AS t, length(CAST(raw AS BLOB)) AS n FROM records "
                      "WHERE line_no = 2") == [{"t": "text", "n": len(big)}]
    assert file_end(index)["unterminated_tail"] == len(big)
    assert exported(index) == path.read_bytes()
    with open(path, "ab") as f:
        f.write(b"\n" + line(3, "u-2"))
    assert index.ingest().new_records == 1
    assert stored_lines(index) == disk_lines(path.read_bytes())
    assert exported(index) == path.read_bytes()


def test_a_last_record_rewritten_in_place_is_a_rewrite(index):
    path = transcript(index, 2)
    with open(path, "ab") as f:
        f.write(line(3, "u-2")[:-1])
    index.ingest()
    before = path.stat()
    data = path.read_bytes().replace(b'"line 3"', b'"line Z"')
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    s = index.ingest()
    assert (s.rewritten_files, s.new_records) == (1, 3)
    assert index.value(
        "SELECT raw ->> '$.message.content' FROM records WHERE line_no = 3") == "line Z"
    assert exported(index) == data


# lines.parse_line_bytes, the ingest's hot path, against parse_line: the same
# fields, the same text (its raw bytes as UTF-8) and the same errors.
HOT_PATH_LINES = [
    json.dumps(rec(1)).encode(),
    json.dumps(rec(2, "u-1", message={"role": "assistant", "id": "msg_x", "model": "m",
                                      "content": [{"type": "text", "text": "héllo ✓ 😀"}]}),
               ensure_ascii=False).encode(),
    b'{"type":"user","uuid":"u","message":{"content":"\xff"}}',          # invalid UTF-8
    b'{"type":"user","uuid":"u","zz":"\xff"}',                           # ... in a skipped field
    b'{"type":"user","uuid":"u","zz":"\xed\xa0\x80"}',                   # a UTF-8-encoded surrogate
    b'{"type":"user","uuid":"u","zz":"\xc0\x80"}',                       # an overlong NUL
    b'{"type":"user","uuid":"\\ud800"}',                                 # a lone surrogate escape
    b'{"type":"user","uuid":"u","zz":"a\x00b"}', b'{"a":1}\x00',         # NUL bytes
    b"\xef\xbb\xbf" + json.dumps(rec(3)).encode(),                       # BOM
    json.dumps(rec(4)).encode() + b"\r",                                 # CRLF
    b"", b"   ", b"\t\r",                                                # blank
    b"[1, 2]", b'"text"', b"42", b"null", b"{", b'{"a":1} x',            # not an object
    b'{"type":"user","uuid":"u","n":123456789012345678901234567890}',    # over 2**63
    b'{"type":"user","uuid":"u","x":NaN}', b'{"type":"user","x":Infinity}',
    b"[" * 5000 + b"]" * 5000, b'{"a":' * 3000 + b"1" + b"}" * 3000,     # deep nesting
    b'{"type":"user","uuid":"u","parentUuid":5,"isSidechain":"yes"}',    # wrong types
    b'{"type":"assistant","uuid":"u","message":"not an object"}',
    b'{"type":"brand-new-type","uuid":"u","timestamp":17}',
]


# message.usage as the usage columns read it (records.RECORD_FIELDS from
# has_usage on): each line and its (has_usage, input, output, cache read,
# cache creation, 5m, 1h, speed, service_tier).
def _assistant(usage, extra=b""):
    return (b'{"type":"assistant","uuid":"a","requestId":"r"' + extra
            + b',"message":{"id":"m","model":"claude-x","content":[{"type":"text","text":"t"}]'
            + (b',"usage":' + usage if usage is not None else b"") + b"}}")


NONE = (0, None, None, None, None, None, None, None, None)
USAGE_LINES = [
    (_assistant(b'{"input_tokens":3,"output_tokens":40,"cache_read_input_tokens":500,'
                b'"cache_creation_input_tokens":70,"cache_creation":{"ephemeral_5m_input_tokens"'
                b':30,"ephemeral_1h_input_tokens":40},"speed":"fast","service_tier":"standard",'
                b'"server_tool_use":{"web_search_requests":0}}'),
     (1, 3, 40, 500, 70, 30, 40, "fast", "standard")),
    (_assistant(b'{"input_tokens":"12","output_tokens":5}'),                 # a string count
     (1, None, 5, None, None, None, None, None, None)),
    (_assistant(b'{"input_tokens":NaN,"output_tokens":Infinity,"cache_read_input_tokens":7}'),
     (1, None, None, 7, None, None, None, None, None)),
    (_assistant(b'{"input_tokens":1,"output_tokens":2}', b',"x":NaN'),     # NaN elsewhere
     (1, 1, 2, None, None, None, None, None, None)),
    (_assistant(None), NONE),                                               # no usage
    (_assistant(b'"lots"'), NONE), (_assistant(b"[1, 2]"), NONE), (_assistant(b"null"), NONE),
    (_assistant(b"{}"), (1, None, None, None, None, None, None, None, None)),
    (_assistant(b'{"input_tokens":12.7,"output_tokens":-3.9,"cache_read_input_tokens":true,'
                b'"cache_creation_input_tokens":null,"speed":7,"service_tier":""}'),
     (1, 12, -3, None, None, None, None, None, "")),
    (_assistant(b'{"input_tokens":1e30,"output_tokens":123456789012345678901234567890,'
                b'"cache_read_input_tokens":9007199254740993}'),            # past 64 bits
     (1, None, None, 9007199254740993, None, None, None, None, None)),
    (_assistant(b'{"output_tokens":1,"cache_creation":5,"speed":{"a":1}}'),  # odd types
     (1, None, 1, None, None, None, None, None, None)),
    (_assistant(b'{"cache_creation":{"ephemeral_5m_input_tokens":"9",'
                b'"ephemeral_1h_input_tokens":8}}'),
     (1, None, None, None, None, None, 8, None, None)),
    (b'{"type":"user","uuid":"u","message":{"role":"user","content":"x",'   # not assistant
     b'"usage":{"input_tokens":5}}}', NONE),
    (b'{"type":"assistant","uuid":"a","message":"text","usage":{"input_tokens":5}}', NONE),
]
HOT_PATH_LINES += [data for data, _ in USAGE_LINES]


def _parsed(parse, data):
    try:
        raw, fields = parse(data)
    except Exception as exc:  # noqa: BLE001 - the error is what is compared
        return type(exc).__name__, str(exc)
    return (raw.decode("utf-8") if isinstance(raw, bytes) else raw), fields


def test_the_hot_path_parses_every_line_as_parse_line_does():
    from conftest import CORPUS
    from indexer.transcripts.lines import parse_line, parse_line_bytes

    lines = list(HOT_PATH_LINES)
    for path in sorted(CORPUS.rglob("*.jsonl"))[:200] if CORPUS.is_dir() else []:
        lines += path.read_bytes().split(b"\n")
    assert len(lines) > len(HOT_PATH_LINES) or not CORPUS.is_dir()
    for data in lines:
        expected = _parsed(parse_line, memoryview(data))
        assert _parsed(parse_line_bytes, memoryview(data)) == expected, data[:200]


def test_the_fast_and_slow_paths_read_the_same_fields():
    # lines._from_struct (msgspec's typed decode) against lines._from_dict
    # (json.loads), on every line the fast path reads; parse_large_line
    # against parse_line on each.
    import msgspec

    from conftest import CORPUS
    from indexer.transcripts import lines as lines_mod

    lines = list(HOT_PATH_LINES)
    for path in sorted(CORPUS.rglob("*.jsonl"))[:200] if CORPUS.is_dir() else []:
        lines += path.read_bytes().split(b"\n")
    fast = 0
    for data in lines:
        try:
            lines_mod.parse_line(data)   # a record (not a bad line)
            struct = lines_mod._FAST.decode(data)
        except (lines_mod.BadLine, msgspec.DecodeError, msgspec.ValidationError,
                RecursionError):
            continue
        fast += 1
        assert lines_mod._from_struct(struct) == lines_mod._from_dict(json.loads(data)), data[:200]
        assert lines_mod.parse_large_line(memoryview(data)) == lines_mod.parse_line(data)[1]
    assert fast > len(USAGE_LINES) // 2


@pytest.mark.parametrize("data, expected", USAGE_LINES)
def test_usage_columns_from_either_path(data, expected):
    from indexer.transcripts.lines import parse_line, parse_line_bytes
    from indexer.transcripts.records import RECORD_FIELDS

    at = RECORD_FIELDS.index("has_usage")
    assert RECORD_FIELDS[at:] == ("has_usage", "input_tokens", "output_tokens",
                                  "cache_read_tokens", "cache_creation_tokens", "cache_5m_tokens",
                                  "cache_1h_tokens", "speed", "service_tier")
    assert parse_line(data)[1][at:] == expected
    assert parse_line_bytes(memoryview(data))[1][at:] == expected


def test_usage_columns_stored_and_filled_again_by_the_migration(index):
    # Ingest stores the parser's usage columns; migrations.fill_usage_columns
    # (m022_prices, on an index ingested before it) reads the same from raw.
    from indexer.index import migrations
    from indexer.transcripts.records import RECORD_FIELDS

    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(data + b"\n" for data, _ in USAGE_LINES))
    s = index.ingest()
    assert (s.new_records, s.bad_lines) == (len(USAGE_LINES), 0)
    columns = RECORD_FIELDS[RECORD_FIELDS.index("has_usage"):]
    select = f"SELECT {', '.join(columns)} FROM records ORDER BY line_no"
    stored = [tuple(r.values()) for r in index.rows(select)]
    assert stored == [expected for _, expected in USAGE_LINES]
    index.db.execute("UPDATE records SET " + ", ".join(
        f"{c} = {'0' if c == 'has_usage' else 'NULL'}" for c in columns))
    assert index.value("SELECT count(*) FROM records WHERE has_usage") == 0
    migrations.fill_usage_columns(index.db)
    assert [tuple(r.values()) for r in index.rows(select)] == stored
    # the partial index holds the assistant lines with usage, and no others
    assert index.value("SELECT count(*) FROM records INDEXED BY records_usage "
                       "WHERE has_usage") == sum(e[0] for _, e in USAGE_LINES) == 9


def test_raw_is_stored_as_text_from_either_path(index):
    path = index.projects / "p" / f"{SID}.jsonl"
    write_jsonl(path, [rec(1), json.dumps(rec(2, "u-1", cwd="/tmp/é"), ensure_ascii=False),
                       b"\xef\xbb\xbf" + json.dumps(rec(3, "u-2")).encode(), b"\xff"])
    index.ingest()
    assert index.rows("SELECT typeof(raw) AS t, count(*) AS n FROM records GROUP BY 1") == [
        {"t": "text", "n": 3}]
    assert rebuilt(index, path) == path.read_bytes()


def test_new_files_derived_on_the_other_core_equal_derive_pending(tmp_path, monkeypatch):
    """A big ingest of new files has their caches computed by a worker
    process (derive_worker.py) while it goes on: the caches it writes equal
    what derive_pending writes alone, and the definitions hold. (The files
    the preload workers derive are test_preload.py's: none here.)"""
    import subprocess
    import sys
    from pathlib import Path

    from conftest import Index
    from indexer.ingest import derive, derive_worker, preload

    monkeypatch.setattr(preload, "MAX_FILE_BYTES", 0)

    corpus = tmp_path / "corpus"
    subprocess.run([sys.executable, str(Path(__file__).parent.parent / "bench" / "make_corpus.py"),
                    str(corpus), "--size-mb", "3", "--seed", "4"], check=True,
                   capture_output=True)
    tables = ["leaves_cache", "leaf_ancestry_cache", "orphans_cache", "chain_breaks_cache",
              "duplicate_uuids_cache", "sdk_terminals", "sessions"]
    dumps = {}
    original = derive_worker.apply
    for with_worker in (False, True):
        monkeypatch.setattr(derive_worker, "MIN_BYTES", 0 if with_worker else 1 << 60)
        monkeypatch.setattr(derive_worker, "BATCH", 7)
        (tmp_path / f"i{int(with_worker)}").mkdir()
        index = Index(tmp_path / f"i{int(with_worker)}")
        applied = []
        monkeypatch.setattr(derive_worker, "apply",
                            lambda db, bg: applied.append(original(db, bg)) or applied[-1])
        before = derive.STATS["recomputed"]
        index.ingest(corpus)
        files = index.value("SELECT count(*) FROM files WHERE kind IN ('main', 'subagent')")
        assert derive.STATS["recomputed"] - before == files
        if with_worker:
            assert applied and applied[0] == files   # the worker did every file
            index.assert_caches_match_definitions()
        else:
            assert applied == []
        assert index.value("SELECT count(*) FROM files WHERE needs_derive") == 0
        dumps[with_worker] = {t: sorted(map(tuple, index.db.conn.execute(
            f"SELECT * FROM {t}").fetchall()), key=repr) for t in tables}
    assert dumps[True] == dumps[False]


def test_a_worker_that_fails_leaves_the_caches_to_derive_pending(index, monkeypatch):
    """When the derive worker cannot run (or dies), nothing is lost: the
    files stay marked and derive_pending computes their caches."""
    from indexer.ingest import derive_worker, preload

    monkeypatch.setattr(derive_worker, "MIN_BYTES", 0)
    monkeypatch.setattr(preload, "MAX_FILE_BYTES", 0)   # no file derived by preload.py
    monkeypatch.setattr(derive_worker, "WORKER_MODULE", "indexer.no_such_worker")
    sid = "77777777-aaaa-4000-8000-000000000000"
    path = index.projects / "p" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps({
        "type": "user", "uuid": f"u{i}", "parentUuid": f"u{i - 1}" if i else None,
        "sessionId": sid, "message": {"role": "user", "content": "x"}}) + "\n"
        for i in range(30)))
    import tempfile

    temp = index.path.parent / "tmp"   # this test's own temp folder: others make theirs too
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    started = []
    start = derive_worker.Background._start
    monkeypatch.setattr(derive_worker.Background, "_start",
                        lambda self: started.append(1) or start(self))
    summary = index.ingest()
    assert started   # the worker was tried
    assert summary.errors == [] and summary.new_records == 30
    assert index.value("SELECT count(*) FROM files WHERE needs_derive") == 0
    assert index.value("SELECT count(*) FROM leaf_ancestry WHERE rule = 'resume'") == 30
    index.assert_caches_match_definitions()
    assert list(temp.iterdir()) == []   # its folder went too


@pytest.mark.xdist_group("timing")
def test_a_bulk_write_checkpoints_the_wal_from_a_thread(tmp_path, monkeypatch):
    from indexer.index import connection, db as dbmod
    from indexer.sql import write_lock

    conn = connection.connect(tmp_path / "x.db")
    conn.execute("CREATE TABLE t (v BLOB)")
    before = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    monkeypatch.setattr(dbmod, "WAL_HIGH_WATER", 4 << 20)
    wal = tmp_path / "x.db-wal"
    sizes = []
    with dbmod.background_checkpoints(conn):
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        for _ in range(40):   # 40 transactions of 1 MB: 40 MB of WAL if nothing copied it
            with write_lock(dbmod.Index(conn)):
                conn.executemany("INSERT INTO t VALUES (?)", [(os.urandom(1 << 16),)] * 16)
            sizes.append(wal.stat().st_size)
            time.sleep(0.03)
        time.sleep(3 * dbmod.CHECKPOINT_EVERY_S)
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert frames == copied   # the thread had copied every committed page
    assert max(sizes) < 16 << 20   # and restarted the WAL past the high-water mark
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == before
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 640
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_new_index_needs_no_refresh_of_every_session(index, monkeypatch):
    from indexer.ingest import derive

    t = Transcript()
    t.add("a", None, "user")
    t.add("b", "a", "assistant")
    t.write(index.projects / "-tmp-demo")

    def refresh_all(db):
        raise AssertionError("a new index's sessions rows are already today's")

    monkeypatch.setattr(derive, "refresh_all_sessions", refresh_all)
    marked = []
    original = derive.mark_all_if_definitions_changed
    monkeypatch.setattr(derive, "mark_all_if_definitions_changed",
                        lambda db: marked.append(original(db)))
    index.ingest()
    assert index.value("SELECT records FROM sessions") == 2
    assert marked and not any(marked)   # the caches were already today's


def test_a_new_derive_version_rebuilds_every_cache(index, monkeypatch):
    from indexer.ingest import derive
    from indexer.index import views
    from indexer.transcripts.digests import sha256

    for n, sid in enumerate(("11111111-2222-3333-4444-555555555555",
                             "22222222-2222-3333-4444-555555555555")):
        t = Transcript(sid)
        t.add("a", None, "user")
        t.add("b", "a", "assistant")
        t.write(index.projects / f"-tmp-p{n}")
    index.ingest()
    before = index.rows("SELECT * FROM leaf_ancestry_cache ORDER BY file_id, rule, height")
    index.db.conn.execute("DELETE FROM leaf_ancestry_cache")   # what a wrong version left
    bumped = sha256(f"{views.DEFINITIONS_HASH}:{views.DERIVE_VERSION + 1}".encode()).hexdigest()[:16]
    monkeypatch.setattr(views, "CACHES_HASH", bumped)
    derive.STATS.clear()
    index.ingest()   # nothing new on disk: the version alone rebuilds both files' caches
    assert derive.STATS["recomputed"] == 2
    assert index.rows("SELECT * FROM leaf_ancestry_cache ORDER BY file_id, rule, height") == before
    assert index.value("SELECT value FROM index_meta WHERE key = 'definitions_hash'") == bumped


def test_the_unchanged_check_reads_an_index_not_the_files_table(index):
    """Every run reads TRACKED_FILES_SQL for every file: from files_tracked
    (migration m027), which covers its columns, not from the wide rows."""
    from indexer.ingest.files import TRACKED_FILES_SQL

    plan = index.rows(f"EXPLAIN QUERY PLAN {TRACKED_FILES_SQL}")
    assert [r["detail"] for r in plan] == ["SCAN files USING COVERING INDEX files_tracked"]
