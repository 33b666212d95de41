"""A new index made from a snapshot of the schema the migrations leave.

Bringing a new file up through the migrations (sqlite-utils imported,
each migration its own savepoint, every view created) was about 100 ms of a
cold ingest's serial start: some 5% of it (bench/ingest_speed.py). The
snapshot, ``new_index.json`` beside this file, holds what they leave in a
new index: every CREATE statement as SQLite stores it (tables, indexes,
FTS5 tables, views; not the tables SQLite makes itself), the header's
application_id, the rows of its tables, and the names of the migrations,
which are recorded as applied at the time the index is made, as
sqlite-utils records them. The packaged prices are loaded and the caches
stamped current as the migrations and ``migrations.upgrade`` do.

A snapshot is used only when it names this code's last migration
(``connection.LAST_MIGRATION``) and its views (``views_digest``); otherwise, or
without the file, the migrations run as before. ``python -m
indexer.index.new_index`` writes it again from an index the migrations made;
tests/test_new_index.py fails when the file is not what that would write,
and holds an index made from it equal to a migrated one, table by table,
FTS5's shadow tables included.
"""

from __future__ import annotations

import datetime
import json
import os

from indexer.index import prices, views
from indexer.index.connection import LAST_MIGRATION, TABLES_SQL, connect
from indexer.sql import retry_locked
from indexer.transcripts.digests import sha256

SNAPSHOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "new_index.json")
# Tables whose rows are not the snapshot's: each is filled as the migrations
# fill it, at the time the index is made.
MIGRATIONS_TABLE = "_sqlite_migrations"
PRICES_TABLE = "prices"
FILLED_AT_CREATION = (MIGRATIONS_TABLE, PRICES_TABLE)

OBJECTS_SQL = "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
# The tables FTS5's CREATE VIRTUAL TABLE makes for each of its tables.
FTS5_SHADOW_SUFFIXES = ("data", "idx", "content", "docsize", "config")
MIGRATION_NAMES_SQL = f"SELECT migration_set, name FROM {MIGRATIONS_TABLE} ORDER BY id"
INSERT_MIGRATION_SQL = f"INSERT INTO {MIGRATIONS_TABLE} (migration_set, name, applied_at) VALUES (?, ?, ?)"
APPLICATION_ID_SQL = "PRAGMA application_id"


def views_digest() -> str:
    """What names this code's views (their names and SELECTs, as db.is_current
    compares them, and the caches' definitions, as views.stamp_current
    records them)."""
    text = "\n".join(f"{name}\n{sql}" for name, sql in views.VIEWS.items())
    text += f"\n{views.CACHES_HASH}\n{views.SESSIONS_HASH}"
    return sha256(text.encode()).hexdigest()[:16]


def snapshot(conn) -> dict:
    """The snapshot of the index ``conn`` holds (made by the migrations,
    nothing ingested)."""
    objects = conn.execute(OBJECTS_SQL).fetchall()
    virtual = {name for kind, name, sql in objects if sql.startswith("CREATE VIRTUAL TABLE")}
    shadow = {f"{name}_{suffix}" for name in virtual for suffix in FTS5_SHADOW_SUFFIXES}
    statements, rows = [], []
    for kind, name, sql in objects:
        if name in shadow:
            continue   # made by its virtual table's CREATE
        if name.startswith("sqlite_"):
            raise ValueError(f"{name}: a table SQLite keeps itself; the snapshot cannot hold it")
        statements.append(sql)
        if kind == "table" and name not in virtual and name not in FILLED_AT_CREATION:
            columns = [c for (_, c, *_) in conn.execute(f'PRAGMA table_info("{name}")')]
            quoted = " || ', ' || ".join(f'quote("{c}")' for c in columns)
            order = "" if "WITHOUT ROWID" in sql.upper() else " ORDER BY rowid"
            rows += [f'INSERT INTO "{name}" VALUES ({values})' for (values,) in conn.execute(
                f'SELECT {quoted} FROM "{name}"{order}')]
    return {
        "last_migration": LAST_MIGRATION,
        "views": views_digest(),
        "application_id": conn.execute(APPLICATION_ID_SQL).fetchone()[0],
        "statements": statements + rows,
        "migrations": [list(row) for row in conn.execute(MIGRATION_NAMES_SQL)],
    }


def load(path: str | None = None) -> dict | None:
    """The snapshot at ``path`` if it is this code's (its last migration and
    views), else None."""
    try:
        with open(path or SNAPSHOT, encoding="utf-8") as f:
            snap = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(snap, dict) or snap.get("last_migration") != LAST_MIGRATION \
            or snap.get("views") != views_digest():
        return None
    return snap


def create(conn, path: str | None = None) -> bool:
    """Make a new index in ``conn``'s empty database from the snapshot, in
    one IMMEDIATE transaction. False, with nothing written, when there is no
    snapshot of this code's schema or the database has tables by the time
    the lock is taken (another process made the index meanwhile): the
    caller then opens it as usual."""
    snap = load(path)
    if snap is None:
        return False
    retry_locked(lambda: conn.execute("BEGIN IMMEDIATE"))
    try:
        if conn.execute(TABLES_SQL).fetchone() is not None:
            conn.execute("ROLLBACK")
            return False
        conn.execute(f"PRAGMA application_id = {int(snap['application_id'])}")
        for sql in snap["statements"]:
            conn.execute(sql)
        now = str(datetime.datetime.now(datetime.timezone.utc))   # as sqlite-utils records it
        conn.executemany(INSERT_MIGRATION_SQL, [(s, name, now) for s, name in snap["migrations"]])
        prices.store(conn, prices.read(prices.PACKAGED))
        prices.store(conn, prices.read(prices.AGENT_PACKAGED))   # as m075_agents does
        views.stamp_current(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return True


def migrated_snapshot() -> dict:
    """The snapshot of a new in-memory index brought up by the migrations."""
    import sqlite_utils   # (only to write the snapshot again: a new index made from it never needs sqlite-utils)

    from indexer.index.migrations import upgrade   # (sqlite-utils' Migrations, as above)

    db = sqlite_utils.Database(connect(":memory:"))
    upgrade(db)
    return snapshot(db.conn)


def write(path: str | None = None) -> None:
    with open(path or SNAPSHOT, "w", encoding="utf-8") as f:
        json.dump(migrated_snapshot(), f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    write()
    print(f"wrote {SNAPSHOT}")
