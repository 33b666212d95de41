"""Many writers on one index, as real processes, while transcripts grow:
`ingest` processes started over and over, an `ingest --watch`, store
appends from another process, and `check` loops. Every process exits as documented (no
traceback, no IntegrityError), every complete line is stored exactly once,
and the index passes integrity_check."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from test_append_derive import live_session

SESSION_INDEX = str(Path(sys.executable).with_name("session-index"))
CHECK_EXITS = {0, 4, 5, 6}   # ok, missing, poisoned, spliced (cli.py)
STORE_APPENDER = r'''
import asyncio, json, sys
from indexer.ingest.store import IndexSessionStore

async def main(db, batches):
    store = IndexSessionStore(db)
    try:
        for key, entries in batches:
            await store.append(key, entries)
    finally:
        store.close()

asyncio.run(main(sys.argv[1], json.load(open(sys.argv[2]))))
'''


def _run(cmd, allowed={0}):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode in allowed, (cmd, p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return p


class Loop(threading.Thread):
    """Run a command again and again until stopped; remember failures."""

    def __init__(self, cmd, allowed={0}):
        super().__init__(daemon=True)
        self.cmd, self.allowed = cmd, allowed
        self.stop, self.runs, self.failures = threading.Event(), 0, []

    def run(self):
        while not self.stop.is_set():
            try:
                _run(self.cmd, self.allowed)
                self.runs += 1
            except AssertionError as exc:
                self.failures.append(str(exc)[:3000])
            except subprocess.TimeoutExpired as exc:
                self.failures.append(f"timeout: {exc}")


def _complete_lines(path: Path) -> list[tuple[int, bytes]]:
    data = path.read_bytes()
    out, pos = [], 0
    for line in data.split(b"\n")[:-1]:
        out.append((pos, line))
        pos += len(line) + 1
    return out


@pytest.mark.xdist_group("timing")
@pytest.mark.slow
def test_many_writers_store_every_line_exactly_once(tmp_path):
    rng = random.Random(5)
    projects = tmp_path / "projects" / "-tmp-demo"
    projects.mkdir(parents=True)
    db = tmp_path / "index.db"
    sessions = [f"{k:08d}-3333-4000-8000-000000000000" for k in range(6)]
    plans = {sid: [json.dumps(r) + "\n" for r in live_session(rng, 25, sid)] for sid in sessions}
    store_sessions = [f"{k:08d}-4444-4000-8000-000000000000" for k in range(3)]
    per_session, sent = {}, {}
    for sid in store_sessions:
        records = live_session(rng, 20, sid)
        sent[sid] = len(records)  # every uuid is new: each entry is a record
        i, per_session[sid] = 0, []
        while i < len(records):
            n = rng.randrange(1, 15)
            per_session[sid].append(({"project_key": "store-p", "session_id": sid},
                                     records[i:i + n]))
            i += n
    batches = []  # the sessions interleaved, each one's batches in order
    while any(per_session.values()):
        sid = rng.choice([s for s, b in per_session.items() if b])
        batches.append(per_session[sid].pop(0))
    batch_file = tmp_path / "batches.json"
    batch_file.write_text(json.dumps(batches))

    _run([SESSION_INDEX, "ingest", str(tmp_path / "projects"), "--db", str(db), "--silent"])
    ingests = [Loop([SESSION_INDEX, "ingest", str(tmp_path / "projects"), "--db", str(db),
                     "--silent"]) for _ in range(2)]
    checks = [Loop([SESSION_INDEX, "check", sid, "--db", str(db), "--config-dir",
                    str(tmp_path / "no-config")], CHECK_EXITS) for sid in sessions[:2]]
    for loop in ingests + checks:
        loop.start()
    watcher = subprocess.Popen(
        [SESSION_INDEX, "ingest", "--watch", str(tmp_path / "projects"), "--db", str(db)],
        stderr=subprocess.PIPE, text=True)
    store = subprocess.Popen([sys.executable, "-c", STORE_APPENDER, str(db), str(batch_file)],
                             stderr=subprocess.PIPE, text=True)
    files = {sid: projects / f"{sid}.jsonl" for sid in sessions}
    cursors = dict.fromkeys(sessions, 0)
    deadline = time.monotonic() + 90
    while any(cursors[s] < len(plans[s]) for s in sessions) and time.monotonic() < deadline:
        sid = rng.choice(sessions)
        lines = plans[sid][cursors[sid]:cursors[sid] + rng.randrange(1, 6)]
        cursors[sid] += len(lines)
        data = "".join(lines).encode()
        with open(files[sid], "ab") as f:
            cut = rng.randrange(len(data)) if data and rng.random() < 0.3 else len(data)
            f.write(data[:cut])   # sometimes half a line now, the rest a moment later
            f.flush()
            if cut < len(data):
                time.sleep(rng.random() * 0.05)
                f.write(data[cut:])
        time.sleep(rng.random() * 0.03)
    _, store_err = store.communicate(timeout=120)
    time.sleep(1.0)  # the watcher's last batch
    watcher.send_signal(signal.SIGTERM)
    _, watch_err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, watch_err[-3000:]
    assert "Traceback" not in watch_err and "rror" not in watch_err, watch_err[-3000:]
    for loop in ingests + checks:
        loop.stop.set()
    for loop in ingests + checks:
        loop.join(timeout=120)
    assert store.returncode == 0, store_err[-3000:]
    assert all(cursors[s] == len(plans[s]) for s in sessions), "the appender ran out of time"
    failures = [f for loop in ingests + checks for f in loop.failures]
    assert failures == [], failures[:3]
    assert all(loop.runs > 2 for loop in ingests + checks), [l.runs for l in ingests + checks]
    _run([SESSION_INDEX, "ingest", str(tmp_path / "projects"), "--db", str(db), "--silent"])

    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for sid, path in files.items():
        stored = conn.execute(
            "SELECT byte_offset, raw FROM records WHERE file_id = (SELECT id FROM files "
            "WHERE path = ?) UNION ALL SELECT byte_offset, raw FROM bad_lines WHERE file_id = "
            "(SELECT id FROM files WHERE path = ?) ORDER BY byte_offset",
            [str(path), str(path)]).fetchall()
        expected = [(o, line.decode()) for o, line in _complete_lines(path)]
        assert [(o, r if isinstance(r, str) else r.decode()) for o, r in stored] == expected, sid
    for sid, n in sent.items():
        assert conn.execute(
            "SELECT count(*) FROM records r JOIN files f ON f.id = r.file_id "
            "WHERE f.origin = 'store' AND f.session_id = ?", [sid]).fetchone()[0] == n, sid
    conn.close()


def _lines_of(index, path):
    return index.rows(
        "SELECT byte_offset, raw FROM records WHERE file_id = (SELECT id FROM files "
        "WHERE path = ?) UNION ALL SELECT byte_offset, raw FROM bad_lines WHERE file_id = "
        "(SELECT id FROM files WHERE path = ?) ORDER BY byte_offset", [str(path), str(path)])


def _grow(path, sid, n, start=0):
    with open(path, "a") as f:
        for i in range(start, start + n):
            f.write(json.dumps({"type": "user", "uuid": f"{sid}-{i}", "sessionId": sid,
                                "parentUuid": f"{sid}-{i - 1}" if i else None,
                                "message": {"role": "user", "content": "x" * 200}}) + "\n")


def test_a_file_row_read_before_the_lock_is_read_again_under_it(index, monkeypatch):
    """Another process stores a file's new lines after this run read the
    files table and before it takes the write lock: this run reads the row
    again and stores nothing twice (it used to fail on the unique key)."""
    from conftest import Index
    from indexer.ingest import files as ingestmod

    sid = "55555555-1111-4000-8000-000000000000"
    path = index.projects / "p" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    _grow(path, sid, 5)
    index.ingest()
    _grow(path, sid, 5, start=5)
    other = Index.__new__(Index)
    other.path, other.projects = index.path, index.projects
    from indexer.index.db import open_db
    other.db = open_db(index.path)
    original = ingestmod._ingest_file

    def late(writer, cand, row, st, summary):
        if not late.done:  # the other process gets there first
            late.done = True
            other.ingest()
        return original(writer, cand, row, st, summary)

    late.done = False
    monkeypatch.setattr(ingestmod, "_ingest_file", late)
    index.ingest()
    stored = _lines_of(index, path)
    assert [r["byte_offset"] for r in stored] == [
        o for o, _ in _complete_lines(path)] and len(stored) == 10


def test_a_file_overtaken_between_two_slices_is_left_to_the_other(index, monkeypatch):
    """A big file is stored a slice (TXN_BYTES) per transaction, letting go
    of the lock between slices; another process that stores the rest
    meanwhile is noticed, and no line is stored twice or lost."""
    from conftest import Index
    from indexer.ingest import files as ingestmod
    from indexer.index.db import open_db

    sid = "66666666-1111-4000-8000-000000000000"
    path = index.projects / "p" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    _grow(path, sid, 40)
    monkeypatch.setattr(ingestmod, "TXN_BYTES", 2000)
    monkeypatch.setattr(ingestmod, "READ_CHUNK", 1500)
    other = Index.__new__(Index)
    other.path, other.projects, other.db = index.path, index.projects, open_db(index.path)
    calls = []

    def progress(n):
        calls.append(n)
        if len(calls) == 2:  # after this run's second commit, the other runs
            ingestmod.ingest(other.db, [str(index.projects)])

    ingestmod.ingest(index.db, [str(index.projects)], progress=progress)
    stored = _lines_of(index, path)
    assert [r["byte_offset"] for r in stored] == [o for o, _ in _complete_lines(path)]
    assert len(stored) == 40
    assert len(calls) >= 2
    index.assert_caches_match_definitions()
