"""Opening the index: a new file made (from the schema snapshot, else by
the migrations), an older one upgraded, anything else refused (``probe``).

A command opens the index with ``open_index``: an index already at the
schema this code states is opened with sqlite3 alone (sqlite-utils costs
about 50 ms of imports, and checking migrations and views as many
queries), any other through ``open_db`` and ``migrations.upgrade``."""

from __future__ import annotations

import os
import sqlite3

from indexer.index import views
from indexer.index.connection import (
    APPLICATION_ID,
    BUSY_TIMEOUT_MS,
    LAST_MIGRATION,
    MIGRATION_SET,
    TABLES_SQL,
    IndexError_,
    connect,
    connect_readonly,
    not_writable,
    readonly_uri,
    remove_stale_sidecars,
    unusable,
    writable,
)
from indexer.transcripts.safefiles import NotRegular, open_regular

TYPE_CHECKING = False  # typing costs a check process start-up time
if TYPE_CHECKING:
    import sqlite_utils

# The connection's journal mode: 'wal', or 'memory' for a fresh_build.py build.
JOURNAL_MODE_SQL = "PRAGMA journal_mode"
# Into WAL (what a build is switched to before it is published).
TO_WAL_SQL = "PRAGMA journal_mode = WAL"
# 1 when that migration is recorded as applied.
LAST_MIGRATION_SQL = "SELECT 1 FROM _sqlite_migrations WHERE migration_set = ? AND name = ?"
# Each view as stored: "CREATE VIEW <name> AS <its SELECT>" (sqlite-utils'
# create_view writes it so, and rewrites it when the SELECT differs).
STORED_VIEWS_SQL = "SELECT name, sql FROM sqlite_master WHERE type = 'view'"


class IndexReplaced(IndexError_):
    """The index file was deleted or replaced while this process had it open."""


# The file a connection has open as "main" (its third column).
DATABASE_LIST_SQL = "PRAGMA database_list"


def file_identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file or folder at ``path``, None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class OpenedFile:
    """The index file a long-running writer (``ingest --watch``, ``ingest
    --from``) has open. Deleting or replacing the path (``rm``, a copy or a
    backup restored over it) does not reach an open connection: it would go
    on writing, and a fleet consumer acknowledging, lines into an unlinked
    file nobody reads again. ``verify()`` raises IndexReplaced once the path
    names another file, or none, so the writer stops and says so."""

    def __init__(self, conn: sqlite3.Connection):
        self.path = next(row[2] for row in conn.execute(DATABASE_LIST_SQL) if row[1] == "main")
        self.identity = file_identity(self.path)

    def verify(self) -> None:
        if file_identity(self.path) != self.identity:
            raise IndexReplaced(f"{self.path} was deleted or replaced while in use; stopped "
                                "(run again: a new index is built from the transcripts)")


class Index:
    """An index opened with sqlite3 alone (``open_index``): its ``conn``,
    which is all the library uses of a sqlite_utils.Database outside
    migrations and view creation."""

    __slots__ = ("conn", "read_only", "immutable")

    def __init__(self, conn: sqlite3.Connection, read_only: bool = False,
                 immutable: bool = False):
        self.conn = conn
        # Opened with connect_readonly (a user who may read the index but
        # not write it, or ``mcp``), and whether as immutable: it then sees
        # nothing a writer does after it was opened.
        self.read_only, self.immutable = read_only, immutable


def read_only(db) -> bool:
    """Is ``db`` (open_index's) an index this user may only read? What
    writes before it answers (an ingest of a session's changed transcript,
    a refresh of stale sessions) is left undone on it."""
    return isinstance(db, Index) and db.read_only


def data_dir() -> str:
    """Where the default index lives: $XDG_DATA_HOME/session-index, else
    ~/.local/share/session-index."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                           "share")
    return os.path.join(base, "session-index")


def data_db_path() -> str:
    """sessions.db in the user's data dir."""
    return os.path.join(data_dir(), "sessions.db")


def default_db_path() -> str:
    """$SESSION_INDEX_DB, else sessions.db in the user's data dir (``--db``
    wins over both)."""
    return os.environ.get("SESSION_INDEX_DB") or data_db_path()


def make_default_folder(path: str) -> None:
    """The data dir, made when the default index is first created there
    (a folder named by --db is never made)."""
    if os.path.abspath(path) == os.path.abspath(data_db_path()):
        os.makedirs(data_dir(), exist_ok=True)


def _missing(path) -> IndexError_:
    return IndexError_(f"no index at {path}: run 'session-index ingest' first")


SQLITE_HEADER = b"SQLite format 3\x00"
IS_INDEX_SQL = "SELECT 1 FROM _sqlite_migrations WHERE migration_set = ? LIMIT 1"
NEW, INDEX = "new", "index"


def probe(path: str) -> str:
    """What ``path`` holds, found without changing a byte of it: NEW (no
    file, an empty one, or a SQLite database with no table yet: an index
    may be made there) or INDEX; IndexError_ for anything else (a folder,
    a FIFO, a file that is not SQLite, another application's database)."""
    if not path:  # sqlite3 would open a temporary database, gone at exit
        raise IndexError_("the index path is empty: name the index file")
    if path == ":memory:":
        return NEW
    try:
        with open_regular(path) as f:
            head = f.read(100)
    except FileNotFoundError:
        return NEW
    except NotRegular as exc:
        raise IndexError_(f"{path} is {exc.what}, not an index file") from None
    except OSError as exc:
        raise IndexError_(f"{path} cannot be read: {exc.strerror or exc}") from None
    if not head:
        return NEW
    if not head.startswith(SQLITE_HEADER):
        raise IndexError_(f"{path} is not a SQLite database, so not a session index: "
                          "name another --db") from None
    if int.from_bytes(head[68:72], "big") == APPLICATION_ID:
        return INDEX
    # A WAL database with no -wal file: read it as immutable, so that no
    # -wal or -shm file is made beside another application's database.
    immutable = len(head) > 19 and head[18] == 2 and not os.path.exists(path + "-wal")
    try:
        conn = sqlite3.connect(readonly_uri(path, immutable), uri=True)
        try:
            tables = {name for (name,) in conn.execute(TABLES_SQL)}
            if "_sqlite_migrations" in tables and conn.execute(
                    IS_INDEX_SQL, [MIGRATION_SET]).fetchone():
                return INDEX
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise unusable(path, exc) from None
    if not tables:
        return NEW
    names = ", ".join(sorted(tables)[:4]) + (", ..." if len(tables) > 4 else "")
    raise IndexError_(f"{path} is another application's SQLite database, not a session index "
                      f"(its tables: {names}); it was left as it was: name another --db")


def open_db(path, *, create: bool = True) -> sqlite_utils.Database:
    """The index at ``path`` as a sqlite_utils Database; with ``create``,
    made if the file is new or empty, and upgraded. Never anything else's
    database (``probe``)."""
    import sqlite_utils   # (what it returns; a check, which opens with open_index, never needs it)

    path = os.fspath(path)
    if probe(path) == NEW:
        if not create:
            raise _missing(path)
        made = _create(path)
        return made if isinstance(made, sqlite_utils.Database) else sqlite_utils.Database(made.conn)
    if create:
        return _upgraded(connect(path))
    return sqlite_utils.Database(connect(path))


def _upgraded(conn: sqlite3.Connection) -> sqlite_utils.Database:
    """``conn`` as a sqlite_utils Database, brought up to date (the
    migrations, then every view)."""
    import sqlite_utils   # (only for an index to bring up to date: 50 ms of a check's start-up)

    from indexer.index.migrations import upgrade   # (sqlite-utils' Migrations, as above)

    db = sqlite_utils.Database(conn)
    upgrade(db)
    return db


def _create(path: str, bulk: bool = False) -> Index | sqlite_utils.Database:
    """A new index at ``path``, which ``probe`` found NEW: made from the
    schema snapshot (new_index.py: no sqlite-utils, no migrations to run)
    when there is one of this code's schema, else by the migrations."""
    from indexer.index import new_index   # (only to make a new index: start-up time)

    make_default_folder(path)
    remove_stale_sidecars(path)
    conn = connect(path, bulk)
    try:
        made = new_index.create(conn)
    except BaseException:
        conn.close()
        raise
    if made:
        return Index(conn)
    return _upgraded(conn)


def open_index(path, *, create: bool = False, write: bool = False,
               bulk: bool = False) -> Index | sqlite_utils.Database:
    """The index at ``path``, upgraded (with ``create``, made if the file is
    new or empty): what a command opens. Only ingest and the session store
    create an index; no command touches a file that is not one (``probe``).
    At the current schema (``is_current``) it is an ``Index`` on a plain
    sqlite3 connection; otherwise the sqlite_utils Database that ``upgrade``
    brought up to date. ``bulk`` (for a new file only): connect's.

    A file this user may not write is opened read-only (``open_readonly``:
    an ``Index`` whose ``read_only`` is set, never upgraded), unless the
    command writes (``create``, ``write``): that is refused, saying so."""
    path = os.fspath(path)
    if probe(path) == NEW:
        if not create:
            raise _missing(path)
        return _create(path, bulk)
    if not writable(path):
        if create or write:
            raise not_writable(path)
        return open_readonly(path)
    try:
        conn = connect(path)
    except IndexError_:
        # A file this user may write in a folder it may not (where SQLite
        # makes the -wal and -shm files): read-only too, for a reader.
        if create or write or os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
            raise
        return open_readonly(path)
    try:
        current = is_current(conn)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise unusable(path, exc) from None
    if current:
        return Index(conn)
    return _upgraded(conn)


def open_readonly(path) -> Index:
    """The index at ``path`` for a reader that never writes (``session-index
    mcp``, and any command on a file this user may not write): opened
    read-only (connection.connect_readonly) with writes refused, never made
    nor upgraded; an index of another schema is refused (a command run by a
    user who may write it upgrades it)."""
    path = os.fspath(path)
    if probe(path) == NEW:
        raise _missing(path)
    conn, immutable = connect_readonly(path)
    try:
        current = is_current(conn)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise unusable(path, exc) from None
    if not current:
        conn.close()
        if writable(path):
            raise IndexError_(f"{path} is not at this session-index's schema: run "
                              "'session-index status' on it once to upgrade it")
        raise IndexError_(f"{path} needs upgrading to this session-index's schema, and this "
                          "user may only read it: run 'session-index status' on it once as "
                          "a user who may write it")
    return Index(conn, read_only=True, immutable=immutable)


def is_current(conn: sqlite3.Connection) -> bool:
    """Would ``upgrade`` change nothing? True when the last migration is
    applied and every view is stored as views.py states it."""
    try:
        applied = conn.execute(LAST_MIGRATION_SQL, [MIGRATION_SET, LAST_MIGRATION]).fetchone()
    except sqlite3.OperationalError as exc:
        # No _sqlite_migrations table: a new index. Any other error (a file
        # SQLite cannot open or read) is the caller's to report as it is.
        if not str(exc).startswith("no such table"):
            raise
        return False
    if applied is None:
        return False
    stored = dict(conn.execute(STORED_VIEWS_SQL).fetchall())
    return all((stored.get(name) or "").partition(" AS ")[2] == sql
               for name, sql in views.VIEWS.items())


# A bulk write checkpoints the WAL from a thread (background_checkpoints).
CHECKPOINT_EVERY_S = 0.1
# Past this size the thread's checkpoint also restarts the WAL (waiting for
# the writer between two transactions), so it cannot grow without bound.
WAL_HIGH_WATER = 512 << 20


class background_checkpoints:
    """``with background_checkpoints(conn):`` while one connection writes a
    lot (a cold ingest), the WAL is copied into the database file by a
    thread on a second connection, on the other core, rather than by the
    writer at the commit that crosses ``wal_autocheckpoint`` (sqlite3 lets
    go of the GIL while SQLite works). The writer's autocheckpoint is off
    meanwhile and set back after. Nothing is lost if the process dies: a
    checkpoint only copies committed pages (bench/ingest_speed.py)."""

    def __init__(self, conn: sqlite3.Connection, enabled: bool = True):
        self.conn = conn
        self.path = next(r[2] for r in conn.execute("PRAGMA database_list")
                         if r[1] == "main") if enabled else None
        self.stop = None
        self.thread = None
        self.autocheckpoint = None

    def __enter__(self):
        if not self.path:  # not enabled, or an in-memory or temporary database
            return self
        import threading   # (not for a run with nothing to write: start-up time)

        self.autocheckpoint = self.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        self.conn.execute("PRAGMA wal_autocheckpoint = 0")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)
        self.thread.start()
        return self

    def _run(self):
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error:
            return
        try:
            while not self.stop.wait(CHECKPOINT_EVERY_S):
                try:
                    big = os.path.getsize(self.path + "-wal") > WAL_HIGH_WATER
                except OSError:
                    big = False
                conn.execute(f"PRAGMA wal_checkpoint({'RESTART' if big else 'PASSIVE'})")
        except sqlite3.Error:
            pass  # the writer's own checkpoints take over once it is set back
        finally:
            conn.close()

    def __exit__(self, *exc) -> bool:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()
            self.conn.execute(f"PRAGMA wal_autocheckpoint = {int(self.autocheckpoint)}")
        return False
