"""Issue 29, item 1: the verdict of a session and the compaction audit read
what they need, not every record (of the session, of the index).

Counted in SQLite virtual-machine steps (test_append_derive.sqlite_steps),
which no load on the machine changes:
- a session's verdict (session_verdicts for one session) costs at most 2x at
  4,000 records what it costs at 200: the version of the Claude Code that
  last wrote the file is read from the file's last lines, and the refused
  thinking of the latest message from that message's records, not by
  sorting or walking every record of the file;
- the compaction audit (compaction_segments, as the health page and the
  compaction_findings query filter it) costs the same whatever the size of
  the transcripts that were never compacted: it finds the boundaries by
  records_compact_boundaries, not by reading every record of the index.
"""
from __future__ import annotations

import json

from test_append_derive import linear_session, sqlite_steps

from indexer.signals import classes

# The health page's compaction row and the compaction_findings query's filter.
FINDINGS_SQL = ("SELECT * FROM compaction_segments WHERE " + classes._SEGMENT_FINDING
                + " ORDER BY session_id, position")


def as_claude_code_writes(records: list[dict]) -> list[dict]:
    """The records with what Claude Code writes on each answer: a msg_ id, a
    model and a requestId."""
    for i, r in enumerate(records):
        if r["type"] == "assistant":
            r["message"] = {**r["message"], "id": f"msg_{i:06d}", "model": "claude-opus-4-5",
                            "type": "message"}
            r["requestId"] = f"req_{i:06d}"
    return records


def write(index, session_id: str, records: list[dict]):
    path = index.projects / "p" / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return path


def compacted_session(session_id: str) -> list[dict]:
    """A short conversation, a compact boundary, its summary and more
    conversation after it."""
    before = linear_session(session_id, 8)
    boundary = {"parentUuid": None, "logicalParentUuid": before[-1]["uuid"], "type": "system",
                "subtype": "compact_boundary", "content": "Conversation compacted",
                "sessionId": session_id, "uuid": f"{session_id[:8]}-b00000",
                "timestamp": "2026-10-01T01:00:00.000Z",
                "compactMetadata": {"trigger": "manual", "preTokens": 1000}}
    summary = {"parentUuid": boundary["uuid"], "type": "user", "isCompactSummary": True,
               "sessionId": session_id, "uuid": f"{session_id[:8]}-s00000",
               "timestamp": "2026-10-01T01:00:01.000Z",
               "message": {"role": "user", "content": "This session is being continued..."}}
    after = linear_session(session_id, 9)[1:]
    for i, r in enumerate(after):
        r["uuid"] = f"{session_id[:8]}-a{i:05d}"
        r["parentUuid"] = after[i - 1]["uuid"] if i else summary["uuid"]
        r["timestamp"] = f"2026-10-01T02:00:{i:02d}.000Z"
    return before + [boundary, summary] + after


def test_a_sessions_verdict_costs_the_same_at_any_session_size(index):
    costs, verdicts = {}, {}
    for n in (200, 4000):
        sid = f"{n:08d}-2929-4000-8000-000000000001"
        records = as_claude_code_writes(linear_session(sid, n))
        records[-1]["version"] = "2.1.300"    # the writer's version: on the last line only
        write(index, sid, records)
        index.ingest()
        rows = []
        costs[n] = sqlite_steps(index, lambda: rows.extend(index.rows(
            "SELECT verdict, resumer_version FROM session_verdicts WHERE session_id = ?", [sid])))
        verdicts[n] = rows
    assert verdicts == {n: [{"verdict": "resumable", "resumer_version": "2.1.300"}]
                        for n in (200, 4000)}
    assert costs[4000] <= 2 * costs[200], costs


def test_the_compaction_audit_costs_the_same_beside_any_uncompacted_transcript(index):
    sid = "c0000000-2929-4000-8000-000000000002"
    write(index, sid, compacted_session(sid))
    costs, rows = {}, {}
    for n in (200, 4000):
        other = f"{n:08d}-2929-4000-8000-000000000003"
        write(index, other, linear_session(other, n))
        index.ingest()
        found = []
        costs[n] = sqlite_steps(index, lambda: found.extend(index.rows(
            "SELECT session_id, position, last, records, lost FROM compaction_segments")))
        sqlite_steps(index, lambda: index.rows(FINDINGS_SQL))
        rows[n] = found
    assert rows[200] == rows[4000] == [
        {"session_id": sid, "position": 1, "last": 1, "records": 9, "lost": 0}]
    assert costs[4000] <= 1.2 * costs[200], costs


def test_the_compaction_audit_reads_a_segment_once(index):
    """A compaction's row (records, reached, lost, lost_causes) reads the
    records after its boundary once, and finds the next boundary by
    records_compact_boundaries: it costs at most 2x one count of the
    segment's records a resume reaches (1.65x: the lost records' causes are
    looked up and grouped in the same pass; it read the segment three times,
    and every record of the file to find that there is no next boundary:
    3.06x)."""
    from indexer.signals import compaction
    sid = "c0000000-2929-4000-8000-000000000004"
    records = compacted_session(sid)
    after = linear_session(sid, 3000)[1:]
    for i, r in enumerate(after):
        r["uuid"] = f"{sid[:8]}-l{i:05d}"
        r["parentUuid"] = after[i - 1]["uuid"] if i else records[-1]["uuid"]
    write(index, sid, records + after)
    index.ingest()
    found = []
    audit = sqlite_steps(index, lambda: found.extend(index.rows(
        "SELECT position, last, records, reached, lost, lost_causes FROM compaction_segments "
        "WHERE session_id = ?", [sid])))
    segment = f"""SELECT (SELECT count(*) FROM (
        {compaction.SEGMENT_RECORDS_TEMPLATE.format(b="x", next="NULL")}) s
        WHERE {compaction.REACHED_TEMPLATE.format(f="x.file_id", u="s.uuid")}) AS n
      FROM records x WHERE x.type = 'system' AND x.subtype = 'compact_boundary'
        AND x.file_id = (SELECT main_file_id FROM sessions WHERE session_id = ?)"""
    counted = []
    once = sqlite_steps(index, lambda: counted.extend(index.rows(segment, [sid])))
    assert found == [{"position": 1, "last": 1, "records": counted[0]["n"],
                      "reached": counted[0]["n"], "lost": 0, "lost_causes": None}]   # all reached
    assert counted[0]["n"] > 3000
    assert audit <= 2 * once, (audit, once)
