"""Issue 30, item 5: the habits of Datasette and sqlite-utils users, each
through the real command: `serve DB` and -p, --project by a part of a folder
name or cwd, listings' columns, install hints that name real packages,
--db's default in --help, demo's temporary folder, "1 file"."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import Transcript, run_on_tty
from indexer.cli import demo_data
from indexer.cli.commands import cli
from indexer.ingest import extras
from indexer.signals.classes import LISTED

ROOT = Path(__file__).resolve().parent.parent
_SCRIPT = Path(sys.executable).with_name("session-index")
CMD = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "indexer"]
SID = "11111111-2222-3333-4444-555555555555"


def run(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_data.build_demo(tmp_path_factory.mktemp("demo"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, cwd, env=None) -> subprocess.Popen:
    return subprocess.Popen([*CMD, *map(str, args)], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, **(env or {})))


def health(port, proc, deadline=30.0) -> int:
    end = time.monotonic() + deadline
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/session-health",
                                        timeout=2) as r:
                return r.status
        except OSError:
            if proc.poll() is not None or time.monotonic() > end:
                proc.kill()
                raise AssertionError(proc.communicate()[1].decode()) from None
            time.sleep(0.1)


# --- serve DB -p PORT -------------------------------------------------------

@pytest.mark.xdist_group("timing")   # a real server on a port
def test_serve_takes_the_index_as_its_argument_and_p_for_the_port(demo, tmp_path):
    port = free_port()
    proc = start(["serve", demo, "-p", port], cwd=tmp_path)
    try:
        assert health(port, proc) == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert f"Serving {demo} at http://127.0.0.1:{port}/" in proc.stderr.read().decode()


def test_serve_arguments_that_cannot_be_meant(demo, tmp_path):
    two = run("serve", demo, tmp_path / "other.db")
    assert two.exit_code == 2 and "serve takes one index" in two.output
    folder = run("serve", tmp_path)
    assert folder.exit_code == 2 and "is a folder" in folder.output
    both = run("serve", demo, "--db", tmp_path / "other.db")
    assert both.exit_code == 2 and "two indexes named" in both.output
    missing = run("serve", tmp_path / "none.db")   # the argument is the index --db would be
    assert missing.exit_code == 3 and f"no index at {tmp_path / 'none.db'}" in missing.output
    same = run("serve", tmp_path / "none.db", "--db", tmp_path / "none.db")
    assert same.exit_code == 3 and "no index at" in same.output


def test_serve_watch_tells_the_index_from_the_folders_it_follows(tmp_path):
    from indexer.cli.serve import names_index

    (tmp_path / "projects").mkdir()
    (tmp_path / "sqlite-file").write_bytes(b"SQLite format 3\x00" + bytes(100))
    (tmp_path / "notes.jsonl").write_text("{}\n")
    assert names_index(str(tmp_path / "new.db")) and names_index(str(tmp_path / "x.sqlite3"))
    assert names_index(str(tmp_path / "sqlite-file"))
    assert not names_index(str(tmp_path / "projects"))
    assert not names_index(str(tmp_path / "notes.jsonl"))
    (tmp_path / "folder.db").mkdir()
    assert not names_index(str(tmp_path / "folder.db"))


def test_db_help_names_the_index_this_run_would_open(tmp_path):
    def help_text(command, env):   # unwrapped (click breaks long paths at - and /)
        return re.sub(r"\s+", "", run(command, "--help", env=env).output)

    env = {"SESSION_INDEX_DB": str(tmp_path / "mine.db")}
    for command in ("serve", "status", "ingest"):
        assert f"[default:{tmp_path / 'mine.db'};from$SESSION_INDEX_DB]" in help_text(
            command, env), command
    text = help_text("serve", {"SESSION_INDEX_DB": "", "XDG_DATA_HOME": str(tmp_path)})
    assert f"[default:{tmp_path}/session-index/sessions.db;in$XDG_DATA_HOME" in text
    text = help_text("serve", {"SESSION_INDEX_DB": "", "XDG_DATA_HOME": "",
                               "HOME": str(tmp_path)})
    assert "[default:~/.local/share/session-index/sessions.db;" in text


# --- demo's temporary folder -------------------------------------------------

@pytest.mark.xdist_group("timing")   # a real server on a port
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_demo_removes_its_temporary_folder_when_stopped(tmp_path, sig):
    port = free_port()
    proc = start(["demo", "-p", port], cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    path = Path(proc.stdout.readline().decode().strip())
    assert path.name == "demo.db" and path.parent.parent == tmp_path
    assert health(port, proc) == 200
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 0
    assert not path.parent.exists()
    assert "Traceback" not in proc.stderr.read().decode()


# --- --project ------------------------------------------------------------------

@pytest.fixture()
def two_projects(tmp_path):
    for sid, cwd in ((SID, "/home/me/src/shop-api"), ("22222222-2222-3333-4444-555555555555",
                                                      "/home/me/src/blog")):
        t = Transcript(sid)
        t.add("a", None, "user", cwd=cwd)
        t.add("b", "a", "assistant", cwd=cwd)
        t.write(tmp_path / "projects" / cwd.replace("/", "-"))
    db = tmp_path / "x.db"
    assert run("ingest", tmp_path / "projects", "--db", db, "--silent").exit_code == 0
    return db


@pytest.mark.parametrize("project", ["shop-api", "shop", "src/shop-api", "-home-me-src-shop-api",
                                     "/home/me/src/shop-api"])
def test_project_matches_a_folder_name_a_cwd_or_a_part_of_either(two_projects, project):
    result = run("sessions", "--db", two_projects, "--project", project, "--json")
    assert [r["session_id"] for r in json.loads(result.output)] == [SID]
    assert "note:" not in result.output


def test_project_that_matches_nothing_says_so(two_projects):
    result = CliRunner().invoke(
        cli, ["sessions", "--db", str(two_projects), "--project", "payroll", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert result.stderr == ("note: no session's project folder or cwd contains 'payroll' "
                             "(`session-index sessions` lists them)\n")
    every = json.loads(run("sessions", "--db", two_projects, "--project", "src", "--json").output)
    assert len(every) == 2


def test_project_dot_is_the_folder_it_runs_in(two_projects, tmp_path, monkeypatch):
    from indexer.signals.projects import project_value

    here = tmp_path / "home" / "me" / "src" / "blog"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    assert project_value(".") == str(here)
    assert project_value("shop") == "shop" and project_value(None) == ""


# --- listings' columns -------------------------------------------------------------

def header(output: str) -> list[str]:
    return output.splitlines()[0].split()


def test_a_table_shows_the_columns_an_operator_reads(demo):
    checked = []
    for name, cls in LISTED.items():
        if not cls.listing.columns:
            continue
        table = run(name, "--db", demo, "--table")
        if not table.output:
            continue   # nothing of that class in the demo at NOW
        assert header(table.output) == list(cls.listing.columns), name
        every = run(name, "--db", demo, "--json")
        assert len(json.loads(every.output)[0]) > len(cls.listing.columns), name
        wide = run(name, "--db", demo, "--table", "--all")
        assert header(wide.output) == list(json.loads(every.output)[0]), name
        assert max(map(len, table.output.splitlines())) < max(map(len, wide.output.splitlines()))
        checked.append(name)
    assert len(checked) >= 6, checked   # the demo has one of (nearly) every class


def test_columns_picks_columns_in_any_format(demo):
    out = run("failed", "--db", demo, "--columns", "error_class,session_id", "--json").output
    rows = json.loads(out)
    assert rows and all(list(r) == ["error_class", "session_id"] for r in rows)
    tsv = run("failed", "--db", demo, "--columns", "session_id").output.splitlines()
    assert tsv[0] == "session_id" and len(tsv) == len(rows) + 1
    bad = run("failed", "--db", demo, "--columns", "session_id,nope")
    assert bad.exit_code == 2 and "no column nope: the columns are id, file_id" in bad.output
    assert "Traceback" not in bad.output


def test_scripts_still_get_every_column_and_a_terminal_gets_a_table(demo):
    tsv = run("failed", "--db", demo).output   # not a terminal: tab-separated, every column
    assert len(header(tsv)) == len(json.loads(run("failed", "--db", demo, "--json").output)[0])
    shown = run_on_tty([*CMD, "sessions", "--db", demo], stream="stdout").splitlines()
    assert shown[0].split() == ["session_id", "title", "last_activity", "records", "verdict",
                                "cause"]
    assert set(shown[1].replace(" ", "")) == {"-"}
    assert all(len(line) <= 6 * 82 for line in shown)


# --- install hints --------------------------------------------------------------------

def test_install_hints_name_packages_that_exist():
    extras_of = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for extra, packages in extras.PACKAGES.items():
        declared = {re.split(r"[<>=!~]", p)[0] for p in extras_of[extra]}
        assert set(packages) == declared, extra
    sources = "\n".join(p.read_text() for p in (ROOT / "indexer").rglob("*.py"))
    assert "session-index[" not in sources and "session-index[" not in "".join(
        p.read_text() for p in (ROOT / "datasette-plugins").rglob("*.py"))
    assert extras.install_hint("fleet") == "pip install 'nats-py[nkeys]' prometheus-client"


def test_verify_without_a_binary_names_the_package_that_brings_one(tmp_path, monkeypatch):
    from indexer.repair import oracle

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(oracle.NoClaudeBinary, match=r"or pip install claude-agent-sdk \(it "
                                                    r"bundles one\)"):
        oracle.find_claude(None)


# --- counts ---------------------------------------------------------------------------

def test_one_file_is_one_file(tmp_path):
    t = Transcript(SID)
    t.add("a", None, "user")
    t.write(tmp_path / "projects" / "-tmp-demo")
    result = run("ingest", tmp_path / "projects", "--db", tmp_path / "x.db", "--silent")
    assert result.output.startswith("1 file (1 changed, 0 newly deleted, 0 rewritten, 0 not "
                                    "transcripts): 1 new record, 0 bad lines, ")


def test_titles_read_without_claude_codes_markup(tmp_path):
    t = Transcript(SID)
    t.add("a", None, "user", message={"role": "user", "content": [
        {"type": "text", "text": "<ide_selection>the editor's selection</ide_selection>"},
        {"type": "text", "text": "<command-message>fix</command-message> the login redirect"}]})
    t.add("b", "a", "assistant")
    t.write(tmp_path / "projects" / "-tmp-demo")
    db = tmp_path / "x.db"
    run("ingest", tmp_path / "projects", "--db", db, "--silent")
    [row] = json.loads(run("sessions", "--db", db, "--json").output)
    assert row["title"] == "the login redirect"   # (a command's own message is markup too)
    from indexer.index import db as dbmod, usage

    facts = usage.session_facts(dbmod.open_db(str(db)), [SID])
    assert facts[SID]["title"] == "the login redirect"


def test_a_table_of_sessions_names_the_agent_when_another_agents_are_there(tmp_path):
    codex = ROOT / "tests" / "fixtures" / "codex"
    if not codex.is_dir():
        pytest.skip("no Codex fixtures")
    db = tmp_path / "x.db"
    t = Transcript(SID)
    t.add("a", None, "user")
    t.add("b", "a", "assistant")
    t.write(tmp_path / "projects" / "-tmp-demo")
    run("ingest", tmp_path / "projects", "--db", db, "--silent")
    alone = run("sessions", "--db", db, "--table").output
    assert header(alone)[:2] == ["session_id", "title"]   # Claude Code's alone: no column
    run("ingest", codex, "--db", db, "--silent")
    mixed = run("sessions", "--db", db, "--table").output.splitlines()
    assert mixed[0].split()[:2] == ["session_id", "agent"]
    assert {line.split()[1] for line in mixed[2:]} >= {"claude-code", "codex"}


def test_the_readmes_tour_searches_the_demo(demo):
    """README's tour runs `session-index search "coupon test"` on the demo
    index, made as `ingest` makes one: search on."""
    readme = (ROOT / "README.md").read_text()
    assert 'session-index search "coupon test"' in readme
    result = run("search", "coupon test", "--db", demo, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)
