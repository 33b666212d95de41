"""An index the user may read but not write: one a service account ingests,
read by people as themselves. Every command that only reads answers from it
(mode=ro, and immutable when the folder may not be written and no writer has
it open); one that writes says, in one line and exit 3, that it may not.

Tests run as root, whom file modes do not stop: each command runs as a
subprocess under ``setpriv`` as nobody (uid 65534), so SQLite meets the
permissions a real reader does."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from indexer.index.connection import LAST_MIGRATION, MIGRATION_SET

FIXTURES = Path(__file__).parent / "fixtures"
SID = "11111111-2222-3333-4444-555555555555"
OTHER_SID = "33333333-2222-3333-4444-555555555555"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
READ_ONLY_FILE, READ_ONLY_FOLDER = 0o444, 0o555


def _nobody_runs_python() -> str | None:
    """Why the tests cannot run commands as nobody, or None."""
    if os.geteuid() != 0:
        return "not root: setpriv cannot run a command as another user"
    if shutil.which("setpriv") is None:
        return "no setpriv"
    done = subprocess.run([*NOBODY, sys.executable, "-c", "import indexer"],
                          capture_output=True, cwd="/")
    if done.returncode != 0:
        return f"nobody cannot run this Python and import indexer: {done.stderr[-200:]!r}"
    return None


pytestmark = pytest.mark.skipif(_nobody_runs_python() is not None,
                                reason=str(_nobody_runs_python()))


class Place:
    """A folder nobody may reach (pytest's tmp_path is root's alone): the
    config dir with the transcripts, and the index in ``index/``."""

    def __init__(self, root: Path):
        self.root = root
        self.config = root / "claude"
        self.projects = self.config / "projects"
        self.folder = root / "index"
        self.path = self.folder / "sessions.db"

    def env(self) -> dict:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root),
                "CLAUDE_CONFIG_DIR": str(self.config),
                "SESSION_INDEX_MANAGED_SETTINGS": str(self.root / "managed.json")}

    def run(self, *args, as_nobody: bool = True) -> subprocess.CompletedProcess:
        """``session-index ARGS --db INDEX``, as nobody unless told."""
        cmd = [sys.executable, "-m", "indexer", *args, "--db", str(self.path)]
        return subprocess.run([*NOBODY, *cmd] if as_nobody else cmd, capture_output=True,
                              text=True, env=self.env(), cwd="/", timeout=120)

    def transcript(self, session_id: str) -> Path:
        path = self.projects / "-tmp-demo" / f"{session_id}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((FIXTURES / "seed000_splice.jsonl").read_text().replace(SID, session_id))
        return path

    def lock(self) -> None:
        """The index 0444 in a 0555 folder: nobody may read, never write."""
        os.chmod(self.path, READ_ONLY_FILE)
        os.chmod(self.folder, READ_ONLY_FOLDER)


@pytest.fixture
def place():
    root = Path(tempfile.mkdtemp(prefix="session-index-ro-"))
    os.chmod(root, 0o755)
    here = Place(root)
    here.transcript(SID)
    here.folder.mkdir()
    done = here.run("ingest", "--silent", str(here.projects), as_nobody=False)
    assert done.returncode == 0, done.stderr
    yield here
    for folder, _, _ in os.walk(root):
        os.chmod(folder, 0o755)
    shutil.rmtree(root)


def assert_reads(place: Place, *sessions: str) -> None:
    """Every reading command answers as nobody, from the index as it is."""
    for args in (["status"], ["usage"], ["check", SID], ["show", SID],
                 ["search", "the"], ["quarantined"]):
        done = place.run(*args)
        assert done.returncode in (0, 6), (args, done.stderr)   # (6: check's spliced)
        assert "Error" not in done.stderr, (args, done.stderr)
    listed = place.run("sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(row["session_id"] for row in json.loads(listed.stdout)) == sorted(sessions)
    checked = place.run("check", SID, "--json")
    assert (checked.returncode, json.loads(checked.stdout)["verdict"]) == (6, "spliced")
    shown = place.run("show", SID, "--format", "json")
    assert shown.returncode == 0 and json.loads(shown.stdout), shown.stderr
    assert place.run("search", "the", "--json").stdout.strip() not in ("", "[]")
    assert mcp_check(place)["verdict"] == "spliced"


def mcp_check(place: Place) -> dict:
    """``check_session`` of SID, asked of ``session-index mcp`` run as nobody."""
    params = StdioServerParameters(
        command=NOBODY[0],
        args=[*NOBODY[1:], sys.executable, "-m", "indexer", "mcp", "--db", str(place.path),
              "--config-dir", str(place.config)],
        env=place.env(), cwd="/")

    async def main():
        with open(place.root / "mcp.log", "w") as log:
            async with stdio_client(params, errlog=log) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    result = await client.call_tool("check_session", {"session_id": SID})
        assert not result.is_error, result.content[0].text
        return json.loads(result.content[0].text)

    return anyio.run(main)


def assert_one_line_exit_3(done: subprocess.CompletedProcess, says: str) -> None:
    assert done.returncode == 3, (done.returncode, done.stderr)
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr, done.stderr


def side_files(place: Place) -> list[str]:
    return sorted(p.name for p in place.folder.iterdir() if p.name != place.path.name)


def test_every_reader_reads_an_index_with_no_wal_or_shm(place):
    """No writer has it open, so no -wal or -shm file, and nobody may make
    them in the folder: SQLite's mode=ro open fails there; it is read as
    immutable (the database file is the whole index)."""
    place.lock()
    assert side_files(place) == []
    assert_reads(place, SID)
    assert side_files(place) == []


def test_every_reader_reads_what_a_writer_holding_it_open_wrote(place):
    """A writer (an ingest --watch) has it open: its -wal and -shm files are
    there, and a reader sees what the writer committed to the WAL."""
    holder = sqlite3.connect(place.path, isolation_level=None)
    try:
        holder.execute("SELECT count(*) FROM records").fetchone()
        place.lock()
        place.transcript(OTHER_SID)
        done = place.run("ingest", "--silent", str(place.projects), as_nobody=False)
        assert done.returncode == 0, done.stderr
        assert os.path.getsize(f"{place.path}-wal") > 0   # (not checkpointed away)
        assert_reads(place, SID, OTHER_SID)
    finally:
        holder.close()


def test_a_transcript_changed_since_the_ingest_is_said_by_every_reader(place):
    """On an index nobody may write, check, show and repair's dry run
    answer from the index as it stands, and each says which transcript
    changed on disk since the index read it (check's warning)."""
    place.lock()
    path = place.projects / "-tmp-demo" / f"{SID}.jsonl"
    with open(path, "a") as f:
        f.write(path.read_text().splitlines()[-1] + "\n")
    said = f"warning: {path} changed on disk since the index last read it"
    for args in (["check", SID], ["show", SID], ["repair", SID]):
        done = place.run(*args)
        assert "Error" not in done.stderr and said in done.stderr, (args, done.stderr)
    assert side_files(place) == []


def test_a_writing_command_says_it_may_not_write(place):
    place.lock()
    refs = place.root / "refs.jsonl"
    refs.write_text(json.dumps({"session_id": SID}) + "\n")
    for args in (["ingest", "--silent", str(place.projects)], ["refs", "import", str(refs)],
                 ["search", "--enable"], ["repair", SID, "--write"]):
        assert_one_line_exit_3(place.run(*args), "cannot be written: permission denied")
    assert side_files(place) == []


def test_an_index_that_needs_upgrading_is_one_line_exit_3(place):
    """A reader cannot upgrade it: it says who can, rather than that the
    file is unusable or (mcp) at another schema for want of a -shm file."""
    conn = sqlite3.connect(place.path)
    conn.execute("DELETE FROM _sqlite_migrations WHERE migration_set = ? AND name = ?",
                 [MIGRATION_SET, LAST_MIGRATION])
    conn.commit()
    conn.close()
    place.lock()
    for args in (["status"], ["sessions"], ["check", SID], ["mcp"]):
        assert_one_line_exit_3(place.run(*args), "needs upgrading")


def test_a_wal_holding_changes_without_its_shm_is_one_line_exit_3(place):
    """A writer that died left a -wal file with changes; its -shm is gone:
    SQLite cannot read the changes without one, and immutable would miss
    them, so a reader says so rather than answer without them."""
    crash = ("import os, sqlite3; c = sqlite3.connect(%r, isolation_level=None); "
             "c.execute('PRAGMA wal_autocheckpoint = 0'); "
             "c.execute(\"INSERT INTO index_meta VALUES ('crashed', '1')\"); os._exit(0)")
    subprocess.run([sys.executable, "-c", crash % str(place.path)], check=True)
    os.remove(f"{place.path}-shm")
    assert os.path.getsize(f"{place.path}-wal") > 0
    place.lock()
    assert_one_line_exit_3(place.run("status"), "its -wal file holds changes")


@pytest.mark.parametrize("held_open", [False, True])
def test_serve_serves_it(place, held_open):
    """serve, as nobody: immutable (saying so) with no -wal or -shm and a
    folder it may not write; as Datasette's mode=ro while a writer has it open."""
    holder = sqlite3.connect(place.path, isolation_level=None) if held_open else None
    if holder is not None:
        holder.execute("SELECT count(*) FROM records").fetchone()
    place.lock()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [*NOBODY, sys.executable, "-m", "indexer", "serve", "--db", str(place.path),
           "--port", str(port)]
    log = place.root / "serve.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, env=place.env(),
                                cwd="/")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("GET", "/sessions/sessions.json?_shape=array")
                response = conn.getresponse()
                status, body = response.status, response.read().decode()
                conn.close()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if holder is not None:
            holder.close()
    assert status == 200, body
    assert [row["session_id"] for row in json.loads(body)] == [SID]
    assert ("is served as it is now" in log.read_text()) is not held_open
