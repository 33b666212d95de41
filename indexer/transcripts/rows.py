"""The row a transcript line becomes (its columns: records.RECORD_FIELDS) and
why a line is not a record. Without the parser (lines.py and its msgspec), so a
run with nothing new to read does not load it.
"""

from __future__ import annotations


class BadLine(Exception):
    """A line that is not a JSON object; ``str(exc)`` says why."""


class NeedsText(Exception):
    """A large line the fast path cannot read from its bytes: parse_line it."""


# Python's sqlite3 binds None through its adapter lookup, about ten times
# slower than a number; SQLite stores a NaN float as NULL. So rows with many
# None (a record's: about 13 of its 40 values) are bound in bulk with NULL
# for None: the same values once SQLite has them (tests/test_rows.py holds
# SQLite to that). Not the caches' rows: with about one None in two rows
# the conversion costs more than it saves.
NULL = float("nan")


def bindable(rows):
    """``rows`` (tuples) for executemany, None bound as NULL (lazily)."""
    return (tuple([NULL if v is None else v for v in row]) for row in rows)


# Lines longer than this are parsed from their bytes without a text copy,
# and stored with incremental blob I/O (ingest.py), so memory stays bounded
# by the longest line, not several copies of it.
LARGE_LINE_BYTES = 4 << 20


# A token count outside this (an integer no SQLite integer holds) is NULL.
INT_RANGE = 1 << 63


def count(value: object) -> int | None:
    """A token count: a JSON number as an integer (a fraction truncated
    toward zero, as SQLite's CAST does); NULL for anything else (a string, a
    bool, null, NaN, an infinity) and for a number no SQLite integer holds."""
    if value.__class__ is int:
        return value if -INT_RANGE <= value < INT_RANGE else None
    if value.__class__ is float and -INT_RANGE < value < INT_RANGE:  # NaN fails both
        return int(value)
    return None


def storable(value: str) -> str:
    """A string SQLite can store as UTF-8: a lone surrogate (from a \\ud800
    escape) written as its backslash escape."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("ascii")
    return value
