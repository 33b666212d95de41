"""Late grafts (issue 27 item 4, anthropics/claude-code#62301): a tool
result written long after the conversation moved on, onto the call an
earlier result already answered (a permission response drained at start-up,
a second process resuming the session). Being the last row it takes the
resume, and the conversation that went on from the first answer is dropped:
its records are named ``late_graft``, in the caches and in the SQL
definitions alike, also when the graft is appended to an indexed file."""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Transcript, write_jsonl
from indexer.cli.commands import cli
from indexer.ingest import derive, derive_append
from test_oracle import CLAUDE
from test_web import Web, session_url

SID = "67676767-2222-3333-4444-555555555555"


def u(n: int) -> str:
    return f"dddddddd-0000-0000-0000-{n:012d}"


def call(mid, tid):
    return {"id": mid, "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"c": "ls"}}]}


def result(tid, words, error=False):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                         "content": words, "is_error": error}]}


def text(mid, words):
    return {"id": mid, "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": words}]}


def conversation(t):
    """A call left waiting for permission (day 1), answered as interrupted;
    the conversation goes on from there two days later."""
    t.add(u(1), None, "user", ts="2026-11-01T10:00:00.000Z")
    t.add(u(2), u(1), "assistant", message=call("msg_2", "toolu_p"), ts="2026-11-01T10:00:01.000Z")
    t.add(u(3), u(2), "user", message=result("toolu_p", "[Request interrupted by user for tool use]",
                                             error=True), ts="2026-11-01T10:05:00.000Z")
    t.add(u(4), u(3), "user", ts="2026-11-03T09:00:00.000Z")
    t.add(u(5), u(4), "assistant", message=text("msg_5", "the newer conversation"),
          ts="2026-11-03T09:00:05.000Z")


def graft(t):
    """The permission response drained at start-up days later: the call's
    result, onto the old call."""
    return t.add(u(6), u(2), "user", message=result("toolu_p", "drained output"),
                 ts="2026-11-05T08:00:00.000Z")


def test_the_conversation_a_late_graft_cuts_off_is_named(index):
    t = Transcript(SID)
    conversation(t)
    graft(t)
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    fid = index.file_id(path)
    assert index.ancestry(fid)[::-1] == [u(1), u(2), u(6)]
    assert index.causes(fid) == {u(3): "parallel_tool_branch", u(4): "late_graft",
                                 u(5): "late_graft"}
    index.assert_caches_match_definitions()
    site = Web(index.path)
    health = site.get("/-/session-health").text
    assert "Conversation cut off by a late graft" in health
    page = site.get(session_url(SID)).text
    assert "late_graft" in page


def test_a_rewind_or_a_result_of_another_call_is_not_a_graft(index):
    # The same tree with a new prompt where the graft was (the user went
    # back on purpose: the branch is abandoned), or with a result of
    # another call: no graft. Two sessions in one index, one definitions check.
    paths = {}
    for n, last in ((1, {}), (2, {"message": result("toolu_other", "another call's output")})):
        other = f"67676767-2222-3333-4444-00000000000{n}"
        t = Transcript(other)
        conversation(t)
        t.add(u(6), u(2), "user", ts="2026-11-05T08:00:00.000Z", **last)
        paths[n] = write_jsonl(index.projects / "-tmp-demo" / f"{other}.jsonl", t.records)
    index.ingest()
    for path in paths.values():
        causes = index.causes(index.file_id(path))
        assert causes[u(4)] == causes[u(5)] == "abandoned_branch"
    index.assert_caches_match_definitions()


def test_a_graft_appended_to_an_indexed_file(index):
    t = Transcript(SID)
    conversation(t)
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    fid = index.file_id(path)
    assert index.causes(fid) == {}
    with open(path, "a") as f:
        f.write(json.dumps(graft(t)) + "\n")
    before = derive.STATS["appended"]
    index.ingest()
    assert index.causes(fid)[u(4)] == "late_graft"
    index.assert_caches_match_definitions()
    # Then the resumed session goes on from the graft: an extension.
    with open(path, "a") as f:
        f.write(json.dumps(t.add(u(7), u(6), "assistant", message=text("msg_7", "on the graft"),
                                 ts="2026-11-05T08:00:09.000Z")) + "\n")
    index.ingest()
    assert derive.STATS["appended"] >= before + 1, derive_append.BAILS
    assert index.causes(fid)[u(5)] == "late_graft"
    index.assert_caches_match_definitions()


@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
def test_the_real_cli_drops_what_the_index_names(index):
    from indexer.repair import oracle, verify

    t = Transcript(SID)
    conversation(t)
    graft(t)
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    with oracle.FakeMessagesAPI() as api:
        sent = oracle.resume_sent(path.read_bytes(), SID, api, CLAUDE)
    assert "the newer conversation" not in sent.assistant_texts()
    kept_not_sent, sent_but_dropped, _ = verify.compare(index.db.conn, index.file_id(path), sent)
    assert (kept_not_sent, sent_but_dropped) == ([], [])


def check(index, tmp_path):
    out = CliRunner().invoke(cli, ["check", SID, "--db", str(index.path), "--json",
                                   "--config-dir", str(tmp_path / "claude")])
    return out.exit_code, json.loads(out.stdout)


def grafted_file(index):
    t = Transcript(SID)
    conversation(t)
    graft(t)
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    then = time.time() - 600   # repair refuses a file written in the last minutes
    os.utime(path, (then, then))
    index.ingest()
    return path


def test_check_says_spliced_and_repair_drops_the_graft(index, tmp_path):
    path = grafted_file(index)
    code, verdict = check(index, tmp_path)
    assert (code, verdict["verdict"], verdict["details"]["cause"]) == (6, "spliced", "late_graft")
    assert "#62301" in verdict["reason"] and verdict["details"]["grafted_records"] == 2
    before = path.read_bytes()
    out = CliRunner().invoke(cli, ["repair", SID, "--db", str(index.path), "--write"])
    assert out.exit_code == 0, out.output
    fid = index.file_id(path)
    # The resume continues the newer conversation; the graft is in the backup.
    assert index.ancestry(fid)[::-1] == [u(1), u(2), u(3), u(4), u(5)]
    backups = list(path.parent.glob(f"{SID}.jsonl.session-index-backup-*"))
    assert [b.read_bytes() for b in backups] == [before]
    assert b"drained output" not in path.read_bytes()
    code, verdict = check(index, tmp_path)
    assert (code, verdict["verdict"]) == (0, "resumable")
    index.assert_caches_match_definitions()


def test_no_repair_once_a_prompt_was_typed_on_the_graft(index, tmp_path):
    # The user went on from the graft: that is the conversation now.
    t = Transcript(SID)
    conversation(t)
    graft(t)
    t.add(u(7), u(6), "assistant", message=text("msg_7", "on the graft"),
          ts="2026-11-05T08:00:09.000Z")
    t.add(u(8), u(7), "user", ts="2026-11-05T08:01:00.000Z")
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    code, verdict = check(index, tmp_path)
    assert (code, verdict["verdict"]) == (0, "resumable")


@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
def test_after_the_repair_the_real_cli_sends_the_newer_conversation(index):
    from indexer.repair import oracle

    path = grafted_file(index)
    out = CliRunner().invoke(cli, ["repair", SID, "--db", str(index.path), "--write"])
    assert out.exit_code == 0, out.output
    with oracle.FakeMessagesAPI() as api:
        sent = oracle.resume_sent(path.read_bytes(), SID, api, CLAUDE)
    assert "the newer conversation" in sent.assistant_texts()


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_no_late_graft_in_the_corpus(index):
    index.ingest(CORPUS)
    assert index.rows("SELECT count(*) AS n FROM orphans WHERE cause = 'late_graft'") == [
        {"n": 0}]
    assert index.rows("SELECT count(*) AS n FROM session_verdicts WHERE cause = 'late_graft'"
                      ) == [{"n": 0}]


@pytest.mark.skipif(not os.environ.get("SESSION_INDEX_ORACLE_DIR"),
                    reason="set SESSION_INDEX_ORACLE_DIR to a folder of transcripts")
def test_no_late_graft_in_transcripts_not_seen(index):
    """The same on any folder of real transcripts (the held-out check):
    SESSION_INDEX_ORACLE_DIR=~/.claude/projects pytest -k not_seen."""
    index.ingest(os.environ["SESSION_INDEX_ORACLE_DIR"])
    found = index.rows("SELECT session_id, uuid, branch_point_uuid FROM orphans "
                       "WHERE cause = 'late_graft'")
    print(f"\n{index.value('SELECT count(*) FROM files')} transcripts, late grafts: {found}")
    assert found == []
