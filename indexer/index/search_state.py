"""Is full-text search on, and has it records left to index? The one query
every writer runs after its commits (search.py holds the rest: importing it
costs a no-op ingest several milliseconds of start-up)."""

from __future__ import annotations

# Is search enabled, and how far is it? (search_state is made by m021_search.)
STATE_SQL = """
SELECT high_water, (SELECT coalesce(max(id), 0) FROM records) AS last_record FROM search_state
""".strip()


def state(conn) -> tuple[int, int] | None:
    """(high-water mark, the last records.id), or None: search not enabled."""
    return conn.execute(STATE_SQL).fetchone()


def behind(now: tuple[int, int] | None) -> bool:
    """Has search (as ``state`` gave it) records above its mark?"""
    return now is not None and now[0] < now[1]


# An index nothing was ingested into, search never turned on: where
# `session-index ingest` turns search on (unless --no-search).
UNTOUCHED_SQL = """
SELECT NOT EXISTS (SELECT 1 FROM files) AND NOT EXISTS (SELECT 1 FROM search_state)
""".strip()


def untouched(conn) -> bool:
    """Is this an index no ingest has written and no one has turned search on or off in?"""
    return bool(conn.execute(UNTOUCHED_SQL).fetchone()[0])
