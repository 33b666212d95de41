"""A connection to an index file: the pragmas every open uses, and what
names a session index (its header's application_id, its migration set and
the last migration of this code's schema). Below db.py (opening, creating
and upgrading an index) and new_index.py (a new index from the schema
snapshot), which both use them."""

from __future__ import annotations

import os
import sqlite3

BUSY_TIMEOUT_MS = 30_000
PAGE_SIZE = 16384
# Keep the WAL file bounded even when a long-running reader holds it open.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024


# The last migration of migrations.py, as sqlite-utils' Migrations records
# it once applied (tests/test_cli.py holds these to migrations.py: a new
# migration updates them). Migrations apply in order, so an index that has
# it has them all.
MIGRATION_SET, LAST_MIGRATION = "session-index", "m097_sent_names_cache"
# The header's application_id of a session index (migration m026): ``probe``
# knows one from the file's first 100 bytes, without reading its schema
# first (a schema read is about 6 ms of every command's start).
APPLICATION_ID = 0x53494458   # "SIDX"
# The tables of a database (none: a new file).
TABLES_SQL = "SELECT name FROM sqlite_master WHERE type = 'table'"


class IndexError_(Exception):
    """The index file cannot be opened or is not a session index."""


def unusable(path, exc: Exception) -> IndexError_:
    """Why SQLite could not use ``path``: its folder missing (SQLite says
    only "unable to open database file"), else SQLite's reason."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return IndexError_(f"{path}: the folder {folder} does not exist")
    return IndexError_(f"{path} is not a usable SQLite database: {exc}")


# The files SQLite keeps beside a database: the WAL, its index, a rollback journal.
SIDECARS = ("-wal", "-shm", "-journal")


def remove_made(path, extra: tuple = ()) -> None:
    """Remove the database file at ``path`` that this run made and wrote
    nothing of worth to (its connection closed), with its SIDECARS and the
    ``extra`` suffixes' files (a lock): a run that failed before its first
    write leaves no file behind (ingest --from, ship: no server)."""
    for suffix in ("", *SIDECARS, *extra):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def connect(path, bulk: bool = False) -> sqlite3.Connection:
    """A connection to the index file with the pragmas every open uses
    (``bulk``: a build no other process writes, fresh_build.py: a rollback
    journal in memory and no fsync, in place of the WAL)."""
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        # Before anything is written (it only applies to a new file): 16 KiB
        # pages hold a typical record's raw line without overflow pages;
        # cold ingest of bench/ingest_speed.py's corpus took about 25% less
        # time than with 4 KiB pages.
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute(f"PRAGMA journal_mode = {'MEMORY' if bulk else 'WAL'}")
        conn.execute(f"PRAGMA synchronous = {'OFF' if bulk else 'NORMAL'}")
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        conn.execute("PRAGMA foreign_keys = OFF")
        # As sqlite_utils.Database sets it, so both opens behave alike.
        conn.execute("PRAGMA recursive_triggers = on")
        # 32 MB of page cache; checkpoint the WAL every 64 MB rather than 4 MB
        # (bench/ingest_speed.py).
        conn.execute("PRAGMA cache_size = -32768")
        conn.execute("PRAGMA wal_autocheckpoint = 16384")
    except sqlite3.DatabaseError as exc:
        raise unusable(path, exc) from None
    return conn
