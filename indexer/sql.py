"""Running SQL: a query's rows as dicts. The bottom of the package: every
layer may import it, it imports nothing of the package."""

from __future__ import annotations


def dict_rows(conn, sql: str, params=()) -> list[dict]:
    """A query's rows as dicts keyed by column name."""
    cur = conn.execute(sql, params)
    columns = [d[0] for d in cur.description]
    return [dict(zip(columns, row)) for row in cur.fetchall()]
