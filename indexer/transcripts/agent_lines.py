"""What every other agent's line parser shares (codex.py, gemini.py): a
record's columns by name, the checks a line passes before it is a record
(as indexer.transcripts.lines makes them for Claude Code's), and the parser
API ingest calls (line_row, parse_line, parse_large_line)."""

from __future__ import annotations

import json

from indexer.transcripts.records import RECORD_FIELDS
from indexer.transcripts.rows import INT_RANGE, BadLine, NeedsText, count, storable  # noqa: F401 (count: the parsers' API)

_FLAGS = {"is_sidechain", "is_meta", "is_api_error", "is_compact_summary", "is_tool_result",
          "is_unreadable", "has_usage"}
_DEFAULTS = tuple(0 if name in _FLAGS else None for name in RECORD_FIELDS)
_INDEX = {name: i for i, name in enumerate(RECORD_FIELDS)}


def fields(**values) -> tuple:
    """A record's columns in RECORD_FIELDS order: ``values`` by name, the
    flags 0 and the rest NULL where not given."""
    row = list(_DEFAULTS)
    for name, value in values.items():
        row[_INDEX[name]] = value
    return tuple(row)


def text_or_none(value) -> str | None:
    """A JSON string as a column (lines.storable: a lone surrogate as its
    backslash escape); None for an empty one or anything else."""
    return storable(value) if isinstance(value, str) and value else None


def fits(n: int) -> int | None:
    """``n`` when an SQLite integer holds it (a sum of counts may not), else None."""
    return n if -INT_RANGE <= n < INT_RANGE else None


def decode(data) -> tuple[str, dict]:
    """(the exact text, the JSON object) of a line (bytes or memoryview,
    no newline); BadLine as lines.parse_line says it."""
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError as exc:
        raise BadLine(f"invalid UTF-8 at byte {exc.start}") from None
    if not text.strip():
        raise BadLine("blank line")
    if "\x00" in text:
        raise BadLine("NUL byte in line")
    try:
        value = json.loads(text[1:] if text.startswith("\ufeff") else text)
    except RecursionError:
        raise BadLine("JSON nested too deeply") from None
    except ValueError as exc:
        raise BadLine(f"invalid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadLine(f"not a JSON object (a {type(value).__name__})")
    return text, value


class LineParser:
    """The parser ingest uses for one file of another agent, with the API of
    indexer.transcripts.lines (line_row, parse_line, parse_large_line);
    ``entry_fields(value)`` gives a parsed line's columns."""

    def entry_fields(self, value: dict) -> tuple:
        raise NotImplementedError

    def parse_line(self, data) -> tuple[str, tuple]:
        text, value = decode(data)
        return text, self.entry_fields(value)

    def parse_large_line(self, data) -> tuple:
        raise NeedsText()   # read as text (parse_line), like any line

    def line_row(self, line, file_id: int, line_no: int, offset: int, records: list,
                 bads: list) -> None:
        try:
            raw, values = self.parse_line(line)
            records.append((file_id, line_no, offset, *values, raw))
        except BadLine as exc:
            bads.append((file_id, line_no, offset, str(exc), bytes(line)))
