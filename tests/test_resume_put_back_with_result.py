"""Claude Code as it resumes today (issue 26): after a parallel tool call's
results are put back, the loader (2.1.332's nMe()) puts back the one line of
companion records hanging from the call's records, their results, or the
companion records on the chain in the call's region: attachments, system
records, isMeta user records (a Skill body). The real CLI sends the Skill
body (tests/test_oracle_cases.py, skill_in_parallel_meta); these tests hold
the index's rule (orphans cause put_back_with_result, restored 1) without a
binary, through full derives and appends; the last test holds four more
shapes (a line of two, a fork, a line into a prompt, a companion in a
call's region) to the real CLI (marker oracle)."""

from __future__ import annotations

import json

import pytest

from conftest import Transcript, write_jsonl
from indexer.ingest import derive, derive_append

SID = "26262626-6666-3333-4444-555555555555"
SKILL_BODY = "Base directory for this skill: /tmp/skills/otter"


def u(n: int) -> str:
    return f"cccccccc-0000-0000-0000-{n:012d}"


def tool_use(mid, tid, name="Bash"):
    return {"id": mid, "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "tool_use", "id": tid, "name": name, "input": {}}]}


def tool_result(tid):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                         "content": f"out {tid}"}]}


def body(words=SKILL_BODY):
    return {"role": "user", "content": [{"type": "text", "text": words}]}


def batch(t, first=tool_use):
    """A prompt and one API response (msg_P) written as two assistant records
    (a Skill call and a Bash call), a result each; the next answer continues
    from the Bash result (u5), so the Skill result (u4) is put back as a
    parallel_tool_branch."""
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=first("msg_P", "toolu_s", "Skill"))
    t.add(u(3), u(2), "assistant", message=tool_use("msg_P", "toolu_b"))
    t.add(u(4), u(2), "user", message=tool_result("toolu_s"))
    t.add(u(5), u(3), "user", message=tool_result("toolu_b"))
    t.add(u(6), u(5), "assistant", message={
        "id": "msg_Q", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "after the skill and the command"}]})


def orphans(index, path) -> dict:
    fid = index.file_id(path)
    return {r["uuid"]: (r["cause"], r["restored"]) for r in index.rows(
        "SELECT uuid, cause, restored FROM orphans WHERE file_id = ?", [fid])}


def derived(index, records, last=(u(5), u(6))):
    """Ingest the records with ``last`` moved to the end (the conversation
    goes on from the Bash result after what hangs from the Skill result)."""
    records = [r for r in records if r["uuid"] not in last] + [
        r for name in last for r in records if r["uuid"] == name]
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", records)
    index.ingest()
    index.assert_caches_match_definitions()
    return path


def test_a_skill_body_below_a_put_back_result_is_put_back(index):
    t = Transcript(SID)
    batch(t)
    t.add(u(7), u(4), "user", isMeta=True, sourceToolUseID="toolu_s", message=body())
    path = derived(index, t.records)
    assert orphans(index, path) == {u(4): ("parallel_tool_branch", 1),
                                    u(7): ("put_back_with_result", 1)}


def test_the_same_text_without_is_meta_is_a_prompt_and_stays_dropped(index):
    t = Transcript(SID)
    batch(t)
    t.add(u(7), u(4), "user", sourceToolUseID="toolu_s", message=body())
    path = derived(index, t.records)
    assert orphans(index, path)[u(7)] == ("abandoned_branch", 0)


def test_a_line_is_put_back_whole_a_fork_or_a_prompt_leaves_it_whole(index):
    # One line of three companions below the Skill result: all put back.
    t = Transcript(SID)
    batch(t)
    t.add(u(7), u(4), "user", isMeta=True, message=body())
    t.add(u(8), u(7), "attachment", attachment={"type": "hook_additional_context"})
    t.add(u(9), u(8), "system", subtype="stop_hook_summary")
    path = derived(index, t.records)
    got = orphans(index, path)
    assert [got[u(n)] for n in (7, 8, 9)] == [("put_back_with_result", 1)] * 3

    # A link with two children: the line is left whole.
    t.add(u(10), u(7), "system", subtype="stop_hook_summary")
    path = derived(index, t.records)
    got = orphans(index, path)
    assert [got[u(n)] for n in (7, 8, 9, 10)] == [("abandoned_branch", 0)] * 4

    # A line that runs into a prompt: left whole too.
    t.records = [r for r in t.records if r["uuid"] != u(10)]
    t.add(u(10), u(9), "user")
    path = derived(index, t.records)
    got = orphans(index, path)
    assert [got[u(n)] for n in (7, 8, 9, 10)] == [("abandoned_branch", 0)] * 4


def progress(t, uuid, parent):
    return t.add(uuid, parent, "progress", data={"type": "hook_progress"})


def test_a_line_is_read_through_progress_records_as_the_loader_reads_parents(index):
    # The loader does not load progress records: a record below one written
    # before it hangs from the progress record's parent (resume.bridged), so
    # a body below two progress records below the Skill result is put back
    # (the real CLI sends it: tests/test_oracle_cases.py,
    # skill_body_under_a_progress_record).
    t = Transcript(SID)
    batch(t)
    progress(t, u(20), u(4))
    progress(t, u(21), u(20))
    t.add(u(7), u(21), "user", isMeta=True, message=body())
    t.add(u(8), u(7), "attachment", attachment={"type": "hook_additional_context"})
    path = derived(index, t.records)
    got = orphans(index, path)
    assert [got[u(n)] for n in (7, 8)] == [("put_back_with_result", 1)] * 2
    assert [got[u(n)][0] for n in (20, 21)] == ["progress"] * 2

    # A progress record written after what hangs from it is no bridge: the
    # body's parent is not loaded, and it stays dropped.
    records = [r for r in t.records if r["uuid"] != u(21)]
    records.insert(records.index(next(r for r in records if r["uuid"] == u(7))) + 1,
                   next(r for r in t.records if r["uuid"] == u(21)))
    path = derived(index, records)
    assert orphans(index, path)[u(7)][1] == 0

    # A progress record below a link: what hangs from it counts as the
    # link's child (here a prompt, so the line is left whole).
    progress(t, u(22), u(7))
    t.add(u(9), u(22), "user")
    path = derived(index, t.records)
    assert orphans(index, path)[u(7)] == ("abandoned_branch", 0)


def test_a_line_through_an_unreadable_record(index):
    t = Transcript(SID)
    batch(t)
    t.add(u(20), u(4), "user", message={"role": "user", "content": 7})  # unreadable
    t.add(u(7), u(20), "user", isMeta=True, message=body())
    path = derived(index, t.records)
    assert orphans(index, path)[u(7)] == ("put_back_with_result", 1)


def test_only_below_an_api_response_with_a_tool_call(index):
    # The same tree where msg_P holds no tool_use block (two text parts):
    # its records and their children are parallel, the line is not put back.
    def text_part(mid, tid, name=None):
        return {"id": mid, "type": "message", "role": "assistant", "model": "claude-x",
                "content": [{"type": "text", "text": f"part {tid}"}]}

    t = Transcript(SID)
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant", message=text_part("msg_P", "a"))
    t.add(u(3), u(2), "assistant", message=text_part("msg_P", "b"))
    t.add(u(7), u(2), "user", isMeta=True, message=body())
    t.add(u(5), u(3), "user")
    t.add(u(6), u(5), "assistant")
    path = derived(index, t.records)
    assert orphans(index, path)[u(7)] == ("abandoned_branch", 0)
    # With a tool call in the response, the line below its first record is put back.
    t.records[2]["message"] = tool_use("msg_P", "toolu_b")
    path = derived(index, t.records)
    assert orphans(index, path)[u(7)] == ("put_back_with_result", 1)


def test_below_a_companion_on_the_chain_inside_the_calls_region(index):
    # An attachment on the chain right after the Bash result is in msg_P's
    # region: a system record hanging from it (off the chain) is put back;
    # after the next prompt (outside the region) it is not.
    t = Transcript(SID)
    batch(t)
    t.records.pop()   # the answer goes on from the attachment instead
    t.add(u(7), u(5), "attachment", attachment={"type": "hook_additional_context"})
    t.add(u(8), u(7), "system", subtype="stop_hook_summary")
    t.add(u(9), u(7), "assistant", message=tool_use("msg_Q", "toolu_c"))
    t.add(u(10), u(9), "user", message=tool_result("toolu_c"))
    t.add(u(11), u(10), "user")
    t.add(u(12), u(11), "attachment", attachment={"type": "hook_additional_context"})
    t.add(u(13), u(12), "system", subtype="stop_hook_summary")
    t.add(u(14), u(12), "assistant")
    path = derived(index, t.records, last=())
    got = orphans(index, path)
    assert got[u(8)] == ("put_back_with_result", 1)
    assert got[u(13)] == ("abandoned_branch", 0)


def call_written(index):
    """The call and its results written and ingested, the answer (u5, u6)
    held back: (the transcript to add to, its path, the answer's records)."""
    t = Transcript(SID)
    batch(t)
    path = derived(index, [r for r in t.records if r["uuid"] not in (u(5), u(6))], last=())
    answer = [r for r in t.records if r["uuid"] in (u(5), u(6))]
    t.records = []
    return t, path, answer


def appended_in_steps(index, path, steps):
    """Append each step's records; each is an extension (not a recompute)
    that equals the definitions and classes the body u7 as wanted."""
    for appended, want in steps:
        before = derive.STATS["appended"]
        with open(path, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in appended)
        index.ingest()
        index.assert_caches_match_definitions()
        assert derive.STATS["appended"] == before + 1, derive_append.BAILS
        assert orphans(index, path)[u(7)] == want


def test_appends_class_the_line_again(index):
    """A live session: the call is written, then the body, the Bash result
    and the answer; then an attachment below the body and a new turn; then
    a second record below the body and another turn. The caches are
    extended (not recomputed) and equal the definitions after each append."""
    t, path, answer = call_written(index)
    steps = [
        ([t.add(u(7), u(4), "user", isMeta=True, message=body()),
          *(t.add(r["uuid"], r["parentUuid"], r["type"], message=r["message"])
            for r in answer)],
         ("put_back_with_result", 1)),
        ([t.add(u(8), u(7), "attachment", attachment={"type": "hook_additional_context"}),
          t.add(u(9), u(6), "user"), t.add(u(10), u(9), "assistant")],
         ("put_back_with_result", 1)),
        ([t.add(u(11), u(7), "system", subtype="stop_hook_summary"),
          t.add(u(12), u(10), "user"), t.add(u(13), u(12), "assistant")],
         ("abandoned_branch", 0)),
    ]
    appended_in_steps(index, path, steps)


def test_appends_read_the_line_through_progress_records(index):
    """Appended: a progress record below the Skill result and the body
    below it with the answer; then a progress record below the body, a
    prompt below that (the line is left whole) and a new turn. Extended, not recomputed,
    and equal to the definitions after each append."""
    t, path, answer = call_written(index)
    steps = [
        ([progress(t, u(20), u(4)), t.add(u(7), u(20), "user", isMeta=True, message=body()),
          *(t.add(r["uuid"], r["parentUuid"], r["type"], message=r["message"])
            for r in answer)],
         ("put_back_with_result", 1)),
        ([progress(t, u(21), u(7)), t.add(u(8), u(21), "user"),
          t.add(u(9), u(6), "user"), t.add(u(10), u(9), "assistant")],
         ("abandoned_branch", 0)),
    ]
    appended_in_steps(index, path, steps)


def test_verify_counts_the_put_back_body_as_sent(index):
    """What `session-index verify` holds the real CLI to: the body is a
    record the resume sends (kept), not one it drops."""
    from indexer.repair import verify

    t = Transcript(SID)
    batch(t)
    t.add(u(7), u(4), "user", isMeta=True, message=body())
    path = derived(index, t.records)
    verdicts = {r["uuid"]: (r["verdict"], r["cause"]) for r in index.rows(
        verify.RECORDS_BY_VERDICT_SQL, {"file_id": index.file_id(path)})}
    assert verdicts[u(7)] == ("kept", "put_back_with_result")


def test_the_companion_rule_in_python_is_the_sql_rule():
    import itertools
    import sqlite3

    from indexer.transcripts import records

    conn = sqlite3.connect(":memory:")
    rows = list(itertools.product(("user", "assistant", "system", "attachment", "progress"),
                                  (None, "compact_boundary", "api_error"), (0, 1), (0, 1)))
    sql = (f"SELECT {records.COMPANION_RECORD.format(r='r')} FROM (SELECT ? AS type, "
           "? AS subtype, ? AS is_meta, ? AS is_tool_result) r")
    assert [bool(conn.execute(sql, row).fetchone()[0]) for row in rows] == [
        records.is_companion(*row) for row in rows]
    # what it is: attachments, system records but boundaries, isMeta prompts
    assert {row for row in rows if records.is_companion(*row)} == {
        row for row in rows if row[0] == "attachment"
        or (row[0] == "system" and row[1] != "compact_boundary")
        or (row[0] == "user" and row[2] and not row[3])}


def test_has_tool_use_reads_the_blocks():
    import sqlite3

    from indexer.transcripts import records

    conn = sqlite3.connect(":memory:")
    sql = (f"SELECT {records.HAS_TOOL_USE.format(r='r')} FROM (SELECT ? AS type, "
           "? AS raw) r")

    def answer(type_, content):
        raw = json.dumps({"type": type_, "message": {"content": content}})
        return conn.execute(sql, [type_, raw]).fetchone()[0]

    use = {"type": "tool_use", "id": "t", "name": "Bash", "input": {}}
    assert answer("assistant", [{"type": "text", "text": "x"}, use]) == 1
    assert answer("assistant", [{"type": "text", "text": '"tool_use"'}]) == 0
    assert answer("assistant", '"tool_use"') == 0
    assert answer("assistant", ['"tool_use"', "tool_use"]) == 0
    assert answer("user", [use]) == 0


# --- The same rule held to the real CLI (marker oracle) -----------------------

def _shape(below, last=(u(5), u(6))):
    t = Transcript(SID)
    batch(t)
    below(t)
    return [r for r in t.records if r["uuid"] not in last] + [
        r for name in last for r in t.records if r["uuid"] == name]


def _line_of_two(t):
    t.add(u(7), u(4), "user", isMeta=True, message=body("BODY-A"))
    t.add(u(8), u(7), "user", isMeta=True, message=body("BODY-B"))


def _fork(t):
    _line_of_two(t)
    t.add(u(9), u(7), "user", isMeta=True, message=body("BODY-C"))


def _into_a_prompt(t):
    t.add(u(7), u(4), "user", isMeta=True, message=body("BODY-A"))
    t.add(u(8), u(7), "user", message=body("PROMPT-B"))


def _in_the_region(t):
    t.records.pop()
    t.add(u(7), u(5), "attachment", attachment={"type": "hook_additional_context", "content": "x"})
    t.add(u(8), u(7), "user", isMeta=True, message=body("BODY-R"))
    t.add(u(9), u(7), "assistant", message=tool_use("msg_Q", "toolu_c"))
    t.add(u(10), u(9), "user", message=tool_result("toolu_c"))
    t.add(u(11), u(10), "user")
    t.add(u(12), u(11), "attachment", attachment={"type": "hook_additional_context", "content": "y"})
    t.add(u(13), u(12), "user", isMeta=True, message=body("BODY-OUT"))
    t.add(u(14), u(12), "assistant")


# shape -> (records, user texts the CLI sends, user texts it does not)
ORACLE_SHAPES = {
    "line_of_two": (lambda: _shape(_line_of_two), ["BODY-A", "BODY-B"], []),
    "fork": (lambda: _shape(_fork), [], ["BODY-A", "BODY-B", "BODY-C"]),
    "into_a_prompt": (lambda: _shape(_into_a_prompt), [], ["BODY-A", "PROMPT-B"]),
    "in_the_region": (lambda: _shape(_in_the_region, last=()), ["BODY-R"], ["BODY-OUT"]),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(ORACLE_SHAPES))
def test_the_real_cli_sends_what_the_index_puts_back(index, name):
    from indexer.repair import oracle, verify
    from test_oracle import CLAUDE
    from test_oracle_cases import user_record_verdicts, user_texts

    if CLAUDE is None:
        pytest.skip("no Claude Code binary")
    make, sent_words, unsent_words = ORACLE_SHAPES[name]
    records = [dict(r, sessionId=SID) for r in make()]
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", records)
    index.ingest()
    index.assert_caches_match_definitions()
    fid = index.file_id(path)
    with oracle.FakeMessagesAPI() as api:
        sent = oracle.resume_sent(path.read_bytes(), SID, api, CLAUDE)
    texts = "\n".join(user_texts(sent))
    assert [w for w in sent_words + unsent_words if w in texts] == sent_words
    assert verify.compare(index.db.conn, fid, sent)[:2] == ([], [])
    differ = {uuid: kept for uuid, (kept, words) in user_record_verdicts(index, fid).items()
              if kept != (words in texts)}
    assert differ == {}
