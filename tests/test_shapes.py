"""Every transcript shape the views must name: leaves, ancestry, orphan causes."""

from __future__ import annotations

import json
from pathlib import Path


from conftest import Transcript, sdk_chain, write_jsonl

FIXTURES = Path(__file__).parent / "fixtures"
SEED_SID = "11111111-2222-3333-4444-555555555555"


def u(n: int) -> str:
    return f"aaaaaaaa-0000-0000-0000-{n:012d}"


def check_against_sdk(index, path, kind="main"):
    fid = index.file_id(path)
    assert list(reversed(index.ancestry(fid, "sdk"))) == sdk_chain(path, kind)
    index.assert_caches_match_definitions()
    return fid


def seed000(index, control=False):
    lines = (FIXTURES / "seed000_splice.jsonl").read_text().splitlines()
    if control:  # the clean-turn shape: stop_hook_summary chained onto the reply
        last = json.loads(lines[3])
        last["parentUuid"] = u(2)
        lines[3] = json.dumps(last)
    path = index.projects / "-tmp-demo" / f"{SEED_SID}.jsonl"
    write_jsonl(path, lines)
    index.ingest()
    return path


def test_seed000_splice_orphans_the_reply(index):
    path = seed000(index)
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(4), u(3), u(1)]
    assert index.rows("SELECT uuid, type, cause, branch_point_uuid FROM orphans") == [
        {"uuid": u(2), "type": "assistant", "cause": "api_error_splice",
         "branch_point_uuid": u(1)}]
    assert index.rows("SELECT * FROM api_error_splices") == [{
        "file_id": fid, "session_id": SEED_SID, "api_error_uuid": u(3),
        "branch_point_uuid": u(1), "orphaned_records": 1,
        "orphaned_assistant_messages": 1,
        "first_orphan_at": "2026-09-01T00:00:05.000Z",
        "last_orphan_at": "2026-09-01T00:00:05.000Z", "minutes_spanned": 0.0, "host": ""}]
    leaves = index.rows("SELECT resume_leaf_uuid, sdk_leaf_uuid, leaves_agree, branch_count FROM leaves")
    # The resume rule lands on the late stop_hook_summary; the SDK's
    # file-order rule on the reply itself: the two readers disagree.
    assert leaves == [{"resume_leaf_uuid": u(4), "sdk_leaf_uuid": u(2),
                       "leaves_agree": 0, "branch_count": 2}]


def test_seed000_control_keeps_the_reply(index):
    path = seed000(index, control=True)
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(4), u(2), u(1)]
    assert index.causes(fid) == {u(3): "api_error_record"}
    assert index.value("SELECT count(*) FROM api_error_splices") == 0


def test_multi_error_episode_counts_the_whole_segment(index):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message={"id": "msg_A", "role": "assistant", "model": "m",
                                             "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]})
    t.add(u(3), u(2), "user", message={"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]})
    t.add(u(4), u(3), "assistant", message={"id": "msg_B", "role": "assistant", "model": "m",
                                             "content": [{"type": "text", "text": "done"}]},
          ts="2026-09-01T00:30:00.000Z")
    # Flushed late: older timestamps, parented on the prompt (the leaf at error time).
    t.add(u(5), u(1), "system", subtype="api_error", ts="2026-09-01T00:00:02.000Z")
    t.add(u(6), u(5), "system", subtype="api_error", ts="2026-09-01T00:00:03.000Z")
    t.add(u(7), u(6), "system", subtype="stop_hook_summary", ts="2026-09-01T00:31:00.000Z")
    t.add(u(8), u(7), "user", ts="2026-09-01T00:40:00.000Z")
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(8), u(7), u(6), u(5), u(1)]
    assert index.causes(fid) == {u(2): "api_error_splice", u(3): "api_error_splice",
                                 u(4): "api_error_splice"}
    [episode] = index.rows("SELECT * FROM api_error_splices")
    assert (episode["api_error_uuid"], episode["branch_point_uuid"]) == (u(5), u(1))
    assert episode["orphaned_records"] == 3
    assert episode["orphaned_assistant_messages"] == 2
    assert episode["minutes_spanned"] == 30.0


def parallel_turn(t: Transcript, continue_from_first=False):
    """Seed 002: one response with two tool calls, chained, each result on its call."""
    def block(kind, **kw):
        return {"id": "msg_P", "type": "message", "role": "assistant", "model": "m",
                "content": [dict(type=kind, **kw)]}
    t.add("ZZZ", None, "user")
    t.add("AAA", "ZZZ", "assistant", message=block("thinking", thinking="plan"))
    t.add("BBB", "AAA", "assistant", message=block("tool_use", id="ta", name="Write", input={}))
    t.add("CCC", "BBB", "assistant", message=block("tool_use", id="tb", name="Write", input={}))
    t.add("DDD", "BBB", "user", message={"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "ta", "content": "wrote a"}]})
    t.add("EEE", "CCC", "user", message={"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tb", "content": "wrote b"}]})
    nxt = "DDD" if continue_from_first else "EEE"
    t.add("FFF", nxt, "assistant", message={"id": "msg_Q", "role": "assistant", "model": "m",
                                             "content": [{"type": "thinking", "thinking": "ok"}]})
    t.add("GGG", "FFF", "assistant", message={"id": "msg_Q", "role": "assistant", "model": "m",
                                               "content": [{"type": "text", "text": "Created both files"}]})


def test_seed002_parallel_tool_result_is_a_parallel_branch(index):
    t = Transcript()
    parallel_turn(t)
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == ["GGG", "FFF", "EEE", "CCC", "BBB", "AAA", "ZZZ"]
    assert index.rows("SELECT uuid, cause, branch_point_uuid FROM orphans") == [
        {"uuid": "DDD", "cause": "parallel_tool_branch", "branch_point_uuid": "BBB"}]


def test_parallel_siblings_skipped_by_the_walk(index):
    t = Transcript()
    parallel_turn(t, continue_from_first=True)
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == ["GGG", "FFF", "DDD", "BBB", "AAA", "ZZZ"]
    assert index.causes(fid) == {"CCC": "parallel_tool_branch", "EEE": "parallel_tool_branch"}


def test_compaction_orphans_are_compacted_not_lost(index):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant")
    t.add(u(5), None, "system", subtype="compact_boundary", logicalParentUuid=u(4))
    t.add(u(6), u(5), "user", isCompactSummary=True)
    t.add(u(7), u(6), "user")
    t.add(u(8), u(7), "assistant")
    t.add(u(9), u(6), "assistant")  # a post-compaction side branch
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(9), u(6), u(5)]
    assert index.causes(fid) == {u(1): "compacted", u(2): "compacted", u(3): "compacted",
                                 u(4): "compacted", u(7): "abandoned_branch",
                                 u(8): "abandoned_branch"}
    assert index.value("SELECT branch_point_uuid FROM orphans WHERE uuid = ?", [u(7)]) == u(6)


def test_rewind_leaves_an_abandoned_branch(index):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant")
    t.add(u(5), u(2), "user")  # the edited prompt, parented on an earlier record
    t.add(u(6), u(5), "assistant")
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(6), u(5), u(2), u(1)]
    assert index.rows("SELECT uuid, cause, branch_point_uuid FROM orphans ORDER BY line_no") == [
        {"uuid": u(3), "cause": "abandoned_branch", "branch_point_uuid": u(2)},
        {"uuid": u(4), "cause": "abandoned_branch", "branch_point_uuid": u(2)}]
    assert index.value("SELECT branch_count FROM leaves") == 2


def test_synthetic_placeholder_is_stored_with_its_marks(index):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", isApiErrorMessage=True, message={
        "id": "5f0c1a52-3a49-4a4e-9f0e-2f1c6e3b7d11", "type": "message", "role": "assistant",
        "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 529"}],
        "usage": {"input_tokens": 0, "output_tokens": 0}})
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid)[0] == u(4)
    assert index.rows("SELECT message_id, model, is_api_error FROM records WHERE uuid = ?", [u(4)]) == [
        {"message_id": "5f0c1a52-3a49-4a4e-9f0e-2f1c6e3b7d11", "model": "<synthetic>",
         "is_api_error": 1}]


def test_chain_break_unlinked_and_dangling(index):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), "ffffffff-0000-0000-0000-00000000dead", "user")  # parent not in the file
    t.add(u(4), u(3), "assistant")
    t.add(u(5), None, "user")  # a second root
    t.add(u(6), u(5), "assistant")
    t.add(u(7), u(2), "user")
    t.add(u(8), u(7), "assistant")
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(8), u(7), u(2), u(1)]
    assert index.causes(fid) == {u(3): "dangling_parent", u(4): "dangling_parent",
                                 u(5): "unlinked", u(6): "unlinked"}
    assert index.rows("SELECT uuid, line_no, missing_parent_uuid FROM chain_breaks") == [
        {"uuid": u(3), "line_no": 3, "missing_parent_uuid": "ffffffff-0000-0000-0000-00000000dead"}]


def test_chain_break_within_five_seconds_is_read_on_by_timestamp(index):
    # The CLI links a record whose parent is missing to the latest record at
    # or before its time within 5 s (the records here are 1 s apart).
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), "ffffffff-0000-0000-0000-00000000dead", "user")
    t.add(u(4), u(3), "assistant")
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(4), u(3), u(2), u(1)]
    assert index.causes(fid) == {}
    assert index.value("SELECT count(*) FROM chain_breaks") == 1


def test_chain_break_after_a_longer_gap_stops_the_walk(index):
    t = Transcript()
    t.add(u(1), None, "user", ts="2026-09-01T00:00:00.000Z")
    t.add(u(2), u(1), "assistant", ts="2026-09-01T00:00:01.000Z")
    t.add(u(3), "ffffffff-0000-0000-0000-00000000dead", "user", ts="2026-09-01T00:00:06.001Z")
    t.add(u(4), u(3), "assistant", ts="2026-09-01T00:00:07.000Z")
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(4), u(3)]
    assert index.causes(fid) == {u(1): "unlinked", u(2): "unlinked"}


def test_duplicate_uuid_resolves_to_its_last_line(index):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant")
    t.add(u(3), u(1), "user")  # the same uuid again, now parented on the prompt
    t.add(u(5), u(4), "user")
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(5), u(4), u(3), u(1)]
    assert index.causes(fid) == {u(2): "abandoned_branch"}
    assert index.rows("SELECT uuid, copies, line_nos, kept_line_no FROM duplicate_uuids") == [
        {"uuid": u(3), "copies": 2, "line_nos": "3,5", "kept_line_no": 5}]


def test_self_parent_and_cycles_terminate(index):
    t = Transcript()
    t.add(u(1), u(2), "user")       # 1 -> 2 -> 3 -> 1: a cycle
    t.add(u(2), u(3), "assistant")
    t.add(u(3), u(1), "user")
    t.add(u(4), u(1), "assistant")  # the leaf hangs off the cycle
    t.add(u(5), u(6), "user", ts="2026-09-01T00:00:00.100Z")  # an unreachable cycle
    t.add(u(6), u(5), "assistant", ts="2026-09-01T00:00:00.200Z")
    t.add(u(7), u(7), "user", ts="2026-09-01T00:00:00.500Z")  # self-parent
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    # The last row is the self-parented record: at a parent already walked
    # the CLI takes its timestamp fallback past the walk: u6 (0.3 s before),
    # its parent u5, whose parent u6 is walked and no other record is older.
    assert index.ancestry(fid) == [u(7), u(6), u(5)]
    assert index.causes(fid) == {u(n): "other" for n in range(1, 5)}
    assert index.value("SELECT resume_rule FROM leaves") == "last_row"
    # The leaf hanging off the cycle, when it is the last row: round the
    # cycle to u3, whose parent u1 is walked; the fallback from u3 (at 3 s)
    # takes the latest record not walked, u7 (at 0.5 s), and on as above.
    t.records.append(dict(t.records[3], timestamp="2026-09-01T00:00:00.050Z"))
    t.write(index.projects / "p")
    index.ingest()
    assert index.ancestry(fid) == [u(4), u(1), u(2), u(3), u(7), u(6), u(5)]


def test_self_parent_leaf(index):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(2), "assistant")
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    # the fallback from a parent already walked (itself): u1, 1 s before
    assert index.ancestry(fid) == [u(2), u(1)]


def test_deep_chain_and_long_cycle_terminate(index):
    n = 100_000
    t = Transcript()
    for i in range(1, n + 1):
        t.add(u(i), u(i - 1) if i > 1 else None, "user" if i % 2 else "assistant",
              ts=f"2026-09-01T00:00:00.{i:06d}Z")
    deep = t.write(index.projects / "p")
    ring = Transcript("22222222-2222-3333-4444-555555555555")
    for i in range(1, 1001):
        ring.add(u(i), u(i - 1) if i > 1 else u(1000), "user")
    cyc = ring.write(index.projects / "p")
    index.ingest()
    fid = index.file_id(deep)
    assert index.value("SELECT max(depth) FROM leaf_ancestry WHERE file_id = ? AND rule = 'resume'", [fid]) == n - 1
    assert list(reversed(index.ancestry(fid, "sdk"))) == sdk_chain(deep)
    cid = index.file_id(cyc)
    assert len(index.ancestry(cid)) == 1000
    index.assert_caches_match_definitions()


def test_progress_records_are_bridged_and_classed(index):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), u(2), "progress", data={"type": "hook_progress"})
    t.add(u(4), u(3), "progress", data={"type": "hook_progress"})
    t.add(u(5), u(4), "user")               # parented on a progress record
    t.add(u(6), u(2), "progress", data={})  # a side branch of progress
    t.add(u(7), u(6), "user")               # hanging off one
    t.add(u(8), u(5), "assistant")
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(8), u(5), u(2), u(1)]
    assert index.ancestry(fid, "sdk") == [u(8), u(5), u(4), u(3), u(2), u(1)]
    # u7 hangs off progress u6, which hangs off u2: the CLI reads it as a
    # sibling of u5 under u2, an abandoned branch (not dropped with progress).
    assert index.causes(fid) == {u(3): "progress", u(4): "progress", u(6): "progress",
                                 u(7): "abandoned_branch"}


def test_sidechain_records_inline_are_not_orphans(index):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), None, "user", isSidechain=True, ts="2026-09-01T01:00:00.000Z")
    t.add(u(4), u(3), "assistant", isSidechain=True, ts="2026-09-01T01:00:01.000Z")
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(2), u(1)]
    assert index.causes(fid) == {}


def test_subagent_files_use_the_last_message_for_both_rules(index):
    sid = "33333333-2222-3333-4444-555555555555"
    t = Transcript(sid)
    t.add(u(1), None, "user", isSidechain=True, agentId="abc")
    t.add(u(2), u(1), "assistant", isSidechain=True, agentId="abc")
    t.add(u(3), u(1), "assistant", isSidechain=True, agentId="abc", ts="2026-09-01T00:00:00.100Z")
    t.add(u(4), u(2), "system", subtype="turn_duration", isSidechain=True)
    path = t.write(index.projects / "p" / sid / "subagents", "agent-abc.jsonl")
    index.ingest()
    fid = check_against_sdk(index, path, kind="subagent")
    assert index.rows("SELECT kind, session_id, resume_leaf_uuid, sdk_leaf_uuid, leaves_agree FROM leaves") == [
        {"kind": "subagent", "session_id": sid, "resume_leaf_uuid": u(3),
         "sdk_leaf_uuid": u(3), "leaves_agree": 1}]
    assert index.rows("SELECT agent_id FROM files") == [{"agent_id": "abc"}]
    assert index.ancestry(fid) == [u(3), u(1)]
    assert index.causes(fid) == {}


def test_metadata_and_unknown_types_are_kept(index):
    t = Transcript()
    t.add(u(1), None, "user")
    t.records.append({"type": "summary", "summary": "S", "leafUuid": u(1)})
    t.records.append({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}})
    t.records.append({"type": "brand-new-type", "whatever": [1, 2, {"x": None}]})
    path = t.write(index.projects / "p")
    index.ingest()
    rows = index.rows("SELECT line_no, type, uuid, leaf_uuid, raw FROM records ORDER BY line_no")
    assert [(r["line_no"], r["type"], r["uuid"], r["leaf_uuid"]) for r in rows] == [
        (1, "user", u(1), None), (2, "summary", None, u(1)),
        (3, "file-history-snapshot", None, None), (4, "brand-new-type", None, None)]
    assert [json.loads(r["raw"]) for r in rows] == t.records
    check_against_sdk(index, path)


def test_rewound_turns_with_hook_progress_stay_abandoned(index):
    """Hook progress sits inside ordinary turns (stop hook: assistant ->
    progress -> stop_hook_summary); a rewind abandons such turns whole."""
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    t.add(u(3), u(2), "user")                            # the rewound prompt
    t.add(u(4), u(3), "assistant")
    t.add(u(5), u(4), "progress", data={"type": "hook_progress"})
    t.add(u(6), u(5), "system", subtype="stop_hook_summary")
    t.add(u(7), u(6), "user")
    t.add(u(8), u(2), "user")                            # the edit, after the rewind
    t.add(u(9), u(8), "assistant")
    path = t.write(index.projects / "p")
    index.ingest()
    fid = check_against_sdk(index, path)
    assert index.ancestry(fid) == [u(9), u(8), u(2), u(1)]
    assert index.causes(fid) == {u(3): "abandoned_branch", u(4): "abandoned_branch",
                                 u(5): "progress", u(6): "abandoned_branch",
                                 u(7): "abandoned_branch"}
