"""Watch mode with real processes and real files: ``session-index ingest
--watch`` follows new files and folders, appends, partial lines, rewrites and
deletions; SIGTERM in the middle of a big ingest leaves a consistent index
that a plain ingest then completes exactly once; ``serve --watch`` shows an
appended line through Datasette's JSON API and stops on SIGTERM with exit 0.

Everything waits by polling a separate read-only connection (or the log)
against a deadline; no sleep stands in for synchronization.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from indexer.index import generations
from indexer.ingest import files as ingestmod, watch as watchmod

# Deadlines on real processes: in the serial xdist group (conftest.py).
pytestmark = pytest.mark.xdist_group("timing")

ROOT = Path(__file__).resolve().parent.parent
_SCRIPT = Path(sys.executable).with_name("session-index")
CMD = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "indexer"]
SID = "0b1fed78-ad30-4641-94b1-5f6931526c96"
SID2 = "1c2fed78-ad30-4641-94b1-5f6931526c97"
# Generous for a loaded machine: the figure to meet (a second) is
# bench/watch_latency.py's; these only have to fail when nothing arrives.
DEADLINE = 5.0
START_DEADLINE = 30.0

TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
LOG_LINE = re.compile(TIME + "(" + "|".join([
    r"watching .+ \((inotify|polling)\)",
    r"ingest: [\d,]+ files? \(\d+ changed, \d+ deleted, \d+ rewritten\), [\d,]+ new lines?, "
    r"\d+\.\d{3}s(: .+)?",
    r"error: .+",
    r"warning: .+",
    r"stopped on (SIGTERM|SIGINT|request)",
]) + ")$")


def record(uuid, parent=None, text="hello", session=SID, **extra) -> bytes:
    r = {"parentUuid": parent, "isSidechain": False, "type": "user", "uuid": uuid,
         "sessionId": session, "cwd": "/tmp/demo", "timestamp": "2026-11-01T00:00:00.000Z",
         "message": {"role": "user", "content": text}, **extra}
    return json.dumps(r).encode()


def poll(fn, what, timeout=DEADLINE):
    """fn()'s first truthy value, polled every 10 ms; fails at the deadline."""
    end = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout}s: {what} (last: {value!r})")
        time.sleep(0.01)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


class Proc:
    """A real session-index process, its stderr in a file."""

    def __init__(self, args, tmp_path: Path, env: dict, name="watch"):
        self.err_path = tmp_path / f"{name}.stderr"
        with open(self.err_path, "wb") as err:
            self.p = subprocess.Popen(CMD + args, stdout=subprocess.DEVNULL, stderr=err,
                                      stdin=subprocess.DEVNULL, env=env, cwd=tmp_path)

    def log(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait_for_log(self, pattern, timeout=START_DEADLINE, count=1):
        def seen():
            assert self.p.poll() is None, f"exited {self.p.returncode}:\n{self.log()}"
            return len(re.findall(pattern, self.log(), re.M)) >= count
        poll(seen, f"{pattern!r} in the log", timeout)

    def stop(self, sig=signal.SIGTERM, timeout=20) -> int:
        self.p.send_signal(sig)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {timeout}s after {sig!r}:\n{self.log()}")

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.fixture
def live(tmp_path):
    """A config dir with projects/, an index path, a reader, the processes."""
    config = tmp_path / "claude"
    (config / "projects").mkdir(parents=True)
    env = dict(os.environ, CLAUDE_CONFIG_DIR=str(config),
               SESSION_INDEX_MANAGED_SETTINGS=str(tmp_path / "managed.json"))
    env.pop("WATCHFILES_FORCE_POLLING", None)
    procs: list[Proc] = []

    class Live:
        projects = config / "projects"
        db = tmp_path / "index.db"

        def __init__(self):
            self.env = env
            self.conn = None

        def start(self, *args, name="watch", **env_extra):
            proc = Proc(list(args), tmp_path, dict(env, **env_extra), name=name)
            procs.append(proc)
            return proc

        def watch(self, *args, **env_extra):
            proc = self.start("ingest", "--watch", "--db", str(self.db), *args, **env_extra)
            proc.wait_for_log(r" watching ")     # the first ingest is done
            return proc

        def reader(self):
            if self.conn is None:
                self.conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True,
                                            isolation_level=None)
            return self.conn

        def value(self, sql, params=()):
            row = self.reader().execute(sql, params).fetchone()
            return row[0] if row else None

        def lines(self, path):
            """The stored lines of a file, in order: (line_no, offset, raw bytes)."""
            return self.reader().execute(STORED_LINES_SQL, [str(path)]).fetchall()

    live = Live()
    yield live
    for proc in procs:
        proc.kill()
    if live.conn is not None:
        live.conn.close()


# Every stored line of the file at ?, records and bad lines, in file order.
STORED_LINES_SQL = """
SELECT line_no, byte_offset, CAST(raw AS BLOB) FROM records
WHERE file_id = (SELECT id FROM files WHERE path = ?1)
UNION ALL
SELECT line_no, byte_offset, CAST(raw AS BLOB) FROM bad_lines
WHERE file_id = (SELECT id FROM files WHERE path = ?1)
ORDER BY byte_offset
""".strip()


def assert_clean_log(proc: Proc, signal_name="SIGTERM"):
    log = proc.log()
    assert "Traceback" not in log, log
    lines = [line for line in log.splitlines() if not line.startswith("Serving ")]
    assert [line for line in lines if not LOG_LINE.match(line)] == [], log
    assert lines[-1].endswith(f" stopped on {signal_name}"), log


def test_watch_follows_files_through_appends_partial_lines_rewrites_and_deletion(live):
    project = live.projects / "-tmp-demo"
    project.mkdir()
    proc = live.watch()
    assert " (inotify)" in proc.log()

    # A new file.
    path = project / f"{SID}.jsonl"
    first = record("u1") + b"\n"
    path.write_bytes(first)
    poll(lambda: len(live.lines(path)) == 1, "the new file's line")

    # Appends.
    append(path, record("u2", "u1") + b"\n" + record("u3", "u2") + b"\n")
    poll(lambda: len(live.lines(path)) == 3, "two appended lines")

    # A partial line: nothing stored until its newline comes, then once.
    partial = record("u4", "u3", text="a longer prompt")
    cut = len(partial) // 2
    append(path, partial[:cut])
    poll(lambda: live.value("SELECT pending_tail FROM files WHERE path = ?", [str(path)])
         == partial[:cut], "the partial tail seen")
    assert len(live.lines(path)) == 3
    append(path, partial[cut:] + b"\n")
    poll(lambda: len(live.lines(path)) == 4, "the completed line")

    # A last record without its newline (as Claude Code writes them): stored
    # once; its newline and the next line add one line, not two.
    append(path, record("u5", "u4"))
    poll(lambda: len(live.lines(path)) == 5, "the unterminated last record")
    append(path, b"\n" + record("u6", "u5") + b"\n")
    poll(lambda: len(live.lines(path)) == 6, "the line after it")
    data = path.read_bytes()
    stored = live.lines(path)
    assert [(n, raw) for n, _, raw in stored] == list(enumerate(data.split(b"\n")[:-1], 1))
    assert [data[o:o + len(raw)] for _, o, raw in stored] == [raw for _, _, raw in stored]

    # A folder created later, two levels deep: a subagent transcript.
    sub = live.projects / "-tmp-other" / SID2 / "subagents" / "agent-a1b2.jsonl"
    sub.parent.mkdir(parents=True)
    sub.write_bytes(record("s1", session=SID2, isSidechain=True) + b"\n")
    poll(lambda: len(live.lines(sub)) == 1, "the file in a new folder")
    # Tool outputs are not transcripts.
    (sub.parent.parent / "tool-results").mkdir()
    (sub.parent.parent / "tool-results" / "x.jsonl").write_bytes(record("t1") + b"\n")

    # A rewrite: replaced by a shorter, different file (a new inode); the
    # old generation is kept, the new one read from the start.
    old = path.read_bytes()
    old_id = live.value("SELECT id FROM files WHERE path = ?", [str(path)])
    tmp = project / "rewrite.tmp"
    tmp.write_bytes(record("r1") + b"\n" + record("r2", "r1") + b"\n")
    os.replace(tmp, path)
    poll(lambda: live.value("SELECT generation FROM files WHERE path = ?", [str(path)]) == 2,
         "the rewrite")
    poll(lambda: len(live.lines(path)) == 2, "the new generation's lines")
    assert b"".join(generations.generation_bytes(live.reader(), old_id, 1)) == old
    assert live.value("SELECT lines FROM superseded_generations WHERE file_id = ?",
                      [old_id]) == 6
    # ... and truncated in place (the same inode), then written anew.
    second = path.read_bytes()
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(record("w1") + b"\n")
    poll(lambda: live.value("SELECT generation FROM files WHERE path = ?", [str(path)]) == 3,
         "the truncation")
    poll(lambda: len(live.lines(path)) == 1, "the third generation's line")
    assert b"".join(generations.generation_bytes(live.reader(), old_id, 2)) == second
    assert live.value("SELECT id FROM files WHERE path = ?", [str(path)]) == old_id

    # A deletion: rows kept, deleted_at set.
    path.unlink()
    poll(lambda: live.value("SELECT deleted_at FROM files WHERE path = ?", [str(path)]),
         "deleted_at")
    assert len(live.lines(path)) == 1

    assert proc.p.poll() is None
    assert proc.stop() == 0
    assert_clean_log(proc)
    # Each batch's line names the files it read and their sessions.
    assert re.search(rf" ingest: 1 file \(1 changed.*, 1 new line, .*: {re.escape(str(path))} "
                     rf"\(session {SID}\)$", proc.log(), re.M), proc.log()
    assert f"{sub} (session {SID2})" in proc.log()
    assert live.value("SELECT count(*) FROM files WHERE path LIKE '%tool-results%'") == 0
    assert live.value("SELECT count(*) FROM files") == 2
    assert live.value("PRAGMA integrity_check") == "ok"


def test_polling_fallback_and_sigint(live):
    project = live.projects / "-tmp-demo"
    project.mkdir()
    path = project / f"{SID}.jsonl"
    path.write_bytes(record("u1") + b"\n")
    proc = live.watch(WATCHFILES_FORCE_POLLING="1")
    assert " (polling)" in proc.log()
    assert len(live.lines(path)) == 1
    # Polling compares mtimes to the second: appends in the same second as
    # the write before them are seen too.
    append(path, record("u2", "u1") + b"\n")
    poll(lambda: len(live.lines(path)) == 2, "an append, polled")
    append(path, record("u3", "u2") + b"\n")
    poll(lambda: len(live.lines(path)) == 3, "an append right after it, polled")
    assert proc.stop(signal.SIGINT) == 0
    assert_clean_log(proc, "SIGINT")


def test_a_source_that_does_not_exist_is_one_line_and_exit_3(live):
    proc = live.start("ingest", "--watch", "--db", str(live.db), str(live.projects / "nope"))
    assert proc.p.wait(30) == 3
    log = proc.log()
    assert "Traceback" not in log
    assert log.strip() == f"Error: {live.projects / 'nope'}: no such file or folder"


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_an_index_deleted_or_replaced_under_the_watcher_stops_it_with_exit_3(live, how):
    """Its open connection would go on writing into the unlinked file: the
    watcher stops and says why, and a restart rebuilds every line."""
    project = live.projects / "-tmp-demo"
    project.mkdir()
    path = project / f"{SID}.jsonl"
    path.write_bytes(record("u1") + b"\n")
    proc = live.watch()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{live.db}{suffix}").unlink(missing_ok=True)
    if how == "replaced":
        live.db.write_bytes(b"")        # (a new empty file: another inode at the path)
    append(path, record("u2", "u1") + b"\n")
    assert proc.p.wait(DEADLINE) == 3
    log = proc.log()
    assert "Traceback" not in log
    assert log.splitlines()[-1] == (f"Error: {live.db} was deleted or replaced while in use; "
                                    "stopped (run again: a new index is built from the "
                                    "transcripts)")
    again = live.watch()
    assert len(live.lines(path)) == 2
    assert again.stop() == 0


def test_the_watcher_follows_no_link_to_a_folder_as_a_plain_ingest_does(live, tmp_path):
    """A linked folder appearing (or growing) under a source is not indexed
    by the watcher, whose notifications follow links, since a plain ingest
    does not walk it: the next rescan would mark its files deleted."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"{SID2}.jsonl").write_bytes(record("o1", session=SID2) + b"\n")
    project = live.projects / "-tmp-demo"
    project.mkdir()
    path = project / f"{SID}.jsonl"
    path.write_bytes(record("u1") + b"\n")
    proc = live.watch()
    (live.projects / "-tmp-linked").symlink_to(outside)
    (project / "nested").symlink_to(outside)
    append(outside / f"{SID2}.jsonl", record("o2", "o1", session=SID2) + b"\n")
    append(path, record("u2", "u1") + b"\n")      # then a change the watcher must take
    poll(lambda: len(live.lines(path)) == 2, "the append after the links")
    assert proc.stop() == 0
    assert live.value("SELECT group_concat(path) FROM files") == str(path)
    plain = subprocess.run(CMD + ["ingest", "--db", str(live.db), "--json"], env=live.env,
                           capture_output=True, timeout=60)
    assert json.loads(plain.stdout)["deleted_files"] == 0


def test_a_name_that_is_not_utf8_turns_the_watcher_to_polling_not_off(live):
    """watchfiles' inotify watch fails on every wait while such a name is
    under it (and its polling once per new one): the watcher used to start
    it anew every second, a whole ingest and an error line each time."""
    odd = os.fsencode(live.projects) + b"/-tmp-\xff\xfeodd"
    os.mkdir(odd)
    Path(os.fsdecode(odd + b"/x.jsonl")).write_bytes(record("o1") + b"\n")
    project = live.projects / "-tmp-demo"
    project.mkdir()
    path = project / f"{SID}.jsonl"
    path.write_bytes(record("u1") + b"\n")
    proc = live.watch()
    append(path, record("u2", "u1") + b"\n")
    poll(lambda: len(live.lines(path)) == 2, "an append beside the odd name")
    Path(os.fsdecode(os.fsencode(project) + b"/\xe9.jsonl")).write_bytes(b"{}\n")
    append(path, record("u3", "u2") + b"\n")
    poll(lambda: len(live.lines(path)) == 3, "an append after another odd name appeared")
    assert proc.stop() == 0
    assert_clean_log(proc)
    log = proc.log()
    assert "warning: file notifications unavailable (Unable to decode path" in log
    assert log.count("error: watching failed") <= 1     # polling: once, for the new name
    assert log.count("-tmp-\\xff\\xfeodd/x.jsonl: a file name that is not UTF-8: skipped") == 1
    assert live.value("SELECT count(*) FROM files") == 1


@pytest.mark.parametrize("log", ["full", "closed"])
def test_a_log_that_cannot_be_written_never_stops_the_watcher(live, log):
    """stderr on a full disk (ENOSPC) or closed: the lines are lost, the
    indexing goes on and SIGTERM still ends it with exit 0."""
    project = live.projects / "-tmp-demo"
    project.mkdir()
    path = project / f"{SID}.jsonl"
    path.write_bytes(record("u1") + b"\n")
    with open("/dev/full", "wb") as full:
        p = subprocess.Popen(CMD + ["ingest", "--watch", "--db", str(live.db)], env=live.env,
                             stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                             stderr=full if log == "full" else None,
                             preexec_fn=(lambda: os.close(2)) if log == "closed" else None)
    try:
        def first_line():
            try:
                return live.db.exists() and live.lines(path)
            except sqlite3.OperationalError:   # (the index being made)
                return False

        poll(first_line, "the first line", START_DEADLINE)
        append(path, record("u2", "u1") + b"\n")
        poll(lambda: len(live.lines(path)) == 2, "an append")
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0
    finally:
        if p.poll() is None:
            p.kill()


def run_watcher_thread(db, sources):
    """An in-process Watcher in a thread, its log in a list."""
    log: list[str] = []
    watcher = watchmod.Watcher(db, sources, log=log.append)
    failure = []

    def run():
        try:
            watcher.run()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    poll(lambda: any(line.startswith("ingest: ") for line in log) or failure, "first ingest")
    return watcher, thread, log, failure


def test_errors_are_logged_once_and_the_watcher_goes_on(tmp_path, monkeypatch):
    """A file that cannot be read and a batch that fails (the index locked,
    say) are one log line each; the other files go on, the failed batch is
    retried. (In-process: as root, no file is unreadable.)"""
    project = tmp_path / "projects" / "-tmp-demo"
    project.mkdir(parents=True)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("SESSION_INDEX_MANAGED_SETTINGS", str(tmp_path / "managed.json"))
    bad, good = project / f"{SID}.jsonl", project / f"{SID2}.jsonl"
    denied = {str(bad)}
    real_open = ingestmod.open_regular

    def guarded_open(file, *args, **kwargs):
        if str(file) in denied:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(ingestmod, "open_regular", guarded_open)
    db = tmp_path / "index.db"
    watcher, thread, log, failure = run_watcher_thread(db, [str(tmp_path / "projects")])
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)

    def count(path):
        return reader.execute("SELECT line_count FROM files WHERE path = ?",
                              [str(path)]).fetchone()

    try:
        bad.write_bytes(record("b1") + b"\n")
        good.write_bytes(record("g1", session=SID2) + b"\n")
        poll(lambda: count(good) == (1,), "the readable file")
        append(bad, record("b2", "b1") + b"\n")
        append(good, record("g2", "g1", session=SID2) + b"\n")
        poll(lambda: count(good) == (2,), "the readable file, again")
        errors = [line for line in log if line.startswith("error: ")]
        assert errors == [f"error: {bad}: Permission denied"], log
        assert count(bad) is None

        # Readable again: picked up at its next change.
        denied.clear()
        append(bad, record("b3", "b2") + b"\n")
        poll(lambda: count(bad) == (3,), "the healed file")

        # A batch that fails is logged and retried.
        real_ingest, calls = ingestmod.ingest, []

        def failing_once(*args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise sqlite3.OperationalError("database is locked")
            return real_ingest(*args, **kwargs)

        monkeypatch.setattr(ingestmod, "ingest", failing_once)
        append(good, record("g3", "g2", session=SID2) + b"\n")
        poll(lambda: count(good) == (3,), "the retried batch")
        assert [line for line in log if "will retry" in line] == [
            "error: ingest of 1 path(s) failed, will retry: OperationalError: "
            "database is locked"]
        assert not failure and thread.is_alive()
    finally:
        watcher.request_stop()
        thread.join(10)
        reader.close()
    assert not thread.is_alive() and not failure


def make_big_corpus(folder: Path, size_mb: int) -> None:
    subprocess.run([sys.executable, str(ROOT / "bench" / "make_corpus.py"), str(folder),
                    "--size-mb", str(size_mb), "--seed", "7"],
                   check=True, stdout=subprocess.DEVNULL)


def stored_consistently(conn, path: str) -> tuple[int, int]:
    """Assert the file's stored lines are its bytes at their offsets, each
    once, numbered 1..N, and its offset and line count agree with them.
    Returns (lines stored, ingested_offset)."""
    file_id, offset, count, unterminated = conn.execute(
        "SELECT id, ingested_offset, line_count, unterminated_tail FROM files WHERE path = ?",
        [path]).fetchone()
    rows = conn.execute(STORED_LINES_SQL, [path]).fetchall()
    data = Path(path).read_bytes()
    assert [n for n, _, _ in rows] == list(range(1, len(rows) + 1)), path
    at = 0
    for _, byte_offset, raw in rows:
        assert byte_offset == at, path
        assert data[at:at + len(raw)] == raw, path
        at += len(raw)
        if at < len(data):
            assert data[at:at + 1] == b"\n", path
            at += 1
    if unterminated:
        assert at == len(data) and len(rows[-1][2]) == unterminated, path
    assert (count, offset) == (len(rows), at), path
    return len(rows), offset


def test_sigterm_during_a_big_ingest_leaves_a_consistent_index(live):
    make_big_corpus(live.projects, 90)
    files = sorted(str(p) for p in live.projects.rglob("*.jsonl"))
    total = sum(os.path.getsize(p) for p in files)
    proc = live.start("ingest", "--watch", "--db", str(live.db))
    poll(lambda: live.db.exists() and live.value(
        "SELECT count(*) FROM sqlite_master WHERE name = 'records'"), "the schema",
        START_DEADLINE)
    poll(lambda: live.value("SELECT count(*) FROM records"), "the first commit",
         START_DEADLINE)
    assert proc.stop() == 0
    assert_clean_log(proc)
    assert not re.search(r"^\S+ ingest: ", proc.log(), re.M), "the ingest was not cut short"

    conn = live.reader()
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    tracked = [p for (p,) in conn.execute("SELECT path FROM files ORDER BY path")]
    done = sum(stored_consistently(conn, p)[1] for p in tracked)
    assert 0 < done < total, (done, total)
    for table in ("records", "bad_lines"):
        assert conn.execute(f"SELECT count(*) - count(DISTINCT file_id || ':' || byte_offset) "
                            f"FROM {table}").fetchone()[0] == 0

    # A plain ingest completes it, every line exactly once.
    result = subprocess.run(CMD + ["ingest", "--db", str(live.db), "--json"], env=live.env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["errors"] == []
    assert [p for (p,) in conn.execute("SELECT path FROM files ORDER BY path")] == files
    lines = 0
    for p in files:
        n, offset = stored_consistently(conn, p)
        assert offset == os.path.getsize(p), p
        lines += n
    assert lines == sum(Path(p).read_bytes().count(b"\n") for p in files)
    assert conn.execute("SELECT count(*) FROM files WHERE needs_derive").fetchone()[0] == 0
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.load(response)
    except OSError:
        return None


def test_serve_watch_shows_an_appended_line_and_stops_on_sigterm(live):
    project = live.projects / "-tmp-demo"
    project.mkdir()
    path = project / f"{SID}.jsonl"
    path.write_bytes(record("u1") + b"\n")
    port = free_port()
    proc = live.start("serve", "--watch", "--db", str(live.db), "--port", str(port),
                      name="serve")
    base = f"http://127.0.0.1:{port}/index/records.json?_shape=array&_col=uuid"

    def uuids():
        assert proc.p.poll() is None, proc.log()
        rows = get_json(base)
        return rows is not None and [r["uuid"] for r in rows]

    assert poll(uuids, "Datasette with the first ingest", START_DEADLINE) == ["u1"]
    append(path, record("u2", "u1") + b"\n")
    written = time.monotonic()
    poll(lambda: uuids() == ["u1", "u2"], "the appended line through the JSON API", 3.0)
    assert time.monotonic() - written < 3.0
    assert proc.stop() == 0
    assert_clean_log(proc)
    assert proc.log().startswith(f"Serving {live.db} at http://127.0.0.1:{port}/")


def test_the_batch_line_names_three_changed_files_and_counts_the_rest():
    from indexer.ingest.watch import named_files

    assert named_files([]) == ""
    assert named_files([("/p/a.jsonl", "s1"), ("/l/run.log", None)]) == (
        ": /p/a.jsonl (session s1), /l/run.log")
    five = [(f"/p/{n}.jsonl", str(n)) for n in range(5)]
    assert named_files(five) == (": /p/0.jsonl (session 0), /p/1.jsonl (session 1), "
                                 "/p/2.jsonl (session 2) and 2 more")
