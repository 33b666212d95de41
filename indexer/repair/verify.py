"""`session-index verify`: what the real resume sent, next to what the index says.

The comparison is by content that survives the trip to the API: the ids of
``tool_use`` blocks, the ``tool_use_id`` of ``tool_result`` blocks, and
assistant text. A record is *kept* by the index when it is on the file's
``resume`` ancestry or an orphan the CLI puts back (``orphans.restored``);
it is *dropped* when it is any other orphan. They agree when nothing kept is
missing from what was sent (but a tool call no kept result answers, which the
CLI strips) and nothing sent is only in dropped records.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from indexer.repair import oracle
from indexer.transcripts import records
from indexer.sql import dict_rows
from indexer.ingest.files import stored_bytes

# Every chain record of a file with whether the index keeps it on a resume:
# on the resume ancestry, or off it as an orphan (restored: the CLI puts it
# back; else dropped). Synthetic placeholders are not sent back as written.
RECORDS_BY_VERDICT_SQL = f"""
SELECT r.id, r.line_no, r.uuid, r.type, r.raw,
       ({records.SYNTHETIC_RECORD.format(r="r")}) AS synthetic,
       CASE WHEN EXISTS (SELECT 1 FROM leaf_ancestry a WHERE a.file_id = r.file_id
                         AND a.rule = 'resume' AND a.record_id = r.id) THEN 'kept'
            WHEN o.restored THEN 'kept'
            WHEN o.uuid IS NOT NULL THEN 'dropped' END AS verdict,
       o.cause
FROM records r
LEFT JOIN orphans o ON o.file_id = r.file_id AND o.record_id = r.id
WHERE r.file_id = :file_id AND (r.type IN ('user', 'assistant')
  OR (r.type = 'system' AND r.subtype = '{records.VOICE_CALL_TALK_SUBTYPE}'))
ORDER BY r.line_no
""".strip()


@dataclass
class Verdict:
    session_id: str
    file_id: int
    path: str
    claude: str
    claude_version: str
    agree: bool
    sent_messages: int
    compacted: bool
    kept_not_sent: list = field(default_factory=list)     # on the index's chain, not sent
    sent_but_dropped: list = field(default_factory=list)  # sent, the index calls dropped
    checked: dict = field(default_factory=dict)           # how many items of each kind

    def as_dict(self) -> dict:
        return asdict(self)


def content_of(raw: str, record_type: str) -> list[tuple[str, str]]:
    """(kind, value) items of a record that survive the trip to the API."""
    try:
        record = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(record, dict):
        return []
    if records.is_voice_call_talk(record):   # (a system record: its own test)
        call = records.VOICE_CALL_RECORD_ID + record["uuid"]   # sent as a call and its result
        return [("tool_use", call), ("tool_result", call)]
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    items = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if record_type == "assistant" and kind == "tool_use" and isinstance(block.get("id"), str):
            items.append(("tool_use", block["id"]))
        elif record_type == "assistant" and kind == "text" and isinstance(block.get("text"), str):
            if block["text"].strip():
                items.append(("text", block["text"].strip()))
        elif record_type == "user" and kind == "tool_result" and isinstance(
                block.get("tool_use_id"), str):
            items.append(("tool_result", block["tool_use_id"]))
    return items


def sent_items(sent: oracle.Sent) -> set[tuple[str, str]]:
    items = {("tool_use", i) for i in sent.tool_use_ids()}
    items |= {("tool_result", i) for i in sent.tool_result_ids()}
    items |= {("text", t.strip()) for t in sent.assistant_texts()}
    return items


def compare(conn, file_id: int, sent: oracle.Sent) -> tuple[list, list, dict]:
    """(kept_not_sent, sent_but_dropped, counts) for one file and one resume."""
    sent_set = sent_items(sent)
    kept: dict = {}
    dropped: dict = {}
    for row in dict_rows(conn, RECORDS_BY_VERDICT_SQL, {"file_id": file_id}):
        if row["verdict"] is None or (row["synthetic"] and row["type"] == "assistant"):
            continue
        target = kept if row["verdict"] == "kept" else dropped
        for item in content_of(row["raw"], row["type"]):
            target.setdefault(item, {"line_no": row["line_no"], "uuid": row["uuid"],
                                     "cause": row["cause"]})
    # A kept tool_use whose tool_result nothing kept answers (it is only in a
    # sidechain, say) is stripped by the CLI before it sends the conversation
    # (observed with 2.1.332): not a difference.
    # Nor is a kept tool_result whose tool_use nothing kept (an isVirtual
    # result put back on a line, tests/test_oracle_cases.py
    # virtual_user_record_on_a_line: 2.1.332 does not send it).
    answered = {value for kind, value in kept if kind == "tool_result"}
    asked = {value for kind, value in kept if kind == "tool_use"}
    kept_not_sent = [_describe(item, where) for item, where in kept.items()
                     if item not in sent_set
                     and not (item[0] == "tool_use" and item[1] not in answered)
                     and not (item[0] == "tool_result" and item[1] not in asked)]
    sent_but_dropped = [_describe(item, where) for item, where in dropped.items()
                        if item in sent_set and item not in kept]
    counts = {"kept": len(kept), "dropped": len(set(dropped) - set(kept)), "sent": len(sent_set)}
    return kept_not_sent, sent_but_dropped, counts


def _describe(item, where) -> dict:
    kind, value = item
    return {"kind": kind, "value": value if len(value) <= 80 else value[:77] + "...", **where}


def verify_file(conn, file_id: int, session_id: str, path: str, binary: str,
                cwd: str | None = None) -> Verdict:
    """Resume a copy of the file's indexed bytes with the real CLI and compare."""
    data = b"".join(stored_bytes(conn, file_id, with_pending=True))
    with oracle.FakeMessagesAPI() as api:
        sent = oracle.resume_sent(data, session_id, api, binary, cwd=cwd)
    kept_not_sent, sent_but_dropped, counts = compare(conn, file_id, sent)
    return Verdict(session_id=session_id, file_id=file_id, path=path, claude=binary,
                   claude_version=oracle.claude_version(binary),
                   agree=not kept_not_sent and not sent_but_dropped,
                   sent_messages=len(sent.messages), compacted=sent.compacted,
                   kept_not_sent=kept_not_sent, sent_but_dropped=sent_but_dropped,
                   checked=counts)
