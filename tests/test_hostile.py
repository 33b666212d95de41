"""Hostile files, foreign databases, faults: every command gives a clear
one-line error, writes nowhere it was not asked to, and never a traceback
(issue 11). Each test runs the real console entry (``python -m indexer``) on
real files, FIFOs and symlinks."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Transcript, free_port

SID = "11111111-2222-3333-4444-555555555555"


def cli(*args, env=None, timeout=60, cwd=None):
    """The session-index command as a user runs it: (exit code, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-m", "indexer", *map(str, args)], env=env,
                       capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, p.stdout, p.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> dict:
    """Every file under ``folder`` with its bytes' digest (symlinks as links)."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            p = Path(root) / name
            out[str(p.relative_to(folder))] = (
                "link:" + os.readlink(p) if p.is_symlink() else
                digest(p) if p.is_file() else "special")
    return out


@pytest.fixture
def home(tmp_path):
    config = tmp_path / "claude"
    t = Transcript(SID)
    t.add("a", None, "user")
    t.add("b", "a", "assistant")
    t.write(config / "projects" / "-tmp-demo")
    env = dict(os.environ, CLAUDE_CONFIG_DIR=str(config),
               SESSION_INDEX_MANAGED_SETTINGS=str(tmp_path / "managed.json"))
    env.pop("SESSION_INDEX_DEBUG", None)
    return {"tmp": tmp_path, "config": config, "projects": config / "projects", "env": env}


# --- files that are not regular files --------------------------------------

def test_fifos_and_device_symlinks_in_a_folder_are_skipped_with_a_note(home):
    folder = home["projects"] / "-tmp-demo"
    os.mkfifo(folder / "x.jsonl")
    os.mkfifo(folder / "22222222-2222-3333-4444-555555555555.jsonl")
    os.symlink("/dev/zero", folder / "33333333-2222-3333-4444-555555555555.jsonl")
    os.symlink("/dev/urandom", folder / "44444444-2222-3333-4444-555555555555.jsonl")
    db = home["tmp"] / "x.db"
    code, out, err = cli("ingest", home["projects"], "--db", db, "--json", env=home["env"],
                         timeout=30)   # a FIFO read would hang past the timeout
    summary = json.loads(out)
    assert code == 0 and summary["not_regular_files"] == 4 and summary["new_records"] == 2
    assert err.count("not a regular file: skipped") == 4
    assert "x.jsonl: a FIFO" in err and "a character device" in err
    # Nothing of /dev/zero or /dev/urandom went in: the index is its empty size
    # (its tables' first pages, about 1.3 MB with 16 KB pages) and two records.
    assert os.path.getsize(db) < 4 << 20
    # The good file was stored, and stays so at the next run.
    code, out, _ = cli("ingest", home["projects"], "--db", db, env=home["env"], timeout=30)
    assert code == 0 and "4 not regular files skipped" in out
    code, data, _ = cli("export", SID, "--out", "-", "--db", db, env=home["env"])
    assert code == 0 and data == (folder / f"{SID}.jsonl").read_text()


def test_file_and_folder_names_that_are_not_utf8_are_skipped_with_a_note(home):
    """The index stores paths as TEXT: such a name used to end the whole
    ingest ("internal error, UnicodeEncodeError"), indexing nothing."""
    projects = os.fsencode(home["projects"])
    odd_folder = projects + b"/-tmp-\xff\xfeodd"
    os.mkdir(odd_folder)
    (home["projects"] / "-tmp-demo" / f"{SID}.jsonl").replace(
        os.fsdecode(odd_folder + f"/{SID}.jsonl".encode()))
    Path(os.fsdecode(projects + b"/-tmp-demo/\xe9.jsonl")).write_bytes(b"{}\n")
    good = Transcript("22222222-2222-3333-4444-555555555555")
    good.add("c", None, "user")
    good.write(home["projects"] / "-tmp-demo")
    db = home["tmp"] / "x.db"
    code, out, err = cli("ingest", home["projects"], "--db", db, "--json", env=home["env"])
    assert code == 0 and json.loads(out)["new_records"] == 1
    assert err.splitlines() == [
        f"warning: {home['projects']}/-tmp-demo/\\xe9.jsonl: a file name that is not UTF-8: "
        "skipped",
        f"warning: {home['projects']}/-tmp-\\xff\\xfeodd/{SID}.jsonl: a file name that is not "
        "UTF-8: skipped"]


# An OSC that retitles the terminal, a screen clear, a carriage return that
# overwrites, a C1 CSI, a right-to-left override, DEL and a NUL.
HOSTILE = "a\x1b]0;PWNED\x07b\x1b[2Jc\rd\x9b31me\u202ef\x7fg\x00h"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_no_control_character_of_a_transcript_reaches_the_terminal(home):
    """Every command's output goes through visible.Writer: each control
    character comes out as its \\uXXXX escape (a JSON escape too, so --json
    decodes to the transcript's text); export stays byte for byte."""
    sid = "22222222-2222-3333-4444-555555555555"
    t = Transcript(sid)
    t.add("a", None, "user", cwd="/tmp/" + HOSTILE, message={"role": "user", "content": HOSTILE})
    t.add("b", "a", "assistant", cwd="/tmp/" + HOSTILE, message={"role": "assistant", "content": [
        {"type": "text", "text": HOSTILE}]})
    path = t.write(home["projects"] / "-tmp-demo")
    os.mkfifo(home["projects"] / "-tmp-demo" / "x\x1b]0;PWNED\x07.jsonl")
    db = home["tmp"] / "x.db"
    outputs = [cli("ingest", home["projects"], "--db", db, env=home["env"])]
    outputs += [cli(*args, "--db", db, env=home["env"]) for args in (
        ["sessions"], ["sessions", "--csv"], ["sessions", "--table"], ["show", sid],
        ["show", sid, "--format", "markdown"], ["show", sid, "--format", "json"],
        ["sessions", "--json"], ["check", sid])]
    for code, out, err in outputs:
        assert RAW_CONTROL.sub("", out.replace("\t", "").replace("\n", "")) == \
            out.replace("\t", "").replace("\n", ""), out
        assert not RAW_CONTROL.search(err.replace("\n", "")), err
    assert "x\\u001b]0;PWNED\\u0007.jsonl: a FIFO" in outputs[0][2]
    # show, text and markdown, off a terminal too (the CSI kept: a CR splits the line)
    for shown in (outputs[4][1], outputs[5][1]):
        assert "a\\u001b]0;PWNED\\u0007b\\u001b[2Jc" in shown
    assert "d\\u009b31me\\u202ef\\u007fg\\u0000h" in outputs[4][1]
    assert "c\\u000dd" in outputs[1][1]                   # sessions, TSV
    shown = json.loads(outputs[6][1])
    assert shown[0]["message"]["content"] == HOSTILE
    assert shown[1]["message"]["content"][0]["text"] == HOSTILE
    assert {r["session_id"]: r["cwd"] for r in json.loads(outputs[7][1])}[sid] == \
        "/tmp/" + HOSTILE
    p = subprocess.run([sys.executable, "-m", "indexer", "export", sid, "--out", "-", "--db", db],
                       env=home["env"], capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == path.read_bytes()


@pytest.mark.parametrize("args", [["ingest"], ["ingest", "--watch"], ["serve", "--watch"]])
def test_an_index_in_a_folder_that_does_not_exist_is_one_line_naming_it(home, args):
    db = home["tmp"] / "nowhere" / "x.db"
    code, out, err = cli(*args, "--db", db, env=home["env"], timeout=30)
    assert code == 3
    assert err == f"Error: {db}: the folder {db.parent} does not exist\n"
    assert not db.parent.exists()


def _random_value(rng, depth=0):
    k = rng.randrange(8 if depth < 2 else 5)
    if k == 5:
        return [_random_value(rng, depth + 1) for _ in range(2)]
    if k == 6:
        return {key: _random_value(rng, depth + 1)
                for key in ("type", "id", "tool_use_id", "text", "content")}
    return [None, True, 1, 1.5, "s", None, None, "tool_use"][k]


def test_show_reads_entries_whose_fields_have_any_json_type():
    """The SDK's reader raises on a ``type`` or ``parentUuid`` that is a list
    or an object; the port show and repair use reads past them (seeded)."""
    from indexer.transcripts import conversation
    from indexer.repair import show

    for seed in range(1500):
        rng = random.Random(seed)
        uuids = [f"u{i}" for i in range(rng.randrange(1, 12))]
        lines = [json.dumps({
            "type": rng.choice(["user", "assistant", "progress", "system", "attachment",
                                _random_value(rng)]),
            "uuid": u, "parentUuid": rng.choice([None, *uuids[:i], _random_value(rng)]),
            "message": rng.choice([_random_value(rng), {"role": "assistant", "id": _random_value(
                rng), "content": [{"type": rng.choice(["tool_use", "tool_result", "text",
                                                       _random_value(rng)]),
                                   "id": _random_value(rng), "tool_use_id": _random_value(rng),
                                   "content": _random_value(rng), "text": _random_value(rng)}
                                  for _ in range(rng.randrange(3))]}]),
            **{key: _random_value(rng) for key in ("isSidechain", "isMeta", "teamName")}})
            for i, u in enumerate(uuids)]
        chain = conversation.build_conversation_chain(conversation.parse_entries(lines))
        for m in conversation.visible_messages(chain):
            show._blocks(m.get("message"))


def test_show_of_a_transcript_the_sdk_reader_cannot_read(home):
    t = Transcript(SID)
    t.add("a", None, "user")
    t.add("b", "a", "assistant")
    t.records.append({"type": ["user"], "uuid": "c", "parentUuid": "b", "sessionId": SID})
    t.add("d", "b", "user", parentUuid={"not": "a uuid"})
    t.write(home["projects"] / "-tmp-demo")
    db = home["tmp"] / "x.db"
    assert cli("ingest", home["projects"], "--db", db, env=home["env"])[0] == 0
    code, out, err = cli("show", SID, "--db", db, env=home["env"])
    # d's parent is no uuid: d is a root of its own, and the leaf
    head, conversation = out.split("\n\n", 1)
    assert code == 0 and head == "resumable: the resume chain ends at a real message", err
    assert conversation.startswith("[user]") and "prompt d" in conversation, err


def test_a_fifo_given_as_a_source_is_skipped_not_missing(home):
    fifo = home["tmp"] / "run.jsonl"
    os.mkfifo(fifo)
    code, out, err = cli("ingest", fifo, "--db", home["tmp"] / "x.db", "--json",
                         env=home["env"], timeout=30)
    assert code == 0 and json.loads(out)["not_regular_files"] == 1
    assert "run.jsonl: a FIFO, not a regular file: skipped" in err


def test_a_symlink_to_a_regular_file_is_followed(home):
    elsewhere = home["tmp"] / "kept" / f"{SID}.jsonl"
    elsewhere.parent.mkdir()
    os.replace(home["projects"] / "-tmp-demo" / f"{SID}.jsonl", elsewhere)
    os.symlink(elsewhere, home["projects"] / "-tmp-demo" / f"{SID}.jsonl")
    code, out, _ = cli("ingest", home["projects"], "--db", home["tmp"] / "x.db", "--json",
                       env=home["env"])
    assert code == 0 and json.loads(out)["new_records"] == 2


# --- foreign databases -----------------------------------------------------

def foreign_db(path: Path, wal: bool = False) -> Path:
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE files (id INTEGER PRIMARY KEY, path TEXT)")
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO files (path) VALUES ('/etc/passwd')")
    conn.commit()
    conn.close()
    return path


def every_command(home, db):
    """Each command with the arguments it needs, against ``db``."""
    refs = home["tmp"] / "refs.csv"
    refs.write_text(f"session_id\n{SID}\n")
    out = home["tmp"] / "out"
    return [
        ["ingest", home["projects"]], ["status"], ["poisoned"], ["stale"], ["expiring"],
        ["failed"], ["check", SID], ["show", SID], ["export", SID, "--out", out],
        ["restore", SID, "--config-dir", home["tmp"] / "restored"], ["repair", SID],
        ["repair", SID, "--write", "--force"], ["refs", "import", refs], ["verify", SID],
        ["serve", "--port", str(free_port())], ["serve", "--watch", "--port", str(free_port())],
        ["ingest", "--watch", home["projects"]],
    ], [out, home["tmp"] / "restored"]


@pytest.mark.parametrize("kind", ["tables", "wal", "not sqlite", "directory"])
def test_no_command_touches_a_database_that_is_not_an_index(home, kind):
    db = home["tmp"] / "app.db"
    if kind == "not sqlite":
        db.write_bytes(b"PK\x03\x04 a zip file, say" * 50)
    elif kind == "directory":
        db.mkdir()
    else:
        foreign_db(db, wal=kind == "wal")
    before = listing(home["tmp"])
    commands, never_made = every_command(home, db)
    before = listing(home["tmp"])
    for args in commands:
        code, out, err = cli(*args, "--db", db, env=home["env"], timeout=60)
        assert code in (2, 3), (args, code, out, err)
        lines = err.strip().splitlines()
        assert lines and lines[-1].startswith("Error: "), (args, err)
        if kind == "tables":
            assert "another application's SQLite database, not a session index" in err, args
        assert listing(home["tmp"]) == before, args   # not a byte changed, nothing made
    for folder in never_made:
        assert not folder.exists()


def test_an_empty_file_or_a_new_name_becomes_an_index_only_by_ingest(home):
    empty = home["tmp"] / "empty.db"
    empty.touch()
    for args in (["status"], ["check", SID], ["poisoned"], ["show", SID]):
        code, _, err = cli(*args, "--db", empty, env=home["env"])
        assert code == 3 and "no index at" in err
        assert empty.stat().st_size == 0
        code, _, err = cli(*args, "--db", home["tmp"] / "new.db", env=home["env"])
        assert code == 3 and not (home["tmp"] / "new.db").exists()
    code, _, _ = cli("ingest", home["projects"], "--db", empty, env=home["env"])
    assert code == 0
    code, out, _ = cli("check", SID, "--db", empty, env=home["env"])
    assert code == 0 and out.startswith("resumable")


# --- writing only where it may ---------------------------------------------

def indexed(home) -> Path:
    db = home["tmp"] / "x.db"
    code, _, err = cli("ingest", home["projects"], "--db", db, env=home["env"])
    assert code == 0, err
    return db


def assert_rebuilds(db: Path, projects: Path, env) -> None:
    """Every main transcript under ``projects`` comes back out of the index
    byte for byte."""
    mains = [p for p in projects.glob("*/*.jsonl") if p.is_file() and not p.is_symlink()]
    assert mains
    for path in mains:
        p = subprocess.run([sys.executable, "-m", "indexer", "export", path.stem, "--out", "-",
                            "--db", str(db)], env=env, capture_output=True, timeout=60)
        assert p.returncode == 0 and p.stdout == path.read_bytes(), (path, p.stderr)


def crafted_path(db: Path, path: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute("UPDATE files SET path = ? WHERE session_id = ?", [path, SID])
    conn.commit()
    conn.close()


def test_a_dotdot_in_files_path_never_writes_outside_the_folder(home):
    db = indexed(home)
    crafted_path(db, f"{home['projects']}/-tmp-demo/../../../../escaped/{SID}.jsonl")
    victim_dir = home["tmp"].parent / "escaped"
    out = home["tmp"] / "out"
    for args, folder in ((["export", SID, "--out", out], out),
                         (["restore", SID, "--config-dir", home["tmp"] / "c2"], home["tmp"] / "c2"),
                         (["restore", SID], None)):
        code, _, err = cli(*args, "--db", db, env=home["env"])
        assert code == 3, (args, err)
        assert "refus" in err and len(err.strip().splitlines()) == 1, err
        assert not victim_dir.exists() and not (folder and folder.exists())
    crafted_path(db, str(home["projects"] / "-tmp-demo" / f"{SID}.jsonl"))
    assert_rebuilds(db, home["projects"], home["env"])


def test_a_symlink_at_a_temporary_or_target_name_is_never_followed(home):
    db = indexed(home)
    victim = home["tmp"] / "victim.txt"
    victim.write_text("precious\n")
    out = home["tmp"] / "out" / "-tmp-demo"
    out.mkdir(parents=True)
    # The temporary names earlier versions used, planted as links to the victim.
    os.symlink(victim, out / f".{SID}.jsonl.session-index-tmp")
    code, _, err = cli("export", SID, "--out", home["tmp"] / "out", "--db", db, env=home["env"])
    assert code == 0, err
    assert victim.read_text() == "precious\n"
    assert (out / f"{SID}.jsonl").read_bytes() == \
        (home["projects"] / "-tmp-demo" / f"{SID}.jsonl").read_bytes()
    # A link at the target itself: refused, even with --force.
    os.unlink(out / f"{SID}.jsonl")
    os.symlink(victim, out / f"{SID}.jsonl")
    for extra in ([], ["--force"]):
        code, _, err = cli("export", SID, "--out", home["tmp"] / "out", "--db", db, *extra,
                           env=home["env"])
        assert code == 3 and "is a symlink: refusing to write through it" in err
    assert victim.read_text() == "precious\n"
    assert_rebuilds(db, home["projects"], home["env"])
    # repair's temporary name too.
    transcript = home["projects"] / "-tmp-demo" / f"{SID}.jsonl"
    os.symlink(victim, transcript.parent / f".{SID}.jsonl.repair-tmp")
    code, _, err = cli("repair", SID, "--write", "--force", "--db", db, env=home["env"])
    assert code in (0, 3, 7) and victim.read_text() == "precious\n"
    assert not transcript.is_symlink()


def test_export_over_a_different_file_needs_force(home):
    db = indexed(home)
    target = home["tmp"] / "out" / "-tmp-demo" / f"{SID}.jsonl"
    target.parent.mkdir(parents=True)
    target.write_text("someone else's file\n")
    code, _, err = cli("export", SID, "--out", home["tmp"] / "out", "--db", db, env=home["env"])
    assert code == 3 and "exists and differs from the indexed transcript: --force" in err
    assert target.read_text() == "someone else's file\n"
    code, _, err = cli("export", SID, "--out", home["tmp"] / "out", "--db", db, "--force",
                       env=home["env"])
    assert code == 0 and target.read_bytes() == \
        (home["projects"] / "-tmp-demo" / f"{SID}.jsonl").read_bytes()
    # The same bytes again: nothing to refuse.
    code, _, _ = cli("export", SID, "--out", home["tmp"] / "out", "--db", db, env=home["env"])
    assert code == 0
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]
    assert_rebuilds(db, home["projects"], home["env"])


# --- faults: full disk, read-only file systems, a corrupt page -------------

@pytest.fixture
def mount(tmp_path):
    """mount(size, ro=False) -> a fresh tmpfs folder; skipped where mounting
    is not allowed (not root, no CAP_SYS_ADMIN)."""
    mounted = []

    def make(size="4m", ro=False, at=None):
        point = at or tmp_path / f"mnt{len(mounted)}"
        point.mkdir(exist_ok=True)
        options = f"size={size}" + (",ro" if ro else "")
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                           capture_output=True, text=True)
        if p.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
        mounted.append(point)
        return point

    yield make
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def remount(point, options):
    subprocess.run(["mount", "-o", f"remount,{options}", str(point)], check=True)


def one_error_line(err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    for w in words:
        assert w in lines[0], err


def many_sessions(projects: Path, n=40, size=20_000):
    for i in range(n):
        t = Transcript(f"{i:08d}-2222-3333-4444-555555555555")
        t.add("a", None, "user", message={"role": "user", "content": "x" * size})
        t.add("b", "a", "assistant")
        t.write(projects / "-tmp-many")


def test_a_full_disk_is_one_line_and_the_index_rebuilds_after(home, mount):
    many_sessions(home["projects"])
    disk = mount("1m")
    db = disk / "x.db"
    code, _, err = cli("ingest", home["projects"], "--db", db, env=home["env"])
    assert code == 3
    one_error_line(err, "database or disk is full")
    assert "cannot rollback" not in err
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    remount(disk, "size=64m")
    code, _, err = cli("ingest", home["projects"], "--db", db, env=home["env"])
    assert code == 0, err
    out = home["tmp"] / "out"
    for f in (home["projects"] / "-tmp-many").iterdir():
        code, _, err = cli("export", f.stem, "--out", out, "--db", db, env=home["env"])
        assert code == 0, err
        assert (out / "-tmp-many" / f.name).read_bytes() == f.read_bytes()


def test_restore_onto_a_directory_or_a_read_only_file_system_is_one_line(home, mount):
    db = indexed(home)
    blocked = home["tmp"] / "c1" / "projects" / "-tmp-demo" / f"{SID}.jsonl"
    blocked.mkdir(parents=True)   # a folder where the transcript would go
    code, _, err = cli("restore", SID, "--config-dir", home["tmp"] / "c1", "--db", db,
                       env=home["env"])
    assert code == 3
    one_error_line(err)
    assert blocked.is_dir() and not list(blocked.iterdir())
    ro = mount("1m", ro=True)
    code, _, err = cli("restore", SID, "--config-dir", ro, "--db", db, env=home["env"])
    assert code == 3
    one_error_line(err, "Read-only file system")
    code, _, err = cli("export", SID, "--out", ro, "--db", db, env=home["env"])
    assert code == 3
    one_error_line(err, "Read-only file system")
    assert_rebuilds(db, home["projects"], home["env"])


def test_repair_write_in_a_read_only_folder_is_one_line(home, mount):
    fixtures = Path(__file__).parent / "fixtures"
    disk = mount("4m")
    projects = disk / "projects"
    transcript = projects / "-tmp-demo" / f"{SID}.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_bytes((fixtures / "seed000_splice.jsonl").read_bytes())
    old = 1_700_000_000
    os.utime(transcript, (old, old))
    db = home["tmp"] / "x.db"
    assert cli("ingest", projects, "--db", db, env=home["env"])[0] == 0
    before = transcript.read_bytes()
    remount(disk, "ro")
    code, _, err = cli("repair", SID, "--write", "--db", db, env=home["env"])
    assert code == 3
    one_error_line(err, "Read-only file system")
    assert transcript.read_bytes() == before
    assert_rebuilds(db, projects, home["env"])


def test_an_existing_backup_name_is_a_refusal_not_a_traceback(home, monkeypatch):
    import time

    fixtures = Path(__file__).parent / "fixtures"
    transcript = home["projects"] / "-tmp-demo" / f"{SID}.jsonl"
    transcript.write_bytes((fixtures / "seed000_splice.jsonl").read_bytes())
    os.utime(transcript, (1_700_000_000, 1_700_000_000))
    db = indexed(home)
    before = transcript.read_bytes()
    # Every name this minute's repair could take is taken.
    now = time.time()
    for s in range(0, 120):
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now + s))
        Path(f"{transcript}.session-index-backup-{stamp}").write_text("taken")
    code, _, err = cli("repair", SID, "--write", "--db", db, env=home["env"])
    assert code == 3 and transcript.read_bytes() == before
    one_error_line(err, "exists already")
    assert_rebuilds(db, home["projects"], home["env"])


def test_a_corrupt_page_is_one_line_and_the_file_is_left_alone(home):
    db = indexed(home)
    many = home["tmp"] / "many"
    many_sessions(many)
    assert cli("ingest", many, "--db", db, env=home["env"])[0] == 0
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.close()
    with open(db, "r+b") as f:   # scribble over every page but the first
        for n in range(1, pages):
            f.seek(n * page + 100)
            f.write(b"\xde\xad\xbe\xef" * 64)
    before = digest(db)
    for args in (["status"], ["poisoned"], ["check", SID], ["show", SID], ["export", SID, "--out", "-"]):
        code, _, err = cli(*args, "--db", db, env=home["env"])
        assert code == 3, (args, err)
        one_error_line(err)
        assert digest(db) == before, args


# --- the web ---------------------------------------------------------------

def test_serve_refuses_a_database_name_datasette_would_render_unescaped(home):
    folder = home["tmp"] / "names"
    folder.mkdir()
    bad = folder / 'x"><img src=x onerror=alert(1)>.db'
    for extra in ([], ["--watch", home["projects"]]):
        code, _, err = cli("serve", *extra, "--db", bad, "--port", str(free_port()),
                           env=home["env"])
        assert code == 3
        one_error_line(err, "markup characters")
        assert list(folder.iterdir()) == []   # --watch made no index either


def test_ids_too_large_for_sqlite_are_404_not_500(home):
    db = indexed(home)
    from indexer.cli import web

    async def fetch():
        ds = web.make_datasette(db)
        huge = "9" * 30
        return [(await ds.client.get(path)).status_code for path in (
            f"/-/session-record/{huge}", f"/-/session-download/{huge}/original",
            f"/-/session-download/{huge}/repaired",
            f"/-/session-download/1/original?generation={huge}")]

    import asyncio

    assert asyncio.run(fetch()) == [404, 404, 404, 404]
