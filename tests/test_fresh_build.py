"""fresh_build.py: the first ingest into a new index is built in a file
beside it and published whole; it stores exactly what an ingest into an
existing index stores, never replaces an index made meanwhile, keeps what
was committed on Ctrl-C, and leaves no build behind."""

import os
import sqlite3
import subprocess
import sys
from types import SimpleNamespace

import pytest

from indexer.index import db as dbmod
from indexer.ingest import derive_worker, fresh_build, files as ingest_mod
from test_preload import dump, make_sources
from test_watch import CMD


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


def _lines(path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT (SELECT count(*) FROM records) "
                            "+ (SELECT count(*) FROM bad_lines)").fetchone()[0]
    finally:
        conn.close()


def _session(folder, sid: str, n: int) -> None:
    """A transcript of ``n`` user records in ``folder`` (made), session ``sid``."""
    folder.mkdir(exist_ok=True)
    (folder / f"{sid}-0000-4000-8000-000000000000.jsonl").write_text("".join(
        f'{{"type": "user", "uuid": "{sid}-{i}", "sessionId": "{sid}"}}\n' for i in range(n)))


def _ingest(sources):
    return lambda index: ingest_mod.ingest(index, [str(s) for s in sources])


@pytest.mark.parametrize("workers", [False, True])
def test_a_built_index_equals_one_ingested_in_place(tmp_path, monkeypatch, workers):
    monkeypatch.setattr(derive_worker, "MIN_BYTES", 0 if workers else 1 << 60)
    sources = make_sources(tmp_path / "src")
    (tmp_path / "in-place").mkdir()
    (tmp_path / "built").mkdir()
    in_place = dbmod.open_index(tmp_path / "in-place" / "index.db", create=True)   # exists
    s1 = ingest_mod.ingest(in_place, [str(sources)])
    final = tmp_path / "built" / "index.db"
    journal = []
    run = _ingest([sources])
    s2 = fresh_build.ingest(str(final), lambda index: (
        journal.append(index.conn.execute("PRAGMA journal_mode").fetchone()[0]), run(index))[1])
    assert journal == ["memory"]   # built aside, not in a WAL
    assert s1.as_dict() | {"seconds": 0} == s2.as_dict() | {"seconds": 0}
    assert _files(tmp_path / "built") == ["index.db"]   # no build, no journal left
    built = dbmod.open_index(final)
    assert built.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert built.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert dump(SimpleNamespace(db=built)) == dump(SimpleNamespace(db=in_place))


def test_an_index_made_meanwhile_is_not_replaced(tmp_path):
    """Another process creates the index while the build runs: the build
    goes and this ingest runs again into that index."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, sid in ((a, "aaaaaaaa"), (b, "bbbbbbbb")):
        _session(folder, sid, 5)
    final = tmp_path / "index.db"
    runs = []

    def run(index):
        runs.append(index.conn.execute("PRAGMA database_list").fetchone()[2])
        summary = ingest_mod.ingest(index, [str(a)])
        if len(runs) == 1:   # the other writer: an ingest of b into the index itself
            other = dbmod.open_index(final, create=True)
            ingest_mod.ingest(other, [str(b)])
            other.conn.close()
        return summary

    summary = fresh_build.ingest(str(final), run)
    assert [os.path.basename(p) for p in runs] == [
        f".index.db.building-{os.getpid()}", "index.db"]
    assert summary.new_records == 5
    assert _lines(final) == 10   # b's lines, kept, and a's, once
    assert [n for n in _files(tmp_path) if "building" in n] == []


def test_ctrl_c_publishes_what_was_committed(tmp_path):
    src = tmp_path / "src"
    _session(src, "cccccccc", 1)
    final = tmp_path / "index.db"

    def run(index):
        ingest_mod.ingest(index, [str(src)])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fresh_build.ingest(str(final), run)
    assert _files(tmp_path) == ["index.db", "src"]
    assert _lines(final) == 1


def test_a_failed_build_leaves_nothing(tmp_path):
    final = tmp_path / "index.db"
    with pytest.raises(ingest_mod.SourceNotFound):
        fresh_build.ingest(str(final), _ingest([tmp_path / "no-such-folder"]))
    assert _files(tmp_path) == []


def test_the_cli_removes_the_builds_of_gone_processes_only(tmp_path):
    src = tmp_path / "src"
    _session(src, "dddddddd", 1)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for pid in (gone, alive.pid):
            (tmp_path / f".index.db.building-{pid}").write_bytes(b"a build cut short")
        (tmp_path / f".index.db.building-{gone}-journal").write_bytes(b"")
        result = subprocess.run(CMD + ["ingest", str(src), "--db", str(tmp_path / "index.db"),
                                       "--silent"],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert _files(tmp_path) == [f".index.db.building-{alive.pid}", "index.db", "src"]
        assert _lines(tmp_path / "index.db") == 1
    finally:
        alive.kill()
        alive.wait()


def test_an_existing_file_is_opened_in_place(tmp_path):
    """An empty file at the path, or a link: no build, opened as always."""
    final = tmp_path / "index.db"
    final.write_bytes(b"")
    seen = []
    fresh_build.ingest(str(final), lambda index: seen.append(
        index.conn.execute("PRAGMA database_list").fetchone()[2]))
    assert seen == [str(final)]
    assert [n for n in _files(tmp_path) if "building" in n] == []


def test_the_builds_pages_are_handed_to_the_disk_while_it_is_written(tmp_path, monkeypatch):
    """Writeback: sync_file_range on the build every WRITEBACK_EVERY_S while
    the ingest runs, so that the fsync at the end has little left to write;
    the thread ends with the build, and a build it cannot open costs nothing."""
    import threading
    import time

    monkeypatch.setattr(fresh_build, "WRITEBACK_EVERY_S", 0.02)
    seen = {}

    def run(index):
        index.conn.execute("CREATE TABLE pad (x)")
        index.conn.execute("INSERT INTO pad VALUES (zeroblob(1 << 20))")
        time.sleep(0.2)
        seen["threads"] = [t.name for t in threading.enumerate()]
        return "done"

    writebacks = []
    real = fresh_build.Writeback
    monkeypatch.setattr(fresh_build, "Writeback",
                        lambda path: writebacks.append(real(path)) or writebacks[-1])
    assert fresh_build.ingest(str(tmp_path / "index.db"), run) == "done"
    assert "session-index-writeback" in seen["threads"]
    (writeback,) = writebacks
    if sys.platform.startswith("linux"):
        assert writeback.calls >= 3
    assert not writeback.thread.is_alive()
    assert (tmp_path / "index.db").exists() and _files(tmp_path) == ["index.db"]

    with real(str(tmp_path / "missing.db")) as gone:   # nothing to open: nothing done
        time.sleep(0.05)
    assert gone.calls == 0 and not gone.thread.is_alive()


# A process holding the index open with a change in its WAL (no checkpoint),
# killed once the file is deleted: its -wal and -shm stay, as ingest --watch
# left them when the index was deleted under it.
HOLD_WAL = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA wal_autocheckpoint = 0")
conn.execute("CREATE TABLE left_by_the_old_index AS SELECT * FROM records")
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["built", "in place"])
def test_a_wal_left_by_a_deleted_index_is_not_replayed_into_the_next(tmp_path, how):
    """The next index made under the name is the new one alone, whole:
    SQLite would have replayed the old index's WAL into it (the old tables,
    or a corrupt file), and `ingest` said it stored what it did not."""
    _session(tmp_path / "old", "aaaaaaaa", 40)
    _session(tmp_path / "new", "bbbbbbbb", 3)
    final = tmp_path / "index.db"
    fresh_build.ingest(str(final), _ingest([tmp_path / "old"]))
    holder = subprocess.Popen([sys.executable, "-c", HOLD_WAL, str(final)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert os.path.getsize(f"{final}-wal") > 0
        os.unlink(final)
    finally:
        holder.kill()
        holder.wait()
    assert _files(tmp_path) == ["index.db-shm", "index.db-wal", "new", "old"]
    if how == "built":
        fresh_build.ingest(str(final), _ingest([tmp_path / "new"]))
        index = dbmod.open_index(final)
    else:   # (ingest --watch, ingest --from, the session store: made in place)
        index = dbmod.open_index(final, create=True)
        ingest_mod.ingest(index, [str(tmp_path / "new")])
    assert index.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert index.conn.execute(
        "SELECT name FROM sqlite_master WHERE name = 'left_by_the_old_index'").fetchall() == []
    assert index.conn.execute("SELECT DISTINCT session_id FROM records").fetchall() == [
        ("bbbbbbbb",)]
    assert _lines(final) == 3
