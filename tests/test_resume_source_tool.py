"""sourceToolAssistantUUID (issue 26): Claude Code 2.1.332's loader (RRr)
reads a stray tool_result under the record its sourceToolAssistantUUID
names too, when that is not its parent and has its side and agentId, and
recovers it with that record's response when the response holds a call it
answers (walk.recovered_by_tool_use_id). The shapes are
tests/test_oracle_cases.py's, where the real CLI decides each; these hold
the index's answer in the caches and the SQL definitions, the column the
parser and an upgrade fill, and an append."""

from __future__ import annotations

import json

import pytest
import sqlite_utils

from conftest import write_jsonl
from indexer.transcripts.lines import RECORD_FIELDS, parse_line
from test_oracle import u
from test_oracle_cases import SHAPES

SOURCE = RECORD_FIELDS.index("source_tool_assistant_uuid")
# Shape -> is the first call's stray result (u4) recovered (the CLI sends it).
RECOVERED = {
    "result_attached_by_its_source_tool_assistant_uuid": True,
    "result_named_source_of_another_agent": False,
    "result_named_source_of_another_response": False,
    "result_of_another_agent_not_recovered": False,
    "result_recovered_under_the_other_result": True,
}


def sid(n: int) -> str:
    return f"5e575e57-8888-3333-4444-{n:012d}"


def write(index, n, records):
    for r in records:
        r["sessionId"] = sid(n)
    return write_jsonl(index.projects / "-tmp-demo" / f"{sid(n)}.jsonl", records)


def verdict(index, fid, uuid=u(4)):
    row = index.rows("SELECT cause, restored FROM orphans WHERE file_id = ? AND uuid = ?",
                     [fid, uuid])
    return (row[0]["cause"], bool(row[0]["restored"])) if row else None


def test_a_stray_result_is_recovered_where_the_cli_recovers_it(index):
    paths = {name: write(index, n, SHAPES[name]()) for n, name in enumerate(sorted(RECOVERED))}
    index.ingest()
    index.assert_caches_match_definitions()
    for name, path in paths.items():
        got = verdict(index, index.file_id(path))
        if RECOVERED[name]:
            assert got == ("parallel_tool_branch", True), (name, got)
        else:
            assert got is not None and not got[1], (name, got)


@pytest.mark.parametrize("value, parent, kept", [
    ("a1", "p1", "a1"), ("p1", "p1", None), ("", "p1", None), (None, "p1", None),
    (7, "p1", None), ("a1", None, "a1"), ("\ud800x", "p1", "\\ud800x")])
def test_the_field_is_kept_when_it_names_another_record_than_the_parent(value, parent, kept):
    line = {"type": "user", "uuid": "u1", "parentUuid": parent,
            "message": {"role": "user", "content": "x"}}
    if value is not None:
        line["sourceToolAssistantUUID"] = value
    assert parse_line(json.dumps(line).encode())[1][SOURCE] == kept
    # the slow path (a field of the wrong type elsewhere) reads it alike
    line["isMeta"] = "no"
    assert parse_line(json.dumps(line).encode())[1][SOURCE] == kept


def test_an_upgrade_reads_the_field_from_the_lines(tmp_path):
    """m089: an index made before the column gets it from the lines stored."""
    from indexer.index import db as dbmod
    from indexer.index.migrations import migrations

    path = tmp_path / "old.db"
    db = sqlite_utils.Database(path)
    migrations.apply(db, stop_before="m089_records_source_tool_assistant")
    lines = [{"type": "user", "uuid": "u1", "parentUuid": "a1", "sourceToolAssistantUUID": "a2"},
             {"type": "user", "uuid": "u2", "parentUuid": "a1", "sourceToolAssistantUUID": "a1"},
             {"type": "user", "uuid": "u3", "sourceToolAssistantUUID": "a2"},
             {"type": "user", "uuid": "u4", "parentUuid": "a1", "sourceToolAssistantUUID": 7},
             {"type": "user", "uuid": "u5", "parentUuid": "a1"}]
    db.execute("INSERT INTO files (path, kind) VALUES ('/x.jsonl', 'main')")
    for n, line in enumerate(lines, 1):
        db.execute("INSERT INTO records (file_id, line_no, byte_offset, uuid, type, raw) "
                   "VALUES (1, ?, ?, ?, 'user', ?)", [n, n * 100, line["uuid"], json.dumps(line)])
    db.close()
    upgraded = dbmod.open_db(path)
    assert upgraded.execute(
        "SELECT uuid, source_tool_assistant_uuid FROM records ORDER BY line_no").fetchall() == [
        ("u1", "a2"), ("u2", None), ("u3", "a2"), ("u4", None), ("u5", None)]
    upgraded.close()


def test_an_append_after_a_recovered_result_keeps_the_caches(index):
    """A file whose stray result the named record's response recovers, and
    an answer appended to it: the caches still equal the definitions."""
    records = SHAPES["result_attached_by_its_source_tool_assistant_uuid"]()
    path = write(index, 1, records)
    index.ingest()
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"type": "user", "uuid": u(20), "parentUuid": u(6),
                            "sessionId": sid(1), "timestamp": "2026-09-01T00:10:00.000Z",
                            "message": {"role": "user", "content": "and then?"}}) + "\n")
    index.ingest()
    index.assert_caches_match_definitions()
    assert verdict(index, index.file_id(path)) == ("parallel_tool_branch", True)
