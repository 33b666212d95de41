"""Codex CLI rollouts: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``
(CODEX_HOME defaults to ``~/.codex``), one JSON object a line:
``{"timestamp", "type", "payload"}`` with type ``session_meta`` (the
thread: id, cwd, cli_version, git, ``forked_from_id``, a subagent's
``source.subagent``), ``turn_context`` (the turn's model and cwd),
``response_item`` (the model's input and output items: messages, function
calls and their outputs, reasoning), ``event_msg`` (events, among them
``token_count``), ``compacted``, ``world_state`` and, from about 0.170,
``token_usage_record`` (one per model call, naming its ``response_id``).

A fork or a subagent spawned with the parent's history starts with its own
``session_meta``, then the parent's (a second one) and the parent's history
replayed; older CLIs replay the parent's ``token_count`` events too, and
re-emit a ``token_count`` with unchanged totals. So a model call's tokens
are counted by what identifies the call, whichever file holds it: a
``token_usage_record``'s ``response_id`` (in message_id and request_id,
which the usage view groups on), or, in a file that has none, a
``token_count``'s cumulative total within the thread whose ``session_meta``
came last (a replayed event has its parent's total and scope; a re-emitted
one its own again).
"""

from __future__ import annotations

import json
import os
import re

from indexer.transcripts.agent_lines import LineParser, count, fields, fits, text_or_none

# rollout-2026-12-03T22-25-20-01a23e03-1bec-77a0-bcae-9ca48503d3bc.jsonl
ROLLOUT_NAME = re.compile(
    r"^rollout-.*-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$", re.I)
# The record types whose lines carry conversation text (search, show).
TEXT_TYPES = ("response_item", "compacted")
USAGE_RECORD = "token_usage_record"
TOKEN_COUNT = "token_count"

# What the index holds of a file already, for a parser that reads on from
# its offset: the last turn's model, whether it has token_usage_records, and
# the thread of its last session_meta.
FILE_STATE_SQL = """
SELECT
  (SELECT model FROM records WHERE file_id = :file_id AND type = 'turn_context'
     AND model IS NOT NULL ORDER BY byte_offset DESC LIMIT 1),
  EXISTS (SELECT 1 FROM records WHERE file_id = :file_id AND type = 'token_usage_record'),
  (SELECT session_id FROM records WHERE file_id = :file_id AND type = 'session_meta'
     ORDER BY byte_offset DESC LIMIT 1)
""".strip()


# A Codex thread's parent, from its own (first) session_meta: the thread it
# was forked from, or the one that spawned it as a subagent (:session_id).
PARENT_SQL = """
SELECT r.raw ->> '$.payload.forked_from_id' AS forked_from,
  r.raw ->> '$.payload.source.subagent.thread_spawn.parent_thread_id' AS spawned_by
FROM files f JOIN records r ON r.file_id = f.id
WHERE f.session_id = :session_id AND f.agent = 'codex' AND r.type = 'session_meta'
  AND json_valid(r.raw)
ORDER BY f.id, r.byte_offset LIMIT 1
""".strip()


def session_id_of(path: str) -> str | None:
    """The thread id a rollout's name ends with."""
    m = ROLLOUT_NAME.match(os.path.basename(path))
    return m.group(1).lower() if m else None


def is_rollout_head(value: dict) -> bool:
    """A rollout's first line: its session_meta."""
    payload = value.get("payload")
    return value.get("type") == "session_meta" and isinstance(payload, dict) \
        and isinstance(payload.get("id"), str)


def default_folders() -> list[str]:
    """Where the Codex CLI keeps its rollouts: $CODEX_HOME (else ~/.codex)
    /sessions, and /archived_sessions, where `codex archive` moves them."""
    home = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
    return [os.path.join(home, "sessions"), os.path.join(home, "archived_sessions")]


def _usage(u) -> dict:
    """The usage columns of a Codex token usage object: input less what was
    read from or written to the cache, those apart, output (reasoning is in it)."""
    if not isinstance(u, dict):
        return {}
    total_in = count(u.get("input_tokens")) or 0
    cached = count(u.get("cached_input_tokens")) or 0
    written = count(u.get("cache_write_input_tokens")) or 0
    return {"has_usage": 1, "input_tokens": fits(max(total_in - cached - written, 0)),
            "output_tokens": count(u.get("output_tokens")) or 0,
            "cache_read_tokens": cached, "cache_creation_tokens": written}


def _total_key(u) -> str | None:
    if not isinstance(u, dict):
        return None
    return "/".join(str(count(u.get(k)) or 0) for k in (
        "input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens",
        "reasoning_output_tokens", "total_tokens"))


class RolloutLines(LineParser):
    """One rollout's parser: the model of the turn in progress goes to each
    call's usage (a token_usage_record names none)."""

    def __init__(self, conn=None, file_id: int | None = None):
        self.model, self.has_usage_records, self.scope = None, False, None
        if conn is not None and file_id is not None:
            self.model, has, self.scope = conn.execute(
                FILE_STATE_SQL, {"file_id": file_id}).fetchone()
            self.has_usage_records = bool(has)

    def entry_fields(self, value: dict) -> tuple:
        rtype = text_or_none(value.get("type"))
        payload = value.get("payload")
        payload = payload if isinstance(payload, dict) else {}
        subtype = text_or_none(payload.get("type"))
        common = {"type": rtype, "subtype": subtype,
                  "timestamp": text_or_none(value.get("timestamp"))}
        if rtype == "session_meta":
            self.scope = text_or_none(payload.get("id"))
            git = payload.get("git") if isinstance(payload.get("git"), dict) else {}
            return fields(**common, session_id=self.scope, cwd=text_or_none(payload.get("cwd")),
                          version=text_or_none(payload.get("cli_version")),
                          git_branch=text_or_none(git.get("branch")))
        if rtype == "turn_context":
            self.model = text_or_none(payload.get("model")) or self.model
            return fields(**common, model=self.model, cwd=text_or_none(payload.get("cwd")))
        if rtype == USAGE_RECORD:
            self.has_usage_records = True
            rid = text_or_none(payload.get("response_id"))
            thread = text_or_none(payload.get("thread_id"))
            if rid is None:
                return fields(**common, session_id=thread)
            return fields(**common, session_id=thread, model=self.model, message_id=rid,
                          request_id=rid, **_usage(payload.get("usage")))
        if rtype == "event_msg" and subtype == TOKEN_COUNT and not self.has_usage_records:
            info = payload.get("info") if isinstance(payload.get("info"), dict) else {}
            key = _total_key(info.get("total_token_usage"))
            if key is not None and isinstance(info.get("last_token_usage"), dict):
                call = f"codex-total:{self.scope}:{key}"
                return fields(**common, session_id=self.scope, model=self.model,
                              message_id=call, request_id=call,
                              **_usage(info.get("last_token_usage")))
        return fields(**common)


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts)


def turns(value: dict) -> list[tuple[str | None, str, str]]:
    """The conversation a line holds: [(item id, role, text)] (none for
    events and metadata: their text repeats the response items')."""
    payload = value.get("payload")
    if not isinstance(payload, dict):
        return []
    if value.get("type") == "compacted":
        message = payload.get("message")
        return [(None, "compaction", message)] if isinstance(message, str) and message else []
    if value.get("type") != "response_item":
        return []
    kind, item_id = payload.get("type"), text_or_none(payload.get("id"))
    if kind == "message":
        text = _content_text(payload.get("content"))
        role = payload.get("role") if isinstance(payload.get("role"), str) else "message"
        return [(item_id, role, text)] if text else []
    if kind in ("function_call", "custom_tool_call", "local_shell_call"):
        name = payload.get("name") or kind
        args = payload.get("arguments", payload.get("input", payload.get("action")))
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        return [(item_id, "tool call", f"{name} {args}")]
    if kind in ("function_call_output", "custom_tool_call_output"):
        out = payload.get("output")
        out = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
        return [(item_id, "tool result", out)]
    if kind == "reasoning":
        text = _content_text(payload.get("summary"))
        return [(item_id, "reasoning", text)] if text else []
    return []
