"""Turning stored values into safe, readable text and HTML for the web UI.

Transcripts hold hostile text (prompts, tool output, web pages), so every
value that reaches HTML goes through ``markupsafe`` here: ``Markup.format``
escapes its arguments, and nothing else builds markup from data.

The SQL functions registered for Datasette (``prepare_connection``) are the
plain functions at the top: ``is_synthetic`` and ``json_excerpt``.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from urllib.parse import quote

from markupsafe import Markup

from indexer.transcripts import records

# Orphan causes (the `orphans` view), in the order the legend shows them,
# with the colour the session page and the badges use.
CAUSE_COLOURS = {
    "api_error_splice": "#c62828",
    "parallel_tool_branch": "#ef6c00",
    "put_back_with_result": "#f9a825",
    "late_graft": "#d84315",
    "concurrent_resume": "#00838f",
    "abandoned_branch": "#6a1b9a",
    "dangling_parent": "#ad1457",
    "unlinked": "#4e342e",
    "other": "#37474f",
    "api_error_record": "#9e9d24",
    "compacted": "#1565c0",
    "progress": "#90a4ae",
}
# error_class of executions (issue 3), and the status/reason words of the
# retention and stale-reference views: a badge colour each.
ERROR_CLASS_COLOURS = {
    "ok": "#2e7d32",
    "resume_not_found": "#c62828",
    "poisoned_previous_message_id": "#ad1457",
    "rate_limit": "#ef6c00",
    "max_turns": "#6a1b9a",
    "max_budget": "#6a1b9a",
    "auth": "#4e342e",
    "other_error": "#37474f",
}
STATUS_COLOURS = {
    "expiring": "#ef6c00", "expired": "#c62828", "deleted": "#37474f",
    "never_indexed": "#4e342e", "unopenable": "#6d4c41",
}

PRETTY_LIMIT = 20_000  # characters of pretty-printed JSON shown in a table cell
_WS = re.compile(r"\s+")
# A JSON token: a string (escapes kept as written), a structural character,
# or a run of anything else (numbers, literals, NaN: kept as written).
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[{}\[\],:]|[^"{}\[\],:\s]+', re.S)


def is_synthetic(type_, model) -> int | None:
    """SQL function: 1 when a record (its ``type``, ``model``) is a synthetic
    placeholder (records.is_synthetic: an assistant record whose
    message.model is ``<synthetic>``, whatever its message.id), else 0;
    NULL when its type is NULL."""
    if type_ is None:
        return None
    return int(records.is_synthetic(type_, model))


def json_excerpt(raw, length=120) -> str | None:
    """SQL function: a one-line excerpt of a record's text (its message text,
    tool call, tool result, system content or subtype), at most ``length``
    characters. Never fails: text that is not JSON is cut as it is."""
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    try:
        length = max(1, int(length))
    except (TypeError, ValueError):
        length = 120
    try:
        text = _text_of(json.loads(raw))
    except (ValueError, RecursionError):
        text = str(raw)
    text = _WS.sub(" ", text).strip()
    return text if len(text) <= length else text[: length - 1] + "\u2026"


def _text_of(obj) -> str:
    if not isinstance(obj, dict):
        return _short_json(obj)
    message = obj.get("message")
    if isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return " ".join(filter(None, (_block_text(b) for b in content)))
    for key in ("content", "summary"):
        if isinstance(obj.get(key), str):
            return obj[key]
    error = obj.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    for key in ("data", "attachment"):
        value = obj.get(key)
        if isinstance(value, dict) and isinstance(value.get("type"), str):
            return f"{key}: {value['type']}"
    return str(obj.get("subtype") or obj.get("type") or "")


def _block_text(block) -> str:
    if not isinstance(block, dict):
        return _short_json(block)
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "thinking":
        return f"(thinking) {block.get('thinking') or ''}"
    if kind == "tool_use":
        return f"{block.get('name')}: {_short_json(block.get('input'))}"
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            content = " ".join(filter(None, (_block_text(b) for b in content)))
        return f"result: {content if isinstance(content, str) else _short_json(content)}"
    return f"[{kind}]" if isinstance(kind, str) else ""


def _short_json(value, limit=300) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)[:limit]
    except (TypeError, ValueError, RecursionError):
        return repr(value)[:limit]


def pretty_json(text: str, indent: int = 2) -> str:
    """Re-indent JSON text without re-encoding it: only whitespace between
    tokens changes, so duplicate keys, NaN, huge numbers and escapes stay
    exactly as written. Text that does not start like JSON comes back as is."""
    if not isinstance(text, str) or not text.lstrip("\ufeff \t\r\n").startswith(("{", "[")):
        return text
    tokens = _JSON_TOKEN.findall(text)
    out, depth, pad = [], 0, " " * indent
    for i, tok in enumerate(tokens):
        if tok in ("{", "["):
            if i + 1 < len(tokens) and tokens[i + 1] in ("}", "]"):
                out.append(tok)
                continue
            depth += 1
            out.append(tok + "\n" + pad * depth)
        elif tok in ("}", "]"):
            if i and tokens[i - 1] in ("{", "["):
                out.append(tok)
                continue
            depth = max(0, depth - 1)
            out.append("\n" + pad * depth + tok)
        elif tok == ",":
            out.append(",\n" + pad * depth)
        elif tok == ":":
            out.append(": ")
        else:
            out.append(tok)
    return "".join(out)


def json_block(text: str, full_url: str | None = None, limit: int = PRETTY_LIMIT) -> Markup:
    """A ``<pre>`` of pretty-printed JSON, cut at ``limit`` characters with a
    link to the whole value."""
    pretty = pretty_json(text)
    if len(pretty) <= limit:
        return Markup('<pre class="si-json">{}</pre>').format(pretty)
    more = Markup("")
    if full_url:
        more = Markup(' <a href="{}">the whole line</a>').format(full_url)
    return Markup('<pre class="si-json">{}</pre><p class="si-note">{} more characters.{}</p>'
                  ).format(pretty[:limit], f"{len(pretty) - limit:,}", more)


def badge(text: str, colour: str | None, title: str = "") -> Markup:
    """A small coloured label. ``colour`` comes from the tables above, never
    from data."""
    return Markup('<span class="si-badge" style="background:{}" title="{}">{}</span>').format(
        colour or "#546e7a", title, text)


def cause_badge(cause: str) -> Markup:
    return badge(cause, CAUSE_COLOURS.get(cause), "orphan cause")


def session_path(session_id: str) -> str:
    """The session page's path (before the base URL), the id percent-encoded."""
    return "/-/sessions/" + quote(str(session_id), safe="")


def css_class(word, known) -> str:
    """A CSS class suffix for a word from a view, only if it is a known word."""
    return word if word in known else "unknown"


_AGO_UNITS = ((365 * 86400, "year"), (30 * 86400, "month"), (7 * 86400, "week"),
              (86400, "day"), (3600, "hour"), (60, "minute"), (1, "second"))


def relative_time(iso: str | None, now: datetime | None = None) -> str:
    """An ISO-8601 time as '3 hours ago' (or 'in 2 days') from ``now`` (the
    clock): the largest whole unit; '' for what is not a time."""
    if not iso:
        return ""
    try:
        moment = datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    seconds = int(((now or datetime.now(timezone.utc)) - moment).total_seconds())
    if abs(seconds) < 1:
        return "just now"
    size, unit = next((s, u) for s, u in _AGO_UNITS if abs(seconds) >= s)
    n = abs(seconds) // size
    words = f"{n} {unit}{'' if n == 1 else 's'}"
    return f"{words} ago" if seconds > 0 else f"in {words}"


def when(iso: str | None, now: datetime | None = None) -> Markup:
    """A stored time as the pages show it: the ISO time as stored, and
    beside it how long ago that was (``relative_time``)."""
    if not iso:
        return Markup("")
    ago = relative_time(iso, now)
    if not ago:
        return Markup("{}").format(iso)
    return Markup('<time datetime="{}">{}</time> <span class="si-ago">({})</span>').format(
        iso, iso, ago)
