"""Running SQL: a query's rows as dicts, and short ``BEGIN IMMEDIATE``
write transactions. The bottom of the package: every layer may import it,
it imports nothing of the package."""

from __future__ import annotations

import sqlite3
import time


def dict_rows(conn, sql: str, params=()) -> list[dict]:
    """A query's rows as dicts keyed by column name."""
    cur = conn.execute(sql, params)
    columns = [d[0] for d in cur.description]
    return [dict(zip(columns, row)) for row in cur.fetchall()]


def retry_locked(fn, attempts: int = 50):
    for i in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or i == attempts - 1:
                raise
            time.sleep(0.05 * (i + 1))


class write_lock:
    """``with write_lock(db) as conn``: a ``BEGIN IMMEDIATE`` transaction,
    committed on success and rolled back on error (when SQLite has not
    already rolled it back itself, as it does on a full disk: the error
    raised is then the real one).

    sqlite-utils' ``db.atomic()`` is a deferred transaction, which fails at
    once with "database is locked" when it reads and then tries to write
    while another process writes; IMMEDIATE takes the write lock up front
    and waits ``busy_timeout`` for it. (A class, not contextlib: a check
    process imports neither.)
    """

    __slots__ = ("conn",)

    def __init__(self, db):   # an index.db.Index or a sqlite_utils.Database
        self.conn = db.conn

    def __enter__(self) -> sqlite3.Connection:
        retry_locked(lambda: self.conn.execute("BEGIN IMMEDIATE"))
        return self.conn

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.conn.execute("COMMIT")
        elif self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        return False
