"""Issue 26: the put-back lines (walk.put_back_with_results, the loader's
RRr()/nMe()) as 2.1.332 reads them, beyond companion records: a line may run
through an isVirtual tool call or result (the loader's z8()). The real CLI
sends the record below such a link (tests/test_oracle_cases.py,
virtual_*_record_on_a_line); these tests hold the index's rule without a
binary, through full derives and appends, each cache equal to its
definition."""

from __future__ import annotations

import json

import pytest

from conftest import Transcript, write_jsonl
from indexer.ingest import derive, derive_append

SID = "26262626-7777-3333-4444-555555555555"


def u(n: int) -> str:
    return f"dddddddd-0000-0000-0000-{n:012d}"


def tool_use(mid, tid):
    return {"id": mid, "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "tool_use", "id": tid, "name": "Bash", "input": {}}]}


def tool_result(tid):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                         "content": f"out {tid}"}]}


def meta(words):
    return {"role": "user", "content": [{"type": "text", "text": words}]}


def two_calls(t):
    """One API response (msg_P) as two assistant records, a result each; the
    answer goes on from the second result, so the first (u4) is put back as
    a parallel_tool_branch."""
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(4), u(2), "user", message=tool_result("toolu_a"))


def answer(t):
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant")


def virtual(t, kind, virtual_flag=True):
    fields = {"isVirtual": True} if virtual_flag else {}
    if kind == "user":
        return t.add(u(7), u(4), "user", message=tool_result("toolu_v"), **fields)
    return t.add(u(7), u(4), "assistant", message=tool_use("msg_V", "toolu_v"), **fields)


def orphans(index, path) -> dict:
    fid = index.file_id(path)
    return {r["uuid"]: (r["cause"], r["restored"]) for r in index.rows(
        "SELECT uuid, cause, restored FROM orphans WHERE file_id = ?", [fid])}


def derived(index, records):
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", records)
    index.ingest()
    index.assert_caches_match_definitions()
    return path


@pytest.mark.parametrize("kind", ["user", "assistant"])
def test_a_line_runs_through_a_virtual_call(index, kind):
    t = Transcript(SID)
    two_calls(t)
    virtual(t, kind)
    t.add(u(8), u(7), "user", isMeta=True, message=meta("below the virtual record"))
    answer(t)
    path = derived(index, t.records)
    got = orphans(index, path)
    assert [got[u(n)] for n in (7, 8)] == [("put_back_with_result", 1)] * 2


@pytest.mark.parametrize("kind", ["user", "assistant"])
def test_the_same_record_not_virtual_leaves_the_line_whole(index, kind):
    t = Transcript(SID)
    two_calls(t)
    virtual(t, kind, virtual_flag=False)
    t.add(u(8), u(7), "user", isMeta=True, message=meta("below the record"))
    answer(t)
    path = derived(index, t.records)
    got = orphans(index, path)
    assert [got[u(n)] for n in (7, 8)] == [("abandoned_branch", 0)] * 2


def test_a_virtual_record_that_forks_leaves_the_line_whole(index):
    t = Transcript(SID)
    two_calls(t)
    virtual(t, "user")
    t.add(u(8), u(7), "user", isMeta=True, message=meta("one"))
    t.add(u(9), u(7), "user", isMeta=True, message=meta("two"))
    answer(t)
    path = derived(index, t.records)
    got = orphans(index, path)
    assert [got[u(n)] for n in (7, 8, 9)] == [("abandoned_branch", 0)] * 3


def test_a_virtual_record_without_a_tool_block_is_no_link(index):
    # z8() asks for a tool_use (assistant) or tool_result (user) block.
    t = Transcript(SID)
    two_calls(t)
    t.add(u(7), u(4), "user", isVirtual=True, message=meta("virtual text"))
    t.add(u(8), u(7), "user", isMeta=True, message=meta("below it"))
    answer(t)
    path = derived(index, t.records)
    got = orphans(index, path)
    assert [got[u(n)] for n in (7, 8)] == [("abandoned_branch", 0)] * 2


def test_appends_class_a_line_through_a_virtual_call(index):
    """A live session: the call and its first result, then the virtual
    record, the meta record below it and the answer, then a second child of
    the virtual record and a new turn. Extended (not recomputed) and equal
    to the definitions after each append."""
    t = Transcript(SID)
    two_calls(t)
    path = derived(index, t.records)
    t.records = []
    steps = [
        ([virtual(t, "user"), t.add(u(8), u(7), "user", isMeta=True, message=meta("below")),
          t.add(u(5), u(3), "user", message=tool_result("toolu_b")),
          t.add(u(6), u(5), "assistant")],
         [("put_back_with_result", 1)] * 2),
        ([t.add(u(9), u(7), "user", isMeta=True, message=meta("a second child")),
          t.add(u(10), u(6), "user"), t.add(u(11), u(10), "assistant")],
         [("abandoned_branch", 0)] * 2),
    ]
    for appended, want in steps:
        before = derive.STATS["appended"]
        with open(path, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in appended)
        index.ingest()
        index.assert_caches_match_definitions()
        assert derive.STATS["appended"] == before + 1, derive_append.BAILS
        got = orphans(index, path)
        assert [got[u(n)] for n in (7, 8)] == want


def test_verify_does_not_ask_for_a_result_whose_call_is_not_kept(index):
    """The virtual result is put back but its call is nowhere: the CLI does
    not send it, and verify does not count it as kept and not sent."""
    from indexer.repair import oracle, verify

    t = Transcript(SID)
    two_calls(t)
    virtual(t, "user")
    t.add(u(8), u(7), "user", isMeta=True, message=meta("below"))
    answer(t)
    path = derived(index, t.records)
    sent = oracle.Sent(requests=1, exit_code=0, stderr="", messages=[
        {"role": "user", "content": "prompt"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {}},
            {"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "out toolu_a"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "out toolu_b"}]},
        {"role": "assistant", "content": [{"type": "text", "text": f"reply {u(6)}"}]}])
    kept_not_sent, sent_but_dropped, _ = verify.compare(index.db.conn, index.file_id(path), sent)
    assert (kept_not_sent, sent_but_dropped) == ([], [])
