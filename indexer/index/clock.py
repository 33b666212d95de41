"""Times as the index stores them: ISO 8601 in UTC, to the millisecond, with
a ``Z`` (``2026-01-02T03:04:05.678Z``)."""

from __future__ import annotations

import time
from datetime import datetime, timezone


def utcnow() -> str:
    return iso(time.time())


def iso(ts: float) -> str:
    """A POSIX timestamp as the index stores a time."""
    return (datetime.fromtimestamp(ts, timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"))


# The days of the week, Monday first (datetime.weekday()'s order): what
# `usage weekly --start-of-week` names.
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
