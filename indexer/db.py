"""Opening the index: pragmas for one writer beside Datasette readers,
migrations, view definitions, and short ``BEGIN IMMEDIATE`` transactions."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

import sqlite_utils

from .migrations import migrations
from . import views

BUSY_TIMEOUT_MS = 30_000
PAGE_SIZE = 16384
# Keep the WAL file bounded even when a long-running reader holds it open.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024


class IndexError_(Exception):
    """The index file cannot be opened or is not a session index."""


def dict_rows(conn, sql: str, params=()) -> list[dict]:
    """A query's rows as dicts keyed by column name."""
    cur = conn.execute(sql, params)
    columns = [d[0] for d in cur.description]
    return [dict(zip(columns, row)) for row in cur.fetchall()]


def default_db_path() -> str:
    return os.environ.get("SESSION_INDEX_DB") or "sessions.db"


def open_db(path: str | Path, *, create: bool = True) -> sqlite_utils.Database:
    """Open (and, with ``create``, create or upgrade) the index at ``path``."""
    path = Path(path)
    if not create and not path.exists():
        raise IndexError_(f"no index at {path}: run 'session-index ingest' first")
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        # Before anything is written (it only applies to a new file): 16 KiB
        # pages hold a typical record's raw line without overflow pages;
        # cold ingest of bench/ingest_speed.py's corpus took about 25% less
        # time than with 4 KiB pages.
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        conn.execute("PRAGMA foreign_keys = OFF")
        # 32 MB of page cache; checkpoint the WAL every 64 MB rather than 4 MB
        # (bench/ingest_speed.py).
        conn.execute("PRAGMA cache_size = -32768")
        conn.execute("PRAGMA wal_autocheckpoint = 16384")
    except sqlite3.DatabaseError as exc:
        raise IndexError_(f"{path} is not a usable SQLite database: {exc}") from None
    db = sqlite_utils.Database(conn)
    if create:
        upgrade(db)
    return db


def upgrade(db: sqlite_utils.Database) -> None:
    """Apply pending migrations, then (re)create every view."""
    # Under one IMMEDIATE lock, so two processes opening a new index at once
    # do not both try to create it (migrations nest as savepoints).
    with write_lock(db):
        if migrations.pending(db):
            migrations.apply(db)
        views.create_views(db)


def retry_locked(fn, attempts: int = 50):
    for i in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or i == attempts - 1:
                raise
            time.sleep(0.05 * (i + 1))


@contextlib.contextmanager
def write_lock(db: sqlite_utils.Database):
    """A ``BEGIN IMMEDIATE`` transaction: commit on success, roll back on error.

    sqlite-utils' ``db.atomic()`` is a deferred transaction, which fails at
    once with "database is locked" when it reads and then tries to write
    while another process writes; IMMEDIATE takes the write lock up front
    and waits ``busy_timeout`` for it.
    """
    conn = db.conn
    retry_locked(lambda: conn.execute("BEGIN IMMEDIATE"))
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")
