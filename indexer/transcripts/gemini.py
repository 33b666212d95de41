"""Gemini CLI chats: ``~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl``
(``<project>`` the sha256 of the project's path in older CLIs, a short
name from ``~/.gemini/projects.json`` in newer ones). The append-only
``.jsonl`` form (0.57 and 0.61 write it; 0.30 writes the ``.json`` one) has
three kinds of line: a header ``{"sessionId", "projectHash", "startTime",
"lastUpdated", "kind"}`` (written again when the session is resumed),
mutation records ``{"$set": {...}}`` (``messages`` sets the whole list, as
at the start and on a resume; ``lastUpdated``, ``sessionId``, ...), and bare
message records ``{"id", "timestamp", "type": "user" | "gemini" | "info" |
"error" | "warning", "content", "toolCalls", "thoughts", "tokens",
"model"}``, a message written again with the same id when it changes (its
tool calls added). The conversation is what the CLI itself rebuilds:
apply the lines in order (``replay``). A reader of the ``$set`` lines only
loses every user turn after the first; one of the bare records only, the
history a resume set.

In ``records`` a line's type is ``gemini.`` and its kind (``gemini.user``,
``gemini.gemini``, ``gemini.$set``, ``gemini.session``); a message with
``tokens`` is one model call (message_id and request_id its id: a message
written again, or set again by a resume, counts once).
"""

from __future__ import annotations

import json
import os
import re

from indexer.transcripts.agent_lines import LineParser, count, fields, fits, text_or_none

TYPE_PREFIX = "gemini."
SESSION = TYPE_PREFIX + "session"
SET = TYPE_PREFIX + "$set"
CHAT = TYPE_PREFIX + "chat"   # a whole .json chat: one record
MESSAGE_KINDS = ("user", "gemini", "info", "error", "warning")
# The record types whose lines carry conversation text (search, show).
TEXT_TYPES = tuple(TYPE_PREFIX + k for k in MESSAGE_KINDS) + (SET, CHAT)
# A .json chat's opening, as the CLI writes it (JSON.stringify(chat, null, 2)).
JSON_CHAT_HEAD = re.compile(rb'^\{\s*"sessionId":\s*"[^"]*",\s*"projectHash":')


def is_json_chat(path: str, head: bytes) -> bool:
    """A ``session-*.json`` chat (the older form, one JSON document written
    whole): its name and first bytes."""
    name = os.path.basename(path)
    return name.startswith("session-") and name.endswith(".json") \
        and JSON_CHAT_HEAD.match(head.lstrip(b"\xef\xbb\xbf")) is not None


def is_chat_head(value: dict) -> bool:
    """A chat's first line: its header (or a whole .json chat's opening)."""
    return isinstance(value.get("sessionId"), str) and "projectHash" in value \
        and "type" not in value


def default_folder() -> str:
    """Where the Gemini CLI keeps its chats: ~/.gemini/tmp (the chats folder of each project)."""
    home = os.environ.get("GEMINI_CLI_HOME") or os.path.expanduser("~")
    return os.path.join(home, ".gemini", "tmp")


def _usage(tokens) -> dict:
    """The usage columns of a message's ``tokens``: input less the cached
    part (tool-use prompt tokens are input), the cached part, output with
    the thinking."""
    if not isinstance(tokens, dict):
        return {}
    cached = count(tokens.get("cached")) or 0
    return {"has_usage": 1,
            "input_tokens": fits(max((count(tokens.get("input")) or 0) - cached, 0)
                                 + (count(tokens.get("tool")) or 0)),
            "output_tokens": fits((count(tokens.get("output")) or 0)
                                  + (count(tokens.get("thoughts")) or 0)),
            "cache_read_tokens": cached}


# The session a file read on from its offset is about (its header's).
FILE_SESSION_SQL = "SELECT session_id FROM files WHERE id = :file_id"


class ChatLines(LineParser):
    """A chat's parser: every line is the session's its header names."""

    def __init__(self, conn=None, file_id: int | None = None):
        self.session_id = None
        if conn is not None and file_id is not None:
            row = conn.execute(FILE_SESSION_SQL, {"file_id": file_id}).fetchone()
            self.session_id = row[0] if row else None

    def entry_fields(self, value: dict) -> tuple:
        if "$set" in value:
            changes = value["$set"] if isinstance(value["$set"], dict) else {}
            self.session_id = text_or_none(changes.get("sessionId")) or self.session_id
            return fields(type=SET, subtype=",".join(sorted(changes)) or None,
                          session_id=self.session_id,
                          timestamp=text_or_none(changes.get("lastUpdated")))
        if is_chat_head(value):
            self.session_id = value["sessionId"]
            return fields(type=SESSION, subtype=text_or_none(value.get("kind")),
                          session_id=self.session_id,
                          timestamp=text_or_none(value.get("startTime")))
        kind = text_or_none(value.get("type"))
        common = {"type": TYPE_PREFIX + kind if kind else None,
                  "timestamp": text_or_none(value.get("timestamp")),
                  "model": text_or_none(value.get("model")), "session_id": self.session_id}
        mid = text_or_none(value.get("id"))
        if mid is not None and isinstance(value.get("tokens"), dict):
            return fields(**common, message_id=mid, request_id=mid, **_usage(value["tokens"]))
        return fields(**common, message_id=mid)


class JsonChat(LineParser):
    """A ``.json`` chat's parser: the whole document is one record (raw its
    exact bytes, newlines and all), read again whole at each rewrite (each a
    generation of the file: index/generations.py). Its messages' tokens are
    not counted by usage (one record, many calls): the .jsonl form's are."""

    whole_document = True

    def __init__(self, conn=None, file_id: int | None = None):
        pass

    def entry_fields(self, value: dict) -> tuple:
        messages = value.get("messages") if isinstance(value.get("messages"), list) else []
        model = next((m.get("model") for m in reversed(messages) if isinstance(m, dict)
                      and isinstance(m.get("model"), str)), None)
        return fields(type=CHAT, session_id=text_or_none(value.get("sessionId")),
                      timestamp=text_or_none(value.get("lastUpdated")), model=model)


def _parts_text(content) -> list[tuple[str, str]]:
    """[(role, text)] of a message's content: text parts, function calls and
    their responses."""
    if isinstance(content, str):
        return [("", content)] if content else []
    out = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str) and part["text"]:
            out.append(("", part["text"]))
        elif isinstance(part.get("functionResponse"), dict):
            fr = part["functionResponse"]
            out.append(("tool result", f"{fr.get('name', '')} "
                        + json.dumps(fr.get("response"), ensure_ascii=False)))
        elif isinstance(part.get("functionCall"), dict):
            fc = part["functionCall"]
            out.append(("tool call", f"{fc.get('name', '')} "
                        + json.dumps(fc.get("args"), ensure_ascii=False)))
    return out


def message_turns(message: dict) -> list[tuple[str | None, str, str]]:
    """[(message id, role, text)] of one message: its content, then its
    tool calls (name and arguments) and their results."""
    if not isinstance(message, dict):
        return []
    mid, kind = text_or_none(message.get("id")), message.get("type")
    role = "assistant" if kind == "gemini" else (kind if isinstance(kind, str) else "message")
    out = [(mid, part_role or role, text) for part_role, text in _parts_text(message.get("content"))]
    for call in message.get("toolCalls") or []:
        if isinstance(call, dict):
            out.append((mid, "tool call", f"{call.get('name', '')} "
                        + json.dumps(call.get("args"), ensure_ascii=False)))
    return out


def turns(value: dict) -> list[tuple[str | None, str, str]]:
    """The conversation text a line holds (a $set of messages: theirs)."""
    if "$set" in value:
        changes = value["$set"] if isinstance(value["$set"], dict) else {}
        messages = changes.get("messages")
        return [t for m in (messages if isinstance(messages, list) else [])
                for t in message_turns(m)]
    if is_chat_head(value):   # a header; a whole .json chat has its messages
        messages = value.get("messages")
        return [t for m in (messages if isinstance(messages, list) else [])
                for t in message_turns(m)]
    return message_turns(value)


def replay(values) -> list[dict]:
    """The chat's messages as the Gemini CLI rebuilds them from its lines
    (parsed, in file order): a ``$set`` of messages replaces the list, a
    bare message replaces the one with its id or is appended."""
    messages: list[dict] = []
    for value in values:
        if not isinstance(value, dict):
            continue
        if "$set" in value:
            changes = value["$set"]
            if isinstance(changes, dict) and isinstance(changes.get("messages"), list):
                messages = [m for m in changes["messages"] if isinstance(m, dict)]
            continue
        if is_chat_head(value) and isinstance(value.get("messages"), list):   # a .json chat
            messages = [m for m in value["messages"] if isinstance(m, dict)]
            continue
        if is_chat_head(value) or not isinstance(value.get("type"), str):
            continue
        at = next((i for i, m in enumerate(messages)
                   if value.get("id") is not None and m.get("id") == value.get("id")), None)
        if at is None:
            messages.append(value)
        else:
            messages[at] = value
    return messages
