"""Several main transcripts with one session id: the one `claude --resume`
opens is sessions.main_file_id (main_file_rule says why), check/show/repair
and the session page use it, and the others are listed as copies in
session_main_copies, never merged. The last test asks the real CLI."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import Transcript, write_jsonl
from indexer.chain import mainfile
from indexer.repair import oracle
from indexer.chain import definitions
from indexer.cli import web
from indexer.cli.commands import cli

SID = "11111111-2222-3333-4444-555555555555"
FIXTURES = Path(__file__).parent / "fixtures"
COPY_COLUMNS = ("path", "chosen", "why", "named", "on_disk", "has_messages", "in_cwd_project",
                "records", "only_here", "only_in_chosen", "only_here_uuids", "diverged")


def run(env, *args):
    return CliRunner().invoke(cli, [*args, "--db", str(env.path)], catch_exceptions=False)


def check(env, *extra):
    result = run(env, "check", SID, "--json", *extra)
    return result.exit_code, json.loads(result.stdout)


def compact(t: Transcript) -> list[str]:
    """The records as Claude Code writes them (no spaces: what its scan of
    every project folder looks for)."""
    return [json.dumps(r, separators=(",", ":")) for r in t.records]


def age(path: Path, seconds: float) -> Path:
    t = time.time() - seconds
    os.utime(path, (t, t))
    return path


def conversation(cwd="/tmp/demo", turns=1, text="reply") -> Transcript:
    t = Transcript(SID)
    parent = None
    for n in range(1, turns + 1):
        t.add(f"u{n}", parent, "user", cwd=cwd)
        t.add(f"a{n}", f"u{n}", "assistant", cwd=cwd, message={
            "id": f"msg_{text}{n}", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": f"{text} {n}"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}})
        parent = f"a{n}"
    return t


def copies(env, sid=SID):
    return [{k: r[k] for k in COPY_COLUMNS} for r in env.rows(
        "SELECT * FROM session_main_copies WHERE session_id = ? ORDER BY NOT chosen, path", [sid])]


def session_row(env):
    return env.rows("SELECT main_file_id, main_file_rule, project_dir, cwd, main_files "
                    "FROM sessions WHERE session_id = ?", [SID])[0]


# --- the choice ----------------------------------------------------------------

def test_a_named_copy_in_another_project_folder_is_a_copy_not_the_transcript(env):
    home = conversation().write(env.projects / "-tmp-demo")
    age(home, 3600)
    # The copy is newer and holds one more turn: the newest mtime is not the rule.
    elsewhere = conversation(turns=2).write(env.projects / "-srv-elsewhere")
    env.ingest()
    assert session_row(env) == {"main_file_id": env.file_id(home),
                                "main_file_rule": "named_in_cwd_project",
                                "project_dir": "-tmp-demo", "cwd": "/tmp/demo", "main_files": 2}
    assert copies(env) == [
        {"path": str(home), "chosen": 1, "why": "named_in_cwd_project", "named": 1, "on_disk": 1,
         "has_messages": 1, "in_cwd_project": 1, "records": 2, "only_here": 0,
         "only_in_chosen": 0, "only_here_uuids": "[]", "diverged": 0},
        {"path": str(elsewhere), "chosen": 0, "why": "named_other_project", "named": 1,
         "on_disk": 1, "has_messages": 1, "in_cwd_project": 0, "records": 4, "only_here": 2,
         "only_in_chosen": 0, "only_here_uuids": '["u2","a2"]', "diverged": 1}]
    # export --out - writes the transcript a resume opens.
    exported = CliRunner().invoke(cli, ["export", SID, "--out", "-", "--db", str(env.path)])
    assert exported.stdout_bytes == home.read_bytes()
    # The copy is an ordinary transcript of its own: its leaves are kept apart.
    assert {r["file_id"]: r["resume_leaf_uuid"] for r in env.rows("SELECT * FROM leaves")} == {
        env.file_id(home): "a1", env.file_id(elsewhere): "a2"}


def test_a_fork_not_named_after_the_session_is_never_the_transcript(env):
    named = conversation().write(env.projects / "-tmp-demo")
    age(named, 3600)
    fork = conversation(turns=3).write(env.projects / "-tmp-demo", name="forked-session.jsonl")
    env.ingest()
    # files.session_id of the fork comes from its records.
    assert env.value("SELECT session_id FROM files WHERE path = ?", [str(fork)]) == SID
    assert session_row(env)["main_file_id"] == env.file_id(named)
    assert session_row(env)["main_file_rule"] == "only_named"
    assert [(c["path"], c["chosen"], c["why"], c["only_here"], c["diverged"]) for c in copies(env)] == [
        (str(named), 1, "only_named", 0, 0), (str(fork), 0, "not_named", 4, 1)]


def test_only_a_file_not_named_after_the_session_is_missing_for_check(env):
    fork = conversation().write(env.projects / "-tmp-demo", name="forked-session.jsonl")
    env.ingest()
    assert session_row(env)["main_file_id"] == env.file_id(fork)
    assert session_row(env)["main_file_rule"] == "not_named"
    code, verdict = check(env)
    assert (code, verdict["verdict"], verdict["path"]) == (4, "missing", str(fork))
    assert f"is not named {SID}.jsonl" in verdict["reason"]
    assert f"No conversation found with session ID: {SID}" in verdict["reason"]


def test_a_referenced_session_no_resume_can_open_is_a_stale_ref(env, tmp_path):
    conversation().write(env.projects / "-tmp-demo", name="forked-session.jsonl")
    env.ingest()
    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps([{"session_id": SID, "source": "app"}]))
    assert run(env, "refs", "import", str(refs)).exit_code == 0
    listed = run(env, "stale", "--json")
    assert listed.exit_code == 1
    assert [(r["session_id"], r["reason"]) for r in json.loads(listed.stdout)] == [
        (SID, "unopenable")]


def test_a_named_file_without_messages_is_missing(env):
    stub = write_jsonl(env.projects / "-tmp-demo" / f"{SID}.jsonl", [
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}, "sessionId": SID}])
    env.ingest()
    assert session_row(env)["main_file_rule"] == "named_no_messages"
    code, verdict = check(env)
    assert (code, verdict["verdict"], verdict["path"]) == (4, "missing", str(stub))
    assert "holds no user or assistant message" in verdict["reason"]


def test_the_chosen_file_follows_deletions_and_check_sees_them_before_ingest(env):
    home = conversation().write(env.projects / "-tmp-demo")
    elsewhere = conversation(turns=2).write(env.projects / "-srv-elsewhere")
    env.ingest()
    assert session_row(env)["main_file_id"] == env.file_id(home)
    home.unlink()  # no ingest since: check stats every main file of the session
    code, verdict = check(env)
    assert (code, verdict["verdict"], verdict["path"]) == (0, "resumable", str(elsewhere))
    assert verdict["details"]["main_file"]["rule"] == "only_named"
    assert session_row(env)["main_file_rule"] == "only_named"
    assert [(c["path"], c["chosen"], c["why"]) for c in copies(env)] == [
        (str(elsewhere), 1, "only_named"), (str(home), 0, "deleted")]
    elsewhere.unlink()
    code, verdict = check(env)
    assert (code, verdict["verdict"], verdict["path"]) == (4, "missing", str(home))
    assert "the transcript was deleted (" in verdict["reason"]
    assert session_row(env)["main_file_rule"] == "deleted"


# --- check, show, repair use it ------------------------------------------------

def test_check_show_and_repair_use_the_chosen_file_and_list_the_copies(env):
    # The transcript a resume opens is seed 000's splice; a newer clean copy of
    # the session sits in another project folder.
    home = write_jsonl(env.projects / "-tmp-demo" / f"{SID}.jsonl",
                       (FIXTURES / "seed000_splice.jsonl").read_text().splitlines())
    age(home, 3600)
    elsewhere = conversation(turns=2).write(env.projects / "-srv-elsewhere")
    age(elsewhere, 600)
    copy_bytes = elsewhere.read_bytes()
    env.ingest()
    assert session_row(env)["main_file_id"] == env.file_id(home)

    code, verdict = check(env)
    assert (code, verdict["verdict"], verdict["path"]) == (6, "spliced", str(home))
    assert verdict["details"]["main_file"] == {
        "file_id": env.file_id(home), "rule": "named_in_cwd_project", "cwd": None}
    assert [(c["path"], c["chosen"], c["why"], c["diverged"]) for c in verdict["details"]["copies"]] == [
        (str(home), 1, "named_in_cwd_project", 0), (str(elsewhere), 0, "named_other_project", 1)]
    assert any("2 transcripts are named" in w and str(home) in w for w in verdict["warnings"])

    shown = run(env, "show", SID)
    assert shown.exit_code == 0
    assert "The otter" in shown.stdout  # the splice's recovered output: seed 000's file
    assert "reply 1" not in shown.stdout
    assert f"transcript: {home} (named_in_cwd_project)" in shown.stderr
    assert f"copy: {elsewhere} (named_other_project; differs:" in shown.stderr

    repaired = run(env, "repair", SID, "--write")
    assert repaired.exit_code == 0, repaired.output
    assert f"copy: {elsewhere} (named_other_project" in repaired.stderr
    assert env.rows("SELECT path, status FROM repairs") == [{"path": str(home), "status": "applied"}]
    assert elsewhere.read_bytes() == copy_bytes  # copies are never touched or merged
    code, verdict = check(env)
    assert (code, verdict["verdict"], verdict["path"]) == (0, "resumable", str(home))


def test_check_cwd_answers_as_the_cli_from_that_directory(env, tmp_path):
    cwd_a, cwd_b, cwd_c = (tmp_path / n for n in ("work-a", "work-b", "work-c"))
    for d in (cwd_a, cwd_b, cwd_c):
        d.mkdir()
    folder = {d: oracle.project_folder(os.path.realpath(d)) for d in (cwd_a, cwd_b, cwd_c)}
    a = write_jsonl(env.projects / folder[cwd_a] / f"{SID}.jsonl", compact(conversation(str(cwd_a))))
    b = write_jsonl(env.projects / folder[cwd_b] / f"{SID}.jsonl",
                    compact(conversation(str(cwd_a), turns=2)))
    env.ingest()
    code, verdict = check(env, "--cwd", str(cwd_a))
    assert (code, verdict["path"], verdict["details"]["main_file"]["rule"]) == (
        0, str(a), "named_in_cwd_project")
    code, verdict = check(env, "--cwd", str(cwd_b))
    assert (code, verdict["path"], verdict["details"]["main_file"]["rule"]) == (
        0, str(b), "named_in_cwd_project")
    code, verdict = check(env, "--cwd", str(cwd_c))  # the CLI finds two and picks neither
    assert (code, verdict["verdict"], verdict["details"]["main_file"]["rule"]) == (
        4, "missing", "ambiguous")
    assert "none in the project folder" in verdict["reason"]
    b.unlink()
    code, verdict = check(env, "--cwd", str(cwd_c))  # now its scan finds exactly one
    assert (code, verdict["path"], verdict["details"]["main_file"]["rule"]) == (
        0, str(a), "only_named")
    # The scan looks for the compact "type":"user" text Claude Code writes.
    write_jsonl(a, conversation(str(cwd_a)).records)
    code, verdict = check(env, "--cwd", str(cwd_c))
    assert (code, verdict["verdict"]) == (4, "missing")
    code, verdict = check(env, "--cwd", str(cwd_a))
    assert (code, verdict["path"]) == (0, str(a))


def test_check_cwd_looks_in_the_project_folders_of_other_git_worktrees(env, tmp_path):
    if shutil.which("git") is None:
        pytest.skip("no git")
    repo, tree = tmp_path / "repo", tmp_path / "tree"
    repo.mkdir()
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], cwd=repo, check=True)
    subprocess.run([*git, "worktree", "add", "-q", str(tree)], cwd=repo, check=True)
    main = write_jsonl(env.projects / oracle.project_folder(os.path.realpath(repo)) / f"{SID}.jsonl",
                       conversation(str(repo)).records)
    write_jsonl(env.projects / "-srv-elsewhere" / f"{SID}.jsonl", conversation(str(repo)).records)
    env.ingest()
    code, verdict = check(env, "--cwd", str(tree))
    assert (code, verdict["path"], verdict["details"]["main_file"]["rule"]) == (
        0, str(main), "named_in_worktree_project")


# --- what the SQL knows --------------------------------------------------------

def test_project_folder_is_claude_codes_name_for_a_cwd(env):
    assert mainfile.project_folder(env.db, "/home/me/my_app.v2") == "-home-me-my-app-v2"
    # JavaScript replaces UTF-16 code units: a character past U+FFFF is two.
    assert mainfile.project_folder(env.db, "/x/é\U0001F600y") == "-x----y"
    # A name over 200 characters has a hash suffix: the first 200 and '-' must match.
    long_cwd = "/" + "deep/" * 60
    folder = mainfile.project_folder(env.db, long_cwd)[:200] + "-1a2b3c"
    write_jsonl(env.projects / folder / f"{SID}.jsonl", conversation(long_cwd).records)
    write_jsonl(env.projects / "-srv-elsewhere" / f"{SID}.jsonl", conversation(long_cwd).records)
    env.ingest()
    assert session_row(env)["main_file_rule"] == "named_in_cwd_project"
    assert session_row(env)["project_dir"] == folder


def test_every_sessions_row_is_refreshed_when_the_rule_changes(env):
    conversation().write(env.projects / "-tmp-demo")
    env.ingest()
    with env.db.conn:
        env.db.conn.execute("UPDATE sessions SET main_file_rule = NULL")
        env.db.conn.execute("UPDATE index_meta SET value = 'older' WHERE key = 'sessions_hash'")
    # check refreshes them before it answers (an index upgraded since its last ingest)...
    assert check(env)[1]["details"]["main_file"]["rule"] == "only_named"
    assert env.value("SELECT value FROM index_meta WHERE key = 'sessions_hash'") != "older"
    with env.db.conn:
        env.db.conn.execute("UPDATE sessions SET main_file_rule = NULL")
        env.db.conn.execute("UPDATE index_meta SET value = 'older' WHERE key = 'sessions_hash'")
    env.ingest()  # ...and so does an ingest, with nothing changed on disk
    assert session_row(env)["main_file_rule"] == "only_named"


def test_every_rule_has_a_rank():
    assert set(definitions.OPENED_BY_RESUME) <= set(definitions.MAIN_FILE_RULES)
    assert definitions.MAIN_FILE_RANK_TEMPLATE.count("WHEN") == len(definitions.MAIN_FILE_RULES)


def test_the_session_page_marks_the_transcript_and_its_copies(env):
    home = conversation().write(env.projects / "-tmp-demo")
    age(home, 3600)
    conversation(turns=2).write(env.projects / "-srv-elsewhere")
    conversation().write(env.projects / "-tmp-demo", name="forked-session.jsonl")
    env.ingest()
    env.db.conn.close()
    ds = web.make_datasette(env.path)
    asyncio.run(ds.invoke_startup())
    html = asyncio.run(ds.client.get(f"/-/sessions/{SID}")).text
    assert "opened by --resume: named_in_cwd_project" in html
    assert "copy: named_other_project" in html and "copy: not_named" in html
    assert "differs: 2 uuid(s) only here, 0 only in the one opened" in html
    assert "session_main_copies" in html


# --- the real CLI ----------------------------------------------------------------

def _cli_loads(binary, api, config: Path, cwd: Path) -> tuple[int, list[str]]:
    """Run `claude --resume SID -p PING` from ``cwd`` on a copy of ``config``
    and return its exit code and the assistant texts it sent (what it loaded)."""
    with_copy = config.parent / f"run-{time.monotonic_ns()}"
    shutil.copytree(config, with_copy)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE_", "AWS_", "GOOGLE_"))}
    env.update({"HOME": str(with_copy), "CLAUDE_CONFIG_DIR": str(with_copy),
                "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{api.port}",
                "ANTHROPIC_API_KEY": "sk-ant-oracle-not-a-key",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
                "NO_PROXY": "127.0.0.1,localhost"})
    api.take()
    try:
        done = subprocess.run([binary, "--resume", SID, "-p", oracle.PING, "--output-format", "json"],
                              cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=oracle.RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(with_copy, ignore_errors=True)
    sent = [r["body"] for r in api.take()
            if r["path"].endswith("/v1/messages") and oracle._holds_ping(r["body"])]
    texts = [b.get("text") for body in sent[:1] for m in body.get("messages") or []
             if m.get("role") == "assistant" for b in oracle._blocks(m) if b.get("type") == "text"]
    return done.returncode, texts


@pytest.mark.oracle
def test_the_real_cli_opens_the_file_the_index_chooses(env, tmp_path):
    try:
        binary = oracle.find_claude()
    except oracle.NoClaudeBinary as exc:
        pytest.skip(str(exc))
    cwds = {n: Path(os.path.realpath(tmp_path / f"work-{n}")) for n in ("a", "b", "c")}
    for d in cwds.values():
        d.mkdir()
    folder = {n: env.projects / oracle.project_folder(str(d)) for n, d in cwds.items()}
    # The session as it ran in a; a copy of it in b's folder that went on a
    # turn (newer); a fork in a's folder that kept the id (newest, longest).
    files = {
        "home": write_jsonl(folder["a"] / f"{SID}.jsonl",
                            compact(conversation(str(cwds["a"]), text="ALPHA"))),
        "copy": write_jsonl(folder["b"] / f"{SID}.jsonl",
                            compact(conversation(str(cwds["a"]), turns=2, text="BRAVO"))),
        "fork": write_jsonl(folder["a"] / "forked-session.jsonl",
                            compact(conversation(str(cwds["a"]), turns=3, text="FORK"))),
    }
    age(files["home"], 7200)
    age(files["copy"], 3600)
    env.ingest()
    loaded_by = {("ALPHA 1",): files["home"], ("BRAVO 1", "BRAVO 2"): files["copy"],
                 ("FORK 1", "FORK 2", "FORK 3"): files["fork"]}

    def cli_opens(api, name):
        code, texts = _cli_loads(binary, api, env.config, cwds[name])
        return loaded_by[tuple(texts)] if code == 0 else None

    def index_opens(name=None):
        code, verdict = check(env, *(["--cwd", str(cwds[name])] if name else []))
        return Path(verdict["path"]) if code == 0 else None

    with oracle.FakeMessagesAPI() as api:
        # The index's own choice is what a resume from the session's cwd opens.
        assert env.value("SELECT path FROM files f JOIN sessions s ON s.main_file_id = f.id") \
            == str(files["home"])
        assert cli_opens(api, "a") == index_opens() == files["home"]
        for name, expected in (("a", files["home"]), ("b", files["copy"]), ("c", None)):
            assert (name, cli_opens(api, name)) == (name, expected)
            assert (name, index_opens(name)) == (name, expected)
        files["copy"].unlink()  # one named file left: found from any cwd
        assert cli_opens(api, "c") == index_opens("c") == files["home"]
        files["home"].unlink()  # only the fork: never opened for this id
        assert cli_opens(api, "a") is None
        assert check(env)[1]["verdict"] == "missing"
