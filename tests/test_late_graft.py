"""Late grafts (issue 27 item 4, anthropics/claude-code#62301): a tool
result written long after the conversation moved on, onto the call an
earlier result already answered (a permission response drained at start-up,
a second process resuming the session). Being the last row it takes the
resume, and the conversation that went on from the first answer is dropped:
its records are named ``late_graft``, in the caches and in the SQL
definitions alike, also when the graft is appended to an indexed file."""

from __future__ import annotations

import json

import pytest

from conftest import Transcript, write_jsonl
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


def test_a_rewind_is_not_a_graft(index):
    # The same tree with a new prompt where the graft was: the user went
    # back on purpose; the branch is abandoned, not grafted.
    t = Transcript(SID)
    conversation(t)
    t.add(u(6), u(2), "user", ts="2026-11-05T08:00:00.000Z")
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    causes = index.causes(index.file_id(path))
    assert causes[u(4)] == causes[u(5)] == "abandoned_branch"
    index.assert_caches_match_definitions()


def test_a_result_of_another_call_is_not_a_graft(index):
    t = Transcript(SID)
    conversation(t)
    t.add(u(6), u(2), "user", message=result("toolu_other", "another call's output"),
          ts="2026-11-05T08:00:00.000Z")
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    assert index.causes(index.file_id(path))[u(4)] == "abandoned_branch"
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
