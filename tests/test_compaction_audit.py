"""Issue 27, item 2: the compaction audit. Each shape of the threads
(anthropics/claude-code#92089, #92849, #46603) as a generated tree: what the
real Claude Code (2.1.332) sends when it resumes it, that the index agrees,
what compaction_segments says of each compaction, and that check, the
compaction-segments listing, the health page and the session page name what
a resume loses (the ``truncated`` verdict, exit 12) and nothing more."""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Transcript, write_jsonl
from indexer.cli.commands import cli
from indexer.signals.classes import COMPACTION_AUDIT
from test_oracle import CLAUDE, SID, text, u
from test_web import Web, session_url

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def at(seconds):
    ms = round(seconds * 1000)
    return f"2026-09-01T00:{ms // 60000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"


def _compacted(t, head_tail=True):
    """u1 prompt, u2 'the kept answer', boundary u5 keeping u1..u2, summary u6."""
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the kept answer"), ts=at(1))
    meta = {"trigger": "manual", "preTokens": 100,
            "preservedSegment": {"headUuid": u(1), "anchorUuid": u(6), "tailUuid": u(2)}}
    t.add(u(5), None, "system", subtype="compact_boundary", content="Conversation compacted",
          logicalParentUuid=u(2), compactMetadata=meta, ts=at(100))
    t.add(u(6), u(5), "user", isCompactSummary=True, ts=at(100.1),
          message={"role": "user", "content": "summary of the earlier conversation"})


def shape_parent_never_written():
    """B3: after the compaction, a prompt whose parent was never written."""
    t = Transcript(SID)
    _compacted(t)
    t.add(u(7), u(6), "user", ts=at(200))
    t.add(u(8), u(7), "assistant", message=text("msg_8", "after the compaction"), ts=at(201))
    t.add(u(9), "ffffffff-0000-0000-0000-00000000dead", "user", ts=at(300))
    t.add(u(10), u(9), "assistant", message=text("msg_10", "after the break"), ts=at(301))
    return t.records


def shape_segment_broken():
    """The boundary's preservedSegment names a head the walk from its tail
    never reaches (the tail hangs from another record): the CLI relinks nothing."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "an earlier answer"), ts=at(1))
    t.add(u(3), None, "user", ts=at(2))
    t.add(u(4), u(3), "assistant", message=text("msg_4", "the kept answer"), ts=at(3))
    meta = {"trigger": "manual", "preTokens": 100,
            "preservedSegment": {"headUuid": u(1), "anchorUuid": u(6), "tailUuid": u(4)}}
    t.add(u(5), None, "system", subtype="compact_boundary", content="Conversation compacted",
          logicalParentUuid=u(4), compactMetadata=meta, ts=at(100))
    t.add(u(6), u(5), "user", isCompactSummary=True, ts=at(100.1),
          message={"role": "user", "content": "summary of the earlier conversation"})
    t.add(u(7), u(6), "user", ts=at(200))
    t.add(u(8), u(7), "assistant", message=text("msg_8", "after the compaction"), ts=at(201))
    return t.records


def shape_no_stop_hook():
    """B2 (#46603, 2.1.260-2.1.267 without a Stop hook): the first row after
    the summary hangs from the summary, the tail is the last answer."""
    t = Transcript(SID)
    _compacted(t)
    t.add(u(7), u(6), "user", ts=at(200))
    t.add(u(8), u(7), "assistant", message=text("msg_8", "after the compaction"), ts=at(201))
    return t.records


def shape_tail_under_an_attachment():
    """As 2.1.332 writes it: the boundary's logicalParentUuid is an
    attachment written after the kept answer (the tail)."""
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the kept answer"), ts=at(1))
    t.add(u(3), u(2), "attachment", attachment={"type": "todo_reminder"}, ts=at(2))
    meta = {"trigger": "manual", "preTokens": 100,
            "preservedSegment": {"headUuid": u(2), "anchorUuid": u(6), "tailUuid": u(2)}}
    t.add(u(5), None, "system", subtype="compact_boundary", content="Conversation compacted",
          logicalParentUuid=u(3), compactMetadata=meta, ts=at(100))
    t.add(u(6), u(5), "user", isCompactSummary=True, ts=at(100.1),
          message={"role": "user", "content": "summary of the earlier conversation"})
    t.add(u(7), u(6), "user", ts=at(200))
    t.add(u(8), u(7), "assistant", message=text("msg_8", "after the compaction"), ts=at(201))
    return t.records


def shape_logical_parent_elsewhere():
    """The boundary's logicalParentUuid is a message the tail is not above:
    a link broken, shown; the CLI does not read it and relinks the tail."""
    records = shape_tail_under_an_attachment()
    records[3]["logicalParentUuid"] = u(1)
    return records


def shape_second_compact_copies():
    """B1 (#92089): a second /compact in one process re-appends the records
    before the first boundary (same uuid, parent, time, bytes); the Stop
    hook row hangs from the last copy; the new boundary's tail is that row."""
    t = Transcript(SID)
    _compacted(t)
    t.add(u(7), u(6), "user", ts=at(200))
    t.add(u(8), u(7), "assistant", message=text("msg_8", "between the compactions"), ts=at(201))
    t.records.append(dict(t.records[0]))
    t.records.append(dict(t.records[1]))
    t.add(u(11), u(2), "system", subtype="stop_hook_summary", ts=at(250), hookCount=1,
          hookInfos=[], hookErrors=[], preventedContinuation=False, stopReason="",
          hasOutput=False, level="suggestion", toolUseID=u(11))
    meta = {"trigger": "manual", "preTokens": 100,
            "preservedSegment": {"headUuid": u(11), "anchorUuid": u(13), "tailUuid": u(11)}}
    t.add(u(12), None, "system", subtype="compact_boundary", content="Conversation compacted",
          logicalParentUuid=u(11), compactMetadata=meta, ts=at(300))
    t.add(u(13), u(12), "user", isCompactSummary=True, ts=at(300.1),
          message={"role": "user", "content": "summary of both conversations"})
    t.add(u(14), u(13), "user", ts=at(400))
    t.add(u(15), u(14), "assistant", message=text("msg_15", "after the second"), ts=at(401))
    return t.records


def shape_second_compact_continuation_on_a_copy():
    """B1 as #92849 saw it: the row after the second compaction hangs from a
    copy written before the first boundary, and the boundary keeps nothing."""
    t = Transcript(SID)
    _compacted(t)
    t.add(u(7), u(6), "user", ts=at(200))
    t.add(u(8), u(7), "assistant", message=text("msg_8", "between the compactions"), ts=at(201))
    t.records.append(dict(t.records[0]))
    t.records.append(dict(t.records[1]))
    meta = {"trigger": "manual", "preTokens": 100,
            "preservedMessages": {"anchorUuid": u(13), "uuids": []}}
    t.add(u(12), None, "system", subtype="compact_boundary", content="Conversation compacted",
          logicalParentUuid=u(2), compactMetadata=meta, ts=at(300))
    t.add(u(13), u(12), "user", isCompactSummary=True, ts=at(300.1),
          message={"role": "user", "content": "summary of both conversations"})
    t.add(u(14), u(2), "user", ts=at(400))
    t.add(u(15), u(14), "assistant", message=text("msg_15", "after the second"), ts=at(401))
    return t.records


SHAPES = {n[len("shape_"):]: f for n, f in dict(globals()).items() if n.startswith("shape_")}

# Per shape, what Claude Code 2.1.332 sends (found with the real binary):
# the assistant texts in order, and the user texts it must and must not send.
SENT = {
    "tail_under_an_attachment": (["the kept answer", "after the compaction"],
                                 ["summary of the earlier conversation"], []),
    "logical_parent_elsewhere": (["the kept answer", "after the compaction"],
                                 ["summary of the earlier conversation"], []),
    "parent_never_written": (["after the break"], [],
                             ["summary of the earlier conversation"]),
    "segment_broken": (["after the compaction"], ["summary of the earlier conversation"], []),
    "no_stop_hook": (["the kept answer", "after the compaction"],
                     ["summary of the earlier conversation"], []),
    "second_compact_copies": (["after the second"], ["summary of both conversations"], []),
    "second_compact_continuation_on_a_copy": (["after the second"], [],
                                              ["summary of both conversations"]),
}

# Per shape, each compaction as compaction_segments states it: (position,
# records, copies, reached, lost, lost_causes, preserved, preserved_finding,
# truncated, truncated_records).
SEGMENTS = {
    "tail_under_an_attachment": [(1, 3, 0, 3, 0, None, "segment", None, None, None)],
    "logical_parent_elsewhere": [(1, 3, 0, 3, 0, None, "segment", "tail_not_logical_parent",
                                  None, None)],
    "parent_never_written": [
        (1, 5, 0, 2, 3, "unlinked 3", "segment", None, "unreached_after_compaction", 3)],
    "segment_broken": [
        (1, 3, 0, 3, 0, None, "segment", "segment_does_not_reach_head",
         "segment_not_relinked", 2)],
    "no_stop_hook": [(1, 3, 0, 3, 0, None, "segment", None, None, None)],
    "second_compact_copies": [
        (1, 3, 2, 0, 3, "compacted 3", "segment", None, None, None),
        (2, 3, 0, 3, 0, None, "segment", None, None, None)],
    "second_compact_continuation_on_a_copy": [
        (1, 3, 2, 0, 3, "unlinked 3", "segment", None, None, None),
        (2, 3, 0, 2, 1, "unlinked 1", "list", None, "unreached_after_compaction", 1)],
}
TRUNCATED = {name for name, rows in SEGMENTS.items() if rows[-1][8]}
COLUMNS = ("position", "records", "copies", "reached", "lost", "lost_causes", "preserved",
           "preserved_finding", "truncated", "truncated_records")


def write_shape(index, name):
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", SHAPES[name]())
    then = time.time() - 600   # repair refuses a file written in the last minutes
    os.utime(path, (then, then))
    index.ingest()
    return path


def health_count(html: str, label: str) -> int:
    """The count the health page gives the row ``label``."""
    found = re.search(re.escape(label) + r'</a>.*?<td class="si-count">(\d+)</td>', html,
                      re.S)
    assert found, label
    return int(found.group(1))


def check(index, tmp_path, sid=SID):
    out = CliRunner().invoke(cli, ["check", sid, "--db", str(index.path), "--json",
                                   "--config-dir", str(tmp_path / "claude")])
    return out.exit_code, json.loads(out.stdout)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_compaction_says_what_a_resume_reaches(index, name):
    path = write_shape(index, name)
    rows = index.rows("SELECT * FROM compaction_segments WHERE file_id = ? ORDER BY position",
                      [index.file_id(path)])
    assert [tuple(r[c] for c in COLUMNS) for r in rows] == SEGMENTS[name]
    assert [r["last"] for r in rows] == [0] * (len(rows) - 1) + [1]
    index.assert_caches_match_definitions()


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_check_says_truncated_only_where_a_resume_loses_conversation(index, tmp_path, name):
    write_shape(index, name)
    code, verdict = check(index, tmp_path)
    if name not in TRUNCATED:
        assert (code, verdict["verdict"]) == (0, "resumable")
        return
    cause, lost = SEGMENTS[name][-1][8:]
    assert (code, verdict["verdict"], verdict["details"]["cause"]) == (12, "truncated", cause)
    assert verdict["details"]["truncated_records"] == lost
    assert verdict["reason"].startswith(f"{lost} conversation record(s) ")
    assert f"session-index repair {SID} --write" in verdict["reason"]


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_listing_the_health_page_and_the_session_page_name_it(index, name):
    path = write_shape(index, name)
    out = CliRunner().invoke(cli, ["compaction-segments", "--db", str(index.path), "--json"])
    listed = json.loads(out.output or "[]")
    expected = sorted((r for r in SEGMENTS[name] if r[8] or r[7] or r[2]),
                      key=lambda r: (r[8] is None, r[0]))   # the truncated first
    assert [tuple(r[c] for c in COLUMNS) for r in listed] == expected
    assert out.exit_code == (1 if expected else 0)
    site = Web(index.path)
    health = site.get("/-/session-health").text
    assert health_count(health, "Truncated: a resume loses conversation after the last "
                                "compaction") == (1 if name in TRUNCATED else 0)
    assert health_count(health, "Compactions with copies re-appended or broken "
                                "preservedSegment links") == sum(
        1 for r in SEGMENTS[name] if (r[2] or r[7]) and not r[8])
    page = site.get(session_url(SID)).text
    assert page.count('data-boundary="') == len(SEGMENTS[name])
    # The repaired download (repair_plan applied) where a repair relinks.
    assert ("repaired</a>" in page) == (name in TRUNCATED)
    for row in SEGMENTS[name]:
        if row[8]:
            assert f'data-truncated="{row[8]}"' in page
            assert 'data-verdict="truncated"' in page
        if row[7]:
            assert f'data-finding="{row[7]}"' in page
        if row[2]:
            assert f'data-copies="{row[2]}"' in page and "#92089" in page
    # A copy is one record on the page: its uuid is drawn once.
    fid = index.file_id(path)
    for uuid in {r["uuid"] for r in index.rows(
            "SELECT uuid FROM records WHERE file_id = ? AND uuid IS NOT NULL", [fid])}:
        assert page.count(f'id="u-{uuid}"') <= 1, uuid


def test_the_listing_is_declared():
    assert COMPACTION_AUDIT.listing.command == "compaction-segments"


@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_what_the_cli_sends_and_the_index_agrees(index, name):
    from indexer.repair import oracle, verify

    path = write_shape(index, name)
    with oracle.FakeMessagesAPI() as api:
        sent = oracle.resume_sent(path.read_bytes(), SID, api, CLAUDE)
    assistant, user_has, user_lacks = SENT[name]
    assert sent.assistant_texts() == assistant
    texts = "\n".join(b.get("text") or "" for m in sent.messages if m.get("role") == "user"
                      for b in oracle._blocks(m) if b.get("type") == "text")
    assert all(t in texts for t in user_has), texts
    assert not any(t in texts for t in user_lacks), texts
    kept_not_sent, sent_but_dropped, _ = verify.compare(index.db.conn, index.file_id(path), sent)
    assert (kept_not_sent, sent_but_dropped) == ([], [])


def truncated_in(index) -> list:
    return index.rows("SELECT session_id, cause FROM session_verdicts "
                      "WHERE verdict = 'truncated'") + index.rows(
        "SELECT session_id, truncated FROM compaction_segments WHERE truncated IS NOT NULL")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_no_truncated_session_in_the_corpus(index):
    index.ingest(CORPUS)
    assert truncated_in(index) == []


def test_no_truncated_session_among_the_real_clis_transcripts(index):
    """tests/fixtures/claude_code: what 2.1.332 wrote against the fake API
    (a manual and an auto compaction, and two /compacts in one process):
    all resume whole. 2.1.332 re-appends nothing at the second /compact
    (#92089 is fixed there): no copies."""
    index.ingest(os.path.join(FIXTURES, "claude_code"))
    rows = index.rows("SELECT s.session_id, position, last, copies, lost, lost_causes, "
                      "preserved_finding FROM compaction_segments s ORDER BY session_id, "
                      "position")
    twice = "dbe4de67-e20e-5f98-bd6f-23a41e9857d8"   # compacted_twice_in_one_process
    assert [(r["position"], r["last"], r["lost"], r["lost_causes"]) for r in rows
            if r["session_id"] == twice] == [(1, 0, 5, "compacted 5"), (2, 1, 0, None)]
    assert len(rows) == 4
    assert {(r["copies"], r["preserved_finding"]) for r in rows} == {(0, None)}
    assert all(r["lost"] == 0 for r in rows if r["last"])
    assert truncated_in(index) == []


@pytest.mark.skipif(not os.environ.get("SESSION_INDEX_ORACLE_DIR"),
                    reason="set SESSION_INDEX_ORACLE_DIR to a folder of transcripts")
def test_no_truncated_session_in_transcripts_not_seen(index):
    """The held-out check: SESSION_INDEX_ORACLE_DIR=~/.claude/projects
    pytest -k not_seen."""
    index.ingest(os.environ["SESSION_INDEX_ORACLE_DIR"])
    found = truncated_in(index)
    print(f"\n{index.value('SELECT count(*) FROM compaction_segments')} compactions, "
          f"truncated: {found}")
    assert found == []


# --- repair --write relinks what the records hold -----------------------------

# Per truncated shape: the records a resume loses (back on the chain after
# the repair), the one line the repair changes and the field it sets, and
# what the real CLI sends after it (assistant texts, user texts).
REPAIRED = {
    "parent_never_written": ({u(6), u(7), u(8)}, u(9), "parentUuid", u(8),
                             ["the kept answer", "after the compaction", "after the break"],
                             ["summary of the earlier conversation"]),
    "second_compact_continuation_on_a_copy": ({u(13)}, u(14), "parentUuid", u(13),
                                              ["after the second"],
                                              ["summary of both conversations"]),
    "segment_broken": ({u(3), u(4)}, u(5), "headUuid", u(3),
                       ["the kept answer", "after the compaction"],
                       ["summary of the earlier conversation"]),
}


def test_every_truncated_shape_is_repaired():
    assert set(REPAIRED) == TRUNCATED


def field_of(record: dict, name: str):
    if name == "headUuid":
        return record["compactMetadata"]["preservedSegment"]["headUuid"]
    return record[name]


@pytest.mark.parametrize("name", sorted(REPAIRED))
def test_repair_relinks_the_lost_conversation(index, tmp_path, name):
    lost, uuid, field, value, _, _ = REPAIRED[name]
    path = write_shape(index, name)
    before = path.read_bytes()
    fid = index.file_id(path)
    assert not lost & set(index.ancestry(fid))
    out = CliRunner().invoke(cli, ["repair", SID, "--db", str(index.path), "--write"])
    assert out.exit_code == 0, out.output
    # One line changed, in one field.
    changed = [(a, b) for a, b in zip(before.splitlines(), path.read_bytes().splitlines())
               if a != b]
    assert len(changed) == 1
    old, new = (json.loads(x) for x in changed[0])
    assert new["uuid"] == uuid and field_of(new, field) == value
    if field == "headUuid":
        new["compactMetadata"]["preservedSegment"]["headUuid"] = field_of(old, field)
    else:
        new[field] = old[field]
    assert new == old
    assert lost <= set(index.ancestry(fid))
    backups = list(path.parent.glob(f"{SID}.jsonl.session-index-backup-*"))
    assert [b.read_bytes() for b in backups] == [before]
    code, verdict = check(index, tmp_path)
    assert (code, verdict["verdict"]) == (0, "resumable")
    index.assert_caches_match_definitions()


def test_no_repair_for_a_compaction_that_resumes_whole(index):
    write_shape(index, "second_compact_copies")
    out = CliRunner().invoke(cli, ["repair", SID, "--db", str(index.path), "--json"])
    assert json.loads(out.output)["changes"] == []


@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
@pytest.mark.parametrize("name", sorted(REPAIRED))
def test_after_the_repair_the_real_cli_sends_the_lost_conversation(index, name):
    from indexer.repair import oracle, verify

    *_, assistant, user_has = REPAIRED[name]
    path = write_shape(index, name)
    out = CliRunner().invoke(cli, ["repair", SID, "--db", str(index.path), "--write"])
    assert out.exit_code == 0, out.output
    with oracle.FakeMessagesAPI() as api:
        sent = oracle.resume_sent(path.read_bytes(), SID, api, CLAUDE)
    texts = "\n".join(b.get("text") or "" for m in sent.messages if m.get("role") == "user"
                      for b in oracle._blocks(m) if b.get("type") == "text")
    assert sent.assistant_texts() == assistant
    assert all(t in texts for t in user_has), texts
    kept_not_sent, sent_but_dropped, _ = verify.compare(index.db.conn, index.file_id(path), sent)
    assert (kept_not_sent, sent_but_dropped) == ([], [])


# --- #92089 as Claude Code 2.1.259 writes it -----------------------------------

OLD = os.path.join(FIXTURES, "compaction", "compacted_twice_2.1.259")
NO_STOP_HOOK = os.path.join(FIXTURES, "compaction", "manual_compact_2.1.273")
BOOKKEEPING = ("promptId", "slug")


def old_fixture(index, folder=OLD):
    shutil.copytree(folder, index.projects / "-tmp-old", ignore=shutil.ignore_patterns("*.json"))
    index.ingest()
    return next((index.projects / "-tmp-old").glob("*.jsonl"))


def copies_after(lines: list[dict], boundary_line: int, next_line: int | None) -> int:
    """The lines in (boundary_line, next_line) that repeat an earlier line of
    their uuid, but for the bookkeeping fields, with a compact boundary line
    at or after that line and before them (1-based line numbers)."""
    def same(a, b):
        return ({k: v for k, v in a.items() if k not in BOOKKEEPING}
                == {k: v for k, v in b.items() if k not in BOOKKEEPING})
    boundaries = [n for n, r in enumerate(lines, 1) if r.get("subtype") == "compact_boundary"]
    found = 0
    for n, r in enumerate(lines, 1):
        if n <= boundary_line or (next_line and n >= next_line) or not r.get("uuid"):
            continue
        found += any(e.get("uuid") == r["uuid"] and same(e, r)
                     and any(m <= k < n for k in boundaries)
                     for m, e in enumerate(lines[:n - 1], 1))
    return found


def test_the_real_second_compact_is_seen_and_resumes_whole(index, tmp_path):
    path = old_fixture(index)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert {r.get("version") for r in lines if r.get("version")} == {"2.1.259"}
    rows = index.rows("SELECT * FROM compaction_segments WHERE file_id = ? ORDER BY position",
                      [index.file_id(path)])
    by_line = {r["uuid"]: n for n, r in reversed(list(enumerate(lines, 1))) if r.get("uuid")}
    starts = [by_line[r["boundary_uuid"]] for r in rows]
    # Two compactions (the copy of the first boundary is no third), copies
    # counted across the first, none lost after the last, nothing truncated.
    assert len(rows) == 2
    assert [r["copies"] for r in rows] == [
        copies_after(lines, start, nxt) for start, nxt in zip(starts, starts[1:] + [None])]
    assert rows[0]["copies"] > 0 and rows[1]["copies"] == 0
    assert (rows[1]["last"], rows[1]["lost"], rows[1]["truncated"]) == (1, 0, None)
    assert [r["preserved_finding"] for r in rows] == [None, None]
    code, verdict = check(index, tmp_path, path.stem)
    assert (code, verdict["verdict"]) == (0, "resumable")
    out = CliRunner().invoke(cli, ["compaction-segments", "--db", str(index.path), "--json"])
    assert out.exit_code == 1
    assert [r["copies"] for r in json.loads(out.output)] == [rows[0]["copies"]]
    site = Web(index.path)
    assert health_count(site.get("/-/session-health").text,
                        "Compactions with copies re-appended or broken preservedSegment "
                        "links") == 1
    page = site.get(session_url(path.stem)).text
    assert f'data-copies="{rows[0]["copies"]}"' in page and "#92089" in page
    for uuid in by_line:
        assert page.count(f'id="u-{uuid}"') <= 1, uuid


@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
def test_the_real_second_compact_as_2_1_332_resumes_it(index):
    from indexer.repair import oracle, verify

    path = old_fixture(index)
    sid = path.stem
    with oracle.FakeMessagesAPI() as api:
        sent = oracle.resume_sent(path.read_bytes(), sid, api, CLAUDE)
    texts = "\n".join(b.get("text") or "" for m in sent.messages if m.get("role") == "user"
                      for b in oracle._blocks(m) if b.get("type") == "text")
    assert "Anything else?" in texts and "What did the notes say?" not in texts
    kept_not_sent, sent_but_dropped, _ = verify.compare(index.db.conn, index.file_id(path), sent)
    assert (kept_not_sent, sent_but_dropped) == ([], [])


# --- #46603 without a Stop hook, as Claude Code 2.1.273 writes it --------------

def test_one_compact_without_a_stop_hook_resumes_whole(index, tmp_path):
    """2.1.273 hangs the rows after the summary from the summary and keeps
    the last answer as the tail (#46603's second shape): a walk from the
    newest row never comes to the conversation before the boundary, but
    2.1.332 relinks the kept answer: not truncated, no finding."""
    path = old_fixture(index, NO_STOP_HOOK)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    by_uuid = {r["uuid"]: r for r in lines if r.get("uuid")}
    [boundary] = [r for r in lines if r.get("subtype") == "compact_boundary"]
    summary = boundary["compactMetadata"]["preservedSegment"]["anchorUuid"]
    after = [r for r in lines if r.get("parentUuid") == summary]
    assert after and by_uuid[summary].get("isCompactSummary")
    assert {r.get("version") for r in lines if r.get("version")} == {"2.1.273"}
    [row] = index.rows("SELECT * FROM compaction_segments WHERE file_id = ?",
                       [index.file_id(path)])
    assert (row["lost"], row["copies"], row["preserved_finding"], row["truncated"]) == (
        0, 0, None, None)
    code, verdict = check(index, tmp_path, path.stem)
    assert (code, verdict["verdict"]) == (0, "resumable")


@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
def test_one_compact_without_a_stop_hook_as_2_1_332_resumes_it(index):
    from indexer.repair import oracle, verify

    path = old_fixture(index, NO_STOP_HOOK)
    with oracle.FakeMessagesAPI() as api:
        sent = oracle.resume_sent(path.read_bytes(), path.stem, api, CLAUDE)
    assert sent.assistant_texts() == ["Goodbye!", "ok"]   # the kept answer, after the summary
    kept_not_sent, sent_but_dropped, _ = verify.compare(index.db.conn, index.file_id(path), sent)
    assert (kept_not_sent, sent_but_dropped) == ([], [])


def test_the_health_row_costs_the_same_however_long_the_file_after_the_last_compaction(
        tmp_path):
    """next_offset (the next boundary's offset) reads the file's boundaries,
    not every line after this one in offset order until a boundary: for the
    last boundary that was the rest of the file (66 ms of the health page's
    compaction row at a million records). Counted in SQLite steps, the
    health row costs about the same with 100 and with 2,000 records after
    the last compaction."""
    from conftest import Index
    from test_append_derive import sqlite_steps

    row = COMPACTION_AUDIT.health[0].sql(COMPACTION_AUDIT.view_name)
    steps = []
    for n in (100, 2000):
        (tmp_path / str(n)).mkdir()
        index = Index(tmp_path / str(n))
        t = Transcript(SID)
        _compacted(t)
        parent = u(6)
        for i in range(n):
            t.add(u(100 + i), parent, "user" if i % 2 else "assistant", ts=at(200 + i))
            parent = u(100 + i)
        write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
        index.ingest()
        assert index.rows(row) == []
        assert index.value("SELECT count(*) FROM compaction_segments") == 1
        steps.append(sqlite_steps(index, lambda: index.rows(row)))
    assert steps[1] < 2 * steps[0] + 5, steps   # (4 and 4 hundred; 10 and 105 before)
