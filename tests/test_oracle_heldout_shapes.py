"""Issue 26, acceptance 1 and 2, on the shapes of real transcripts the project
had not seen (Claude Code 2.0.65 to 2.1.220, found in public repositories and
checked with the oracle at every line boundary; none of their text is here).

Each shape below is a generated tree with the structure one of them showed;
the real CLI resumes it, and every prefix of it cut at a line boundary (the
file as it was at that moment), and the index must agree with what it sent
(tests/oracle_checks.check_folder), as must ``session-index verify``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import Transcript, write_jsonl
from indexer.repair import oracle
from oracle_checks import CLAUDE, check_folder
from test_oracle import SID, text, tool_result, tool_use, u

pytestmark = [pytest.mark.oracle,
              pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")]


@pytest.fixture(scope="module")
def api():
    with oracle.FakeMessagesAPI() as server:
        yield server


def hook(t, uuid, parent, event, tool_use_id):
    """A hook_progress record as 2.1.x writes it around a tool call."""
    return t.add(uuid, parent, "progress", toolUseID=tool_use_id, parentToolUseID=tool_use_id,
                 data={"type": "hook_progress", "hookEvent": event,
                       "hookName": f"{event}:Bash", "command": "true"})


def block(mid, content_block):
    """One content block of the API message ``mid`` (2.x writes one record a block)."""
    return {"id": mid, "type": "message", "role": "assistant", "model": "claude-x",
            "content": [content_block]}


def shape_parallel_calls_through_hooks():
    """2.1.39: one API message written as a whitespace-only text block, a
    thinking block and two tool_use records; the second call's record hangs
    from the first call's last PreToolUse hook, the first call's result from
    the first call's record, the second call's hooks from that result, the
    second result from the second call's record, and the answer from it.
    The first result is off the walk: the CLI sends it (both results)."""
    t = Transcript(SID)
    t.add(u(1), None, "progress", toolUseID="startup", parentToolUseID="startup",
          data={"type": "hook_progress", "hookEvent": "SessionStart",
                "hookName": "SessionStart:startup", "command": "true"})
    t.add(u(2), u(1), "user")
    t.add(u(3), u(2), "assistant", message=block("msg_P", {"type": "text", "text": "\n\n"}))
    t.add(u(4), u(3), "assistant", message=block("msg_P", {
        "type": "thinking", "thinking": "two commands", "signature": "c2ln"}))
    t.add(u(5), u(4), "assistant", message=tool_use("msg_P", "toolu_a"))
    hook(t, u(6), u(5), "PreToolUse", "toolu_a")
    hook(t, u(7), u(6), "PreToolUse", "toolu_a")
    t.add(u(8), u(7), "assistant", message=tool_use("msg_P", "toolu_b"))
    hook(t, u(9), u(8), "PostToolUse", "toolu_a")
    t.add(u(10), u(5), "user", message=tool_result("toolu_a"), sourceToolAssistantUUID=u(5))
    hook(t, u(11), u(10), "PreToolUse", "toolu_b")
    hook(t, u(12), u(11), "PostToolUse", "toolu_b")
    t.add(u(13), u(8), "user", message=tool_result("toolu_b"), sourceToolAssistantUUID=u(8))
    t.add(u(14), u(13), "assistant", message=text("msg_Q", "after both commands"))
    return t.records


def shape_agent_progress_on_the_chain():
    """2.1.34: a Task call whose subagent's progress is written on the main
    chain (agent_progress records, each below the previous one, below the
    call's PreToolUse hook), the file ending there, before the call's result."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=block("msg_P", {"type": "text", "text": "\n\n"}))
    t.add(u(3), u(2), "assistant", message=block("msg_P", {
        "type": "thinking", "thinking": "look first", "signature": "c2ln"}))
    t.add(u(4), u(3), "assistant", message=text("msg_P", "Let me look around first."))
    t.add(u(5), u(4), "assistant", message=block("msg_P", {
        "type": "tool_use", "id": "toolu_t", "name": "Task",
        "input": {"description": "look around", "subagent_type": "Explore",
                  "prompt": "find the files"}}))
    hook(t, u(6), u(5), "PreToolUse", "toolu_t")
    inner = [{"type": "user", "message": {"role": "user", "content": [
                 {"type": "text", "text": "find the files"}]},
              "uuid": u(90), "timestamp": "2026-09-01T00:00:07.000Z"},
             {"type": "assistant", "timestamp": "2026-09-01T00:00:08.000Z",
              "message": tool_use("msg_S", "toolu_s"), "requestId": "req_s", "uuid": u(91)}]
    for n, message in enumerate(inner):
        t.add(u(7 + n), u(6 + n), "progress", toolUseID="agent_msg_P",
              parentToolUseID="toolu_t",
              data={"message": message, "normalizedMessages": [], "type": "agent_progress",
                    "prompt": "find the files", "agentId": "a0f1"})
    return t.records


def shape_manual_compaction_slice():
    """2.1.220 (a sanitised slice of a real file, its first record's parent
    not in it): a manual compact_boundary with no preservedSegment after
    queue operations, a last-prompt without leafUuid and a title; the summary,
    then an isMeta record and a prompt written with times before the boundary,
    then attachments each written with a time before its parent's."""
    t = Transcript(SID)
    t.add(u(1), "ffffffff-0000-0000-0000-00000000dead", "user",
          message=tool_result("toolu_gone"), ts="2026-09-01T00:00:01.000Z")
    t.add(u(2), u(1), "attachment", ts="2026-09-01T00:00:01.004Z",
          attachment={"type": "todo_reminder", "content": [], "itemCount": 0})
    t.add(u(3), u(2), "assistant", message=text("msg_A", "the last answer"),
          ts="2026-09-01T00:00:13.000Z")
    for op in ("enqueue", "dequeue"):
        t.records.append({"type": "queue-operation", "operation": op, "sessionId": SID,
                          "timestamp": "2026-09-01T00:00:59.000Z"})
    t.records.append({"type": "last-prompt", "sessionId": SID})
    t.records.append({"type": "ai-title", "aiTitle": "a title", "sessionId": SID})
    t.add(u(4), None, "system", subtype="compact_boundary", logicalParentUuid=u(3),
          content="Conversation compacted", level="info", isMeta=False,
          ts="2026-09-01T00:03:34.000Z",
          compactMetadata={"trigger": "manual", "preTokens": 250000, "postTokens": 9800})
    t.add(u(5), u(4), "user", isCompactSummary=True, isVisibleInTranscriptOnly=True,
          message={"role": "user", "content": "This session is being continued: a summary."},
          ts="2026-09-01T00:03:33.998Z")
    t.add(u(6), u(5), "user", isMeta=True, ts="2026-09-01T00:00:59.015Z",
          message={"role": "user", "content": "<local-command-caveat>caveat</local-command-caveat>"})
    t.add(u(7), u(6), "user", ts="2026-09-01T00:00:59.015Z",
          message={"role": "user", "content": "<command-name>/compact</command-name>"})
    t.add(u(8), u(7), "user", ts="2026-09-01T00:03:34.389Z",
          message={"role": "user", "content": "<local-command-stdout>Compacted</local-command-stdout>"})
    stamps = ["00:03:34.008", "00:03:34.007", "00:03:34.272", "00:03:34.279"]
    for n, stamp in enumerate(stamps):
        t.add(u(9 + n), u(8 + n), "attachment", ts=f"2026-09-01T{stamp}Z",
              attachment={"type": "todo_reminder", "content": [], "itemCount": 0})
    return t.records


SHAPES = {
    "parallel_calls_through_hooks": shape_parallel_calls_through_hooks,
    "agent_progress_on_the_chain": shape_agent_progress_on_the_chain,
    "manual_compaction_slice": shape_manual_compaction_slice,
}


def write_prefixes(root, records):
    """Every prefix of ``records`` cut at a line boundary, each the whole
    main transcript of its own project folder (the last is the whole file)."""
    for k in range(1, len(records) + 1):
        write_jsonl(root / f"-tmp-cut{k:03d}" / f"{SID}.jsonl", records[:k])


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_prefix_agrees_with_the_cli(index, api, tmp_path, name):
    records = SHAPES[name]()
    write_prefixes(tmp_path / "prefixes", records)
    files = check_folder(index, api, tmp_path / "prefixes")
    assert len(files) == len(records)


def test_the_first_result_is_sent_though_off_the_walk(index, api):
    """The parallel shape does put a result back: both results are sent."""
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl",
                       shape_parallel_calls_through_hooks())
    sent = oracle.resume_sent(path.read_bytes(), SID, api, CLAUDE)
    assert {"toolu_a", "toolu_b"} <= set(sent.tool_result_ids())


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_verify_agrees(index, name):
    from indexer.cli.commands import cli

    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", SHAPES[name]())
    index.ingest()
    result = CliRunner().invoke(cli, ["verify", SID, "--db", str(index.path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["agree"] is True
