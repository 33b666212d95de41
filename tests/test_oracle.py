"""The real Claude Code as the oracle: for every shape of the bug reports and
every main transcript of the corpus, what a resume really sends agrees with
what the index says it keeps and drops (indexer/repair/verify.py compares them).

Each case resumes a copy in a temporary config dir against a fake Messages API
on loopback (indexer/repair/oracle.py); about a second per transcript."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import CORPUS, Transcript, write_jsonl
from indexer.repair import oracle, verify
from oracle_checks import CLAUDE, agree, check_folder

FIXTURES = Path(__file__).parent / "fixtures"

pytestmark = [pytest.mark.oracle,
              pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")]


def u(n: int) -> str:
    return f"aaaaaaaa-0000-0000-0000-{n:012d}"


def text(mid, words):
    return {"id": mid, "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": words}]}


def tool_use(mid, tid):
    return {"id": mid, "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"c": tid}}]}


def tool_result(tid):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                         "content": f"out {tid}"}]}


@pytest.fixture(scope="module")
def api():
    with oracle.FakeMessagesAPI() as server:
        yield server


# --- Generated shapes -------------------------------------------------------

def shape_seed000(control=False):
    lines = (FIXTURES / "seed000_splice.jsonl").read_text().splitlines()
    if control:
        last = json.loads(lines[3])
        last["parentUuid"] = u(2)
        lines[3] = json.dumps(last)
    return lines


def shape_seed002(continue_from_first=False):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_P", "toolu_a"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(4), u(2), "user", message=tool_result("toolu_a"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(4) if continue_from_first else u(5), "assistant",
          message=text("msg_Q", "created both files"))
    return t.records


def shape_compaction():
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "before compaction"))
    t.add(u(3), None, "system", subtype="compact_boundary", logicalParentUuid=u(2))
    t.add(u(4), u(3), "user", isCompactSummary=True,
          message={"role": "user", "content": "summary of the earlier conversation"})
    t.add(u(5), u(4), "assistant", message=text("msg_2", "after compaction"))
    return t.records


def shape_rewind():
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "first answer"))
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", message=text("msg_2", "abandoned answer"))
    t.add(u(5), u(2), "user")   # an edit of the second prompt
    t.add(u(6), u(5), "assistant", message=text("msg_3", "kept answer"))
    return t.records


def shape_synthetic_tail():
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "a real answer"))
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", isApiErrorMessage=True, message={
        "id": "4f1c7c1e-2b7e-4c55-9d3c-0a0b0c0d0e0f", "type": "message", "role": "assistant",
        "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 500"}],
        "usage": {"input_tokens": 0, "output_tokens": 0}})
    return t.records


def shape_chain_break(gap_seconds):
    t = Transcript()
    t.add(u(1), None, "user", ts="2026-09-01T00:00:00.000Z")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "before the break"),
          ts="2026-09-01T00:00:01.000Z")
    t.add(u(3), "ffffffff-0000-0000-0000-00000000dead", "user",
          ts=f"2026-09-01T00:{(1 + gap_seconds) // 60:02d}:{(1 + gap_seconds) % 60:02d}.000Z")
    t.add(u(4), u(3), "assistant", message=text("msg_2", "after the break"),
          ts="2026-09-01T00:10:00.000Z")
    return t.records


def shape_duplicate_uuid():
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "first copy"))
    t.add(u(3), u(2), "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1b", "second copy"))
    t.add(u(4), u(3), "assistant", message=text("msg_2", "the end"))
    return t.records


def shape_progress_branches():
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=tool_use("msg_1", "toolu_p"))
    t.add(u(3), u(2), "progress", data={"type": "hook_progress"})
    t.add(u(4), u(3), "user", message=tool_result("toolu_p"))      # hangs off progress
    t.add(u(5), u(2), "progress", data={"type": "bash_progress"})
    t.add(u(6), u(4), "assistant", message=text("msg_2", "after the progress"))
    t.add(u(7), u(6), "progress", data={"type": "hook_progress"})
    return t.records


def shape_cycle():
    t = Transcript()
    t.add(u(1), u(3), "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "in a ring"))
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", message=text("msg_2", "off the ring"))
    return t.records


def shape_last_prompt(explicit=False, leaf=4, rewound=False):
    t = Transcript()
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "first answer"))
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", message=text("msg_2", "checkpointed answer"))
    t.add(u(5), u(2), "user")
    t.add(u(6), u(5), "assistant", message=text("msg_3", "later branch"))
    prompt = {"type": "last-prompt", "sessionId": t.session_id, "lastPrompt": "prompt",
              "leafUuid": None if leaf is None else u(leaf)}
    if explicit:
        prompt["explicit"] = True
    if rewound:
        prompt["rewound"] = True
    t.records.append(prompt)
    return t.records


SHAPES = {
    "seed000": lambda: shape_seed000(),
    "seed000_control": lambda: shape_seed000(control=True),
    "seed002": lambda: shape_seed002(),
    "seed002_first_result": lambda: shape_seed002(continue_from_first=True),
    "compaction": shape_compaction,
    "rewind": shape_rewind,
    "synthetic_tail": shape_synthetic_tail,
    "chain_break_within_5s": lambda: shape_chain_break(2),
    "chain_break_after_60s": lambda: shape_chain_break(60),
    "duplicate_uuid": shape_duplicate_uuid,
    "progress_branches": shape_progress_branches,
    "cycle": shape_cycle,
    "last_prompt_checkpoint": lambda: shape_last_prompt(),
    "last_prompt_explicit": lambda: shape_last_prompt(explicit=True),
    "last_prompt_on_last_row_branch": lambda: shape_last_prompt(leaf=6),
    "last_prompt_rewound_to_empty": lambda: shape_last_prompt(explicit=True, leaf=None,
                                                              rewound=True),
}

SID = "11111111-2222-3333-4444-555555555555"


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_generated_shape_agrees_with_the_cli(index, api, name):
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", SHAPES[name]())
    agree(index, api, path)


def test_seed000_the_cli_drops_the_otter_reply_and_repair_brings_it_back(index, api, tmp_path):
    from click.testing import CliRunner
    from indexer.cli.commands import cli

    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", shape_seed000())
    counts, sent = agree(index, api, path)
    otter = "The otter. It eats shellfish and small fish."
    assert otter not in sent.assistant_texts()
    assert index.rows("SELECT cause, restored FROM orphans WHERE uuid = ?", [u(2)]) == [
        {"cause": "api_error_splice", "restored": 0}]
    result = CliRunner().invoke(cli, ["repair", SID, "--db", str(index.path), "--write",
                                      "--force"])
    assert result.exit_code == 0, result.output
    counts, sent = agree(index, api, path)
    assert otter in sent.assistant_texts()


# --- The corpus -----------------------------------------------------------

# Known differences, each with its reason (docs/how-it-works/resume-rules.md): none.
KNOWN: frozenset = frozenset()


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_every_corpus_transcript_agrees_with_the_cli(index, api):
    assert len(check_folder(index, api, CORPUS, KNOWN)) > 40


# The same check on transcripts the project has not seen: point
# SESSION_INDEX_ORACLE_DIR at a projects/ folder (a copy is read, never written).
@pytest.mark.skipif(not os.environ.get("SESSION_INDEX_ORACLE_DIR"),
                    reason="SESSION_INDEX_ORACLE_DIR is not set")
def test_every_transcript_of_oracle_dir_agrees_with_the_cli(index, api):
    check_folder(index, api, Path(os.environ["SESSION_INDEX_ORACLE_DIR"]).resolve())


# --- session-index verify -------------------------------------------------

def run_verify(index, *args):
    from click.testing import CliRunner
    from indexer.cli.commands import cli
    return CliRunner().invoke(cli, ["verify", SID, "--db", str(index.path), *args])


def test_verify_agrees_on_seed000(index):
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", shape_seed000())
    index.ingest()
    before = (index.projects / "-tmp-demo" / f"{SID}.jsonl").read_bytes()
    result = run_verify(index, "--json")
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output)
    assert verdict["agree"] is True and verdict["claude_version"] == oracle.claude_version(CLAUDE)
    assert verdict["kept_not_sent"] == [] and verdict["sent_but_dropped"] == []
    assert verdict["checked"]["dropped"] == 1   # the otter reply
    # The CLI appends to what it resumes: only ever to a copy.
    assert (index.projects / "-tmp-demo" / f"{SID}.jsonl").read_bytes() == before


def test_verify_exits_1_on_a_generated_disagreement(index):
    # The index is made to call a reply the CLI sends dropped (its cache
    # rows edited: the model agrees with the CLI on every shape it knows):
    # verify lists it and exits 1.
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "the reply the index drops"))
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    conn = index.db.conn
    row = conn.execute("SELECT file_id, session_id, record_id FROM leaf_ancestry_cache "
                       "WHERE uuid = ? AND rule = 'resume'", [u(2)]).fetchone()
    with conn:
        conn.execute("DELETE FROM leaf_ancestry_cache WHERE uuid = ? AND rule = 'resume'", [u(2)])
        conn.execute(
            "INSERT INTO orphans_cache (file_id, session_id, uuid, type, cause, record_id, "
            "line_no, restored) VALUES (?, ?, ?, 'assistant', 'abandoned_branch', ?, 2, 0)",
            [row[0], row[1], u(2), row[2]])
    result = run_verify(index)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("DIFFER")
    assert "sent, the index drops it (abandoned_branch)" in result.output
    assert "the reply the index drops" in result.output


def test_unreadable_records_are_dropped_as_the_cli_drops_them(index, api):
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "the answer"))
    t.add(u(3), u(2), "user", message={"role": "user", "content": ["bare string"]})
    t.add(u(4), u(3), "assistant", message=text("msg_2", "after the unreadable one"))
    t.add(u(5), None, "user", message={"role": "user", "content": ["bare again"]})
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    agree(index, api, path)
    assert index.ancestry(index.file_id(path)) == [u(4), u(2), u(1)]
    assert index.value("SELECT count(*) FROM records WHERE is_unreadable") == 2


def test_verify_without_a_binary_exits_3(index, tmp_path):
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", shape_seed000())
    index.ingest()
    result = run_verify(index, "--claude", str(tmp_path / "no-such-claude"))
    assert result.exit_code == 3
    assert "not an executable file" in result.output


def voice(t, uuid, parent, words, **fields):
    """A line of what was said on a voice call, as Claude Code 2.1.332 stores it."""
    return t.add(uuid, parent, "system", subtype="voice_call_talk", level="info", isMeta=True,
                 msgV=1, content=words, blocks=[{"type": "text", "text": words}],
                 origin={"kind": "voice-call"}, **fields)


def test_voice_call_talk_is_checked_as_the_cli_sends_it(index, api):
    """A resume by 2.1.332 sends each voice call line on its chain as a
    VoiceCallRecord call and its result (id voicecallrecord_ + the uuid);
    verify checks those ids against the index's chain: the kept lines are
    sent, the one on a branch the resume abandons is not, and neither a line
    with no voice-call origin (a system row) nor a folded one (a queued
    command: sent as text) is sent as a call."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "first answer"))
    voice(t, u(3), u(2), "words said on an abandoned branch")
    t.add(u(4), u(3), "assistant", message=text("msg_2", "answer on the abandoned branch"))
    voice(t, u(5), u(2), "words said on the call")
    t.add(u(6), u(5), "assistant", message=text("msg_3", "answer to the call"))
    t.add(u(7), u(6), "system", subtype="voice_call_talk", level="info",
          content="a damaged line: no origin", isMeta=False)
    voice(t, u(9), u(7), "a queued command said on the call", fold={"command": {"mode": "prompt"}})
    voice(t, u(8), u(9), "more words at the tail")
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    counts, sent = agree(index, api, path)
    calls = {i for i in sent.tool_use_ids() if i.startswith("voicecallrecord_")}
    assert calls == {f"voicecallrecord_{u(5)}", f"voicecallrecord_{u(8)}"}, calls
    assert set(sent.tool_result_ids()) >= calls
    # What verify checked: the two voice lines kept (a call and a result each)
    # and the one dropped, beside the replies.
    items = verify.sent_items(sent)
    assert {("tool_use", c) for c in calls} <= items
    assert counts["kept"] == 2 * 2 + 2 + 0 and counts["dropped"] == 2 + 1, counts
