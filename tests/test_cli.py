"""The session-index command: help, exit codes, JSON, defaults, progress."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from conftest import Transcript, run_on_tty
from indexer.cli.commands import cli

ROOT = Path(__file__).resolve().parent.parent
# The docs, written by hand (the README and docs/; the CLI reference page's
# command sections are generated, its hand-written part counts).
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SID = "11111111-2222-3333-4444-555555555555"


def make_projects(tmp_path):
    t = Transcript(SID)
    t.add("a", None, "user")
    t.add("b", "a", "assistant")
    t.write(tmp_path / "projects" / "-tmp-demo")
    return tmp_path / "projects"


def run(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_every_command_has_help_with_an_example_and_is_in_the_readme():
    readme = "\n".join(page.read_text() for page in DOCS)
    assert cli.commands

    def leaves(group, path):
        for name in group.list_commands(None):
            command = group.get_command(None, name)
            if isinstance(command, click.Group):
                assert run(*path, name, "--help").exit_code == 0
                yield from leaves(command, [*path, name])
            else:
                yield [*path, name]

    for path in leaves(cli, []):
        result = run(*path, "--help")
        assert result.exit_code == 0
        assert "Example:" in result.output, path
        assert f"session-index {' '.join(path)}" in readme, path
        # Each example line printed as written, one per line (not rewrapped).
        command = cli
        for name in path:
            command = command.get_command(None, name)
        examples = [line.strip() for line in command.help.split("Example:")[1].splitlines()
                    if line.strip().startswith("session-index ")]
        printed = [line.strip() for line in result.output.splitlines()]
        assert examples and all(e in printed for e in examples), (path, examples)


def test_ingest_json_summary_then_noop(tmp_path):
    projects = make_projects(tmp_path)
    db = tmp_path / "x.db"
    first = run("ingest", str(projects), "--db", str(db), "--json")
    assert first.exit_code == 0
    s = json.loads(first.output)
    assert {k: s[k] for k in ("files", "new_lines", "new_records", "bad_lines")} == {
        "files": 1, "new_lines": 2, "new_records": 2, "bad_lines": 0}
    assert isinstance(s["seconds"], float)
    again = json.loads(run("ingest", str(projects), "--db", str(db), "--json").output)
    assert (again["new_records"], again["bytes_read"]) == (0, 0)


def test_ingest_defaults_to_the_claude_config_dir_and_db_env(tmp_path):
    make_projects(tmp_path)
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path), "SESSION_INDEX_DB": str(tmp_path / "env.db")}
    result = run("ingest", "--silent", env=env)
    assert result.exit_code == 0, result.output
    assert "2 new records" in result.output
    status = json.loads(run("status", "--json", env=env).output)
    assert (status["records"], status["sessions"], status["live_files"]) == (2, 1, 1)


def test_status_counts_orphans_by_cause(tmp_path):
    projects = make_projects(tmp_path)
    t = Transcript("22222222-2222-3333-4444-555555555555")
    t.add("x", None, "user")
    t.add("y", "x", "assistant")
    t.add("z", "x", "assistant")  # an abandoned branch
    t.add("w", "z", "user")
    t.write(projects / "-tmp-demo")
    db = str(tmp_path / "x.db")
    run("ingest", str(projects), "--db", db, "--silent")
    s = json.loads(run("status", "--db", db, "--json").output)
    assert s["orphans_by_cause"] == {"abandoned_branch": 1}
    text = run("status", "--db", db).output
    assert "abandoned_branch" in text and "records:   6" in text


def test_status_says_how_many_files_are_not_derived_yet(tmp_path):
    """A central behind its hosts derives less often (fleet_central.
    DERIVE_BEHIND_S): status counts the files whose stored lines the caches
    do not show yet, and says nothing of it when there are none."""
    import sqlite3

    projects = make_projects(tmp_path)
    db = str(tmp_path / "x.db")
    run("ingest", str(projects), "--db", db, "--silent")
    assert json.loads(run("status", "--db", db, "--json").output)["files_to_derive"] == 0
    assert "not derived yet" not in run("status", "--db", db).output
    with sqlite3.connect(db) as conn:   # (as a central leaves a file it stored, underived)
        conn.execute("UPDATE files SET needs_derive = 1")
    assert json.loads(run("status", "--db", db, "--json").output)["files_to_derive"] == 1
    assert "files not derived yet: 1 " in run("status", "--db", db).output


def test_the_health_page_says_how_many_files_a_central_has_not_derived_yet(tmp_path):
    """The health page's fleet panel says, as status does, how many files
    have stored lines the caches do not show yet (a central behind its
    hosts derives less often), and says nothing of it when there are none."""
    import asyncio
    import sqlite3

    from indexer.cli import web

    projects = make_projects(tmp_path)
    db = str(tmp_path / "x.db")
    run("ingest", str(projects), "--db", db, "--silent")
    with sqlite3.connect(db) as conn:   # (a host that ships here)
        conn.execute("INSERT INTO fleet_hosts (host, last_heartbeat_at) VALUES ('h1', NULL)")

    def page():
        return asyncio.run(web.make_datasette(db).client.get("/-/session-health")).text

    shown = page()
    assert "<h2>Fleet</h2>" in shown and "si-fleet-to-derive" not in shown
    assert shown.index("<h2>Fleet</h2>") < shown.index("<h2>Recent sessions</h2>")
    with sqlite3.connect(db) as conn:   # (as a central leaves a file it stored, underived)
        conn.execute("UPDATE files SET needs_derive = 1")
    assert 'class="si-fleet-to-derive">Files not derived yet: 1</strong>' in page()


def test_missing_source_and_missing_index_are_clear_errors(tmp_path):
    result = CliRunner().invoke(cli, ["ingest", str(tmp_path / "nope"), "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 3
    assert "no such file or folder" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    result = CliRunner().invoke(cli, ["status", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 3
    assert "run 'session-index ingest' first" in result.output
    assert not (tmp_path / "none.db").exists()


def test_an_empty_source_is_no_folder_not_the_current_one(tmp_path):
    """`ingest ''` read the current folder (os.path.abspath('')); it names
    nothing, in the fast path and in click alike, and writes no index."""
    t = Transcript("33333333-3333-4333-8333-333333333333")
    t.add("a", None, "user")
    t.write(tmp_path / "-tmp-x")
    said = "Error: '': an empty path names no file or folder"
    for args in (["ingest", ""], ["ingest", "", "--silent"], ["ingest", "", "--json"]):
        fast = subprocess.run([sys.executable, "-m", "indexer", *args, "--db", "x.db"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert (fast.returncode, fast.stderr.strip()) == (3, said)
        slow = CliRunner().invoke(cli, [*args, "--db", str(tmp_path / "x.db")])
        assert (slow.exit_code, slow.stderr.strip()) == (3, said)
        assert not (tmp_path / "x.db").exists()


def test_no_default_projects_folder_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(cli, ["ingest", "--db", str(tmp_path / "x.db")],
                                env={"CLAUDE_CONFIG_DIR": str(tmp_path / "empty")})
    assert result.exit_code == 3
    assert "does not exist" in result.output


def test_a_file_that_is_not_sqlite_is_a_clear_error(tmp_path):
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"this is not a database at all" * 100)
    result = CliRunner().invoke(cli, ["ingest", str(make_projects(tmp_path)), "--db", str(bogus)])
    assert result.exit_code == 3
    assert "is not a SQLite database, so not a session index" in result.output
    assert "Traceback" not in result.output


def test_progress_bar_on_a_terminal_and_not_when_silent(tmp_path):
    projects = make_projects(tmp_path)

    def stderr_on_tty(*extra):
        return run_on_tty([sys.executable, "-c", "from indexer.cli.commands import cli; cli()", "ingest",
                           projects, "--db", tmp_path / f"tty{len(extra)}.db", *extra])

    assert "Indexing" in stderr_on_tty()
    assert "Indexing" not in stderr_on_tty("--silent")


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and "version" in result.output


# Start-up (db.open_index): a command opens a current index with sqlite3 alone.
HEAVY_MODULES = ("sqlite_utils", "msgspec", "datasette", "markupsafe", "yaml")
LOADED_BY_A_COMMAND = """
import json, sys
from indexer.cli.commands import cli
try:
    cli(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"exit": code, "loaded": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY_MODULES,)


def loaded_by(*args, env):
    out = subprocess.run([sys.executable, "-c", LOADED_BY_A_COMMAND, *args], env=env,
                         capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_fast_open_names_the_last_migration():
    import sqlite_utils

    from indexer.index import connection
    from indexer.index.migrations import migrations

    names = [m.name for m in migrations.pending(sqlite_utils.Database(memory=True))]
    assert (connection.MIGRATION_SET, connection.LAST_MIGRATION) == (migrations.name, names[-1])


def test_an_index_is_known_by_its_header_without_a_read_of_its_schema(tmp_path, monkeypatch):
    """db.probe reads an index's application_id (migration m026) from its
    first 100 bytes; a SQLite file without it is probed with SQL as before."""
    import sqlite3

    from indexer.index import connection, db as dbmod

    index = dbmod.open_index(tmp_path / "index.db", create=True)
    index.conn.close()
    other = sqlite3.connect(tmp_path / "other.db")
    other.execute("CREATE TABLE t (x)")
    other.commit()
    other.close()
    probes = []
    real_connect = sqlite3.connect
    monkeypatch.setattr(dbmod.sqlite3, "connect",
                        lambda *a, **k: probes.append(a[0]) or real_connect(*a, **k))
    assert dbmod.probe(str(tmp_path / "index.db")) == dbmod.INDEX
    assert probes == []
    try:
        dbmod.probe(str(tmp_path / "other.db"))
    except connection.IndexError_ as exc:
        assert "another application's SQLite database" in str(exc)
    else:
        raise AssertionError("another application's database passed for an index")
    assert len(probes) == 1


def test_check_of_a_current_index_loads_neither_sqlite_utils_nor_the_parser(tmp_path):
    projects = make_projects(tmp_path)
    config = tmp_path / "claude"
    config.mkdir()
    env = dict(os.environ, CLAUDE_CONFIG_DIR=str(config),
               SESSION_INDEX_MANAGED_SETTINGS=str(tmp_path / "managed.json"))
    db = str(tmp_path / "x.db")
    assert run("ingest", str(projects), "--db", db, "--silent").exit_code == 0
    assert loaded_by("check", SID, "--db", db, env=env) == {"exit": 0, "loaded": []}
    # A transcript that changed on disk is ingested first: the parser is loaded then.
    with open(projects / "-tmp-demo" / f"{SID}.jsonl", "a") as f:
        f.write(json.dumps({"type": "custom-title", "customTitle": "x", "sessionId": SID}) + "\n")
    assert loaded_by("check", SID, "--db", db, env=env) == {"exit": 0, "loaded": ["msgspec"]}
    assert loaded_by("check", SID, "--db", db, env=env) == {"exit": 0, "loaded": []}


def test_check_upgrades_an_index_made_by_an_older_version(tmp_path, monkeypatch):
    import sqlite_utils

    from indexer.index import connection, db as dbmod
    from indexer.index.migrations import migrations

    config = tmp_path / "claude"
    projects = make_projects(config)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    monkeypatch.setenv("SESSION_INDEX_MANAGED_SETTINGS", str(tmp_path / "managed.json"))
    old = tmp_path / "old.db"
    db = sqlite_utils.Database(old)
    migrations.apply(db, stop_before=connection.LAST_MIGRATION)  # the schema one version back
    db.close()
    result = run("check", SID, "--db", str(old), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["path"] == str(projects / "-tmp-demo" / f"{SID}.jsonl")
    conn = connection.connect(old)
    assert dbmod.is_current(conn)
    assert conn.execute("SELECT count(*) FROM records").fetchone() == (2,)
    # A view whose stored text is not views.py's is recreated by the next open.
    conn.execute("DROP VIEW poisoned_sessions")
    conn.execute("CREATE VIEW poisoned_sessions AS SELECT 1 AS session_id")
    assert not dbmod.is_current(conn)
    conn.close()
    assert run("check", SID, "--db", str(old)).exit_code == 0
    conn = connection.connect(old)
    assert dbmod.is_current(conn)
    conn.close()


def test_an_unknown_session_id_is_exit_9_everywhere(tmp_path):
    db = str(tmp_path / "x.db")
    assert run("ingest", str(make_projects(tmp_path)), "--db", db, "--silent").exit_code == 0
    other = "99999999-2222-3333-4444-555555555555"
    for args in (["show", other], ["show", other, "--json"], ["export", other, "--out", "-"],
                 ["export", other, "--out", str(tmp_path / "o")], ["repair", other],
                 ["restore", other, "--config-dir", str(tmp_path / "c")], ["verify", other]):
        result = CliRunner().invoke(cli, [*args, "--db", db])
        assert result.exit_code == 9, (args, result.output)
        assert f"session {other} is not in the index" in result.output
    assert not (tmp_path / "o").exists() and not (tmp_path / "c").exists()
    # verify's help said 3 for "no such session", export's and restore's 3 for
    # a session not in the index: each says 9, as the code does.
    for command, says in (("verify", "9 the session is not in the index"),
                          ("export", "Exit 9 when the session is not in the index"),
                          ("restore", "a session not in it is exit 9")):
        text = " ".join(CliRunner().invoke(cli, [command, "--help"]).output.split())
        assert says in text and "no such session" not in text, command
    # A known one still works, and show --json is show --format json.
    result = CliRunner().invoke(cli, ["show", SID, "--json", "--db", db])
    assert result.exit_code == 0 and json.loads(result.output)[0]["uuid"] == "a"


@pytest.mark.parametrize("args", [
    ["demo", "--no-serve", "--dir", ""], ["check", SID, "--cwd", ""],
    ["check", SID, "--config-dir", ""], ["ship", "--once", "--to", "nats://127.0.0.1:1",
                                         "--ledger", ""]])
def test_an_empty_folder_or_file_option_is_a_usage_error(tmp_path, monkeypatch, args):
    # '' named the current directory (demo wrote its index there) or fell back
    # to the option's default.
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "an empty path names no file or folder" in result.output
    assert list(tmp_path.iterdir()) == []
