"""Issue 26, item 1: the loader cases the README (now docs/how-it-works/resume-rules.md) listed as "not modelled",
each a generated tree resumed by the real Claude Code (2.1.332) against the
fake Messages API and compared with the index (indexer/repair/verify.py), and
the user text records (which verify does not compare) with what was sent.

A case the index already gets right is a plain test; one it gets wrong is
``xfail(strict=True)`` with what the CLI does in its reason, so that it
flips to a failure (XPASS) the day the index models it. Each shape names
the rule it shows; the rules, with the minified code, are in the report of
this branch (and, once modelled, in docs/how-it-works/resume-rules.md)."""

from __future__ import annotations

import json

import pytest

from conftest import Transcript, write_jsonl
from indexer.repair import oracle
from test_oracle import CLAUDE, SID, text, tool_result, tool_use, u

pytestmark = [pytest.mark.oracle,
              pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")]


def at(seconds: float) -> str:
    """A timestamp ``seconds`` after 2026-09-01T00:00:00Z (ms precision)."""
    ms = round(seconds * 1000)
    return f"2026-09-01T00:{ms // 60000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"


@pytest.fixture(scope="module")
def api():
    with oracle.FakeMessagesAPI() as server:
        yield server


# --- a. A parent already visited: the timestamp fallback there too --------

def shape_self_parent():
    """j1n: ``if(!z||h.has(z.uuid)){z=Vrn(y,e,k,h)}``: at a self-parent the
    walk falls back to the latest unvisited record of its side at or
    before its time (within 5 s) and reads on from there."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "reached by the fallback"), ts=at(0.1))
    t.add(u(3), u(3), "user", ts=at(0.5))
    t.add(u(4), u(3), "assistant", message=text("msg_4", "the tail"), ts=at(0.6))
    return t.records


def shape_ring_with_an_earlier_root():
    """A ring (u2 -> u3 -> u2) below an earlier root within 5 s: at the
    visited parent the walk falls back past the ring to the root's line."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "before the ring"), ts=at(1))
    t.add(u(3), u(5), "user", ts=at(2))
    t.add(u(5), u(3), "assistant", message=text("msg_5", "in the ring"), ts=at(3))
    t.add(u(6), u(5), "user", ts=at(4))
    t.add(u(7), u(6), "assistant", message=text("msg_7", "off the ring"), ts=at(5))
    return t.records


def shape_fallback_skips_the_walk():
    """A missing parent whose latest candidate (u4, a child written earlier
    than its parent) is already on the walk: Vrn skips visited records and
    lands on the next latest (u2), so u1 and u2 are read."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "found past the walk"), ts=at(1))
    t.add(u(3), "ffffffff-0000-0000-0000-00000000dead", "user", ts=at(3))
    t.add(u(4), u(3), "assistant", message=text("msg_4", "written before its parent's time"),
          ts=at(2.5))
    return t.records


# --- b. Content the loader cleans ------------------------------------------

def shape_cleaned_blocks():
    """Xsn: a list of which some items are not blocks (an object with a
    string ``type``): those items are removed, the record is kept; an
    assistant's string content is wrapped as one text block."""
    t = Transcript(SID)
    t.add(u(1), None, "user", message={"role": "user", "content": [
        "a bare string", {"type": "text", "text": "the prompt"}, {"text": "no type"}]})
    t.add(u(2), u(1), "assistant", message={
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [7, {"type": "text", "text": "the kept block"}, None]})
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", message={
        "id": "msg_4", "type": "message", "role": "assistant", "model": "claude-x",
        "content": "a string answer"})
    return t.records


def shape_every_block_removed():
    """A list with no block at all (assistant and user): the record is
    dropped and its child hangs from its parent."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the first answer"))
    t.add(u(3), u(2), "user", message={"role": "user", "content": [{"text": "no type"}]})
    t.add(u(4), u(3), "assistant", message={
        "id": "msg_4", "type": "message", "role": "assistant", "model": "claude-x",
        "content": ["bare", 1]})
    t.add(u(5), u(4), "user")
    t.add(u(6), u(5), "assistant", message=text("msg_6", "after the dropped ones"))
    return t.records


def shape_empty_list():
    """An empty list is kept by the loader (every item is a block)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_2", "before the empty one"))
    t.add(u(3), u(2), "user", message={"role": "user", "content": []})
    t.add(u(4), u(3), "assistant", message=text("msg_4", "after the empty one"))
    return t.records


# --- c. A newer record that descends from the last row ---------------------

def shape_newest_descendant_of_the_last_row():
    """With no ``last-prompt`` leafUuid in the file and a newest row that is
    not the last row, the leaf is the newest record descending from the
    last row (finish(): ``if(!e&&!pr&&Ei&&_o&&_o!==Ei)Ei=Ma(Ei)``): of the
    last row's two children (written before it), the newer one wins."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the first answer"), ts=at(1))
    t.add(u(4), u(3), "assistant", message=text("msg_4", "the older child"), ts=at(5))
    t.add(u(5), u(3), "assistant", message=text("msg_5", "the newer child"), ts=at(6))
    t.add(u(3), u(2), "user", ts=at(3))
    return t.records


def shape_older_descendant_of_the_last_row():
    """Ma() takes the latest descendant of the last row whatever its time:
    here an older child of the last row wins, because another branch holds
    the newest row."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the first answer"), ts=at(1))
    t.add(u(6), u(2), "user", ts=at(30))
    t.add(u(7), u(6), "assistant", message=text("msg_7", "the newest branch"), ts=at(31))
    t.add(u(4), u(3), "assistant", message=text("msg_4", "older than its parent"), ts=at(9))
    t.add(u(3), u(2), "user", ts=at(10))
    return t.records


def shape_descendant_of_the_last_row_with_a_checkpoint():
    """Any ``last-prompt`` with a leafUuid turns Ma() off (``pr``): the
    checkpoint (here the last row) is the leaf and its child is dropped."""
    records = shape_newest_descendant_of_the_last_row()
    records.append({"type": "last-prompt", "sessionId": SID, "lastPrompt": "prompt",
                    "leafUuid": u(3)})
    return records


# --- d. sentAsUuid ------------------------------------------------------------

def shape_sent_as_uuid():
    """trn(): a user record with a string ``sentAsUuid`` not yet loaded is
    loaded under that uuid (the CLI writes it when it stores a prompt anew,
    ern(): ``{...o,uuid:Jgr(),sentAsUuid:e.uuid}``); its child names the
    sentAsUuid, more than 5 s later (no fallback would find it)."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "before the prompt stored anew"),
          ts=at(1))
    t.add(u(9), u(2), "user", sentAsUuid=u(3), ts=at(2),
          message={"role": "user", "content": "the prompt stored anew"})
    t.add(u(4), u(3), "assistant", message=text("msg_4", "answers the sentAsUuid"), ts=at(60))
    return t.records


def shape_sent_as_uuid_already_loaded():
    """A sentAsUuid already loaded from an earlier line: the record keeps
    its own uuid, and a child naming the sentAsUuid hangs from the earlier
    record."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the first answer"), ts=at(1))
    t.add(u(3), u(2), "user", ts=at(2))
    t.add(u(9), u(2), "user", sentAsUuid=u(3), ts=at(3),
          message={"role": "user", "content": "the copy keeps its uuid"})
    t.add(u(4), u(9), "assistant", message=text("msg_4", "answers the copy"), ts=at(4))
    return t.records


# --- e. fork_briefing attachments --------------------------------------------

def fork_briefing(t, uuid, parent, ts=None):
    return t.add(uuid, parent, "attachment", ts=ts, attachment={
        "type": "fork_briefing", "text": "You are a fork of the session; carry on."})


def shape_fork_briefing_not_a_row():
    """Yin(): a fork_briefing attachment is loaded but is not a row (not the
    last row, not the newest row): written last, hanging from an earlier
    answer, it does not move the leaf off the last row."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the first answer"))
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", message=text("msg_4", "the last row's answer"))
    fork_briefing(t, u(5), u(2))
    return t.records


def shape_fork_briefing_on_the_leaf():
    """As the CLI writes it (a background fork): the briefing hangs from the
    last row and is put back after the walk (bRr), sent as a meta user text."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the answer before the fork"))
    fork_briefing(t, u(5), u(2))
    return t.records


# --- f. The last row descends from the checkpoint through a parallel batch ----

def batch(t, first_result_continues=False):
    """A prompt and one API response (msg_P) with two tool calls written as
    two assistant records, a result for each; the next answer continues from
    one result."""
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(4), u(2), "user", message=tool_result("toolu_a"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(4) if first_result_continues else u(5), "assistant",
          message=text("msg_Q", "after the batch"))


def shape_checkpoint_on_a_sibling_result():
    """Kin(..., {throughBatch: !Go}): the checkpoint is the first call's
    result (u4); the last row (u6) continues from the second call's result
    and reaches the batch's first record (u2, the checkpoint's parent)
    through the batch's other record (u3): the last row wins."""
    t = Transcript(SID)
    batch(t)
    t.records.append({"type": "last-prompt", "sessionId": SID, "lastPrompt": "prompt",
                      "leafUuid": u(4)})
    return t.records


def shape_checkpoint_on_a_sibling_result_explicit():
    """The same with ``explicit: true`` (Go): no batch rule, the checkpoint
    is the leaf."""
    records = shape_checkpoint_on_a_sibling_result()
    records[-1]["explicit"] = True
    return records


def shape_checkpoint_on_a_result_of_one_record_batch():
    """One assistant record with two tool_use blocks; the checkpoint is one
    result, the last row continues from the other (Kin's ``_e`` rule)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message={
        "id": "msg_P", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {}},
                    {"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": {}}]})
    t.add(u(4), u(2), "user", message=tool_result("toolu_a"))
    t.add(u(5), u(2), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the results"))
    t.records.append({"type": "last-prompt", "sessionId": SID, "lastPrompt": "prompt",
                      "leafUuid": u(4)})
    return t.records


# --- g. A Skill body on a sibling branch (#81917) -----------------------------

SKILL_BODY = "Base directory for this skill: /tmp/skills/otter\n\nThe otter skill's body."


def shape_skill_in_parallel(is_meta=True):
    """A Skill call batched with a Bash call: the Skill's result (u4) is
    followed by the expanded body, a user text record (u7) hanging from it,
    and the next answer continues from the Bash result (u5)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message={
        "id": "msg_P", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "tool_use", "id": "toolu_s", "name": "Skill",
                     "input": {"skill": "otter"}}]})
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(4), u(2), "user", message={"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_s", "content": "Launching skill: otter"}]})
    fields = {"isMeta": True} if is_meta else {}
    t.add(u(7), u(4), "user", sourceToolUseID="toolu_s", **fields,
          message={"role": "user", "content": [{"type": "text", "text": SKILL_BODY}]})
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the skill and the command"))
    return t.records


def shape_skill_body_under_a_progress_record():
    """The Skill body hangs from a progress record (written before it) that
    hangs from the Skill's result: the loader reads the body's parent
    through the progress record, and puts the body back with the result as
    if it hung from it."""
    records = shape_skill_in_parallel(is_meta=True)
    body = next(r for r in records if r.get("sourceToolUseID") == "toolu_s")
    progress = {"type": "progress", "uuid": u(8), "parentUuid": u(4), "isSidechain": False,
                "sessionId": SID, "timestamp": body["timestamp"],
                "data": {"type": "hook_progress", "hookName": "PostToolUse:Skill"}}
    records.insert(records.index(body), progress)
    body["parentUuid"] = u(8)
    return records


def shape_skill_in_parallel_meta():
    return shape_skill_in_parallel(is_meta=True)


def shape_skill_in_parallel_not_meta():
    return shape_skill_in_parallel(is_meta=False)


# --- h. <synthetic> assistant records that are not API errors -----------------

def synthetic(words):
    return {"id": "4f1c7c1e-2b7e-4c55-9d3c-0a0b0c0d0e0f", "type": "message", "role": "assistant",
            "model": "<synthetic>", "stop_reason": "stop_sequence", "stop_sequence": "",
            "content": [{"type": "text", "text": words}],
            "usage": {"input_tokens": 0, "output_tokens": 0}}


def shape_no_response_requested_mid():
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_2", "a real answer"))
    t.add(u(3), u(2), "user", message={"role": "user",
                                       "content": "Continue from where you left off."})
    t.add(u(4), u(3), "assistant", isApiErrorMessage=False,
          message=synthetic("No response requested."))
    t.add(u(5), u(4), "user")
    t.add(u(6), u(5), "assistant", message=text("msg_6", "the last answer"))
    return t.records


def shape_no_response_requested_tail():
    return shape_no_response_requested_mid()[:4]


def shape_no_content_mid():
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", isApiErrorMessage=False, message=synthetic("(no content)"))
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", message=text("msg_4", "the last answer"))
    return t.records


def shape_interrupt():
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_2", "a partial answer"))
    t.add(u(3), u(2), "user", message={"role": "user", "content": [
        {"type": "text", "text": "[Request interrupted by user]"}]})
    t.add(u(4), u(3), "user")
    t.add(u(5), u(4), "assistant", message=text("msg_5", "the last answer"))
    return t.records


# --- i. A parent with two children (#88597) -----------------------------------

def shape_two_replies_to_one_prompt():
    """Two assistant children of one prompt (a reply delivered, then a
    second one written later): the walk from the last row keeps one."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the delivered reply"))
    t.add(u(3), u(1), "assistant", message=text("msg_3", "the second reply"))
    return t.records


def shape_two_replies_checkpoint_on_the_first():
    records = shape_two_replies_to_one_prompt()
    records.append({"type": "last-prompt", "sessionId": SID, "lastPrompt": "prompt",
                    "leafUuid": u(2)})
    return records


# --- j. A uuid written again after the last boundary (#92089) -----------------

def copied_after_the_boundary(kept: bool):
    """kRr(): the relink numbers the loaded records in the order their uuid
    was first loaded (a Map keeps a key where it was first set, with the
    last line's record as its value) and drops those before the last
    boundary. A second /compact re-appends copies of earlier records with
    their own uuid, parent and time (#92089): a copy of u2 after the
    boundary keeps u2's place before it, so it is dropped, and the prompt
    written under the copy hangs from the kept tail (kept=True) or from
    nothing (its parent gone, no fallback within 5 s)."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the copied answer"), ts=at(1))
    meta = {"trigger": "manual", "preTokens": 100}
    if kept:
        t.add(u(3), u(2), "user", ts=at(2))
        t.add(u(4), u(3), "assistant", message=text("msg_4", "the kept answer"), ts=at(3))
        meta["preservedSegment"] = {"headUuid": u(3), "anchorUuid": u(6), "tailUuid": u(4)}
    else:
        meta["preservedMessages"] = {"anchorUuid": u(6), "uuids": []}
    t.add(u(5), None, "system", subtype="compact_boundary", content="Conversation compacted",
          logicalParentUuid=u(4) if kept else u(2), compactMetadata=meta, ts=at(100))
    t.add(u(6), u(5), "user", isCompactSummary=True, ts=at(100.1),
          message={"role": "user", "content": "summary of the earlier conversation"})
    t.records.append(dict(t.records[1]))
    t.add(u(7), u(2), "user", ts=at(200))
    t.add(u(8), u(7), "assistant", message=text("msg_8", "after the copy"), ts=at(201))
    return t.records


def shape_copy_after_the_boundary_is_dropped():
    return copied_after_the_boundary(kept=False)


def shape_copy_after_the_boundary_with_a_kept_tail():
    return copied_after_the_boundary(kept=True)


# --- What the CLI sends, and whether the index agrees ---------------------------

# Per shape: the assistant texts the CLI sends, in order (before the reply to
# the ping), and user texts it must and must not send.
EXPECTED = {
    "self_parent": (["reached by the fallback", "the tail"], [], []),
    "ring_with_an_earlier_root": (["before the ring", "in the ring", "off the ring"], [], []),
    "fallback_skips_the_walk": (["found past the walk", "written before its parent's time"],
                                [], []),
    "cleaned_blocks": (["the kept block", "a string answer"], ["the prompt"],
                       ["a bare string", "no type"]),
    "every_block_removed": (["the first answer", "after the dropped ones"], [], ["no type"]),
    "empty_list": (["before the empty one", "after the empty one"], [], []),
    "newest_descendant_of_the_last_row": (["the first answer", "the newer child"], [], []),
    "older_descendant_of_the_last_row": (["the first answer", "older than its parent"], [], []),
    # The leaf is a prompt: the CLI sends its own placeholder after it.
    "descendant_of_the_last_row_with_a_checkpoint": (
        ["the first answer", "No response requested."], [], []),
    "sent_as_uuid": (["before the prompt stored anew", "answers the sentAsUuid"],
                     ["the prompt stored anew"], []),
    "sent_as_uuid_already_loaded": (["the first answer", "answers the copy"],
                                    ["the copy keeps its uuid"], [u(3)]),
    "fork_briefing_not_a_row": (["the first answer", "the last row's answer"], [], []),
    "fork_briefing_on_the_leaf": (["the answer before the fork"],
                                  ["You are a fork of the session; carry on."], []),
    "checkpoint_on_a_sibling_result": (["after the batch"], [], []),
    "checkpoint_on_a_sibling_result_explicit": (["No response requested."], [], []),
    "checkpoint_on_a_result_of_one_record_batch": (["after the results"], [], []),
    "skill_in_parallel_meta": (["after the skill and the command"], [SKILL_BODY], []),
    "skill_in_parallel_not_meta": (["after the skill and the command"], [], [SKILL_BODY]),
    "skill_body_under_a_progress_record": (["after the skill and the command"], [SKILL_BODY],
                                           []),
    "no_response_requested_mid": (["a real answer", "No response requested.",
                                   "the last answer"], [], []),
    "no_response_requested_tail": (["a real answer", "No response requested."], [], []),
    # "(no content)" (xm) is not sent; the prompts around it are merged.
    "no_content_mid": (["the last answer"], [], []),
    "interrupt": (["a partial answer", "the last answer"], ["[Request interrupted by user]"], []),
    "two_replies_to_one_prompt": (["the second reply"], [], []),
    "two_replies_checkpoint_on_the_first": (["the delivered reply"], [], []),
    "copy_after_the_boundary_is_dropped": (["after the copy"], [], []),
    "copy_after_the_boundary_with_a_kept_tail": (["the kept answer", "after the copy"], [], []),
}

# The shapes where the index (as of this commit) differs from the CLI: why.
DIFFERS: dict = {}

SHAPES = {name: globals()[f"shape_{name}"] for name in EXPECTED}
_SENT: dict = {}


def user_texts(sent) -> list[str]:
    return [b.get("text") or "" for m in sent.messages if m.get("role") == "user"
            for b in oracle._blocks(m) if b.get("type") == "text"]


def sent_for(api, name, path):
    """What the CLI sent for shape ``name`` (resumed once per module)."""
    if name not in _SENT:
        _SENT[name] = oracle.resume_sent(path.read_bytes(), SID, api, CLAUDE)
    return _SENT[name]


def write_shape(index, name):
    return write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", SHAPES[name]())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_what_the_cli_sends(index, api, name):
    sent = sent_for(api, name, write_shape(index, name))
    assistant, user_has, user_lacks = EXPECTED[name]
    assert sent.assistant_texts() == assistant
    texts = "\n".join(user_texts(sent))
    assert all(t in texts for t in user_has), texts
    assert not any(t in texts for t in user_lacks), texts


def user_record_verdicts(index, fid) -> dict:
    """uuid -> (kept, its text) for each non-tool_result user record the
    index gives a verdict (on the chain, put back, or dropped)."""
    from indexer.repair import verify

    out = {}
    for row in index.rows(verify.RECORDS_BY_VERDICT_SQL, {"file_id": fid}):
        if row["type"] != "user" or row["verdict"] is None:
            continue
        content = json.loads(row["raw"]).get("message", {}).get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else [
            b for b in content or [] if isinstance(b, dict)]
        if any(b.get("type") == "tool_result" for b in blocks):
            continue
        words = "\n".join(b.get("text") or "" for b in blocks if b.get("type") == "text")
        if words:
            out[row["uuid"]] = (row["verdict"] == "kept", words)
    return out


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=DIFFERS[n]))
    if n in DIFFERS else n for n in sorted(EXPECTED)])
def test_the_index_agrees(index, api, name):
    from indexer.repair import verify

    path = write_shape(index, name)
    index.ingest()
    fid = index.file_id(path)
    sent = sent_for(api, name, path)
    kept_not_sent, sent_but_dropped, _ = verify.compare(index.db.conn, fid, sent)
    assert (kept_not_sent, sent_but_dropped) == ([], [])
    # verify compares assistant text and tool ids only: user text records
    # (a Skill body, a prompt) are held to what was sent here.
    texts = "\n".join(user_texts(sent))
    differ = {uuid: kept for uuid, (kept, words) in user_record_verdicts(index, fid).items()
              if kept != (words in texts)}
    assert differ == {}
