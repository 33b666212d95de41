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
    only "unable to open database file"), a folder this user may not write
    (SQLite says "attempt to write a readonly database" when it cannot make
    the -wal and -shm files there), else SQLite's reason."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return IndexError_(f"{path}: the folder {folder} does not exist")
    if (getattr(exc, "sqlite_errorname", "") in FOLDER_REFUSED
            and not os.access(folder, os.W_OK)):
        return IndexError_(f"{path} cannot be written: this user may not write its folder "
                           f"{folder}, where SQLite keeps the index's -wal and -shm files")
    return IndexError_(f"{path} is not a usable SQLite database: {exc}")


def not_writable(path) -> IndexError_:
    """The index file this user may read but not write, opened to write."""
    return IndexError_(f"{path} cannot be written: permission denied (this user may only "
                       "read it); run this as a user who may write the file and its folder")


# SQLite's errors when it may not make a -wal or -shm file in the folder.
FOLDER_REFUSED = ("SQLITE_READONLY_DIRECTORY", "SQLITE_CANTOPEN")


# The files SQLite keeps beside a database: the WAL, its index, a rollback journal.
SIDECARS = ("-wal", "-shm", "-journal")


def _unlink(path, suffixes) -> None:
    for suffix in suffixes:
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def remove_made(path, extra: tuple = ()) -> None:
    """Remove the database file at ``path`` that this run made and wrote
    nothing of worth to (its connection closed), with its SIDECARS and the
    ``extra`` suffixes' files (a lock): a run that failed before its first
    write leaves no file behind (ingest --from, ship: no server)."""
    _unlink(path, ("", *SIDECARS, *extra))


def remove_stale_sidecars(path) -> None:
    """With no file at ``path``, the SIDECARS there removed: called just
    before an index is made there. An index deleted while a process had it
    open (``ingest --watch``, which then stops) leaves its -wal and -shm,
    and SQLite, opening the next database made under the name, would replay
    that WAL into it: the old index's pages over the new one (a stale or a
    corrupt index)."""
    if not os.path.lexists(path):
        _unlink(path, SIDECARS)


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


def readonly_uri(path: str, immutable: bool = False) -> str:
    """A ``file:`` URI opening ``path`` read-only (sqlite3.connect(uri=True))."""
    quoted = os.path.abspath(path).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    return f"file:{quoted}?mode=ro" + ("&immutable=1" if immutable else "")


# What a read-only open sets (connect_readonly): writes refused, and only
# settings that last as long as the connection. Never journal_mode,
# page_size or another setting stored in the file: a user who may not write
# the file cannot change them, and SQLite refuses the open that tries.
READONLY_PRAGMAS = (
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    "PRAGMA query_only = 1",
    "PRAGMA foreign_keys = OFF",
    "PRAGMA recursive_triggers = on",
    "PRAGMA cache_size = -32768",
)
# A first read (of page 1): SQLite opens the file, and a WAL index's -wal
# and -shm files, lazily, so an open that cannot read fails here.
FIRST_READ_SQL = "PRAGMA schema_version"
# 1 on a connection that refuses writes (connect_readonly's).
QUERY_ONLY_SQL = "PRAGMA query_only"


def writable(path) -> bool:
    """May this process write the index file? (os.access: root may write a
    file whatever its mode; nobody may on a read-only file system.)"""
    return os.access(path, os.W_OK)


def read_only(conn: sqlite3.Connection) -> bool:
    """Does ``conn`` refuse writes (connect_readonly's)?"""
    return bool(conn.execute(QUERY_ONLY_SQL).fetchone()[0])


def connect_readonly(path) -> tuple[sqlite3.Connection, bool]:
    """A connection that only reads the index file: for a user who may read
    it but not write it (an index a service account ingests), and for
    ``session-index mcp``. Opened ``mode=ro``, SQLite reads a WAL index
    through its -wal and -shm files, and makes them when they are missing
    (the last connection to close removes them) and the folder may be
    written. When the folder may not be written and no -shm file is there
    (no writer has the index open), SQLite cannot open it ("Read-Only
    Databases", https://www.sqlite.org/wal.html). Then, with no -wal file
    holding changes, the database file alone is the whole index, and it is
    opened ``immutable`` (which reads no -wal file and takes no lock: a
    writer that starts meanwhile is not seen); a -wal file that holds
    changes cannot be read without its -shm, so that open is refused.
    Returns the connection, and whether it is immutable."""
    try:
        return _opened(readonly_uri(path)), False
    except sqlite3.DatabaseError as exc:
        folder = os.path.dirname(os.path.abspath(path))
        if (os.path.exists(path + "-shm") or not os.path.isdir(folder)
                or os.access(folder, os.W_OK)):
            raise unusable(path, exc) from None
    try:
        pending = os.path.getsize(path + "-wal") > 0
    except OSError:   # (no -wal file)
        pending = False
    if pending:
        raise IndexError_(f"{path} cannot be read by this user now: its -wal file holds changes "
                          "that SQLite reads only through a -shm file, which this user may not "
                          f"make in {folder}; it is read again once a user who may write it "
                          "runs 'session-index status' on it (or while an ingest has it open)")
    try:
        return _opened(readonly_uri(path, immutable=True)), True
    except sqlite3.DatabaseError as exc:
        raise unusable(path, exc) from None


def _opened(uri: str) -> sqlite3.Connection:
    """A connection to ``uri`` with READONLY_PRAGMAS set, that has read page 1."""
    conn = sqlite3.connect(uri, uri=True, isolation_level=None,
                           timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        for pragma in READONLY_PRAGMAS:
            conn.execute(pragma)
        conn.execute(FIRST_READ_SQL).fetchone()
    except BaseException:
        conn.close()
        raise
    return conn
