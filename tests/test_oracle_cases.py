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


def shape_sent_as_uuid_over_an_earlier_line_of_its_uuid():
    """trn() keys a record stored anew by its sentAsUuid, so an earlier line
    of its own uuid (u9, an attachment under the leaf message) keeps its
    own place in the Map: the attachment is put back and sent. (The index
    reads the last line of a uuid: the record stored anew, a sidechain
    user record here, and the attachment is lost.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the leaf answer"))
    hook_context(t, u(9), u(2), "the hook before the copy")
    t.add(u(9), u(1), "user", sentAsUuid=u(3), isSidechain=True,
          message={"role": "user", "content": "stored anew on the side"})
    return t.records


def shape_sent_as_uuid_under_a_later_line_of_its_uuid():
    """The other order: the prompt stored anew (u9, loaded as u3) comes
    first and a later line of its own uuid (u9, a hook attachment under the
    answer to u3) is a record of its own, the last row; it does not replace
    the prompt, which keys u3. The CLI sends the prompt, its answer and the
    hook. (Lines 10 s apart: no timestamp fallback reads on past a wrong
    parent.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10),
          message=text("msg_2", "before the prompt stored anew"))
    t.add(u(9), u(2), "user", ts=at(20), sentAsUuid=u(3),
          message={"role": "user", "content": "the prompt stored anew"})
    t.add(u(4), u(3), "assistant", ts=at(30), message=text("msg_4", "answers the sentAsUuid"))
    hook_context(t, u(9), u(4), "the hook after the copy", ts=at(40))
    return t.records


def shape_sent_as_uuid_over_an_earlier_prompt_with_children():
    """Both lines of u9 have children: the earlier prompt u9 is answered
    (u5, naming u9), the prompt stored anew under u9 for u3 hangs from
    that answer and is answered by u6 (naming u3). The Map holds u9 (the
    earlier prompt) and u3 (the copy): the chain is u1 u2 u9 u5 u3 u6.
    (Lines 10 s apart, as above.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(9), u(2), "user", ts=at(20),
          message={"role": "user", "content": "the earlier prompt"})
    t.add(u(5), u(9), "assistant", ts=at(30),
          message=text("msg_5", "answers the earlier prompt"))
    t.add(u(9), u(5), "user", ts=at(40), sentAsUuid=u(3),
          message={"role": "user", "content": "the copy under its own uuid"})
    t.add(u(6), u(3), "assistant", ts=at(50), message=text("msg_6", "answers the copy"))
    return t.records


def shape_sent_as_uuid_replaced_over_an_earlier_line_of_its_uuid():
    """Across a rewrite: an earlier line of u9 (a hook under the leaf
    answer), the prompt stored anew under u9 for u3 (on the side), then a
    line of u3 that replaces the copy in the Map (the prompt rewritten
    under its sent uuid, on the side too). u9 stays the hook: the CLI
    resumes from the leaf answer and sends the hook."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the leaf answer"))
    hook_context(t, u(9), u(2), "the hook before the copy")
    t.add(u(9), u(1), "user", sentAsUuid=u(3), isSidechain=True,
          message={"role": "user", "content": "stored anew on the side"})
    t.add(u(3), u(1), "user", isSidechain=True,
          message={"role": "user", "content": "rewritten under the sent uuid"})
    return t.records


def shape_progress_line_of_the_uuid_of_a_prompt_stored_anew():
    """As below, the later line of the progress record's uuid a prompt
    stored anew (named by its sentAsUuid u3: the same answer)."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(9), u(2), "progress", ts=at(20), data={"type": "hook_progress"})
    t.add(u(4), u(9), "assistant", ts=at(30), message=text("msg_4", "under the progress"))
    t.add(u(9), u(1), "user", ts=at(40), sentAsUuid=u(3), isSidechain=True,
          message={"role": "user", "content": "stored anew on the side"})
    return t.records


def shape_progress_line_of_the_uuid_of_a_later_line():
    """xr(): a progress line goes to its own Map (``Os.set(tr.uuid, parent)``),
    and a child read after it is read under the progress line's parent
    (``tr.parentUuid = Os.get(...)``) whatever line of that uuid comes later
    (here a user line on the side, which h keys by the same uuid): the CLI
    sends u2 and u4. (Lines 10 s apart: no fallback.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(9), u(2), "progress", ts=at(20), data={"type": "hook_progress"})
    t.add(u(4), u(9), "assistant", ts=at(30), message=text("msg_4", "under the progress"))
    t.add(u(9), u(1), "user", ts=at(40), isSidechain=True,
          message={"role": "user", "content": "a later line of the uuid on the side"})
    return t.records


def shape_progress_line_written_again_as_progress():
    """xr(): a second progress line of a uuid replaces the first in Os from
    its line on: a child read between them is read under the first one's
    parent (u2), a child read after the second under the second's (u6). The
    CLI sends every answer. (Lines 10 s apart: no fallback.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(9), u(2), "progress", ts=at(20), data={"type": "hook_progress"})
    t.add(u(4), u(9), "assistant", ts=at(30),
          message=text("msg_4", "under the first progress line"))
    t.add(u(5), u(4), "user", ts=at(40))
    t.add(u(6), u(5), "assistant", ts=at(50), message=text("msg_6", "the second answer"))
    t.add(u(9), u(6), "progress", ts=at(60), data={"type": "hook_progress"})
    t.add(u(8), u(9), "assistant", ts=at(70),
          message=text("msg_8", "under the second progress line"))
    return t.records


def shape_progress_line_of_a_later_uuid_below_the_leaf():
    """bRr puts back the attachments that hang from the leaf message; one
    read under a progress line (Os) hangs from the leaf whatever line of
    that uuid comes later (here a user line on the side)."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the leaf answer"))
    t.add(u(9), u(2), "progress", ts=at(20), data={"type": "hook_progress"})
    hook_context(t, u(5), u(9), "context under the progress line", ts=at(30))
    t.add(u(9), u(1), "user", ts=at(40), isSidechain=True,
          message={"role": "user", "content": "a later line of the uuid on the side"})
    return t.records


def shape_progress_line_after_a_loaded_line_of_its_uuid():
    """xr(): a progress line never enters h, so a prompt loaded before a
    progress line of its uuid stays loaded (h keeps it) and the answer
    under it continues from it: the CLI sends both answers."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(3), u(2), "user", ts=at(20))
    t.add(u(4), u(3), "assistant", ts=at(30), message=text("msg_4", "the last answer"))
    t.add(u(3), u(2), "progress", ts=at(40), data={"type": "hook_progress"})
    return t.records


def shape_progress_line_after_a_loaded_line_with_children_on_both():
    """Children on both sides of the progress line: the answer read before
    it (u4) hangs from the loaded prompt, h's u3; a prompt read after it
    (u5) is read under the progress line's parent (``Os``). The checkpoint
    names u4: the CLI sends u1, u2, u3 and u4, not u5 nor u6."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(3), u(2), "user", ts=at(20),
          message={"role": "user", "content": "the loaded prompt"})
    t.add(u(4), u(3), "assistant", ts=at(30), message=text("msg_4", "under the loaded prompt"))
    t.add(u(3), u(2), "progress", ts=at(40), data={"type": "hook_progress"})
    t.add(u(5), u(3), "user", ts=at(50),
          message={"role": "user", "content": "read under the progress line"})
    t.add(u(6), u(5), "assistant", ts=at(60), message=text("msg_6", "the last row's answer"))
    t.records.append({"type": "last-prompt", "sessionId": SID, "lastPrompt": "prompt",
                      "leafUuid": u(4), "explicit": True})
    return t.records


def shape_progress_line_between_two_loaded_lines_of_its_uuid():
    """Two loaded lines of u3 with a progress line between them and another
    after: h holds the later loaded line, so the answer read before both
    progress lines (u4, named by the checkpoint) continues from it; the
    CLI sends "the prompt written again", not "the first prompt"."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(3), u(2), "user", ts=at(20),
          message={"role": "user", "content": "the first prompt"})
    t.add(u(4), u(3), "assistant", ts=at(30), message=text("msg_4", "under the prompt"))
    t.add(u(3), u(2), "progress", ts=at(40), data={"type": "hook_progress"})
    t.add(u(3), u(2), "user", ts=at(50),
          message={"role": "user", "content": "the prompt written again"})
    t.add(u(3), u(2), "progress", ts=at(60), data={"type": "hook_progress"})
    t.records.append({"type": "last-prompt", "sessionId": SID, "lastPrompt": "prompt",
                      "leafUuid": u(4), "explicit": True})
    return t.records


def shape_attachment_before_a_progress_line_of_its_uuid():
    """A hook attachment under the leaf answer and then a progress line of
    its uuid: h keeps the attachment, which bRr puts back after the walk."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the leaf answer"))
    hook_context(t, u(5), u(2), "context before the progress line", ts=at(20))
    t.add(u(5), u(2), "progress", ts=at(30), data={"type": "hook_progress"})
    return t.records


def shape_progress_line_of_the_uuid_of_an_unreadable_record():
    """An unreadable prompt (u3: content 7) and then a progress line of its
    uuid: admit() keeps the unreadable record out of h and notes its parent
    (Ysn's ``n``), so the answer read before the progress line (u4) hangs
    from u2 at finish(): the CLI sends both answers. (Lines 10 s apart.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(3), u(2), "user", ts=at(20), message={"role": "user", "content": 7})
    t.add(u(4), u(3), "assistant", ts=at(30),
          message=text("msg_4", "under the unreadable prompt"))
    t.add(u(3), u(1), "progress", ts=at(40), data={"type": "hook_progress"})
    return t.records


def shape_unreadable_line_after_a_loaded_line_of_its_uuid():
    """admit() never puts an unreadable line in h, so a prompt loaded before
    an unreadable line of its uuid (a root here) stays the record of u3:
    the CLI sends u1 to u4. (Lines 10 s apart.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(3), u(2), "user", ts=at(20),
          message={"role": "user", "content": "the loaded prompt"})
    t.add(u(4), u(3), "assistant", ts=at(30), message=text("msg_4", "the last answer"))
    t.add(u(3), None, "user", ts=at(40), message={"role": "user", "content": 7})
    return t.records


def shape_sent_as_uuid_of_a_line_keyed_by_its_sent_as():
    """trn() asks h whether a sentAsUuid is loaded, and h is keyed by the
    loader's keys: u9 (stored anew for u3, so keyed u3) leaves u9 free, and
    a later prompt stored anew for u9 (u7) is keyed u9: the answer naming
    u9 (u5) continues from u7, whose parent u4 answers u3. The CLI sends
    every answer and both prompts. (Lines 10 s apart.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(9), u(2), "user", ts=at(20), sentAsUuid=u(3),
          message={"role": "user", "content": "the first prompt stored anew"})
    t.add(u(4), u(3), "assistant", ts=at(30), message=text("msg_4", "answers the first prompt"))
    t.add(u(7), u(4), "user", ts=at(40), sentAsUuid=u(9),
          message={"role": "user", "content": "the second prompt stored anew"})
    t.add(u(5), u(9), "assistant", ts=at(50), message=text("msg_5", "answers the second prompt"))
    return t.records


def shape_sent_as_uuid_chain_of_three_keys():
    """Three prompts stored anew, each for the uuid of the one before: u9
    for u3 (keyed u3), u7 for u9 (keyed u9: h holds u3, not u9), u6 for u7
    (keyed u7). Each answer names the sentAsUuid of its prompt; the CLI
    sends every answer and all three prompts. (Lines 10 s apart.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(9), u(2), "user", ts=at(20), sentAsUuid=u(3),
          message={"role": "user", "content": "the first prompt stored anew"})
    t.add(u(4), u(3), "assistant", ts=at(30), message=text("msg_4", "answers the first prompt"))
    t.add(u(7), u(4), "user", ts=at(40), sentAsUuid=u(9),
          message={"role": "user", "content": "the second prompt stored anew"})
    t.add(u(5), u(9), "assistant", ts=at(50), message=text("msg_5", "answers the second prompt"))
    t.add(u(6), u(5), "user", ts=at(60), sentAsUuid=u(7),
          message={"role": "user", "content": "the third prompt stored anew"})
    t.add(u(8), u(7), "assistant", ts=at(70), message=text("msg_8", "answers the third prompt"))
    return t.records


def shape_sent_as_uuid_after_an_unreadable_prompt_keyed_by_it():
    """Two prompts stored anew for u3: the first (u9) is unreadable, so
    admit() keeps its key u3 out of h, and the second (u7) is keyed u3
    too and is the record of u3: the answer naming u3 continues from it.
    The CLI sends the second prompt and its answer, not the first.
    (Lines 10 s apart.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(9), u(2), "user", ts=at(20), sentAsUuid=u(3), message={"role": "user", "content": 7})
    t.add(u(7), u(2), "user", ts=at(30), sentAsUuid=u(3),
          message={"role": "user", "content": "the readable prompt stored anew"})
    t.add(u(4), u(3), "assistant", ts=at(40),
          message=text("msg_4", "answers the readable prompt"))
    return t.records


def shape_sent_as_uuid_of_an_unreadable_line():
    """trn() asks the loader's Map whether a sentAsUuid is loaded, and an
    unreadable line never enters it: a prompt stored anew for u3 after an
    unreadable line of u3 is keyed u3 and takes its place; the answer
    naming u3 continues from the prompt. The CLI sends the prompt stored
    anew. (Lines 10 s apart.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(3), u(2), "user", ts=at(20), message={"role": "user", "content": 7})
    t.add(u(9), u(2), "user", ts=at(30), sentAsUuid=u(3),
          message={"role": "user", "content": "the prompt stored anew"})
    t.add(u(4), u(3), "assistant", ts=at(40),
          message=text("msg_4", "answers the prompt stored anew"))
    return t.records


def shape_sent_as_uuid_before_an_unreadable_line_of_it():
    """The other order: an unreadable line of u3 (a root) after the prompt
    stored anew for u3 does not replace it in the Map (admit() keeps it
    out): the answer naming u3 continues from the prompt. The CLI sends
    the prompt and both answers. (Lines 10 s apart.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    t.add(u(9), u(2), "user", ts=at(20), sentAsUuid=u(3),
          message={"role": "user", "content": "the prompt stored anew"})
    t.add(u(4), u(3), "assistant", ts=at(30),
          message=text("msg_4", "answers the prompt stored anew"))
    t.add(u(3), None, "user", ts=at(40), message={"role": "user", "content": 7})
    return t.records


def shape_unreadable_prompt_stored_anew_beside_a_line_of_its_uuid():
    """An unreadable prompt stored anew (u9 for u3, content 7) after a hook
    attachment of its own uuid u9: trn() keys it u3, admit() drops it and
    notes u3's parent (u2), so the answer naming u3 hangs from u2. The CLI
    sends both answers. (Lines 10 s apart.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", ts=at(10), message=text("msg_2", "the first answer"))
    hook_context(t, u(9), u(2), "the hook of the uuid", ts=at(20))
    t.add(u(9), u(2), "user", ts=at(30), sentAsUuid=u(3),
          message={"role": "user", "content": 7})
    t.add(u(4), u(3), "assistant", ts=at(40),
          message=text("msg_4", "answers the unreadable prompt"))
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


# --- k. Put-back lines read through a sentAsUuid or a compaction's relink ------

def meta_text(t, uuid, parent, words):
    """An isMeta user text record: a companion record the CLI sends as text."""
    return t.add(uuid, parent, "user", isMeta=True,
                 message={"role": "user", "content": [{"type": "text", "text": words}]})


def hook_context(t, uuid, parent, words, ts=None):
    """A hook's additional-context attachment (sent as a system text)."""
    return t.add(uuid, parent, "attachment", ts=ts, attachment={
        "type": "hook_additional_context", "content": [words], "hookName": "PostToolUse"})


def two_calls(t):
    """A prompt and one API response (msg_P) written as two assistant
    records, one tool call each."""
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))


def shape_line_under_a_sent_as_result():
    """RRr reads the loader's map, where trn() loaded the first call's
    result (u9) under its sentAsUuid (u4): the meta record naming u4 hangs
    from that result and is put back with it."""
    t = Transcript(SID)
    two_calls(t)
    t.add(u(9), u(2), "user", sentAsUuid=u(4), message=tool_result("toolu_a"))
    meta_text(t, u(7), u(4), "the line under the renamed result")
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_line_under_a_relinked_result():
    """kRr() runs before RRr: a meta record hanging from the summary (the
    anchor) is moved under the kept tail, a tool result of a kept response,
    and put back with it (the next prompt moved there too is the chain)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the early answer"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(4), u(3), "user", message=tool_result("toolu_a"))
    meta = {"trigger": "manual", "preTokens": 100,
            "preservedSegment": {"headUuid": u(3), "anchorUuid": u(6), "tailUuid": u(4)}}
    t.add(u(5), None, "system", subtype="compact_boundary", content="Conversation compacted",
          logicalParentUuid=u(4), compactMetadata=meta)
    t.add(u(6), u(5), "user", isCompactSummary=True,
          message={"role": "user", "content": "summary of the earlier conversation"})
    meta_text(t, u(10), u(6), "the line relinked under the kept result")
    t.add(u(7), u(6), "user")
    t.add(u(8), u(7), "assistant", message=text("msg_8", "after the compaction"))
    return t.records


# --- l. Only the responses RRr has reached are visited --------------------------

def shape_line_meets_a_later_response():
    """RRr takes the chain's responses root first and marks a response's
    records visited when it reaches it: the line under the first response's
    result (u10, u11) meets a record of the second response (u5, off the
    chain, not yet visited), so u10 has two unvisited children and the line
    is left whole; u5 and its result are put back with their response."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_A", "toolu_a"))
    t.add(u(3), u(2), "user", message=tool_result("toolu_a"))
    meta_text(t, u(10), u(3), "line X")
    meta_text(t, u(11), u(10), "line Y")
    t.add(u(4), u(3), "assistant", message=tool_use("msg_B", "toolu_b1"))
    t.add(u(5), u(10), "assistant", message=tool_use("msg_B", "toolu_b2"))
    t.add(u(6), u(4), "user", message=tool_result("toolu_b1"))
    t.add(u(7), u(5), "user", message=tool_result("toolu_b2"))
    t.add(u(8), u(6), "assistant", message=text("msg_C", "after both"))
    return t.records


# --- m. isVirtual records on a put-back line -------------------------------------

def virtual_on_a_line(kind):
    """nMe()'s s_r(): a line may run through an isVirtual user tool_result
    or assistant tool_use record (z8); the meta record below it is put back
    and sent (the virtual record itself is not sent)."""
    t = Transcript(SID)
    two_calls(t)
    t.add(u(4), u(2), "user", message=tool_result("toolu_a"))
    if kind == "user":
        t.add(u(7), u(4), "user", isVirtual=True, message=tool_result("toolu_v"))
    else:
        t.add(u(7), u(4), "assistant", isVirtual=True, message=tool_use("msg_V", "toolu_v"))
    meta_text(t, u(8), u(7), "below the virtual record")
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_virtual_user_record_on_a_line():
    return virtual_on_a_line("user")


def shape_virtual_assistant_record_on_a_line():
    return virtual_on_a_line("assistant")


# --- n. The tengu_foamy_spring family (on by default) ----------------------------

def shape_rows_ahead_of_put_back(named=True):
    """Krn(): a tool_result record on the chain naming ``rowsAheadOfPutBack``
    (companion records off the chain) puts them on the chain after the
    visited record they hang under (l_r's hangUnder, here the prompt)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    meta_text(t, u(10), u(1), "the row ahead")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    fields = {"rowsAheadOfPutBack": [u(10)]} if named else {}
    t.add(u(3), u(2), "user", message=tool_result("toolu_a"), **fields)
    t.add(u(4), u(3), "assistant", message=text("msg_Q", "after the result"))
    return t.records


def shape_rows_ahead_not_named():
    return shape_rows_ahead_of_put_back(named=False)


def queued_text(t, uuid, parent, words):
    """A prompt queued while a tool ran (``queueTranscriptOnly``): a row the
    CLI's writer (Ct(), behind a flag) names in the result's
    ``rowsAheadOfPutBack``; l_r() takes it as a row to put back."""
    return t.add(uuid, parent, "user", queueTranscriptOnly=True,
                 message={"role": "user", "content": [{"type": "text", "text": words}]})


def rows_ahead_of_the_call(names, more=None):
    """The writer's shape: a prompt, a call (msg_P), a queued prompt (u10)
    written under the call's record while the tool ran (and what ``more``
    adds), the result naming ``names``, the answer after it."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    queued_text(t, u(10), u(2), "the queued row")
    if more:
        more(t)
    t.add(u(3), u(2), "user", message=tool_result("toolu_a"), rowsAheadOfPutBack=names)
    t.add(u(4), u(3), "assistant", message=text("msg_Q", "after the result"))
    return t.records


def shape_rows_ahead_under_the_call():
    """The queued prompt named by the result: put back after the call."""
    return rows_ahead_of_the_call([u(10)])


def shape_rows_ahead_of_a_plain_prompt():
    """l_r's row_kind: a row that is neither a companion record nor a
    queued prompt (a plain prompt) is not put back, nor are the others."""
    return rows_ahead_of_the_call([u(10), u(11)], lambda t: t.add(
        u(11), u(10), "user", message={"role": "user", "content": "the plain row"}))


def shape_rows_ahead_not_loaded():
    """l_r's row_not_loaded: a named row that is not in the file: none of
    them is put back."""
    return rows_ahead_of_the_call([u(10), u(99)])


def shape_rows_ahead_one_on_the_chain():
    """A named row already visited (the prompt on the chain) is skipped;
    the other is put back."""
    return rows_ahead_of_the_call([u(1), u(10)])


def shape_rows_ahead_hang_before_the_reply():
    """Krn: rows that hang under a record before the reply's first record's
    parent (an earlier answer) are not put back (row_hangs_elsewhere)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_A", "the first answer"))
    meta_text(t, u(10), u(2), "the row under the first answer")
    t.add(u(5), u(2), "user")
    t.add(u(6), u(5), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(6), "user", message=tool_result("toolu_a"), rowsAheadOfPutBack=[u(10)])
    t.add(u(4), u(3), "assistant", message=text("msg_Q", "after the result"))
    return t.records


def rows_ahead_in_a_batch(under, result_on_chain):
    """One response (msg_P) with two calls as two records (u2, u3), a
    queued row under ``under``; the result naming it is the chain's (u5,
    of the second call) or the first call's, put back (u4)."""
    t = Transcript(SID)
    two_calls(t)
    queued_text(t, u(10), under, "the queued row")
    ahead = {"rowsAheadOfPutBack": [u(10)]}
    t.add(u(4), u(2), "user", message=tool_result("toolu_a"),
          **({} if result_on_chain else ahead))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"), **(ahead if result_on_chain else {}))
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_rows_ahead_past_an_open_call():
    """Krn's a_r(): the row hangs under the first call's record (u2), whose
    call is not answered before it, and another record of the reply (u3)
    comes between it and the result: not put back."""
    return rows_ahead_in_a_batch(u(2), result_on_chain=True)


def shape_rows_ahead_under_the_last_call():
    """The row under the reply's last record (u3), named by the chain's
    result: put back."""
    return rows_ahead_in_a_batch(u(3), result_on_chain=True)


def shape_rows_ahead_of_a_put_back_result():
    """The result naming the row is put back with the batch (u4, of the
    first call), the row hangs under the last record (u3), which comes
    before that result: put back."""
    return rows_ahead_in_a_batch(u(3), result_on_chain=False)


def shape_rows_ahead_of_a_put_back_result_past_a_call():
    """The put-back result (u4) names a row under the first record (u2):
    the other record (u3) comes between: not put back."""
    return rows_ahead_in_a_batch(u(2), result_on_chain=False)


def shape_rows_ahead_one_on_a_put_back_line():
    """Krn() reads the chain RRr hands it, the put-back lines on it: a named
    row already there (u7, the line under the first call's result) is
    skipped, and the queued row under the call (u10) is put back."""
    t = Transcript(SID)
    two_calls(t)
    queued_text(t, u(10), u(3), "the queued row")
    t.add(u(4), u(2), "user", message=tool_result("toolu_a"))
    meta_text(t, u(7), u(4), "the line under the first result")
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"), rowsAheadOfPutBack=[u(7), u(10)])
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_rows_ahead_under_a_recovered_result():
    """A result recovered by tool-call id (u4, written under an attachment
    that split the reply) is on the chain RRr hands Krn(): a queued row
    under it (u10), named by the chain's result (u5), hangs there, after
    the reply's last record, and is put back."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    hook_context(t, u(12), u(2), "context between the records")
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(4), u(12), "user", message=tool_result("toolu_a"))
    queued_text(t, u(10), u(4), "the queued row")
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"), rowsAheadOfPutBack=[u(10)])
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_rows_ahead_taken_by_an_earlier_result():
    """Krn() takes the results in the chain's order, and the rows one puts
    back are on the chain for the next: the put-back result (u4) puts back
    the queued row under the second call (u10); the chain's result (u5)
    names it too, with another queued row under the prompt (u11): u10 is
    skipped, so u11 alone hangs under one record and is put back."""
    records = rows_ahead_in_a_batch(u(3), result_on_chain=False)
    prompt_row = next(i for i, r in enumerate(records) if r.get("uuid") == u(10))
    t = Transcript(SID)
    queued_text(t, u(11), u(1), "the second queued row")
    records[prompt_row + 1:prompt_row + 1] = t.records
    result = next(r for r in records if r.get("uuid") == u(5))
    result["rowsAheadOfPutBack"] = [u(10), u(11)]
    return records


def shape_rows_ahead_under_a_row_put_back_before():
    """A row an earlier result put back is on the chain for the next: the
    put-back result (u4) puts back the queued row under the second call
    (u10); the chain's result (u8, of a third call) names a queued row
    under u10 (u11), which hangs there (a user record), so the open calls
    and the call record between (u7) do not hold it back."""
    t = Transcript(SID)
    two_calls(t)
    queued_text(t, u(10), u(3), "the queued row")
    queued_text(t, u(11), u(10), "the row under the queued row")
    t.add(u(4), u(2), "user", message=tool_result("toolu_a"), rowsAheadOfPutBack=[u(10)])
    t.add(u(7), u(3), "assistant", message=tool_use("msg_P", "toolu_c"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(8), u(7), "user", message=tool_result("toolu_c"), rowsAheadOfPutBack=[u(11)])
    t.add(u(9), u(8), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_rows_ahead_of_a_result_written_before_its_call():
    """Krn() compares places in the chain's order: a result flushed before
    the call it answers (u3, written before u2) comes after it on the
    chain, so the queued row under the call (u10) hangs before the result
    and is put back (the index compares lines, where the result comes
    first)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(3), u(2), "user", message=tool_result("toolu_a"), rowsAheadOfPutBack=[u(10)])
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    queued_text(t, u(10), u(2), "the queued row")
    t.add(u(4), u(3), "assistant", message=text("msg_Q", "after the result"))
    return t.records


def shape_rows_ahead_both_sides_of_a_result_written_before_its_call():
    """The result flushed before its call (u3 before u2) names two queued
    rows under the call, one written before the result's line (u9) and
    one after the call's (u10): on the loader's chain both hang after the
    call, before the result, and are put back (by line, the call and one
    row come after the result)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    queued_text(t, u(9), u(2), "the row written first")
    t.add(u(3), u(2), "user", message=tool_result("toolu_a"), rowsAheadOfPutBack=[u(9), u(10)])
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    queued_text(t, u(10), u(2), "the queued row")
    t.add(u(4), u(3), "assistant", message=text("msg_Q", "after the result"))
    return t.records


def shape_rows_ahead_under_a_record_written_before_the_result():
    """The queued row (u10) hangs under an attachment (u7) that hangs under
    the result (u3) but is written before it: on the loader's chain u7
    comes after the result, so the row hangs past it and is not put back
    (by line, u7 comes between the call and the result)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    hook_context(t, u(7), u(3), "context after the result")
    queued_text(t, u(10), u(7), "the queued row")
    t.add(u(3), u(2), "user", message=tool_result("toolu_a"), rowsAheadOfPutBack=[u(10)])
    t.add(u(4), u(7), "assistant", message=text("msg_Q", "after the result"))
    return t.records


def shape_rows_ahead_of_two_results_one_written_early():
    """Krn() takes the results in the chain's order: two calls one after
    the other (msg_P, msg_R), the second's result (u6) written before the
    first's (u3). u3 puts back the queued row under its call (u10); u6
    names it again (skipped) with a row under its own call (u11), which is
    put back. In line order u6 would come first, its two rows hang under
    different records, and u11 would be left out."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    queued_text(t, u(10), u(2), "the queued row")
    t.add(u(6), u(5), "user", message=tool_result("toolu_b"), rowsAheadOfPutBack=[u(10), u(11)])
    t.add(u(3), u(2), "user", message=tool_result("toolu_a"), rowsAheadOfPutBack=[u(10)])
    t.add(u(5), u(3), "assistant", message=tool_use("msg_R", "toolu_b"))
    queued_text(t, u(11), u(5), "the second queued row")
    t.add(u(7), u(6), "assistant", message=text("msg_Q", "after the calls"))
    return t.records


def shape_rows_ahead_past_a_call_answered_before_it_is_made():
    """Krn's a_r() reads the span in the chain's order: three calls of one
    response (u2, u3, u7), the first two answered by results written before
    the second call (u4, u5: put back before it, by load order). The
    second call's result comes before the call, so the call is open at u3,
    where the queued row (u10) hangs; another record of the response (u7)
    comes between it and the result naming it (u8): not put back. (Read as
    a set, every call up to u3 is answered, and the row is put back.)"""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(4), u(2), "user", message=tool_result("toolu_a"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    queued_text(t, u(10), u(3), "the queued row")
    t.add(u(7), u(3), "assistant", message=tool_use("msg_P", "toolu_c"))
    t.add(u(8), u(7), "user", message=tool_result("toolu_c"), rowsAheadOfPutBack=[u(10)])
    t.add(u(9), u(8), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_rows_ahead_under_a_result_recovered_after_the_reply():
    """RRr() puts a result recovered by tool-call id (u4, written under an
    attachment that split the reply, before the second call u3) no
    earlier than just after the reply's last record: with the chain's
    result (u5) written before u3 too, u4 comes after u5 on the loader's
    chain, so the queued row under u4 (u10), named by u5, hangs past the
    result and is not put back (by its own line, u4 would come first)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    hook_context(t, u(12), u(2), "context between the records")
    t.add(u(4), u(12), "user", message=tool_result("toolu_a"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"), rowsAheadOfPutBack=[u(10)])
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    queued_text(t, u(10), u(4), "the queued row")
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def put_back_result_stored_anew(early_line):
    """rows_ahead_of_a_put_back_result with the put-back result (u4, of the
    first call, naming the queued row under the second call's record u3)
    read through a sentAsUuid. The loader's Map holds a record at the place
    of its key's first line, and the key of a prompt stored anew is its
    sentAsUuid (trn()); RRr() places what it puts back by that place."""
    t = Transcript(SID)
    two_calls(t)
    queued_text(t, u(10), u(3), "the queued row")
    early = Transcript(SID)
    result = {"message": tool_result("toolu_a"), "rowsAheadOfPutBack": [u(10)]}
    if early_line == "own uuid":
        # a line of the stored-anew record's own uuid (u9) before the call
        # record u3: an attachment under no loaded record
        hook_context(early, u(9), "ffffffff-0000-0000-0000-00000000dead", "a stray hook")
        late = ("user", u(9), dict(result, sentAsUuid=u(4)))
    else:
        # the record stored anew for u4 first (u9), then a line of u4 itself,
        # which takes its place in the Map
        early.add(u(9), u(2), "user", sentAsUuid=u(4), **result)
        late = ("user", u(4), result)
    at_call = next(i for i, r in enumerate(t.records) if r.get("uuid") == u(3))
    t.records[at_call:at_call] = early.records
    kind, uuid, fields = late
    t.add(uuid, u(2), kind, **fields)
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_rows_ahead_of_a_result_stored_anew_after_its_own_uuid():
    """The put-back result stored anew (u9, sentAsUuid u4) is written after
    the call record u3, but a line of its own uuid (u9) comes before u3:
    the loader keys it by u4, first loaded after u3, so the result comes
    after u3, where the row hangs: put back (by its own uuid's first line
    the result would come before u3, and the row would not be)."""
    return put_back_result_stored_anew("own uuid")


def shape_rows_ahead_of_a_result_in_the_place_of_its_sent_as():
    """A record stored anew for u4 (u9) is written before the call record
    u3, and the result u4 itself after u3: in the loader's Map u4 takes
    u9's place (before u3), so the result comes before where the row hangs:
    not put back (by u4's own line it would be)."""
    return put_back_result_stored_anew("sent as")


def open_calls_read_from_any_record(block):
    """a_r() reads the content of user and assistant records alike: a
    tool_use block adds a call, a tool_result block answers one, whatever
    the record's type. One response (msg_P): a call (u2), its result (u4)
    on the chain, a text record of the response (u3), where the queued row
    (u10) hangs, another call (u7, an assistant record between the row and
    the result naming it, u8). ``block``: what u4 holds besides its
    result (a tool_use block: a call a_r() counts open at u3)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    result = tool_result("toolu_a")
    if block is not None:
        result["content"].append(block)
    t.add(u(4), u(2), "user", message=result)
    t.add(u(3), u(4), "assistant", message=text("msg_P", "between the calls"))
    queued_text(t, u(10), u(3), "the queued row")
    t.add(u(7), u(3), "assistant", message=tool_use("msg_P", "toolu_c"))
    t.add(u(8), u(7), "user", message=tool_result("toolu_c"), rowsAheadOfPutBack=[u(10)])
    t.add(u(9), u(8), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_rows_ahead_past_a_call_in_a_row_put_back_before():
    """Krn()'s chain holds the rows an earlier result put back, and a_r()
    reads them: the result on the chain (u4) puts back a queued row under
    the call (u11) that holds a tool_use block; it is open at u3, where the
    row u8 names (u10) hangs, with u7 between: u10 is not put back."""
    records = open_calls_read_from_any_record(None)
    at = next(i for i, r in enumerate(records) if r.get("uuid") == u(4))
    t = Transcript(SID)
    queued_text(t, u(11), u(2), "the row with a call")
    t.records[0]["message"]["content"].append(
        {"type": "tool_use", "id": "toolu_x", "name": "Bash", "input": {}})
    records[at:at] = t.records
    records[at + 1]["rowsAheadOfPutBack"] = [u(11)]
    return records


def shape_rows_ahead_past_a_call_answered_on_the_chain():
    """The control: every call made up to u3 is answered there: put back."""
    return open_calls_read_from_any_record(None)


def shape_rows_ahead_past_a_call_in_a_user_record():
    """A tool_use block in the result's user record (toolu_x) is a call
    a_r() counts open at u3, with another assistant record (u7) before the
    result: not put back."""
    return open_calls_read_from_any_record(
        {"type": "tool_use", "id": "toolu_x", "name": "Bash", "input": {}})


def shape_rows_ahead_past_a_call_answered_in_its_own_record():
    """rows_ahead_past_an_open_call with the first call's record (u2, where
    the row hangs) also holding a tool_result block for its own call after
    the tool_use: a_r() reads it answered, so nothing is open at u2 and the
    row is put back."""
    records = rows_ahead_in_a_batch(u(2), result_on_chain=True)
    call = next(r for r in records if r.get("uuid") == u(2))
    call["message"]["content"].append(
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "answered in place"})
    return records


def shape_result_recovered_under_the_other_result():
    """RRr's recovery by tool-call id: a result (u4) whose parent does not
    hold its tool_use (here the other call's result) is put back with the
    record that does (_e: tool_use id -> its assistant record)."""
    t = Transcript(SID)
    two_calls(t)
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(4), u(5), "user", message=tool_result("toolu_a"))
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_result_of_another_agent_not_recovered():
    """RRr's Y(): a stray result is attached to the holder of its call only
    when both have the same agentId: one written with another agent's is
    not recovered (nor is what hangs from it)."""
    t = Transcript(SID)
    two_calls(t)
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(4), u(5), "user", message=tool_result("toolu_a"), agentId="a0000000000000001")
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_result_attached_by_its_source_tool_assistant_uuid():
    """RRr also attaches a stray result under the record its
    ``sourceToolAssistantUUID`` names (not its parent) when both have the
    same agentId; it recovers it with that record's response when a call
    it answers is held by that response: here the holder (u2) has no
    agentId, the named record (u3) has the result's."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"),
          agentId="a0000000000000001")
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(4), u(5), "user", message=tool_result("toolu_a"), agentId="a0000000000000001",
          sourceToolAssistantUUID=u(3))
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def shape_result_named_source_of_another_agent():
    """The control of the shape above: the record the result's
    ``sourceToolAssistantUUID`` names (u3) has another agentId than the
    result, as its call's holder (u2) has: RRr reads the result under
    neither, so it is not recovered."""
    records = shape_result_attached_by_its_source_tool_assistant_uuid()
    named = next(r for r in records if r.get("uuid") == u(3))
    named["agentId"] = "a0000000000000002"
    return records


def shape_result_named_source_of_another_response():
    """The record the result's ``sourceToolAssistantUUID`` names (u7, of
    the later response msg_Q) has the result's agentId, but that response
    holds none of its calls, and the holder (u2) has another agentId: the
    result is read under u7 and not recovered there."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(7), u(5), "assistant", message=tool_use("msg_Q", "toolu_c"),
          agentId="a0000000000000001")
    t.add(u(4), u(5), "user", message=tool_result("toolu_a"), agentId="a0000000000000001",
          sourceToolAssistantUUID=u(7))
    t.add(u(8), u(7), "user", message=tool_result("toolu_c"))
    t.add(u(6), u(8), "assistant", message=text("msg_R", "after the batch"))
    return t.records


def shape_reply_split_around_an_attachment():
    """A reply written around an attachment: the first call's result hangs
    from the attachment; recovered by its tool-call id, it frees the
    attachment's line (no other unvisited child), which is put back too."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    hook_context(t, u(10), u(2), "context between the records")
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(4), u(10), "user", message=tool_result("toolu_a"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    return t.records


def result_of(tid, words):
    """A tool_result for ``tid`` whose output is ``words``."""
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                         "content": words}]}


def shape_result_under_a_later_response_claims_its_call():
    """RRr takes the chain's responses root first: a result (u4) written
    under a record of a later response (u6, msg_B) that does not hold its
    call is attached to its call's holder (u2, msg_A) too, so msg_A, reached
    first, recovers it and its call is answered; a second result for that
    call (u9, under the prompt), written after it, is not recovered, nor is
    the line under it (u11)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_A", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_A", "toolu_b"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant", message=tool_use("msg_B", "toolu_c"))
    t.add(u(4), u(6), "user", message=result_of("toolu_a", "first out toolu_a"))
    t.add(u(9), u(1), "user", message=result_of("toolu_a", "second out toolu_a"))
    meta_text(t, u(11), u(9), "the line under the second result")
    t.add(u(7), u(6), "user", message=tool_result("toolu_c"))
    t.add(u(8), u(7), "assistant", message=text("msg_Q", "after the calls"))
    return t.records


def rewind_cut(cut: bool):
    """wsn(): an explicit ``last-prompt`` with ``rewound: true`` and a
    ``cutUuid`` naming a non-message record marks it visited before RRr (and
    bRr), so it is not put back; the same checkpoint without the cut puts
    the attachment back with the first call's result."""
    t = Transcript(SID)
    two_calls(t)
    t.add(u(4), u(2), "user", message=tool_result("toolu_a"))
    hook_context(t, u(7), u(4), "context after the first call")
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant", message=text("msg_Q", "after the batch"))
    prompt = {"type": "last-prompt", "sessionId": SID, "lastPrompt": "prompt",
              "leafUuid": u(6), "explicit": True}
    if cut:
        prompt.update(rewound=True, cutUuid=u(7))
    t.records.append(prompt)
    return t.records


def shape_rewind_cut_of_a_uuid_written_again():
    """wsn() reads the record a cutUuid names as the loader has it when it
    reads the rewind: here the attachment's first line. The attachment
    (u7) written again after the rewind stays cut (a later row uncuts only
    what is above it); a second explicit rewind naming no loaded record
    keeps the checkpoint explicit and clears nothing."""
    records = rewind_cut(cut=True)
    attachment = next(r for r in records if r.get("uuid") == u(7))
    records.append(dict(attachment))
    records.append({**records[-2], "cutUuid": "ffffffff-0000-0000-0000-00000000dead"})
    return records


def shape_rewind_cut_attachment():
    return rewind_cut(cut=True)


def shape_rewind_uncut_attachment():
    return rewind_cut(cut=False)


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
    "sent_as_uuid_over_an_earlier_line_of_its_uuid": (["the leaf answer"], [], []),
    "sent_as_uuid_under_a_later_line_of_its_uuid": (
        ["before the prompt stored anew", "answers the sentAsUuid"],
        ["the prompt stored anew"], []),
    "sent_as_uuid_over_an_earlier_prompt_with_children": (
        ["the first answer", "answers the earlier prompt", "answers the copy"],
        ["the earlier prompt", "the copy under its own uuid"], []),
    "sent_as_uuid_replaced_over_an_earlier_line_of_its_uuid": (["the leaf answer"], [], []),
    "progress_line_of_the_uuid_of_a_prompt_stored_anew": (
        ["the first answer", "under the progress"], [], []),
    "progress_line_of_the_uuid_of_a_later_line": (
        ["the first answer", "under the progress"], [], []),
    "progress_line_after_a_loaded_line_of_its_uuid": (
        ["the first answer", "the last answer"], [], []),
    "progress_line_after_a_loaded_line_with_children_on_both": (
        ["the first answer", "under the loaded prompt"], ["the loaded prompt"],
        ["read under the progress line"]),
    "progress_line_between_two_loaded_lines_of_its_uuid": (
        ["the first answer", "under the prompt"], ["the prompt written again"],
        ["the first prompt"]),
    "attachment_before_a_progress_line_of_its_uuid": (["the leaf answer"], [], []),
    "progress_line_of_the_uuid_of_an_unreadable_record": (
        ["the first answer", "under the unreadable prompt"], [], []),
    "unreadable_line_after_a_loaded_line_of_its_uuid": (
        ["the first answer", "the last answer"], ["the loaded prompt"], []),
    "sent_as_uuid_of_a_line_keyed_by_its_sent_as": (
        ["the first answer", "answers the first prompt", "answers the second prompt"],
        ["the first prompt stored anew", "the second prompt stored anew"], []),
    "sent_as_uuid_chain_of_three_keys": (
        ["the first answer", "answers the first prompt", "answers the second prompt",
         "answers the third prompt"],
        ["the first prompt stored anew", "the second prompt stored anew",
         "the third prompt stored anew"], []),
    "sent_as_uuid_after_an_unreadable_prompt_keyed_by_it": (
        ["the first answer", "answers the readable prompt"],
        ["the readable prompt stored anew"], []),
    "unreadable_prompt_stored_anew_beside_a_line_of_its_uuid": (
        ["the first answer", "answers the unreadable prompt"], [], []),
    "sent_as_uuid_before_an_unreadable_line_of_it": (
        ["the first answer", "answers the prompt stored anew"], ["the prompt stored anew"], []),
    "sent_as_uuid_of_an_unreadable_line": (
        ["the first answer", "answers the prompt stored anew"], ["the prompt stored anew"], []),
    "progress_line_written_again_as_progress": (
        ["the first answer", "under the first progress line", "the second answer",
         "under the second progress line"], [], []),
    "progress_line_of_a_later_uuid_below_the_leaf": (["the leaf answer"], [], []),
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
    "line_under_a_sent_as_result": (["after the batch"], ["the line under the renamed result"],
                                    []),
    "line_under_a_relinked_result": (["after the compaction"],
                                     ["the line relinked under the kept result"], []),
    "line_meets_a_later_response": (["after both"], [], ["line X", "line Y"]),
    "virtual_user_record_on_a_line": (["after the batch"], ["below the virtual record"], []),
    "virtual_assistant_record_on_a_line": (["after the batch"], ["below the virtual record"],
                                           []),
    "rows_ahead_of_put_back": (["after the result"], ["the row ahead"], []),
    "rows_ahead_not_named": (["after the result"], [], ["the row ahead"]),
    "rows_ahead_under_the_call": (["after the result"], ["the queued row"], []),
    "rows_ahead_of_a_plain_prompt": (["after the result"], [],
                                     ["the queued row", "the plain row"]),
    "rows_ahead_not_loaded": (["after the result"], [], ["the queued row"]),
    "rows_ahead_one_on_the_chain": (["after the result"], ["the queued row"], []),
    "rows_ahead_hang_before_the_reply": (["the first answer", "after the result"], [],
                                         ["the row under the first answer"]),
    "rows_ahead_past_an_open_call": (["after the batch"], [], ["the queued row"]),
    "rows_ahead_under_the_last_call": (["after the batch"], ["the queued row"], []),
    "rows_ahead_of_a_put_back_result": (["after the batch"], ["the queued row"], []),
    "rows_ahead_of_a_put_back_result_past_a_call": (["after the batch"], [],
                                                    ["the queued row"]),
    "result_recovered_under_the_other_result": (["after the batch"], [], []),
    "rows_ahead_one_on_a_put_back_line": (
        ["after the batch"], ["the queued row", "the line under the first result"], []),
    "rows_ahead_under_a_recovered_result": (["after the batch"], ["the queued row"], []),
    "rows_ahead_of_a_result_written_before_its_call": (
        ["after the result"], ["the queued row"], []),
    "rows_ahead_under_a_row_put_back_before": (
        ["after the batch"], ["the queued row", "the row under the queued row"], []),
    "rows_ahead_both_sides_of_a_result_written_before_its_call": (
        ["after the result"], ["the row written first", "the queued row"], []),
    "rows_ahead_under_a_record_written_before_the_result": (
        ["after the result"], [], ["the queued row"]),
    "rows_ahead_of_two_results_one_written_early": (
        ["after the calls"], ["the queued row", "the second queued row"], []),
    "rows_ahead_past_a_call_answered_before_it_is_made": (["after the batch"], [],
                                                          ["the queued row"]),
    "rows_ahead_under_a_result_recovered_after_the_reply": (["after the batch"], [],
                                                            ["the queued row"]),
    "rows_ahead_taken_by_an_earlier_result": (
        ["after the batch"], ["the queued row", "the second queued row"], []),
    "rows_ahead_of_a_result_stored_anew_after_its_own_uuid": (
        ["after the batch"], ["the queued row"], []),
    "rows_ahead_of_a_result_in_the_place_of_its_sent_as": (["after the batch"], [],
                                                           ["the queued row"]),
    "rows_ahead_past_a_call_answered_on_the_chain": (
        ["between the calls", "after the batch"], ["the queued row"], []),
    "rows_ahead_past_a_call_in_a_user_record": (["between the calls", "after the batch"], [],
                                                ["the queued row"]),
    "rows_ahead_past_a_call_in_a_row_put_back_before": (
        ["between the calls", "after the batch"], ["the row with a call"], ["the queued row"]),
    "rows_ahead_past_a_call_answered_in_its_own_record": (["after the batch"],
                                                          ["the queued row"], []),
    "result_of_another_agent_not_recovered": (["after the batch"], [], []),
    "reply_split_around_an_attachment": (["after the batch"], [], []),
    "result_attached_by_its_source_tool_assistant_uuid": (["after the batch"], [], []),
    "result_named_source_of_another_agent": (["after the batch"], [], []),
    "result_named_source_of_another_response": (["after the batch"], [], []),
    "rewind_cut_attachment": (["after the batch"], [], []),
    "rewind_cut_of_a_uuid_written_again": (["after the batch"], [], []),
    "result_under_a_later_response_claims_its_call": (
        ["after the calls"], [], ["the line under the second result"]),
    "rewind_uncut_attachment": (["after the batch"], [], []),
}

# Per shape: texts anywhere in what the CLI sends (system texts, tool result
# contents) that must and must not be there.
SENT_ANYWHERE = {
    "sent_as_uuid_over_an_earlier_line_of_its_uuid": (["the hook before the copy"], []),
    "sent_as_uuid_under_a_later_line_of_its_uuid": (["the hook after the copy"], []),
    "sent_as_uuid_replaced_over_an_earlier_line_of_its_uuid": (["the hook before the copy"], []),
    "virtual_user_record_on_a_line": ([], ["out toolu_v"]),
    "result_recovered_under_the_other_result": (["out toolu_a", "out toolu_b"], []),
    "rows_ahead_under_a_result_recovered_after_the_reply": (["out toolu_a", "out toolu_b"], []),
    "result_of_another_agent_not_recovered": (["out toolu_b"], ["out toolu_a"]),
    "reply_split_around_an_attachment": (["out toolu_a", "context between the records"], []),
    "result_attached_by_its_source_tool_assistant_uuid": (["out toolu_a", "out toolu_b"], []),
    "result_named_source_of_another_agent": (["out toolu_b"], ["out toolu_a"]),
    "result_named_source_of_another_response": (["out toolu_b", "out toolu_c"], ["out toolu_a"]),
    "rewind_cut_attachment": ([], ["context after the first call"]),
    "rewind_cut_of_a_uuid_written_again": ([], ["context after the first call"]),
    "rewind_uncut_attachment": (["context after the first call"], []),
    "progress_line_of_a_later_uuid_below_the_leaf": (["context under the progress line"], []),
    "attachment_before_a_progress_line_of_its_uuid": (["context before the progress line"], []),
    "result_under_a_later_response_claims_its_call": (["first out toolu_a"],
                                                      ["second out toolu_a"]),
}

# The shapes where the index (as of this commit) differs from the CLI: why.
DIFFERS: dict = {}

SHAPES = {name: globals()[f"shape_{name}"] for name in EXPECTED}
_SENT: dict = {}


def user_texts(sent) -> list[str]:
    return [b.get("text") or "" for m in sent.messages if m.get("role") == "user"
            for b in oracle._blocks(m) if b.get("type") == "text"]


def all_texts(sent) -> list[str]:
    """Every text the CLI sent: text blocks of every message (system texts
    too) and tool results' contents."""
    out = []
    for m in sent.messages:
        for b in oracle._blocks(m):
            if b.get("type") == "text":
                out.append(b.get("text") or "")
            elif b.get("type") == "tool_result":
                content = b.get("content")
                out.append(content if isinstance(content, str) else json.dumps(content))
    return out


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
    has, lacks = SENT_ANYWHERE.get(name, ([], []))
    everything = "\n".join(all_texts(sent))
    assert all(t in everything for t in has), everything
    assert not any(t in everything for t in lacks), everything


# The hook-context attachments of a file: their words and whether the index
# keeps them (on the resume chain, or an orphan the CLI puts back).
ATTACHMENT_VERDICTS_SQL = """
SELECT r.uuid, json_extract(r.raw, '$.attachment.content[0]') AS words,
       EXISTS (SELECT 1 FROM leaf_ancestry a WHERE a.file_id = r.file_id
                 AND a.rule = 'resume' AND a.record_id = r.id)
       OR coalesce((SELECT o.restored FROM orphans o WHERE o.file_id = r.file_id
                      AND o.record_id = r.id), 0) AS kept
FROM records r
WHERE r.file_id = :file_id AND r.type = 'attachment'
  AND json_extract(r.raw, '$.attachment.type') = 'hook_additional_context'
""".strip()


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
            b for b in (content if isinstance(content, list) else []) if isinstance(b, dict)]
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
    # Attachments the CLI sends as text: held to what was sent too.
    everything = "\n".join(all_texts(sent))
    differ = {row["uuid"]: bool(row["kept"]) for row in index.rows(ATTACHMENT_VERDICTS_SQL,
                                                                   {"file_id": fid})
              if bool(row["kept"]) != (row["words"] in everything)}
    assert differ == {}
