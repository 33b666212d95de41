"""Issue 26: the put-back lines (walk.put_back_with_results, the loader's
RRr()/nMe()) as 2.1.332 reads them: a line may run through an isVirtual
tool call or result (the loader's z8()), and it follows the parents the
loader reads, a sentAsUuid read as the record stored anew and what a
compaction's relink moves (RRr reads the loader's map after both); and
RRr takes the responses on the chain root first, so a record of a later
response is not yet visited when a line of an earlier one meets it. The
real CLI sends what these put back (tests/test_oracle_cases.py,
virtual_*_record_on_a_line, line_under_a_sent_as_result,
line_under_a_relinked_result, line_meets_a_later_response); and a tool
result the loader reads under a record that does not hold its call is
recovered by its tool-call id (RRr with tengu_foamy_spring):
result_recovered_under_the_other_result, reply_split_around_an_attachment; these tests hold the index's rule without a
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


def test_a_line_under_a_result_stored_anew(index):
    # The first result (u9) is stored anew and keeps the uuid it was sent
    # under (sentAsUuid u4): the meta record naming u4 hangs from it.
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(9), u(2), "user", sentAsUuid=u(4), message=tool_result("toolu_a"))
    t.add(u(8), u(4), "user", isMeta=True, message=meta("under the renamed result"))
    answer(t)
    path = derived(index, t.records)
    got = orphans(index, path)
    assert got[u(9)] == ("parallel_tool_branch", 1)
    assert got[u(8)] == ("put_back_with_result", 1)
    # Without the sentAsUuid nothing is u4: the record's parent is missing.
    del t.records[3]["sentAsUuid"]
    path = derived(index, t.records)
    assert orphans(index, path)[u(8)] == ("dangling_parent", 0)


def relinked(with_kept_tail=True):
    """A compaction that kept a call and its result (u3, u4): the meta
    record and the next prompt hang from the summary (u6), and the relink
    moves both under the kept result."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(4), u(3), "user", message=tool_result("toolu_a"))
    meta_ = {"trigger": "manual", "preTokens": 100}
    if with_kept_tail:
        meta_["preservedSegment"] = {"headUuid": u(3), "anchorUuid": u(6), "tailUuid": u(4)}
    t.add(u(5), None, "system", subtype="compact_boundary", content="Conversation compacted",
          logicalParentUuid=u(4), compactMetadata=meta_)
    t.add(u(6), u(5), "user", isCompactSummary=True, message=meta("summary"))
    t.add(u(10), u(6), "user", isMeta=True, message=meta("under the summary"))
    t.add(u(7), u(6), "user")
    t.add(u(8), u(7), "assistant")
    return t.records


def test_a_line_moved_under_a_kept_result_by_the_relink(index):
    path = derived(index, relinked())
    assert orphans(index, path)[u(10)] == ("put_back_with_result", 1)
    # No kept tail: no relink, and the record stays a branch of the summary.
    path = derived(index, relinked(with_kept_tail=False))
    assert orphans(index, path)[u(10)] == ("abandoned_branch", 0)


def later_response(parent_of_b2):
    """Two responses on the chain: msg_A's result (u3) has a line of two
    meta records (u10, u11); msg_B's second record (u5, off the chain) hangs
    from ``parent_of_b2``."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_A", "toolu_a"))
    t.add(u(3), u(2), "user", message=tool_result("toolu_a"))
    t.add(u(10), u(3), "user", isMeta=True, message=meta("line X"))
    t.add(u(11), u(10), "user", isMeta=True, message=meta("line Y"))
    t.add(u(4), u(3), "assistant", message=tool_use("msg_B", "toolu_b1"))
    t.add(u(5), parent_of_b2, "assistant", message=tool_use("msg_B", "toolu_b2"))
    t.add(u(6), u(4), "user", message=tool_result("toolu_b1"))
    t.add(u(7), u(5), "user", message=tool_result("toolu_b2"))
    t.add(u(8), u(6), "assistant")
    return t.records


def test_a_line_meeting_a_later_response_is_left_whole(index):
    # u5 hangs from u10: for msg_A's line it is a second unvisited child.
    path = derived(index, later_response(u(10)))
    got = orphans(index, path)
    assert [got[u(n)] for n in (10, 11)] == [("abandoned_branch", 0)] * 2
    assert [got[u(n)] for n in (5, 7)] == [("parallel_tool_branch", 1)] * 2
    # u5 hangs from msg_B's own record: msg_A's line is one line, put back.
    path = derived(index, later_response(u(4)))
    got = orphans(index, path)
    assert [got[u(n)] for n in (10, 11)] == [("put_back_with_result", 1)] * 2


def test_a_line_meeting_an_earlier_response_counts_it_visited(index):
    # The same records with the responses the other way round on the chain:
    # msg_B (u4, u5) first, then msg_A under u4's result: u5 was reached first.
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(4), u(1), "assistant", message=tool_use("msg_B", "toolu_b1"))
    t.add(u(6), u(4), "user", message=tool_result("toolu_b1"))
    t.add(u(2), u(6), "assistant", message=tool_use("msg_A", "toolu_a"))
    t.add(u(3), u(2), "user", message=tool_result("toolu_a"))
    t.add(u(10), u(3), "user", isMeta=True, message=meta("line X"))
    t.add(u(11), u(10), "user", isMeta=True, message=meta("line Y"))
    t.add(u(5), u(10), "assistant", message=tool_use("msg_B", "toolu_b2"))
    t.add(u(7), u(5), "user", message=tool_result("toolu_b2"))
    t.add(u(8), u(3), "assistant")
    path = derived(index, t.records)
    got = orphans(index, path)
    assert [got[u(n)] for n in (10, 11)] == [("put_back_with_result", 1)] * 2


def test_a_result_under_the_other_result_is_recovered_by_its_call_id(index):
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(4), u(5), "user", message=tool_result("toolu_a"))
    t.add(u(7), u(4), "user", isMeta=True, message=meta("below the recovered result"))
    t.add(u(6), u(5), "assistant")
    path = derived(index, t.records)
    got = orphans(index, path)
    assert got[u(4)] == ("parallel_tool_branch", 1)
    # and the line below it is put back with it (it is an anchor)
    assert got[u(7)] == ("put_back_with_result", 1)


def test_a_result_whose_call_is_answered_is_not_recovered(index):
    # toolu_a is answered on the chain (u8 under u2): the stray copy stays dropped.
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(8), u(2), "user", message=tool_result("toolu_a"))
    t.add(u(3), u(8), "assistant", message=tool_use("msg_Q", "toolu_b"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(4), u(5), "user", message=tool_result("toolu_a"))
    t.add(u(6), u(5), "assistant")
    path = derived(index, t.records)
    assert orphans(index, path)[u(4)] == ("abandoned_branch", 0)


def test_of_two_strays_for_one_call_the_first_is_recovered(index):
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(4), u(5), "user", message=tool_result("toolu_a"))
    t.add(u(9), u(1), "user", message=tool_result("toolu_a"))
    t.add(u(6), u(5), "assistant")
    path = derived(index, t.records)
    got = orphans(index, path)
    assert (got[u(4)], got[u(9)]) == (("parallel_tool_branch", 1), ("abandoned_branch", 0))


def test_a_call_held_by_two_responses_recovers_nothing(index):
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(10), u(1), "assistant", message=tool_use("msg_R", "toolu_a"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(4), u(5), "user", message=tool_result("toolu_a"))
    t.add(u(6), u(5), "assistant")
    path = derived(index, t.records)
    assert orphans(index, path)[u(4)] == ("abandoned_branch", 0)


def test_appends_give_up_on_a_stray_result(index):
    """An appended result its parent does not hold: the file is derived
    whole (a recompute), and equals the definitions."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant")
    path = derived(index, t.records)
    t.records = []
    before = dict(derive_append.BAILS)
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in [
            t.add(u(4), u(5), "user", message=tool_result("toolu_a")),
            t.add(u(7), u(6), "user"), t.add(u(8), u(7), "assistant")])
    index.ingest()
    index.assert_caches_match_definitions()
    assert derive_append.BAILS["a stray tool result"] == before.get("a stray tool result", 0) + 1
    assert orphans(index, path)[u(4)] == ("parallel_tool_branch", 1)


def hook_context(t, uuid, parent):
    return t.add(uuid, parent, "attachment",
                 attachment={"type": "hook_additional_context", "content": ["context"]})


def last_prompt(leaf, **fields):
    return {"type": "last-prompt", "sessionId": SID, "lastPrompt": "prompt", "leafUuid": leaf,
            "explicit": True, **fields}


def cut_shape(*after):
    """An attachment (u7) below the first call's result (u4), put back with
    it, then ``after``: last-prompt records and records, in that order."""
    t = Transcript(SID)
    two_calls(t)
    hook_context(t, u(7), u(4))
    answer(t)
    for x in after:
        if callable(x):
            x(t)
        else:
            t.records.append(x)
    return t.records


def test_a_rewind_cut_keeps_a_record_from_being_put_back(index):
    path = derived(index, cut_shape(last_prompt(u(6), rewound=True, cutUuid=u(7))))
    assert orphans(index, path)[u(7)] == ("abandoned_branch", 0)
    # The same checkpoint without the cut: put back with the parallel result.
    path = derived(index, cut_shape(last_prompt(u(6))))
    assert orphans(index, path)[u(7)] == ("put_back_with_result", 1)
    # Not explicit: the loader takes no note of it.
    path = derived(index, cut_shape(last_prompt(u(6), rewound=True, cutUuid=u(7),
                                                 explicit=False)))
    assert orphans(index, path)[u(7)] == ("put_back_with_result", 1)


def test_a_later_explicit_checkpoint_or_a_row_below_ends_the_cut(index):
    cut = last_prompt(u(6), rewound=True, cutUuid=u(7))
    path = derived(index, cut_shape(cut, last_prompt(u(6))))
    assert orphans(index, path)[u(7)] == ("put_back_with_result", 1)
    # A row written below the cut record after the rewind: no longer cut.
    path = derived(index, cut_shape(
        cut, lambda t: t.add(u(8), u(7), "system", subtype="stop_hook_summary")))
    got = orphans(index, path)
    assert [got[u(n)] for n in (7, 8)] == [("put_back_with_result", 1)] * 2


def test_a_rewind_cut_of_a_record_below_the_leaf(index):
    # A system record below the leaf message is put back after the walk
    # (restored); cut by a rewind, it is not.
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), u(2), "system", subtype="stop_hook_summary")
    path = derived(index, t.records + [last_prompt(u(2), rewound=True, cutUuid=u(3))])
    assert orphans(index, path)[u(3)][1] == 0
    path = derived(index, t.records + [last_prompt(u(2))])
    assert orphans(index, path)[u(3)][1] == 1


def test_a_rewind_cut_reads_the_lines_written_by_then(index):
    """wsn() reads each uuid as the loader has loaded it by the line it
    reads: a cut record (u7) written again after the rewind stays cut (the
    index once read its last line, written after the rewind: no cut)."""
    cut = last_prompt(u(6), rewound=True, cutUuid=u(7))
    keep = last_prompt(u(6), rewound=True, cutUuid="ffffffff-0000-0000-0000-00000000dead")
    again = lambda t: t.records.append(dict(next(r for r in t.records if r.get("uuid") == u(7))))
    path = derived(index, cut_shape(cut, again, keep))
    assert orphans(index, path)[u(7)] == ("abandoned_branch", 0)
    # Without the cut, the copy is put back with the parallel result.
    path = derived(index, cut_shape(last_prompt(u(6)), again, keep))
    assert orphans(index, path)[u(7)] == ("put_back_with_result", 1)


def test_a_row_after_a_rewind_uncuts_through_an_earlier_line(index):
    """A row (u8) written after the rewind under u9, whose line written by
    then hangs under a progress record (u12) below the cut record (u7):
    the walk up from the row reads u9's earlier line, bridged through the
    progress record, and uncuts u7; u9's later line hangs under u4."""
    cut = last_prompt(u(6), rewound=True, cutUuid=u(7))
    keep = last_prompt(u(6), rewound=True, cutUuid="ffffffff-0000-0000-0000-00000000dead")

    def below(t):
        t.add(u(12), u(7), "progress", data={"type": "hook_progress"})
        hook_context(t, u(9), u(12))

    def after(t):
        t.add(u(8), u(9), "system", subtype="stop_hook_summary")
        hook_context(t, u(9), u(4))

    path = derived(index, cut_shape(below, cut, after, keep))
    got = orphans(index, path)
    assert [got[u(n)] for n in (7, 9, 8)] == [("put_back_with_result", 1)] * 3
    # Without the row below u9's earlier line, u7 stays cut.
    path = derived(index, cut_shape(below, cut, lambda t: hook_context(t, u(9), u(4)), keep))
    assert orphans(index, path)[u(7)] == ("abandoned_branch", 0)
