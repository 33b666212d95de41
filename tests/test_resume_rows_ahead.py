"""rowsAheadOfPutBack (issue 26): a tool_result record may name rows (a prompt
queued while its tool ran, companion records) that Claude Code 2.1.332's
loader puts back ahead of it (Krn(), l_r(); walk.rows_ahead_put_back). The
shapes are tests/test_oracle_cases.py's, where the real CLI decides each;
these hold the index's answer to them, in the caches and in the SQL
definitions, through a full derive, an append and an upgrade."""

from __future__ import annotations

import json

import pytest
import sqlite_utils

from conftest import write_jsonl
from test_oracle_cases import DIFFERS, SHAPES

# Shape -> is the named row put back (the CLI sends it: EXPECTED there); the
# shapes the index does not model yet (DIFFERS) aside.
PUT_BACK = {
    "rows_ahead_of_put_back": True,
    "rows_ahead_under_the_call": True,
    "rows_ahead_one_on_the_chain": True,
    "rows_ahead_under_the_last_call": True,
    "rows_ahead_of_a_put_back_result": True,
    "rows_ahead_one_on_a_put_back_line": True,
    "rows_ahead_under_a_recovered_result": True,
    "rows_ahead_taken_by_an_earlier_result": True,
    "rows_ahead_under_a_row_put_back_before": True,
    "rows_ahead_of_a_result_written_before_its_call": True,
    "rows_ahead_both_sides_of_a_result_written_before_its_call": True,
    "rows_ahead_of_two_results_one_written_early": True,
    "rows_ahead_under_a_record_written_before_the_result": False,
    "rows_ahead_past_a_call_answered_before_it_is_made": False,
    "rows_ahead_under_a_result_recovered_after_the_reply": False,
    "rows_ahead_not_named": False,
    "rows_ahead_of_a_plain_prompt": False,
    "rows_ahead_not_loaded": False,
    "rows_ahead_hang_before_the_reply": False,
    "rows_ahead_past_an_open_call": False,
    "rows_ahead_of_a_put_back_result_past_a_call": False,
    "rows_ahead_past_a_call_answered_on_the_chain": True,
    "rows_ahead_past_a_call_answered_in_its_own_record": True,
    "rows_ahead_past_a_call_in_a_user_record": False,
    "rows_ahead_past_a_call_in_a_row_put_back_before": False,
    "rows_ahead_of_a_result_stored_anew_after_its_own_uuid": True,
    "rows_ahead_of_a_result_in_the_place_of_its_sent_as": False,
}
ROW = "aaaaaaaa-0000-0000-0000-000000000010"   # the named row in every shape
# Shape -> the other rows it names and whether each is put back.
OTHER_ROWS = {
    "rows_ahead_both_sides_of_a_result_written_before_its_call": {
        "aaaaaaaa-0000-0000-0000-000000000009": True},
    "rows_ahead_of_two_results_one_written_early": {
        "aaaaaaaa-0000-0000-0000-000000000011": True},
    "rows_ahead_past_a_call_in_a_row_put_back_before": {
        "aaaaaaaa-0000-0000-0000-000000000011": True},
}


def sid(n: int) -> str:
    return f"5e575e57-7777-3333-4444-{n:012d}"


def write(index, n, records):
    """A shape under its own session (the shapes of a test share one index,
    whose caches are held to the definitions once)."""
    for r in records:
        r["sessionId"] = sid(n)
    return write_jsonl(index.projects / "-tmp-demo" / f"{sid(n)}.jsonl", records)


def verdict(index, fid, uuid=ROW):
    """(cause, restored) of a record off the chain (None: on the chain)."""
    row = index.rows("SELECT cause, restored FROM orphans WHERE file_id = ? AND uuid = ?",
                     [fid, uuid])
    return (row[0]["cause"], bool(row[0]["restored"])) if row else None


def test_the_named_rows_are_put_back_where_the_cli_puts_them_back(index):
    assert set(PUT_BACK) == {n for n in SHAPES if n.startswith("rows_ahead") and n not in DIFFERS}
    paths = {name: write(index, n, SHAPES[name]()) for n, name in enumerate(sorted(PUT_BACK))}
    index.ingest()
    index.assert_caches_match_definitions()
    for name, path in paths.items():
        got = verdict(index, index.file_id(path))
        assert got is not None, name
        assert got[1] == PUT_BACK[name], (name, got)
        if PUT_BACK[name]:
            assert got[0] == "put_back_with_result", (name, got)
        for uuid, put_back in OTHER_ROWS.get(name, {}).items():
            assert verdict(index, index.file_id(path), uuid) == (
                ("put_back_with_result", True) if put_back else ("abandoned_branch", False)), name


def test_an_append_to_a_file_naming_rows_ahead_derives_it_whole(index):
    records = SHAPES["rows_ahead_under_the_call"]()
    *head, last = records
    path = write(index, 1, head)
    index.ingest()
    fid = index.file_id(path)
    # Without the answer the result is the leaf, the row still put back.
    assert verdict(index, fid) == ("put_back_with_result", True)
    with open(path, "a") as f:
        f.write(json.dumps(last) + "\n")
    index.ingest()
    index.assert_caches_match_definitions()
    assert verdict(index, fid) == ("put_back_with_result", True)
    # An appended result naming a row that is not in the file: not put back.
    more = dict(records[3], uuid="aaaaaaaa-0000-0000-0000-000000000020",
                parentUuid=last["uuid"],
                rowsAheadOfPutBack=[ROW, "aaaaaaaa-0000-0000-0000-000000000099"])
    with open(path, "a") as f:
        f.write(json.dumps(more) + "\n")
    index.ingest()
    index.assert_caches_match_definitions()


@pytest.mark.parametrize("value, kept", [
    (["a", "b"], '["a","b"]'), ([], "[]"), (None, None), ("a", None), ({"a": 1}, None)])
def test_only_an_array_is_kept(index, value, kept):
    records = SHAPES["rows_ahead_not_named"]()
    records[3]["rowsAheadOfPutBack"] = value
    write(index, 1, records)
    index.ingest()
    assert [r["rows_ahead"] for r in index.rows(
        "SELECT rows_ahead FROM records WHERE rows_ahead IS NOT NULL")] == (
        [kept] if kept is not None else [])


def test_an_upgrade_reads_rows_ahead_from_the_lines(tmp_path):
    """m086: an index made before the column gets it from the lines stored."""
    from indexer.index import db as dbmod
    from indexer.index.migrations import migrations

    path = tmp_path / "old.db"
    db = sqlite_utils.Database(path)
    migrations.apply(db, stop_before="m086_records_rows_ahead")
    line = json.dumps({"type": "user", "uuid": "u1", "rowsAheadOfPutBack": ["r1"],
                       "message": {"role": "user", "content": "x"}})
    db.execute("INSERT INTO files (path, kind) VALUES ('/x.jsonl', 'main')")
    db.execute("INSERT INTO records (file_id, line_no, byte_offset, uuid, type, raw) "
               "VALUES (1, 1, 0, 'u1', 'user', ?)", [line])
    db.execute("INSERT INTO records (file_id, line_no, byte_offset, uuid, type, raw) "
               "VALUES (1, 2, 100, 'u2', 'user', '{\"rowsAheadOfPutBack\": \"r1\"}')")
    db.close()
    upgraded = dbmod.open_db(path)
    assert upgraded.execute("SELECT uuid, rows_ahead FROM records ORDER BY line_no").fetchall() \
        == [("u1", '["r1"]'), ("u2", None)]
    upgraded.close()
