"""Claude Code 2.1.332 resumes from the last row, not from a checkpoint that
is not explicit, when the last row continues the conversation through the
parallel batch of the call the checkpoint answers (resume.kin, the loader's
Kin): the batch's other record, another result of a call record with two
tool_use blocks, or a hook attachment naming the call. Each shape was first
checked against the real CLI (tests/test_oracle_cases.py f, and the same
harness for the attachment and ever-explicit shapes); these tests hold the
index's answer, and its SQL definition, without a binary."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import Transcript, write_jsonl
from test_preload import private_tmp  # noqa: F401 (a fixture)
from indexer.cli.commands import cli

SID = "26262626-2222-3333-4444-5555555555f6"


def u(n: int) -> str:
    return f"ffffffff-0000-0000-0000-{n:012d}"


def calls(*ids):
    return {"id": "msg_P", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "tool_use", "id": i, "name": "Bash", "input": {}} for i in ids]}


def result(tool_use_id):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id,
                                         "content": "out"}]}


def last_prompt(t, leaf, explicit=False):
    t.records.append({"type": "last-prompt", "sessionId": SID, "lastPrompt": "prompt",
                      "leafUuid": leaf, **({"explicit": True} if explicit else {})})


def batch(one_record=False):
    """A prompt (u1) and one API message, msg_P, with two calls: written as
    two assistant records (u2 toolu_a, u3 toolu_b), or as one (u2) with both
    blocks; a result for each (u4, u5), and the answer after the batch (u6)
    continuing from the second result."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    if one_record:
        t.add(u(2), u(1), "assistant", message=calls("toolu_a", "toolu_b"))
    else:
        t.add(u(2), u(1), "assistant", message=calls("toolu_a"))
        t.add(u(3), u(2), "assistant", message=calls("toolu_b"))
    t.add(u(4), u(2), "user", message=result("toolu_a"))
    t.add(u(5), u(2) if one_record else u(3), "user", message=result("toolu_b"))
    return t


def after_the_batch(t):
    t.add(u(6), u(5), "assistant", message={
        "id": "msg_Q", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "after the batch"}]})


def resume_of(index, records):
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", records)
    index.ingest()
    index.assert_caches_match_definitions()
    fid = index.file_id(path)
    leaf = index.rows("SELECT resume_leaf_uuid, resume_rule FROM leaves WHERE file_id = ?",
                      [fid])[0]
    causes = {r["uuid"]: (r["cause"], r["restored"]) for r in index.rows(
        "SELECT uuid, cause, restored FROM orphans WHERE file_id = ?", [fid])}
    return (leaf["resume_leaf_uuid"], leaf["resume_rule"]), index.ancestry(fid)[::-1], causes


def test_the_last_row_wins_when_it_reaches_the_checkpoints_call_through_the_batch(index):
    # The checkpoint is the first call's result; the last row reaches that
    # call (u2) through the batch's other record (u3).
    t = batch()
    after_the_batch(t)
    last_prompt(t, u(4))
    leaf, chain, causes = resume_of(index, t.records)
    assert leaf == (u(6), "last_row")
    assert chain == [u(1), u(2), u(3), u(5), u(6)]
    assert causes == {u(4): ("parallel_tool_branch", 1)}


def test_an_explicit_checkpoint_still_wins(index):
    t = batch()
    after_the_batch(t)
    last_prompt(t, u(4), explicit=True)
    leaf, chain, causes = resume_of(index, t.records)
    assert leaf == (u(4), "checkpoint")
    assert chain == [u(1), u(2), u(4)]
    assert causes == {u(3): ("parallel_tool_branch", 1), u(5): ("parallel_tool_branch", 1),
                      u(6): ("abandoned_branch", 0)}


def test_the_last_row_wins_from_another_result_of_a_one_record_batch(index):
    # One record with both calls: the last row comes to it from the other
    # call's result.
    t = batch(one_record=True)
    after_the_batch(t)
    last_prompt(t, u(4))
    leaf, chain, _ = resume_of(index, t.records)
    assert leaf == (u(6), "last_row")
    assert chain == [u(1), u(2), u(5), u(6)]


def test_a_hook_attachment_names_the_call_it_follows(index):
    # The checkpoint is a hook attachment on the batch's second record that
    # names the first record's call (toolUseID): that call record is the
    # one the last row must reach, and it does, through the second record.
    # Naming the second record's own call, the last row still passes the
    # batch's first record above it. Either way the last row wins.
    for named in ("toolu_a", "toolu_b"):
        t = batch()
        t.add(u(7), u(3), "attachment", attachment={
            "type": "hook_success", "toolUseID": named, "hookName": "PostToolUse",
            "content": ""})
        after_the_batch(t)
        last_prompt(t, u(7))
        leaf, chain, _ = resume_of(index, t.records)
        assert (leaf, chain) == ((u(6), "last_row"), [u(1), u(2), u(3), u(5), u(6)]), named


def test_a_checkpoint_once_said_explicit_is_not_read_through_the_batch(index):
    # A last-prompt record for the same checkpoint said explicit before the
    # answer was written (checkpointEverExplicit): the batch is not read
    # through, the checkpoint wins. A record for another leaf in between
    # ends that.
    t = batch()
    last_prompt(t, u(4), explicit=True)
    after_the_batch(t)
    last_prompt(t, u(4))
    leaf, _, _ = resume_of(index, t.records)
    assert leaf == (u(4), "checkpoint")
    t.records.insert(-1, {"type": "last-prompt", "sessionId": SID, "lastPrompt": "prompt",
                          "leafUuid": u(5)})
    leaf, _, _ = resume_of(index, t.records)
    assert leaf == (u(6), "last_row")


def test_check_and_show_follow_the_last_row(index):
    t = batch()
    after_the_batch(t)
    last_prompt(t, u(4))
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    shown = CliRunner().invoke(cli, ["show", SID, "--db", str(index.path)])
    assert shown.exit_code == 0, shown.output
    assert "after the batch" in shown.output


def test_a_later_record_for_the_same_checkpoint_keeps_it_explicit(index):
    # An explicit last-prompt record, then another for the same leaf that
    # does not say so, no row between: the checkpoint is still explicit and
    # wins, though the last row descends from it (the CLI's `No`). A row
    # between ends that.
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message={
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "the checkpoint's answer"}]})
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant")
    last_prompt(t, u(2), explicit=True)
    last_prompt(t, u(2))
    leaf, chain, _ = resume_of(index, t.records)
    assert (leaf, chain) == ((u(2), "checkpoint"), [u(1), u(2)])
    t.records.insert(-1, t.records.pop(3))   # u4 written between the two records
    leaf, _, _ = resume_of(index, t.records)
    assert leaf == (u(4), "last_row")


def test_what_kin_reads_of_a_line():
    """records.TOOL_IDS, HAS_TOOL_USE and VIRTUAL_CALL, as kin reads them."""
    import json
    import sqlite3

    from indexer.chain import walk

    def facts(type_, entry):
        raw = entry if isinstance(entry, str) else json.dumps(entry)
        row = sqlite3.connect(":memory:").execute(walk.CALLS_OF_LINE_SQL, [raw, type_]).fetchone()
        return json.loads(row[0]), row[1], row[2]

    use = {"message": {"content": [{"type": "tool_use", "id": "toolu_a"}, "a string",
                                   {"type": "tool_use", "id": 7}, {"type": "text"},
                                   {"type": "tool_use", "id": "toolu_b"}]}}
    assert facts("assistant", use) == (["toolu_a", "toolu_b"], 1, 0)
    assert facts("assistant", {**use, "isVirtual": True}) == (["toolu_a", "toolu_b"], 1, 1)
    results = {"message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_a"}]}}
    assert facts("user", results) == (["toolu_a"], 0, 0)
    assert facts("user", {**results, "isVirtual": True}) == (["toolu_a"], 0, 1)
    assert facts("user", {"isVirtual": True, "message": {"content": "toolu_a"}}) == ([], 0, 0)
    assert facts("attachment", {"attachment": {"toolUseID": "toolu_a"}}) == (["toolu_a"], 0, 0)
    assert facts("attachment", {"attachment": {"toolUseID": 1}}) == ([], 0, 0)
    assert facts("system", {"toolUseID": "toolu_a"}) == ([], 0, 0)
    assert facts("assistant", "not json") == ([], 0, 0)


def test_a_records_tool_ids_are_read_alone_until_another_field_is_asked():
    """calls_reader with ids_of: ``ids`` runs TOOL_IDS_OF_LINE_SQL alone (a
    third of the whole row's cost); any other field reads the whole
    CALLS_OF_LINE_SQL row once, and ids then come from it, the same; each
    record is read once."""
    import json
    import sqlite3
    from types import SimpleNamespace

    from indexer.chain import walk

    conn = sqlite3.connect(":memory:")
    lines = {
        1: (json.dumps({"isVirtual": True, "message": {"content": [
            {"type": "tool_use", "id": "toolu_a"}, {"type": "tool_use", "id": 7}]}}),
            "assistant"),
        2: (json.dumps({"message": {"content": [
            {"type": "tool_result", "tool_use_id": "toolu_a"}]}}), "user"),
        3: (json.dumps({"attachment": {"toolUseID": "toolu_c"}}), "attachment"),
    }
    asked = []

    def row_of(r):
        asked.append(("whole", r.id))
        return conn.execute(walk.CALLS_OF_LINE_SQL, lines[r.id]).fetchone() if r.id in lines else None

    def ids_of(r):
        asked.append(("ids", r.id))
        return conn.execute(walk.TOOL_IDS_OF_LINE_SQL, lines[r.id]).fetchone() if r.id in lines else None

    whole = walk.calls_reader(row_of)
    recs = [SimpleNamespace(id=i) for i in (1, 2, 3, 4)]
    expected = [whole(r) for r in recs]
    asked.clear()
    calls = walk.calls_reader(row_of, ids_of)
    assert [calls(r).ids for r in recs] == [e.ids for e in expected]
    assert [calls(r).ids for r in recs] == [("toolu_a",), ("toolu_a",), ("toolu_c",), ()]
    assert asked == [("ids", 1), ("ids", 2), ("ids", 3), ("ids", 4)]
    asked.clear()
    got = [(c.ids, c.has_tool_use, c.virtual, c.ahead, c.blocks)
           for c in (calls(r) for r in recs)]
    assert got == [(e.ids, e.has_tool_use, e.virtual, e.ahead, e.blocks) for e in expected]
    assert got[0][1:3] == (True, True)
    assert asked == [("whole", 1), ("whole", 2), ("whole", 3), ("whole", 4)]


@pytest.mark.usefixtures("private_tmp")
def test_the_preload_workers_read_the_same_tool_calls(tmp_path, monkeypatch):
    """A big ingest derives in worker processes from the lines they parsed
    (preload.py): on random trees full of parallel batches and checkpoints
    it stores what ingest alone stores."""
    import random

    from indexer.ingest import preload
    from test_definitions import random_transcript
    from test_preload import dump, ingest_into

    projects = tmp_path / "src" / "projects"
    rng = random.Random(5)
    for k in range(60):
        sid = f"00000005-0000-4000-8000-{k:012d}"
        write_jsonl(projects / "p" / f"{sid}.jsonl",
                    random_transcript(rng, rng.randrange(1, 60), sid))
    monkeypatch.setattr(preload, "FIRST_BATCH_BYTES", 1 << 14)   # several batches
    monkeypatch.setattr(preload, "BATCH_BYTES", 1 << 15)
    alone, _ = ingest_into(tmp_path / "alone", projects, monkeypatch, with_workers=False)
    ours, _ = ingest_into(tmp_path / "ours", projects, monkeypatch, with_workers=True)
    assert dump(ours) == dump(alone)
