"""Shared fixtures: real SQLite files in tmp_path, transcripts written as bytes.

The suite runs on two xdist workers (pyproject.toml). Tests that hold real
processes to a deadline or a timing (watch latency, SIGKILL rounds, the fleet,
the browser) are marked ``xdist_group("timing")``: one worker runs them one
after another, so no two of them compete for the cores."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from indexer.index.db import open_db
from indexer.ingest.files import ingest

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"


def pytest_report_header(config):
    return f"sqlite_version(): {sqlite3.sqlite_version}"


def run_on_tty(cmd: list, stream: str = "stderr") -> str:
    """Run ``cmd`` with its ``stream`` (stdout or stderr) on a pseudo-terminal
    and the other piped: what the terminal got (the command must exit 0)."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.run(
        [str(c) for c in cmd],
        stdout=follower if stream == "stdout" else subprocess.PIPE,
        stderr=follower if stream == "stderr" else subprocess.PIPE, timeout=60)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.returncode == 0
    return b"".join(chunks).decode()


def free_port() -> int:
    """A loopback port free now (serve refuses --port 0, as mcp does)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_jsonl(path: Path, records, *, newline_at_end: bool = True) -> Path:
    """Write records (dicts, or raw str/bytes lines) as a JSONL file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for r in records:
        if isinstance(r, bytes):
            lines.append(r)
        elif isinstance(r, str):
            lines.append(r.encode())
        else:
            lines.append(json.dumps(r).encode())
    data = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    path.write_bytes(data)
    return path


class Index:
    """An index in tmp_path with helpers for assertions."""

    def __init__(self, tmp_path: Path):
        self.path = tmp_path / "index.db"
        self.projects = tmp_path / "projects"
        self.projects.mkdir(exist_ok=True)
        self.db = open_db(self.path)

    def ingest(self, *sources):
        return ingest(self.db, [str(s) for s in (sources or [self.projects])])

    def rows(self, sql, params=()):
        cur = self.db.conn.execute(sql, params)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def value(self, sql, params=()):
        return self.db.conn.execute(sql, params).fetchone()[0]

    def ancestry(self, file_id, rule="resume"):
        return [r["uuid"] for r in self.rows(
            "SELECT uuid FROM leaf_ancestry WHERE file_id = ? AND rule = ? ORDER BY depth",
            [file_id, rule])]

    def causes(self, file_id):
        return {r["uuid"]: r["cause"] for r in self.rows(
            "SELECT uuid, cause FROM orphans WHERE file_id = ?", [file_id])}

    def file_id(self, path):
        # the path as ingest stores it: absolute, through a symlinked folder
        # (../shared may be one) or resolved
        return self.value("SELECT id FROM files WHERE path IN (?, ?) ORDER BY path = ? DESC",
                          [str(Path(path).resolve()), os.path.abspath(path),
                           str(Path(path).resolve())])

    def assert_caches_match_definitions(self):
        """Each cache-backed contract view equals its recursive definition,
        the definitions read on a copy of the tables they read (see
        _DefinitionsCopy: preparing them costs seconds, once per process)."""
        from indexer.chain.definitions import CACHED_VIEWS, SQL_CACHED_VIEWS

        copy = _DefinitionsCopy.of(self.db.conn)
        for view in CACHED_VIEWS + SQL_CACHED_VIEWS:
            extra, missing = views_differ(self.db.conn, view, f"{view}_definition", copy)
            assert (extra, missing) == ([], []), view
        assert_verdicts_match_definition(self.db.conn)


def assert_verdicts_match_definition(conn):
    """Every session's verdict (session_verdicts, from the facts ingest keeps
    in verdict_facts_cache) equals the verdict computed from the records
    (verdict.SESSION_VERDICTS_DEFINITION_SQL), row for row, every column."""
    from indexer.signals import verdict

    def read(sql):
        cur = conn.execute(sql)
        return [d[0] for d in cur.description], cur.fetchall()

    cols, kept = read("SELECT * FROM session_verdicts")
    def_cols, computed = read(verdict.SESSION_VERDICTS_DEFINITION_SQL)
    assert cols == def_cols
    assert sorted(kept, key=repr) == sorted(computed, key=repr), "session_verdicts"


class _DefinitionsCopy:
    """One index per test process where the definition views stay prepared:
    SQLite spends seconds planning a recursive definition (3.40), and a
    prepared statement stays valid while only rows change, so each check
    copies the rows of the tables the definitions read into it and reads
    the definitions there. None (read in the index itself) when its schema
    is not the index's (an index at an older migration)."""
    conn = None
    tables: dict = {}

    @classmethod
    def of(cls, src):
        if cls.conn is None:
            import atexit
            import shutil
            import tempfile
            folder = tempfile.mkdtemp(prefix="definitions-")
            cls.conn = open_db(Path(folder) / "index.db").conn
            # the copy goes with the test process (it left a 6 MB folder
            # in the temporary directory per process and run)
            atexit.register(shutil.rmtree, folder, True)
            atexit.register(cls.conn.close)
            virtual = [r[0] for r in cls.conn.execute(
                "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL%'")]
            names = [r[0] for r in cls.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' "
                "AND sql NOT LIKE 'CREATE VIRTUAL%'")]
            # every table but the full-text index's own (the definitions
            # read views too, which read further tables)
            cls.tables = {t: cls._columns(cls.conn, t) for t in names
                          if not any(t.startswith(v) for v in virtual)}
        if any(cls._columns(src, t) != cols for t, cols in cls.tables.items()):
            return None
        conn = cls.conn
        conn.execute("BEGIN")
        for t, cols in cls.tables.items():
            conn.execute(f"DELETE FROM {t}")
            conn.executemany(f"INSERT INTO {t} ({', '.join(cols)}) VALUES "
                             f"({', '.join('?' * len(cols))})",
                             src.execute(f"SELECT {', '.join(cols)} FROM {t}"))
        conn.execute("COMMIT")
        return conn

    @staticmethod
    def _columns(conn, table):
        return [r[1] for r in conn.execute(f"PRAGMA table_info('{table}')")]


def views_differ(conn, view, definition, definitions_conn=None):
    """(view EXCEPT definition, definition EXCEPT view) as lists of dicts.

    The same sets as those two SQL statements, but each view is read once:
    preparing a recursive definition costs seconds on SQLite 3.40 (planning,
    not running: a 2-line index takes as long as a fixture's), and the two
    EXCEPT statements prepared each definition twice. Python tuples compare as
    EXCEPT does here: NULL with NULL, 1 with 1.0, text never equal to a blob."""
    def read(name):
        cur = conn.execute(f"SELECT * FROM {name}")
        return [d[0] for d in cur.description], cur.fetchall()

    cols, ours = read(view)
    if definitions_conn is not None:
        cur = definitions_conn.execute(f"SELECT * FROM {definition}")
        def_cols, theirs = [d[0] for d in cur.description], cur.fetchall()
    else:
        def_cols, theirs = read(definition)
    assert len(cols) == len(def_cols), (view, cols, def_cols)  # as EXCEPT requires
    ours_set, theirs_set = set(ours), set(theirs)
    extra = [dict(zip(cols, r)) for r in dict.fromkeys(r for r in ours if r not in theirs_set)]
    missing = [dict(zip(def_cols, r))
               for r in dict.fromkeys(r for r in theirs if r not in ours_set)]
    return extra, missing


@pytest.fixture
def index(tmp_path):
    return Index(tmp_path)


def sdk_chain(path, kind="main"):
    """The Agent SDK's own leaf-and-walk on a file (its lines, and a last one
    without a newline when it is a whole record), before its parallel-result
    recovery: the uuids from root to leaf."""
    from claude_agent_sdk._internal import sessions as sdk

    entries = sdk._parse_transcript_entries(Path(path).read_bytes().decode("utf-8", "replace"))
    if kind != "main":
        return [e["uuid"] for e in sdk._build_subagent_chain(entries)]
    original = sdk._recover_orphaned_parallel_tool_results
    sdk._recover_orphaned_parallel_tool_results = lambda by_uuid, chain, seen: chain
    try:
        return [e["uuid"] for e in sdk._build_conversation_chain(entries)]
    finally:
        sdk._recover_orphaned_parallel_tool_results = original


class Transcript:
    """Builds records for one session with increasing timestamps."""

    def __init__(self, session_id="11111111-2222-3333-4444-555555555555"):
        self.session_id = session_id
        self.records = []
        self.tick = 0

    def add(self, uuid, parent, type_="user", *, ts=None, message=None, **fields):
        self.tick += 1
        r = {"parentUuid": parent, "isSidechain": False, "userType": "external",
             "cwd": "/tmp/demo", "sessionId": self.session_id, "version": "2.1.247",
             "type": type_, "uuid": uuid,
             "timestamp": ts or f"2026-09-01T00:{self.tick // 60:02d}:{self.tick % 60:02d}.000Z"}
        if message is None:
            if type_ == "user":
                message = {"role": "user", "content": f"prompt {uuid}"}
            elif type_ == "assistant":
                message = {"id": f"msg_{uuid}", "type": "message", "role": "assistant",
                           "model": "claude-x", "content": [{"type": "text", "text": f"reply {uuid}"}]}
        if message is not None:
            r["message"] = message
        r.update(fields)
        self.records.append(r)
        return r

    def write(self, directory: Path, name=None):
        return write_jsonl(Path(directory) / (name or f"{self.session_id}.jsonl"), self.records)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A config dir with projects/, no managed settings, and an index."""
    config = tmp_path / "claude"
    (config / "projects").mkdir(parents=True)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    monkeypatch.setenv("SESSION_INDEX_MANAGED_SETTINGS", str(tmp_path / "managed.json"))
    index = Index(tmp_path)
    index.projects = config / "projects"
    index.config = config
    return index
