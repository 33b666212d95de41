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
