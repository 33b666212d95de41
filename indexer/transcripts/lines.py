"""Turning one transcript line (bytes, no trailing newline) into a row.

A line is either a record (a JSON object: stored whole as text, plus the few
fields the views need) or a bad line (stored as raw bytes with the reason).
Nothing about a line is ever rejected for its content: unknown types and
fields stay in ``raw``.

Speed: most of a transcript's bytes are message bodies and tool output that
the index never needs as Python objects. ``msgspec`` decodes into typed
structs and skips every field it is not asked for without building it; only
a line that does not fit the fast shape (a field of an unexpected type, NaN,
a lone surrogate) takes the slow, general path.
"""

from __future__ import annotations

import codecs
import json
from typing import Any, Optional, Union

import msgspec

from indexer.transcripts.records import RECORD_FIELDS  # noqa: F401 (the parser's API)
from indexer.transcripts.rows import LARGE_LINE_BYTES, BadLine, NeedsText  # noqa: F401 (the parser's API)
from indexer.transcripts.rows import INT_RANGE, count, storable  # noqa: F401 (the parser's API)

BOM = "\ufeff"


class _Block(msgspec.Struct):
    type: Any = None


# A token count as the usage view reads it: a JSON number (lines.count
# makes it an integer); anything else sends the line down the slow path.
_Number = Union[int, float, None]


class _CacheCreation(msgspec.Struct):
    ephemeral_5m_input_tokens: _Number = None
    ephemeral_1h_input_tokens: _Number = None


class _Usage(msgspec.Struct):
    input_tokens: _Number = None
    output_tokens: _Number = None
    cache_read_input_tokens: _Number = None
    cache_creation_input_tokens: _Number = None
    cache_creation: Optional[_CacheCreation] = None
    speed: Optional[str] = None
    service_tier: Optional[str] = None


class _Message(msgspec.Struct):
    id: Optional[str] = None
    model: Optional[str] = None
    content: Union[str, list[_Block], None] = None
    usage: Optional[_Usage] = None


class _RawMessage(_Message):
    # For large lines: content kept as raw JSON (a view of the input, not
    # decoded), since a prompt or tool output can be megabytes.
    content: msgspec.Raw = msgspec.Raw(b"null")


_BLOCKS = msgspec.json.Decoder(list[_Block])


# The fast shape: every field the index extracts, with the type a well-formed
# record has. A record that does not fit (a number where a string belongs, a
# message that is not an object) fails validation and takes the slow path.
class _Record(msgspec.Struct, rename="camel"):
    type: Optional[str] = None
    subtype: Optional[str] = None
    uuid: Optional[str] = None
    parent_uuid: Optional[str] = None
    logical_parent_uuid: Optional[str] = None
    session_id: Optional[str] = None
    # stream-json events (`claude -p`) spell it session_id
    stream_session_id: Optional[str] = msgspec.field(default=None, name="session_id")
    timestamp: Optional[str] = None
    is_sidechain: Optional[bool] = None
    is_meta: Optional[bool] = None
    agent_id: Optional[str] = None
    team_name: Optional[str] = None
    request_id: Optional[str] = None
    is_api_error_message: Optional[bool] = None
    is_compact_summary: Optional[bool] = None
    cwd: Optional[str] = None
    version: Optional[str] = None
    git_branch: Optional[str] = None
    leaf_uuid: Optional[str] = None
    sent_as_uuid: Optional[str] = None
    rows_ahead_of_put_back: Optional[msgspec.Raw] = None
    source_tool_assistant_uuid: Optional[str] = msgspec.field(
        default=None, name="sourceToolAssistantUUID")
    message: Optional[_Message] = None


class _LargeRecord(_Record):
    message: Optional[_RawMessage] = None


_FAST = msgspec.json.Decoder(_Record)
_LARGE = msgspec.json.Decoder(_LargeRecord)
# Large lines are checked for UTF-8, NUL and blankness a piece at a time.
_PIECE = 1 << 20


def _text(value: Any) -> str | None:
    """A string column: strings kept (empty ones are absent), other JSON
    scalars kept as their JSON text so a wrong type is visible, not lost."""
    if value is None:
        return None
    if isinstance(value, str):
        return storable(value) if value else None
    if isinstance(value, bool):
        return "true" if value else "false"
    try:
        return json.dumps(value, ensure_ascii=True)[:200]
    except (TypeError, ValueError, RecursionError):
        return repr(value)[:200]


def _rows_ahead(value: Any) -> str | None:
    """rowsAheadOfPutBack: kept (compact JSON) only when it is an array, the
    one shape the loader reads (any other is ignored as malformed)."""
    if value.__class__ is not list:
        return None
    return json.dumps(value, separators=(",", ":"))   # (ASCII: a lone surrogate stays escaped)


def _source_tool(value: Any, parent: Any) -> str | None:
    """sourceToolAssistantUUID: kept only when it is a string other than
    parentUuid, the one case the loader reads it (RRr: a stray tool_result
    is attached under the record it names)."""
    if value.__class__ is not str or not value or value == parent:
        return None
    return storable(value)


def _id(value: Any) -> str | None:
    """uuid-like columns: only a string is an id (the SDK ignores the rest)."""
    return _text(value) if isinstance(value, str) else None


def _flag(value: Any) -> int:
    """JavaScript/Python truthiness, as the readers test these fields."""
    return 1 if value else 0


def _unreadable(type_, message_is_object: bool, content, is_block) -> int:
    """1 for a user or assistant record Claude Code's loader drops as
    unreadable (2.1.332, resume.py): its message is not an object, its
    content is neither a string nor a list, an assistant's string content
    is blank, or a non-empty list holds no block (an object with a string
    ``type``)."""
    if type_ not in ("user", "assistant"):
        return 0
    if not message_is_object:
        return 1
    if isinstance(content, str):
        return int(type_ == "assistant" and not content.strip())
    if not isinstance(content, list):
        return 1
    return int(bool(content) and not any(is_block(b) for b in content))


# The usage columns of a record that has none (not an assistant record, or
# its message.usage is not an object).
NO_USAGE = (0, None, None, None, None, None, None, None, None)


def _string(value: Any) -> str | None:
    """usage.speed / service_tier: a JSON string as it is (an empty one
    too); NULL for anything else."""
    return storable(value) if value.__class__ is str else None


def _usage_struct(u: _Usage) -> tuple:
    cc = u.cache_creation
    return (1, count(u.input_tokens), count(u.output_tokens), count(u.cache_read_input_tokens),
            count(u.cache_creation_input_tokens),
            None if cc is None else count(cc.ephemeral_5m_input_tokens),
            None if cc is None else count(cc.ephemeral_1h_input_tokens),
            u.speed, u.service_tier)


def _usage_dict(u: dict) -> tuple:
    cc = u.get("cache_creation")
    if not isinstance(cc, dict):
        cc = {}
    return (1, count(u.get("input_tokens")), count(u.get("output_tokens")),
            count(u.get("cache_read_input_tokens")), count(u.get("cache_creation_input_tokens")),
            count(cc.get("ephemeral_5m_input_tokens")),
            count(cc.get("ephemeral_1h_input_tokens")),
            _string(u.get("speed")), _string(u.get("service_tier")))


def _from_struct(r: _Record) -> tuple:
    """Fields of a record that fit the fast shape: strings are already
    strings (msgspec rejects lone surrogates), flags are bools or None."""
    msg = r.message
    message_id = model = None
    is_tool_result = 0
    content = None
    usage = NO_USAGE
    if msg is not None:
        message_id, model = msg.id or None, msg.model or None
        content = msg.content
        if msg.usage is not None and r.type == "assistant":
            usage = _usage_struct(msg.usage)
        if isinstance(content, msgspec.Raw):
            first = memoryview(content)[:1]
            content = (_BLOCKS.decode(content) if first == b"[" else
                       msgspec.json.decode(content) if first == b'"' else None)
        if content.__class__ is list:
            is_tool_result = 1 if any(b.type == "tool_result" for b in content) else 0
    unreadable = _unreadable(r.type, msg is not None, content,
                             lambda b: isinstance(b.type, str))
    return (
        r.session_id or r.stream_session_id or None, r.uuid or None, r.parent_uuid or None,
        r.logical_parent_uuid or None, r.type or None, r.subtype or None,
        r.timestamp or None, 1 if r.is_sidechain else 0, 1 if r.is_meta else 0,
        r.team_name or None, r.agent_id or None, message_id, model,
        r.request_id or None, 1 if r.is_api_error_message else 0,
        1 if r.is_compact_summary else 0, is_tool_result, r.cwd or None,
        r.version or None, r.git_branch or None, r.leaf_uuid or None, unreadable,
        r.sent_as_uuid or None,
        None if r.rows_ahead_of_put_back is None else _rows_ahead(
            msgspec.json.decode(r.rows_ahead_of_put_back)),
        _source_tool(r.source_tool_assistant_uuid, r.parent_uuid),
    ) + usage


def _from_dict(d: dict) -> tuple:
    msg = d.get("message")
    message_id = model = None
    is_tool_result = 0
    content = None
    usage = NO_USAGE
    if isinstance(msg, dict):
        message_id, model = msg.get("id"), msg.get("model")
        content = msg.get("content")
        if isinstance(msg.get("usage"), dict) and d.get("type") == "assistant":
            usage = _usage_dict(msg["usage"])
        if isinstance(content, list):
            is_tool_result = _flag(
                any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
            )
    unreadable = _unreadable(d.get("type"), isinstance(msg, dict), content,
                             lambda b: isinstance(b, dict) and isinstance(b.get("type"), str))
    g = d.get
    return (*_row(
        g("type"), g("subtype"), g("uuid"), g("parentUuid"), g("logicalParentUuid"),
        g("sessionId") or g("session_id"), g("timestamp"), g("isSidechain"), g("isMeta"), g("teamName"),
        g("agentId"), message_id, model, g("requestId"), g("isApiErrorMessage"),
        g("isCompactSummary"), is_tool_result, g("cwd"), g("version"), g("gitBranch"),
        g("leafUuid"),
    ), unreadable, _id(g("sentAsUuid")), _rows_ahead(g("rowsAheadOfPutBack")),
        _source_tool(g("sourceToolAssistantUUID"), g("parentUuid")), *usage)


def _row(type_, subtype, uuid, parent, logical_parent, session_id, timestamp,
         sidechain, meta, team, agent_id, message_id, model, request_id,
         api_error, compact_summary, is_tool_result, cwd, version, branch, leaf):
    return (
        _text(session_id),
        _id(uuid),
        _text(parent),
        _text(logical_parent),
        _text(type_),
        _text(subtype),
        _id(timestamp),
        _flag(sidechain),
        _flag(meta),
        _text(team),
        _text(agent_id),
        _text(message_id),
        _text(model),
        _text(request_id),
        _flag(api_error),
        _flag(compact_summary),
        is_tool_result,
        _text(cwd),
        _text(version),
        _text(branch),
        _text(leaf),
    )


def parse_line(data) -> tuple[str, tuple]:
    """Return ``(raw_text, fields)`` for a record line (bytes or a memoryview
    of them, without the newline), fields in RECORD_FIELDS order.

    Raises BadLine for anything that is not a JSON object. ``raw_text`` is the
    exact line (a leading BOM and a trailing ``\\r`` included), so the file can
    be rebuilt byte for byte.
    """
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError as exc:
        raise BadLine(f"invalid UTF-8 at byte {exc.start}") from None
    if not text.strip():
        raise BadLine("blank line")
    if "\x00" in text:
        raise BadLine("NUL byte in line")
    body = text[1:] if text.startswith(BOM) else text
    try:
        return text, _from_struct(_FAST.decode(body))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass
    return text, _from_dict(_slow_decode(body))


_BOM_BYTES = BOM.encode()
_FAST_FAILS = (UnicodeDecodeError, msgspec.DecodeError, msgspec.ValidationError, RecursionError)


def parse_line_bytes(data) -> tuple[bytes | str, tuple]:
    """parse_line for the ingest's hot path: the same fields and errors, but
    ``raw`` is the line's own bytes when they are UTF-8 without NUL or BOM
    and fit the fast shape (stored as TEXT by ingest's INSERT, the same text
    parse_line would give), read without making a str of the line; any other
    line is parse_line's. tests/test_ingest.py holds the two equal."""
    raw = bytes(data)
    if b"\x00" not in raw and not raw.startswith(_BOM_BYTES):
        try:
            if not raw.isascii():
                raw.decode("utf-8")  # strict: what parse_line's str() accepts
            return raw, _from_struct(_FAST.decode(raw))
        except _FAST_FAILS:
            pass
    return parse_line(raw)


def line_row(line, file_id: int, line_no: int, offset: int, records: list, bads: list) -> None:
    """Parse one complete line (a memoryview, no newline) onto ``records``
    as the records row ingest inserts (file_id, line_no, byte_offset,
    the RECORD_FIELDS, raw), or onto ``bads`` as a bad_lines row."""
    try:
        raw, fields = parse_line_bytes(line)
        records.append((file_id, line_no, offset, *fields, raw))
    except BadLine as exc:
        bads.append((file_id, line_no, offset, str(exc), bytes(line)))


def parse_large_line(data) -> tuple:
    """The fields of a large line (a memoryview of its bytes), in
    RECORD_FIELDS order, read without copying it whole: UTF-8, NUL and blank
    checks piece by piece, then msgspec's typed decode straight from the
    bytes. Raises BadLine as parse_line would, and NeedsText when the fast
    path cannot read the record (odd types, NaN, lone surrogates)."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    blank = True
    for i in range(0, len(data), _PIECE):
        piece = bytes(data[i:i + _PIECE])
        try:
            decoder.decode(piece)
        except UnicodeDecodeError as exc:
            raise BadLine(f"invalid UTF-8 at byte {i + exc.start}") from None
        if b"\x00" in piece:
            raise BadLine("NUL byte in line")
        blank = blank and not piece.strip()
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise BadLine(f"invalid UTF-8 at byte {len(data) - 1}") from None
    if blank:
        raise BadLine("blank line")
    body = data[3:] if bytes(data[:3]) == BOM.encode() else data
    try:
        return _from_struct(_LARGE.decode(body))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise NeedsText() from None


def _slow_decode(body: str) -> dict:
    try:
        value = json.loads(body)
    except RecursionError:
        raise BadLine("JSON nested too deeply") from None
    except ValueError as exc:
        raise BadLine(f"invalid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadLine(f"not a JSON object (a {type(value).__name__})")
    return value
