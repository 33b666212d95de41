"""Claude Code as it resumes today (issue 26): what a compaction kept is put
back after the summary, a record written before its parent (the last row)
is where the resume starts, and a synthetic placeholder is told apart by
kind. Each shape here was first checked against the real CLI
(tests/test_oracle_cases.py, tests/test_claude_code_fixtures.py); these
tests hold the index's answer on every surface without a binary."""

from __future__ import annotations

import json

from click.testing import CliRunner

from conftest import Transcript, write_jsonl
from indexer.cli.commands import cli
from test_web import Web, session_url

SID = "26262626-2222-3333-4444-555555555555"


def u(n: int) -> str:
    return f"bbbbbbbb-0000-0000-0000-{n:012d}"


def text(mid, words, model="claude-x"):
    return {"id": mid, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": words}]}


def kept_compaction(kept="segment", new_parent="summary"):
    """A manual /compact that kept the last answer (u4): the boundary names
    it (preservedSegment head..tail, or the preservedMessages list), the
    summary u6 is its anchor, and the conversation goes on from the summary
    (or, new_parent="tail", from the kept answer)."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "first answer"))
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", message=text("msg_2", "the kept answer"))
    meta = {"trigger": "manual", "preTokens": 100}
    if kept == "segment":
        meta["preservedSegment"] = {"headUuid": u(3), "anchorUuid": u(6), "tailUuid": u(4)}
    else:
        meta["preservedMessages"] = {"anchorUuid": u(6), "uuids": [u(3), u(4)]}
    t.add(u(5), None, "system", subtype="compact_boundary", content="Conversation compacted",
          logicalParentUuid=u(4), compactMetadata=meta)
    t.add(u(6), u(5), "user", isCompactSummary=True,
          message={"role": "user", "content": "summary of the earlier conversation"})
    t.add(u(7), u(6) if new_parent == "summary" else u(4), "user")
    t.add(u(8), u(7), "assistant", message=text("msg_3", "after the compaction"))
    return t.records


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_what_a_compaction_kept_is_on_the_resume_chain_after_the_summary(index):
    for kept in ("segment", "list"):
        path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", kept_compaction(kept))
        index.ingest()
        fid = index.file_id(path)
        # root first: the boundary, the summary, the kept records, what follows
        assert index.ancestry(fid)[::-1] == [u(5), u(6), u(3), u(4), u(7), u(8)], kept
        causes = {r["uuid"]: r["cause"] for r in index.rows(
            "SELECT uuid, cause FROM orphans WHERE file_id = ?", [fid])}
        assert causes == {u(1): "compacted", u(2): "compacted"}, kept
        index.assert_caches_match_definitions()
    shown = run("show", SID, "--db", str(index.path), "--format", "json")
    assert shown.exit_code == 0, shown.output
    texts = [json.dumps(m["message"]) for m in json.loads(shown.output[shown.output.index("["):])]
    assert any("the kept answer" in t for t in texts)
    assert not any("first answer" in t for t in texts)
    assert [i for i, t in enumerate(texts) if "summary of the earlier" in t] < [
        i for i, t in enumerate(texts) if "the kept answer" in t]


def test_a_relink_drops_what_came_before_the_boundary(index):
    # The conversation went on from the kept answer, not from the summary:
    # the CLI still sends the summary, the kept records and what follows,
    # and not the records before the boundary it did not keep.
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl",
                       kept_compaction(new_parent="tail"))
    index.ingest()
    fid = index.file_id(path)
    assert index.ancestry(fid)[::-1] == [u(5), u(6), u(3), u(4), u(7), u(8)]
    index.assert_caches_match_definitions()


def test_a_copy_written_after_the_boundary_is_dropped_with_what_it_copies(index):
    # A second /compact re-appends copies of earlier records with their own
    # uuid (#92089): the CLI's relink places a uuid where it was first
    # loaded, so the copy of u2 is dropped, and u7, written under it, hangs
    # from the kept tail (tests/test_oracle_cases.py: copy_after_the_boundary_*).
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "the copied answer"))
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", message=text("msg_2", "the kept answer"))
    t.add(u(5), None, "system", subtype="compact_boundary", content="Conversation compacted",
          logicalParentUuid=u(4), compactMetadata={"trigger": "manual", "preservedSegment": {
              "headUuid": u(3), "anchorUuid": u(6), "tailUuid": u(4)}})
    t.add(u(6), u(5), "user", isCompactSummary=True,
          message={"role": "user", "content": "summary of the earlier conversation"})
    t.records.append(dict(t.records[1]))
    t.add(u(7), u(2), "user")
    t.add(u(8), u(7), "assistant", message=text("msg_3", "after the copy"))
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    fid = index.file_id(path)
    assert index.ancestry(fid)[::-1] == [u(5), u(6), u(3), u(4), u(7), u(8)]
    # Off the chain both; the copy's line is after the boundary, so its
    # cause is read from where its parent went (issue 27's compaction
    # audit tells copies apart).
    assert index.causes(fid) == {u(1): "compacted", u(2): "unlinked"}
    index.assert_caches_match_definitions()


def test_a_boundary_whose_kept_segment_is_broken_relinks_nothing(index):
    records = kept_compaction()
    records[4]["compactMetadata"]["preservedSegment"]["headUuid"] = "not-in-the-file"
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", records)
    index.ingest()
    assert index.ancestry(index.file_id(path))[::-1] == [u(5), u(6), u(7), u(8)]
    index.assert_caches_match_definitions()


def child_before_parent(checkpoint=False):
    """A tool_result (u3) flushed 2 ms before the tool_use it answers (u2),
    which is the file's last row."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts="2026-09-01T00:00:01.000Z")
    if checkpoint:
        t.records.append({"type": "last-prompt", "sessionId": SID, "lastPrompt": "p",
                          "leafUuid": u(1)})
    t.add(u(3), u(2), "user", ts="2026-09-01T00:00:02.502Z", message={
        "role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a",
                                     "content": "out"}]})
    t.add(u(2), u(1), "assistant", ts="2026-09-01T00:00:02.500Z", message={
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {}}]})
    return t.records


def test_a_record_written_before_its_parent_the_last_row_is_where_the_resume_starts(index):
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", child_before_parent())
    index.ingest()
    leaf = index.rows("SELECT resume_leaf_uuid, resume_rule FROM leaves WHERE file_id = ?",
                      [index.file_id(path)])
    assert leaf == [{"resume_leaf_uuid": u(3), "resume_rule": "newest_descendant"}]
    index.assert_caches_match_definitions()
    # A last-prompt record naming a leaf turns the rule off (the CLI's `pr`).
    write_jsonl(path, child_before_parent(checkpoint=True))
    index.ingest()
    leaf = index.rows("SELECT resume_leaf_uuid, resume_rule FROM leaves WHERE file_id = ?",
                      [index.file_id(path)])
    assert leaf == [{"resume_leaf_uuid": u(2), "resume_rule": "last_row"}]
    index.assert_caches_match_definitions()


def no_response_requested():
    """An auto-resume prompt answered by Claude Code's own placeholder."""
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "a real answer"))
    t.add(u(3), u(2), "user", message={"role": "user", "content": "Continue from where you "
                                       "left off."}, isMeta=True)
    t.add(u(4), u(3), "assistant", isApiErrorMessage=False, message={
        "id": "7d9b4c2e-0000-4000-8000-000000000004", "type": "message", "role": "assistant",
        "model": "<synthetic>", "content": [{"type": "text", "text": "No response requested."}],
        "usage": {"input_tokens": 0, "output_tokens": 0}})
    return t.records


def test_no_response_requested_is_named_by_show_and_on_the_session_page(index):
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", no_response_requested())
    index.ingest()
    shown = run("show", SID, "--db", str(index.path))
    assert shown.exit_code == 0, shown.output
    assert ("synthetic placeholder, No response requested.: Claude Code's placeholder for a "
            "turn that got no answer") in shown.output
    assert "API error" not in shown.output
    html = Web(index.path).get(session_url(SID)).text
    assert "synthetic placeholder, No response requested." in html


def test_synthetic_kinds_are_told_apart_by_text_and_api_error_flag():
    from indexer.transcripts import records

    def entry(words, api_error=False):
        return {"type": "assistant", "isApiErrorMessage": api_error,
                "message": {"model": "<synthetic>", "content": [{"type": "text",
                                                                 "text": words}]}}

    assert records.synthetic_kind(entry("API Error: 529 overloaded", True)) == "api_error"
    assert records.synthetic_kind(entry("No response requested.")) == "no_response_requested"
    assert records.synthetic_kind(entry("(no content)")) == "no_content"
    assert records.synthetic_kind(entry("[Request interrupted by user]")) == "placeholder"
    real = entry("No response requested.")
    real["message"]["model"] = "glm-5"
    assert records.synthetic_kind(real) is None


def test_a_fork_briefing_is_never_the_row_a_resume_starts_from(index):
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "the last real answer"))
    t.add(u(3), u(1), "attachment", attachment={"type": "fork_briefing", "text": "briefing"})
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    leaf = index.rows("SELECT resume_leaf_uuid, resume_rule FROM leaves WHERE file_id = ?",
                      [index.file_id(path)])
    assert leaf == [{"resume_leaf_uuid": u(2), "resume_rule": "last_row"}]
    index.assert_caches_match_definitions()


def test_at_a_parent_already_walked_the_walk_falls_back_past_the_walk(index):
    # u3 names itself: the CLI takes its timestamp fallback there, skipping
    # what it has walked (u3), and reads on through u2 to u1 (the oracle
    # case self_parent); u4 is newer than u3 and not a candidate.
    t = Transcript(SID)
    t.add(u(1), None, "user", ts="2026-09-01T00:00:00.100Z")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "reached by the fallback"),
          ts="2026-09-01T00:00:00.200Z")
    t.add(u(3), u(3), "user", ts="2026-09-01T00:00:00.500Z")
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    assert index.ancestry(index.file_id(path)) == [u(3), u(2), u(1)]
    index.assert_caches_match_definitions()


def check_json(index, tmp_path):
    out = run("check", SID, "--db", str(index.path), "--json",
              "--config-dir", str(tmp_path / "claude"))
    return out.exit_code, json.loads(out.stdout)


def test_an_api_error_placeholder_at_the_tail_does_not_poison_a_resume(index, tmp_path):
    # Claude Code 2.1.132 and newer never name an API error as
    # previous_message_id (tests/test_previous_message_id_oracle.py): the
    # resume names the real reply before it, and goes on.
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "a real answer"), requestId="req_1")
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", isApiErrorMessage=True, requestId="req_2", message={
        "id": "7d9b4c2e-0000-4000-8000-000000000004", "type": "message", "role": "assistant",
        "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 529"}]})
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    code, verdict = check_json(index, tmp_path)
    assert (code, verdict["verdict"]) == (0, "resumable"), verdict


def test_a_providers_reply_named_in_a_session_anthropic_answered_is_poisoned(index, tmp_path):
    # Started on api.anthropic.com (msg_ ids), continued through another
    # provider (its ids, with requestIds): a resume against Anthropic names
    # the provider's id and gets the 400.
    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text("msg_01Anthropic", "first-party answer"),
          requestId="req_011A")
    t.add(u(3), u(2), "user")
    t.add(u(4), u(3), "assistant", requestId="9f1c2d3e4b5a",
          message=text("chatcmpl-9f1c2d3e4b5a", "the provider's answer", model="glm-5"))
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    code, verdict = check_json(index, tmp_path)
    assert (code, verdict["verdict"]) == (5, "poisoned"), verdict
    assert verdict["details"]["cause"] == "foreign_reply"
    assert "chatcmpl-9f1c2d3e4b5a" in verdict["reason"]
    assert "resume through the provider that wrote it" in verdict["reason"]
    # The same replies with no first-party one before them: a third-party
    # session, resumable (its provider is where it resumes).
    t.records[1]["message"]["id"] = "chatcmpl-first"
    t.records[1]["message"]["model"] = "glm-5"
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    code, verdict = check_json(index, tmp_path)
    assert (code, verdict["verdict"]) == (0, "resumable"), verdict
