"""The console script (indexer/cli/entry.py): a plain ``check`` is answered
without click, with the same output and exit code as the click command;
anything else goes to click."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import Transcript
from indexer.cli import entry

SID = "11111111-2222-3333-4444-555555555555"
POISONED = "22222222-2222-3333-4444-555555555555"
SYNTHETIC = {"id": "5f0c1a52-3a49-4a4e-9f0e-2f1c6e3b7d11", "type": "message", "role": "assistant",
             "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 529"}]}
# The same command through the console script's entry and through click alone.
ENTRY = "from indexer.cli.entry import main; main()"
CLICK = "from indexer.cli.commands import cli; cli()"
# Which of some modules a process imported beyond the interpreter's own start-up.
LOADED_OF = """
import json, os, sys
before = set(sys.modules)
from indexer.cli.entry import main
def leave(code):   # (the fast path ends the process with os._exit: report first)
    raise SystemExit(code)
os._exit = leave
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"exit": code, "loaded": sorted(m for m in %r
                                               if m in sys.modules and m not in before)}))
"""
# ... for a check process.
LOADED = LOADED_OF % (("click", "dataclasses", "pathlib", "sqlite_utils", "msgspec", "typing"),)


@pytest.fixture
def world(tmp_path):
    config = tmp_path / "claude"
    projects = config / "projects" / "-tmp-demo"
    ok = Transcript(SID)
    ok.add("a", None, "user")
    ok.add("b", "a", "assistant")
    ok.write(projects)
    bad = Transcript(POISONED)
    bad.add("a", None, "user")
    bad.add("b", "a", "assistant")
    bad.add("c", "b", "user")
    bad.add("s", "c", "assistant", requestId="req_s", message=dict(   # named: poisoned
        SYNTHETIC, content=[{"type": "text", "text": "No response requested."}]))
    path = bad.write(projects)
    old = 1_700_000_000  # long expired under the default 30 days: a warning on stderr
    os.utime(path, (old, old))
    (config / "settings.json").write_text('{"cleanupPeriodDays": "soon"}')  # another warning
    env = dict(os.environ, CLAUDE_CONFIG_DIR=str(config),
               SESSION_INDEX_MANAGED_SETTINGS=str(tmp_path / "managed.json"))
    db = str(tmp_path / "x.db")
    subprocess.run([sys.executable, "-c", CLICK, "ingest", str(config / "projects"), "--db", db,
                    "--silent"], env=env, check=True, capture_output=True)
    return {"env": env, "db": db, "tmp": tmp_path}


def both(world, *args):
    out = []
    for code in (ENTRY, CLICK):
        p = subprocess.run([sys.executable, "-c", code, *args], env=world["env"],
                           capture_output=True, text=True, timeout=60)
        out.append((p.returncode, p.stdout, p.stderr))
    return out


def without_timing(stdout):
    """checked_in_ms differs run to run."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return stdout
    data.pop("checked_in_ms")
    return data


@pytest.mark.parametrize("args,exit_code", [
    (["check", SID], 0),
    (["check", SID, "--json"], 0),
    (["check", POISONED], 5),
    (["check", POISONED, "--json", "--now", "2030-01-01"], 5),
    (["check", "33333333-0000-0000-0000-000000000000", "--json"], 4),
    (["check", SID, "--cwd=/tmp/demo", "--json"], 0),
    (["check", SID, "--cwd", "/tmp"], 4),
    (["check", SID, "--now", "not a time"], 2),          # click words the usage error
    (["check", "--json"], 2),                             # no session id
    (["check", SID, SID], 2),                             # two
    (["check", SID, "--json", "--json"], 0),              # a repeated option: click's rules
    (["check", SID, "--frobnicate"], 2),                  # an option it does not know
    (["check", "--help"], 0),
])
def test_the_fast_check_answers_as_the_click_command_does(world, args, exit_code):
    fast, slow = both(world, *args, "--db", world["db"])
    assert fast[0] == slow[0] == exit_code, (fast, slow)
    assert without_timing(fast[1]) == without_timing(slow[1])
    assert fast[2] == slow[2]
    if exit_code == 5 and "--json" not in args:
        assert "warning: expired" in fast[2]  # warnings on stderr, as click prints them


def test_errors_are_the_click_commands(world):
    folder = world["tmp"]
    for args in (["--db", str(folder)],                      # a directory: exit 3
                 ["--db", str(folder / "no" / "such.db")],   # cannot be opened: exit 3
                 ["--db", ""],
                 ["--db", world["db"], "--config-dir", world["db"]]):  # a file as a dir
        fast, slow = both(world, "check", SID, *args)
        assert fast == slow and fast[0] in (2, 3) and "Error:" in fast[2], (args, fast)


def test_a_folder_as_db_is_an_unusable_index_everywhere(world):
    # click's path check (dir_okay=False) made it a usage error: exit 2 and
    # click's usage text, and statusline (which always exits 0) exited 2.
    folder = world["tmp"] / "d.db"
    folder.mkdir()
    for args in (["check", SID], ["ingest", str(world["tmp"] / "claude" / "projects")],
                 ["status"], ["sessions"], ["export", SID, "--out", "-"]):
        fast, slow = both(world, *args, "--db", str(folder))
        assert fast == slow, (args, fast, slow)
        assert fast[0] == 3 and fast[2] == f"Error: {folder} is a directory, not an index "\
            "file\n", (args, fast)
    for env in ({}, {"SESSION_INDEX_DB": str(folder)}):
        p = subprocess.run([sys.executable, "-c", ENTRY, "statusline",
                            *([] if env else ["--db", str(folder)])],
                           input='{"session_id": "x"}', env=dict(world["env"], **env),
                           capture_output=True, text=True, timeout=60)
        assert (p.returncode, p.stdout, p.stderr) == (
            0, f"session-index: {folder} is a directory, not an index file\n", ""), env


def test_a_plain_check_loads_no_click_dataclasses_or_pathlib(world):
    p = subprocess.run([sys.executable, "-c", LOADED, "check", SID, "--db", world["db"]],
                       env=world["env"], capture_output=True, text=True, timeout=60)
    assert json.loads(p.stdout.splitlines()[-1]) == {"exit": 0, "loaded": []}, p.stderr
    # Anything else is click's.
    p = subprocess.run([sys.executable, "-c", LOADED, "status", "--db", world["db"]],
                       env=world["env"], capture_output=True, text=True, timeout=60)
    assert "click" in json.loads(p.stdout.splitlines()[-1])["loaded"]


def test_the_command_list_loads_no_datasette(world):
    """`session-index --help` lists serve and demo with their help, without
    loading Datasette (0.5 s of start-up) or the web plugin."""
    script = LOADED_OF % (("click", "datasette", "session_index_web"),)
    p = subprocess.run([sys.executable, "-c", script, "--help"], env=world["env"],
                       capture_output=True, text=True, timeout=60)
    assert json.loads(p.stdout.splitlines()[-1])["loaded"] == ["click"], p.stderr
    assert "serve " in p.stdout and "Browse the index in Datasette" in p.stdout


def test_parse_check_leaves_anything_unusual_to_click():
    assert entry.parse_check([SID, "--db=x.db", "--json"]) == {
        "session_id": SID, "db_path": "x.db", "as_json": True}
    assert entry.parse_check([SID, "--now", "2030-01-01", "--cwd", "/"]) == {
        "session_id": SID, "now": "2030-01-01", "cwd": "/"}
    for args in ([], [SID, "-h"], [SID, "--db"], [SID, "--json=1"], ["--", SID],
                 [SID, "--db", "a", "--db", "b"], [SID, "--no-such"]):
        assert entry.parse_check(args) is None, args


def test_python_dash_m_indexer_uses_the_entry(world):
    p = subprocess.run([sys.executable, "-m", "indexer", "check", POISONED, "--db", world["db"]],
                       env=world["env"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 5 and p.stdout.startswith("poisoned: ")


def without_seconds(text):
    import re

    return re.sub(r'("seconds": |in )[0-9.]+s?', r"\1N", text)


@pytest.mark.parametrize("args", [
    [],                                   # the config dir's projects/
    ["--json"],
    ["{projects}", "--silent"],
    ["{projects}", "{projects}/-tmp-demo"],
    ["{tmp}/no-such-folder"],             # exit 3, click's words
    ["{projects}", "--watch", "--json"],  # a usage error
])
def test_the_fast_ingest_runs_as_the_click_command_does(world, args):
    projects = str(world["tmp"] / "claude" / "projects")
    args = [a.format(projects=projects, tmp=world["tmp"]) for a in args]
    (world["tmp"] / "claude" / "settings.json").write_text('{"cleanupPeriodDays": 0}')  # loud
    fast, slow = both(world, "ingest", *args, "--db", world["db"])
    assert fast[0] == slow[0], (fast, slow)
    assert without_seconds(fast[1]) == without_seconds(slow[1])
    assert fast[2] == slow[2]
    if fast[0] == 0:
        assert "WARNING: cleanupPeriodDays is 0" in fast[2]


def test_a_no_op_ingest_loads_no_click(world):
    p = subprocess.run([sys.executable, "-c", LOADED, "ingest", "--db", world["db"]],
                       env=world["env"], capture_output=True, text=True, timeout=60)
    loaded = json.loads(p.stdout.splitlines()[-1])
    assert loaded["exit"] == 0 and "click" not in loaded["loaded"], p.stderr
    # With no config dir to default to, click says so (exit 3).
    env = dict(world["env"], CLAUDE_CONFIG_DIR=str(world["tmp"] / "none"))
    p = subprocess.run([sys.executable, "-c", ENTRY, "ingest", "--db", world["db"]], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "does not exist: name the transcript folders" in p.stderr


def test_the_default_index_is_in_the_users_data_dir(world):
    data = world["tmp"] / "xdg-data"
    env = dict(world["env"], XDG_DATA_HOME=str(data))
    env.pop("SESSION_INDEX_DB", None)
    db = data / "session-index" / "sessions.db"
    for code in (ENTRY, CLICK):
        p = subprocess.run([sys.executable, "-c", code, "status"], env=env, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 3 and "no index at" in p.stderr
        assert not data.exists()   # only ingest makes it
    p = subprocess.run([sys.executable, "-c", ENTRY, "ingest"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.rstrip().endswith(f"; index {db}"), p.stdout
    p = subprocess.run([sys.executable, "-c", ENTRY, "check", SID], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    # $SESSION_INDEX_DB, then --db, win.
    other = world["tmp"] / "other.db"
    p = subprocess.run([sys.executable, "-c", ENTRY, "ingest", "--json"],
                       env=dict(env, SESSION_INDEX_DB=str(other)), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)["db"] == str(other)


def test_config_dirs_a_list_or_the_xdg_and_home_ones(world):
    second = world["tmp"] / "second"
    t = Transcript("44444444-2222-3333-4444-555555555555")
    t.add("a", None, "user")
    t.add("b", "a", "assistant")
    t.write(second / "projects" / "-tmp-other")
    env = dict(world["env"], CLAUDE_CONFIG_DIR=f"{world['env']['CLAUDE_CONFIG_DIR']}, {second}")
    db = str(world["tmp"] / "list.db")
    p = subprocess.run([sys.executable, "-c", ENTRY, "ingest", "--db", db, "--json"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)["new_records"] == 2 + 4 + 2  # both dirs
    p = subprocess.run([sys.executable, "-c", ENTRY, "check", "44444444-2222-3333-4444-555555555555",
                        "--db", db], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout
    # No $CLAUDE_CONFIG_DIR: ~/.config/claude and ~/.claude.
    home = world["tmp"] / "home"
    (home / ".config" / "claude").mkdir(parents=True)
    (second / "projects").rename(home / ".config" / "claude" / "projects")
    env = dict(world["env"], HOME=str(home))
    env.pop("CLAUDE_CONFIG_DIR")
    env.pop("XDG_CONFIG_HOME", None)
    p = subprocess.run([sys.executable, "-c", ENTRY, "ingest", "--db", str(home / "x.db"),
                        "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)["new_records"] == 2
