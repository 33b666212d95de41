"""preload.py: new files parsed (and derived) by worker processes during a
big ingest end in the index exactly as ingest alone would store them, also
when a file changes between the worker's read and ingest's, or the workers
die."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import Index, write_jsonl
from indexer.ingest import derive_worker, files as ingest_mod, linerows, preload
from indexer.transcripts.rows import LARGE_LINE_BYTES

SID = "5e55e55e-0000-4000-8000-{:012d}"
# Columns that hold the time of a run, not what was stored.
TIMES = ("first_ingested_at", "last_ingested_at", "generation_started_at", "first_seen_at",
         "last_seen_at", "last_stored_at")


def _chain(sid: str, n: int, start: int = 0, parent=None):
    out = []
    for i in range(start, start + n):
        out.append({"type": "user" if i % 2 == 0 else "assistant", "uuid": f"{sid[:8]}-{i}",
                    "parentUuid": parent, "sessionId": sid, "version": "2.1.3",
                    "timestamp": f"2026-11-01T10:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
                    "message": {"role": "user", "content": f"line {i}"}})
        parent = out[-1]["uuid"]
    return out


def make_sources(root: Path) -> Path:
    """A varied tree: a synthetic corpus plus files of every shape ingest
    treats apart (bad lines, a record without its newline, a partial last
    line, a line over LARGE_LINE_BYTES, attachments, an execution log)."""
    projects = root / "projects"
    subprocess.run([sys.executable, str(Path(__file__).parent.parent / "bench" /
                                        "make_corpus.py"), str(projects), "--size-mb", "2",
                    "--seed", "7"], check=True, capture_output=True)
    p = projects / "-home-user-odd names é"
    sid = [SID.format(i) for i in range(6)]
    write_jsonl(p / f"{sid[0]}.jsonl", _chain(sid[0], 5) + [
        b"not json", b"", b"\x00\x01", "\ufeff{}".encode(), b"{\"type\": \"user\", \"x\": NaN}",
        b"\xff\xfe bad utf-8", {"type": "attachment", "uuid": "att-1", "parentUuid": None,
                                "sessionId": sid[0], "attachment": {"type": "todo_reminder"}},
        {"type": "last-prompt", "lastPrompt": "hi", "sessionId": sid[0]},
        {"type": "user", "uuid": "unreadable-1", "parentUuid": None, "sessionId": sid[0]},
        {"type": "last-prompt", "lastPrompt": "x", "leafUuid": None, "explicit": True}])
    write_jsonl(p / f"{sid[1]}.jsonl", _chain(sid[1], 6), newline_at_end=False)
    # Thinking the API refuses and thinking it showed (thinking_cache: the
    # workers classify it from the lines they parsed, ingest alone from the index).
    thinks = _chain(SID.format(20), 8)
    signature = "EqgCClkIDBgCKkB" + "Ab9+/" * 60
    for i, blocks in ((1, [{"type": "thinking", "thinking": "why", "signature": signature}]),
                      (3, [{"type": "thinking", "thinking": "", "signature": signature},
                           {"type": "text", "text": "x"}]),
                      (5, [{"type": "thinking", "thinking": "", "signature": ""}]),
                      (7, [{"type": "redacted_thinking"}])):
        thinks[i]["message"] = {"id": f"msg_{i:04d}", "role": "assistant",
                                "model": "claude-opus-4-7", "content": blocks}
    write_jsonl(p / f"{SID.format(20)}.jsonl", thinks)
    (p / f"{sid[2]}.jsonl").write_bytes(
        write_jsonl(p / f"{sid[2]}.jsonl", _chain(sid[2], 4)).read_bytes() + b'{"type": "us')
    big = _chain(sid[3], 3)
    big[1]["message"]["content"] = "x" * (LARGE_LINE_BYTES + 10)
    write_jsonl(p / f"{sid[3]}.jsonl", big + _chain(sid[3], 3, start=3, parent=big[-1]["uuid"]))
    write_jsonl(p / f"{sid[4]}.jsonl", [
        {"type": "system", "subtype": "init", "session_id": sid[4], "uuid": "i-1"},
        {"type": "result", "subtype": "success", "session_id": sid[4], "uuid": "r-1"}])
    (p / f"{sid[5]}.jsonl").write_bytes(b"")
    # Loader cases the workers derive from the parsed lines alone: rows ahead
    # of a result (records.rows_ahead, records.AHEAD_ROW read from the line),
    # a stray result of another agent (Rec.agent_id).
    from test_oracle_cases import SHAPES
    for n, name in enumerate(("rows_ahead_under_the_call", "rows_ahead_of_a_plain_prompt",
                              "result_of_another_agent_not_recovered")):
        case = SID.format(10 + n)
        records = SHAPES[name]()
        for r in records:
            r["sessionId"] = case
        write_jsonl(p / f"{case}.jsonl", records)
    return projects


# Columns that hold a record's id: compared as the record's (file, line).
RECORD_IDS = {"record_id", "resume_leaf_id", "sdk_leaf_id", "message_record_id",
              "last_record_id", "first_user", "first_assistant"}


def dump(index: Index) -> dict:
    """Every table's rows, but the times of the run (and index_meta's), each
    record id as its record's (file_id, line_no): ingest alone stores a line
    over LARGE_LINE_BYTES before the shorter lines read with it, so the ids
    of such a file's records come in another order."""
    conn = index.db.conn
    where = dict(conn.execute("SELECT id, file_id || ':' || line_no FROM records"))
    out = {}
    for (table,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' "
            "AND name NOT LIKE '\\_%' ESCAPE '\\' AND name <> 'index_meta'").fetchall():
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")
                if r[1] not in TIMES and not r[1].endswith("_at")]
        ids = [i for i, c in enumerate(cols)
               if c in RECORD_IDS or (table == "records" and c == "id")]
        out[table] = sorted((tuple(where.get(v, v) if i in ids else v for i, v in enumerate(row))
                             for row in conn.execute(f"SELECT {', '.join(cols)} FROM {table}")),
                            key=repr)
    return out


def ingest_into(path: Path, sources: Path, monkeypatch, *, with_workers: bool):
    monkeypatch.setattr(derive_worker, "MIN_BYTES", 0 if with_workers else 1 << 60)
    path.mkdir()
    index = Index(path)
    summary = index.ingest(sources)
    assert summary.errors == []
    return index, summary


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The system temp folder, for this test alone (the workers' folders go there)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def count_taken(monkeypatch) -> list:
    taken = []
    original = preload.Preloader.take

    def take(self, conn, file_id, path, f, st):
        p = original(self, conn, file_id, path, f, st)
        taken.append((path, p is not None))
        return p
    monkeypatch.setattr(preload.Preloader, "take", take)
    return taken


def test_preloaded_ingest_equals_ingest_alone(tmp_path, monkeypatch, private_tmp):
    sources = make_sources(tmp_path / "src")
    taken = count_taken(monkeypatch)
    monkeypatch.setattr(preload, "FIRST_BATCH_BYTES", 1 << 16)   # several batches
    monkeypatch.setattr(preload, "BATCH_BYTES", 1 << 18)
    monkeypatch.setattr(ingest_mod, "TXN_BYTES", 1 << 17)   # and commits within them
    alone, s1 = ingest_into(tmp_path / "alone", sources, monkeypatch, with_workers=False)
    assert taken == []
    ours, s2 = ingest_into(tmp_path / "ours", sources, monkeypatch, with_workers=True)
    assert s1.as_dict() | {"seconds": 0} == s2.as_dict() | {"seconds": 0}
    assert len(taken) == s2.files   # all but the empty one went to the workers
    assert [Path(path).name for path, ok in taken if not ok] == [f"{SID.format(5)}.jsonl"]
    assert dump(ours) == dump(alone)
    ours.assert_caches_match_definitions()
    assert ours.value("SELECT count(*) FROM files WHERE needs_derive") == 0
    # The workers' folder went (conftest's copy of the definitions, made in
    # the temp folder by the first test of a process that asks, stays).
    assert [x for x in private_tmp.iterdir() if not x.name.startswith("definitions-")] == []


def test_a_file_changed_after_the_worker_read_it(tmp_path, monkeypatch, private_tmp):
    """Rewritten in place (at its start, or only between its first and last
    few KB), grown, or replaced by another file between the worker's read
    and ingest's: the index holds the file as ingest read it."""
    sources = tmp_path / "src"
    sids = [SID.format(100 + i) for i in range(5)]
    paths = [write_jsonl(sources / "p" / f"{s}.jsonl", _chain(s, 40)) for s in sids]
    rewritten, grown, replaced, kept, middle = paths
    at = middle.read_bytes().find(b"line 15")
    assert linerows.HEAD_BYTES < at < middle.stat().st_size - linerows.TAIL_BYTES
    taken = count_taken(monkeypatch)
    original = ingest_mod._ingest_file

    def change_first(writer, cand, row, st, summary):
        # the worker has read this file's batch once ingest is about to open it
        writer.preload.prepare(writer, cand.path)
        if cand.path in (str(rewritten), str(middle)):   # same inode and size, other bytes
            path = Path(cand.path)
            old, new = (b"line 0", b"LINE 0") if path == rewritten else (b"line 15", b"LINE 15")
            data = path.read_bytes()
            with open(path, "r+b") as f:
                f.write(data.replace(old, new, 1))
        elif cand.path == str(grown):
            with open(grown, "a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in
                                _chain(sids[1], 3, start=40, parent=f"{sids[1][:8]}-39")))
        elif cand.path == str(replaced):
            tmp = replaced.with_suffix(".new")
            write_jsonl(tmp, _chain(sids[2], 7))
            os.replace(tmp, replaced)
        return original(writer, cand, row, st, summary)
    monkeypatch.setattr(ingest_mod, "_ingest_file", change_first)
    ours, _ = ingest_into(tmp_path / "ours", sources, monkeypatch, with_workers=True)
    assert dict(taken) == {str(rewritten): False, str(grown): True, str(replaced): False,
                           str(kept): True, str(middle): False}
    monkeypatch.setattr(ingest_mod, "_ingest_file", original)
    alone, _ = ingest_into(tmp_path / "alone", sources, monkeypatch, with_workers=False)
    assert dump(ours) == dump(alone)
    assert ours.value("SELECT count(*) FROM records WHERE file_id = ?",
                      [ours.file_id(grown)]) == 43
    ours.assert_caches_match_definitions()


def test_workers_that_cannot_run_leave_the_files_to_ingest(tmp_path, monkeypatch, private_tmp):
    sources = make_sources(tmp_path / "src")
    taken = count_taken(monkeypatch)
    monkeypatch.setattr(preload, "WORKER_MODULE", "indexer.no_such_worker")
    ours, _ = ingest_into(tmp_path / "ours", sources, monkeypatch, with_workers=True)
    assert taken and not any(ok for _, ok in taken)   # no batch ever came
    alone, _ = ingest_into(tmp_path / "alone", sources, monkeypatch, with_workers=False)
    assert dump(ours) == dump(alone)
    assert list(private_tmp.iterdir()) == []


def test_the_workers_chain_rows_are_what_derive_reads_from_the_index(tmp_path):
    """preload._chain_rows (with _computed_in_sql) gives, from the parsed
    rows, what derive.UUID_RECORDS_SQL reads from a records table."""
    import sqlite3

    from indexer.ingest import derive
    from indexer.index.db import open_index

    sources = make_sources(tmp_path / "src")
    paths = sorted(str(p) for p in sources.rglob("*.jsonl"))
    records_sql = open_index(str(tmp_path / "i.db"), create=True).conn.execute(
        preload.RECORDS_TABLE_SQL).fetchone()[0]
    batch = tmp_path / "batch.db"
    preload.write_batch(str(batch), records_sql, [(p, "main", None) for p in paths])
    conn = sqlite3.connect(batch)
    # a batch holds each line's length, not its text: the records table
    # given its lines, as ingest copies them
    data = [Path(p).read_bytes() for p in paths]
    conn.create_function("line", 3, lambda key, at, n: data[key][at:at + n])
    conn.execute("UPDATE records SET raw = CAST(line(file_id, byte_offset, raw_len) AS TEXT)")
    keys = [k for (k,) in conn.execute("SELECT key FROM files ORDER BY key")]
    expected = conn.execute(derive.UUID_RECORDS_SQL, {"file_ids": json.dumps(keys)}).fetchall()
    got, prompts, boundaries = [], [], []
    columns = ", ".join(preload.RECORD_COLUMNS + ("raw",))
    for key, first, last in conn.execute(
            "SELECT key, first_record, last_record FROM files WHERE first_record IS NOT NULL "
            "ORDER BY key").fetchall():
        rows = conn.execute(f"SELECT {columns} FROM records WHERE id BETWEEN ? AND ? "
                            "ORDER BY id", [first, last]).fetchall()
        preload._chain_rows(rows, first, got, prompts, boundaries)
    preload._computed_in_sql(conn, got, prompts, boundaries)
    assert prompts and any(row[14] is not None for row in got)   # (what the test holds)
    assert any(row[15] for row in got) and any(row[19] and row[20] for row in got)
    assert [tuple(row) for row in got] == expected


def _workers_of(folder: Path) -> list[int]:
    """Pids of live preload workers using ``folder``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if preload.WORKER_MODULE.encode() in args and any(
                a.startswith(str(folder).encode()) for a in args):
            pids.append(int(proc.name))
    return pids


@pytest.mark.xdist_group("timing")
def test_a_killed_ingest_leaves_no_worker_and_no_batch_behind(tmp_path):
    """SIGKILL of a cold `session-index ingest` while the workers run: they
    end and remove their folder; the next ingest removes the build it left
    (fresh_build.py) and stores every line once."""
    import signal
    import sqlite3
    import time

    from test_watch import CMD, make_big_corpus

    projects = tmp_path / "projects"
    make_big_corpus(projects, 48)   # past derive_worker.MIN_BYTES: a bulk ingest
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    db = tmp_path / "index.db"
    proc = subprocess.Popen(CMD + ["ingest", str(projects), "--db", str(db)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    build = tmp_path / f".index.db.building-{proc.pid}"   # the index, until it is done
    while True:   # until the first batch is in and the workers are at work
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        try:
            with sqlite3.connect(f"file:{build}?mode=ro", uri=True) as conn:
                if conn.execute("SELECT count(*) FROM records").fetchone()[0]:
                    break
        except sqlite3.Error:
            pass
        time.sleep(0.02)
    folders = list(temp.glob("session-index-preload-*"))
    assert len(folders) == 1 and _workers_of(folders[0])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20
    while _workers_of(folders[0]) or folders[0].exists():
        assert time.monotonic() < deadline, (_workers_of(folders[0]), list(temp.iterdir()))
        time.sleep(0.05)

    result = subprocess.run(CMD + ["ingest", str(projects), "--db", str(db), "--json"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    conn = sqlite3.connect(db)
    lines = sum(p.read_bytes().count(b"\n") for p in projects.rglob("*.jsonl"))
    stored = conn.execute("SELECT (SELECT count(DISTINCT file_id || ':' || byte_offset) "
                          "FROM records) + (SELECT count(*) FROM bad_lines)").fetchone()[0]
    assert stored == lines == conn.execute(
        "SELECT (SELECT count(*) FROM records) + (SELECT count(*) FROM bad_lines)").fetchone()[0]
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT count(*) FROM files WHERE needs_derive").fetchone()[0] == 0
    assert list(temp.iterdir()) == []
    assert not build.exists() and not db.with_name(db.name + "-journal").exists()
