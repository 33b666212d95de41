"""new_index.py: a new index is made from the schema snapshot, and is the
index the migrations make; a snapshot of another schema is never used."""

import json
import sqlite3

import pytest

from indexer.index import connection, db as dbmod, migrations, new_index

# Columns holding the time an index was made: they differ between any two.
MADE_AT = {"_sqlite_migrations": "applied_at", "prices": "loaded_at"}
PRAGMAS = ("application_id", "user_version", "page_size", "auto_vacuum", "encoding")


def contents(path) -> dict:
    """The schema, the header's settings and every table's rows (FTS5's own
    tables too), but the times the index was made."""
    conn = sqlite3.connect(path)
    try:
        out = {"schema": sorted(conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall(), key=repr)}
        out["pragmas"] = [conn.execute(f"PRAGMA {p}").fetchone() for p in PRAGMAS]
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                     "AND sql NOT LIKE 'CREATE VIRTUAL %'").fetchall():
            columns = [c for (_, c, *_) in conn.execute(f'PRAGMA table_info("{table}")')
                       if c != MADE_AT.get(table)]
            out[table] = sorted(conn.execute(
                f"SELECT {', '.join(f'quote({c})' for c in columns)} FROM \"{table}\"").fetchall())
        return out
    finally:
        conn.close()


def migrated(path) -> None:
    """A new index at ``path`` made by the migrations."""
    import sqlite_utils

    db = sqlite_utils.Database(connection.connect(path))
    migrations.upgrade(db)
    db.conn.close()


def test_the_packaged_snapshot_is_this_codes_schema():
    with open(new_index.SNAPSHOT, encoding="utf-8") as f:
        packaged = json.load(f)
    assert packaged == new_index.migrated_snapshot(), \
        "indexer/new_index.json is out of date: run python -m indexer.index.new_index"
    assert new_index.load() == packaged


@pytest.mark.parametrize("bulk", [False, True])
def test_an_index_made_from_the_snapshot_equals_a_migrated_one(tmp_path, bulk):
    made = dbmod.open_index(tmp_path / "snap.db", create=True, bulk=bulk)
    assert isinstance(made, dbmod.Index)   # from the snapshot: sqlite-utils not involved
    assert dbmod.is_current(made.conn)
    made.conn.close()
    migrated(tmp_path / "migrated.db")
    assert contents(tmp_path / "snap.db") == contents(tmp_path / "migrated.db")


def test_open_db_of_a_new_file_is_made_from_the_snapshot_too(tmp_path):
    db = dbmod.open_db(tmp_path / "new.db")
    assert dbmod.is_current(db.conn)
    assert db["prices"].count > 0
    db.conn.close()
    migrated(tmp_path / "migrated.db")
    assert contents(tmp_path / "new.db") == contents(tmp_path / "migrated.db")


@pytest.mark.parametrize("change", [
    {"last_migration": "m001_create_files"},   # an older schema's
    {"views": "0000000000000000"},              # other views
])
def test_a_snapshot_of_another_schema_is_not_used(tmp_path, monkeypatch, change):
    with open(new_index.SNAPSHOT, encoding="utf-8") as f:
        other = dict(json.load(f), **change, statements=["CREATE TABLE wrong (x)"])
    (tmp_path / "other.json").write_text(json.dumps(other))
    monkeypatch.setattr(new_index, "SNAPSHOT", str(tmp_path / "other.json"))
    assert new_index.load() is None
    made = dbmod.open_index(tmp_path / "new.db", create=True)
    assert not isinstance(made, dbmod.Index)   # the migrations made it
    made.conn.close()
    migrated(tmp_path / "migrated.db")
    assert contents(tmp_path / "new.db") == contents(tmp_path / "migrated.db")


def test_no_snapshot_file_runs_the_migrations(tmp_path, monkeypatch):
    monkeypatch.setattr(new_index, "SNAPSHOT", str(tmp_path / "missing.json"))
    made = dbmod.open_index(tmp_path / "new.db", create=True)
    assert dbmod.is_current(made.conn)
    assert not isinstance(made, dbmod.Index)


def test_an_index_made_meanwhile_is_left_as_it_is(tmp_path):
    migrated(tmp_path / "other.db")
    conn = connection.connect(tmp_path / "other.db")
    before = contents(tmp_path / "other.db")
    assert new_index.create(conn) is False
    assert not conn.in_transaction
    conn.close()
    assert contents(tmp_path / "other.db") == before
