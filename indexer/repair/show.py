"""``session-index show``: the conversation a session really holds.

The main transcript's lines, with every api_error splice re-parented as
``repair`` would (repair_plan), read the way the Agent SDK reads a transcript
(conversation.py: the leaf, the walk, the parallel tool calls and results put
back). Each message says whether it was on the resume chain or recovered, and
why. With no splice, the messages are exactly the SDK's get_session_messages.
"""

from __future__ import annotations

import json

from indexer.chain import resume, walk
from indexer.ingest import derive
from indexer.transcripts import agents, codex, conversation, gemini, records
from indexer.repair import repair
from indexer.signals import verdict as verdicts
from indexer.sql import dict_rows


# The session's verdict on one host (session_verdicts has a row per session
# and host; verdict.of_session reads the default host's).
HOST_VERDICT_SQL = """
SELECT * FROM session_verdicts WHERE session_id = :session_id AND host = :host
""".strip()


def verdict_on(conn, session_id: str, host: str) -> dict | None:
    rows = dict_rows(conn, HOST_VERDICT_SQL, {"session_id": session_id, "host": host})
    return rows[0] if rows else None


def recovered_conversation(db, session_id: str, host: str = "") -> list[dict]:
    p = repair.plan(db, session_id, host)
    lines = []
    for line_no, raw in db.conn.execute(repair.LINES_SQL, {"file_id": p.file_id}):
        raw = bytes(raw)
        if line_no in p.reparent:
            raw = repair._reparent_line(raw, *p.reparent[line_no])
        lines.append(raw.decode("utf-8", "replace"))
    entries = conversation.parse_entries(lines)
    # What a compaction kept, read where the CLI puts it back (resume.relink).
    recs, _ = walk.read_rows(db.conn.execute(
        derive.UUID_RECORDS_SQL, {"file_ids": json.dumps([p.file_id])}).fetchall(),
        [p.file_id])[p.file_id]
    moved = resume.relinked_parents([r for r in recs if r.type in resume.CHAIN_TYPES])
    for entry in entries:
        if entry.get("uuid") in moved:
            entry["parentUuid"] = moved[entry["uuid"]]
    chain = conversation.build_conversation_chain(entries)
    out = []
    for entry in conversation.visible_messages(chain):
        cause = p.orphaned.get(entry["uuid"])
        out.append({
            "uuid": entry["uuid"], "type": entry["type"], "timestamp": entry.get("timestamp"),
            "recovered": cause,   # None: on the resume chain
            "synthetic": records.is_synthetic_entry(entry),
            "synthetic_kind": records.synthetic_kind(entry),
            "message": entry.get("message"),
        })
    return out


def _blocks(message) -> list[str]:
    content = message.get("content") if isinstance(message, dict) else message
    if isinstance(content, str):
        return [content]
    parts = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "thinking":
            parts.append(f"[thinking] {block.get('thinking', '')}")
        elif kind == "tool_use":
            parts.append(f"[tool_use {block.get('name')}] "
                         f"{json.dumps(block.get('input'), ensure_ascii=False)[:500]}")
        elif kind == "tool_result":
            body = block.get("content")
            if isinstance(body, list):
                body = " ".join(str(b.get("text", "")) for b in body if isinstance(b, dict))
            parts.append(f"[tool_result] {str(body)[:500]}")
        else:
            parts.append(f"[{kind}]")
    return parts


def _mark(m: dict) -> str:
    marks = []
    if m["recovered"]:
        marks.append(f"recovered: {m['recovered']}")
    if m["synthetic"]:
        marks.append("synthetic placeholder, " + records.synthetic_label(m["synthetic_kind"]))
    return f" ({'; '.join(marks)})" if marks else ""


def header(verdict: dict, fmt: str) -> str:
    """The lines show starts with: the session's verdict as check states it
    (verdict.py: 'VERDICT: REASON'), and its fix."""
    if fmt == "markdown":
        fix = f"\n\nFix: `{verdict['fix']}`" if verdict["fix"] else ""
        return f"**{verdict['verdict']}**: {verdict['reason']}{fix}\n"
    fix = f"\nfix: {verdict['fix']}" if verdict["fix"] else ""
    return verdicts.headline(verdict["verdict"], verdict["reason"]) + fix + "\n"


def render(messages: list[dict], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(messages, indent=2, ensure_ascii=False)
    out = []
    for m in messages:
        text = "\n".join(_blocks(m["message"]))
        if fmt == "markdown":
            out.append(f"### {m['type']} · {m['timestamp'] or ''}{_mark(m)}\n\n"
                       f"<!-- uuid {m['uuid']} -->\n\n{text}\n")
        else:
            out.append(f"[{m['type']}] {m['timestamp'] or ''} {m['uuid']}{_mark(m)}\n"
                       + "\n".join("    " + line for line in text.splitlines()))
    return "\n".join(out)


# --- another agent's session (agents.py) ------------------------------------

# The lines of a Codex or Gemini CLI session, its files in the order they
# were first ingested (a session is one file; a copy is another), each in
# file order: record type, time and line.
AGENT_LINES_SQL = """
SELECT f.id AS file_id, r.type, r.timestamp, r.raw FROM files f JOIN records r ON r.file_id = f.id
WHERE f.session_id = :session_id AND f.agent = :agent AND f.host IS NULL
ORDER BY f.id, r.byte_offset
""".strip()


# The files of another agent's session (AGENT_LINES_SQL's).
AGENT_FILES_SQL = """
SELECT id FROM files WHERE session_id = :session_id AND agent = :agent AND host IS NULL ORDER BY id
""".strip()


def agent_file_ids(conn, session_id: str, agent: str) -> list[int]:
    return [r[0] for r in conn.execute(AGENT_FILES_SQL, {"session_id": session_id,
                                                         "agent": agent})]


def agent_conversation(conn, session_id: str, agent: str) -> list[dict]:
    """The conversation of another agent's session, in order: [{id, role,
    timestamp, text}]. A Codex rollout's response items (messages, tool
    calls and their output, reasoning summaries, compactions) as written
    (a fork's or subagent's replayed history included: it is what the
    thread holds); a Gemini CLI chat's messages as the CLI rebuilds them
    (gemini.replay)."""
    rows = conn.execute(AGENT_LINES_SQL, {"session_id": session_id, "agent": agent})
    out = []
    if agent == agents.GEMINI:
        by_file: dict[int, list] = {}
        for file_id, _, _, raw in rows:
            by_file.setdefault(file_id, []).append(_loads(raw))
        for values in by_file.values():
            for m in gemini.replay(values):
                for mid, role, text in gemini.message_turns(m):
                    out.append({"id": mid, "role": role, "timestamp": m.get("timestamp"),
                                "text": text})
        return out
    for _, _, timestamp, raw in rows:
        value = _loads(raw)
        for item_id, role, text in codex.turns(value) if isinstance(value, dict) else []:
            out.append({"id": item_id, "role": role, "timestamp": timestamp, "text": text})
    return out


def _loads(raw):
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def render_agent(turns: list[dict], fmt: str) -> str:
    """agent_conversation's turns as text, markdown or JSON."""
    if fmt == "json":
        return json.dumps(turns, indent=2, ensure_ascii=False)
    out = []
    for t in turns:
        if fmt == "markdown":
            out.append(f"### {t['role']} · {t['timestamp'] or ''}\n\n{t['text']}\n")
        else:
            out.append(f"[{t['role']}] {t['timestamp'] or ''}\n"
                       + "\n".join("    " + line for line in t["text"].splitlines()))
    return "\n".join(out)
