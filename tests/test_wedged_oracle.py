"""The thinking-signature wedge (issue 27) against the real Claude Code.

The fake Messages API here refuses, as the real one does, a request whose
latest assistant message carries a thinking block changed from what the API
returned (oracle.refusing_changed_thinking: the 400 texts of #63147, #68768,
#21726). What each Claude Code does with that 400 decides the verdict
(thinking.RECOVERS_FROM): the bundled 2.1.332 sends the request again with
every thinking block stripped (it recovers, losing the thinking); 2.1.150,
as the reports' versions, exits on the 400 and does the same on every
resume. After ``repair --write`` both resume and the first request is
accepted.

The old binary is $SESSION_INDEX_STUCK_CLAUDE, else /work/clis/2.1.150/claude
(bench/wedged_versions.py sweeps any set of binaries); its tests skip
without one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import Index
from indexer.cli.commands import cli
from indexer.repair import oracle
from indexer.transcripts import thinking

try:
    CLAUDE = oracle.find_claude()
except oracle.NoClaudeBinary:
    CLAUDE = None
STUCK_CLAUDE = os.environ.get("SESSION_INDEX_STUCK_CLAUDE", "/work/clis/2.1.150/claude")
STUCK_CLAUDE = STUCK_CLAUDE if os.access(STUCK_CLAUDE, os.X_OK) else None

FIXTURES = Path(__file__).parent / "fixtures" / "thinking"
RETURNED = json.loads((FIXTURES / "returned.json").read_text())
WEDGED = ("blanked_latest", "unsigned_latest")

pytestmark = [pytest.mark.oracle,
              pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")]
needs_stuck = pytest.mark.skipif(STUCK_CLAUDE is None, reason="no Claude Code 2.1.150 binary")


def session_id(name: str) -> str:
    return json.loads((FIXTURES / f"{name}.jsonl").read_text().splitlines()[0])["sessionId"]


def resume(data: bytes, sid: str, binary: str, returned: dict = RETURNED):
    """Resume a copy against the refusing fake API, which returned
    ``returned`` before: (the run, the reply function: its refusals)."""
    reply = oracle.refusing_changed_thinking(returned)
    with oracle.FakeMessagesAPI(reply) as api:
        run = oracle.run_resume(data, sid, api, binary)
    return run, reply


def thinking_sent(body: dict) -> int:
    return sum(1 for m in body.get("messages") or [] if isinstance(m.get("content"), list)
               for b in m["content"] if isinstance(b, dict) and b.get("type") == "thinking")


def messages_calls(run) -> list[dict]:
    return [r["body"] for r in run.requests if r["path"].endswith("/v1/messages")]


@pytest.mark.parametrize("name", WEDGED)
def test_today_recovers_from_the_400_by_dropping_every_thinking_block(name):
    data = (FIXTURES / f"{name}.jsonl").read_bytes()
    run, reply = resume(data, session_id(name), CLAUDE)
    calls = messages_calls(run)
    assert run.exit_code == 0, run.stderr
    assert reply.refused and thinking_sent(calls[0]) > 0          # sent as written: refused
    assert oracle.PING in json.dumps(calls[-1]) and thinking_sent(calls[-1]) == 0
    assert oracle.thinking_refusal(calls[-1], reply.returned) is None
    fault = {"blanked_latest": "blanked", "unsigned_latest": "unsigned"}[name]
    assert thinking.stays_stuck(oracle.claude_version(CLAUDE), fault) is False


@needs_stuck
@pytest.mark.parametrize("name", WEDGED)
def test_the_reports_versions_stay_stuck(name):
    data = (FIXTURES / f"{name}.jsonl").read_bytes()
    for _ in range(2):   # every resume alike
        run, reply = resume(data, session_id(name), STUCK_CLAUDE)
        calls = messages_calls(run)
        assert run.exit_code != 0
        assert calls and len(reply.refused) == len(calls)
    fault = {"blanked_latest": "blanked", "unsigned_latest": "unsigned"}[name]
    assert thinking.stays_stuck(oracle.claude_version(STUCK_CLAUDE), fault) is True


def _index_with(tmp_path: Path, name: str) -> tuple[Index, Path]:
    index = Index(tmp_path)
    folder = index.projects / "-home-dev-shop"
    folder.mkdir(parents=True)
    path = folder / f"{session_id(name)}.jsonl"
    shutil.copyfile(FIXTURES / f"{name}.jsonl", path)
    old = path.stat().st_mtime - 600
    os.utime(path, (old, old))
    index.ingest()
    return index, path


def _cli(index: Index, *args):
    return CliRunner().invoke(cli, [*args, "--db", str(index.path)], catch_exceptions=False)


@pytest.mark.parametrize("name", WEDGED)
def test_after_repair_the_resume_is_accepted_and_nothing_is_lost(tmp_path, name):
    index, path = _index_with(tmp_path, name)
    sid = session_id(name)
    before = path.read_bytes()
    done = _cli(index, "repair", sid, "--write")
    assert done.exit_code == 0, done.output
    after = path.read_bytes()
    backup = next(path.parent.glob(f"{path.name}.session-index-backup-*"))
    assert backup.read_bytes() == before
    # every removed line is in the backup and in the index's earlier generation
    kept = set(after.splitlines())
    removed = [line for line in before.splitlines() if line not in kept]
    assert removed
    generations = index.value("SELECT count(*) FROM file_generations WHERE file_id = ?",
                              [index.file_id(path)])
    assert generations == 2
    earlier = index.rows("SELECT CAST(raw AS TEXT) AS raw FROM superseded_lines")
    assert {line.decode() for line in removed} <= {r["raw"] for r in earlier}
    for binary in filter(None, (CLAUDE, STUCK_CLAUDE)):
        run, reply = resume(after, sid, binary)
        calls = messages_calls(run)
        assert run.exit_code == 0, (binary, run.stderr)
        assert reply.refused == [] and oracle.PING in json.dumps(calls[0])


def test_check_names_the_wedge_and_the_version_that_stays_stuck(tmp_path):
    index, _ = _index_with(tmp_path, "blanked_latest")
    sid = session_id("blanked_latest")
    out = _cli(index, "check", sid, "--config-dir", str(tmp_path), "--json")
    verdict = json.loads(out.output)
    assert (out.exit_code, verdict["verdict"], verdict["details"]["cause"]) == (
        11, "wedged", "thinking_refused")
    assert verdict["details"]["thinking"]["fault"] == "blanked"
    today = oracle.claude_version(CLAUDE)
    out = _cli(index, "check", sid, "--config-dir", str(tmp_path), "--claude-version", today)
    assert out.exit_code == 0 and out.output.startswith("resumable:")


def test_a_session_the_real_binary_writes_with_omitted_display_has_no_fault(tmp_path):
    """The real CLI writes the empty signed blocks the API returns when it
    omits the thinking display (Claude Code 2.1.332 asks for that on every
    request); such a session is no wedge, and resumes without a 400."""
    spec = importlib.util.spec_from_file_location(
        "make_fixtures", Path(__file__).parent / "fixtures" / "claude_code" / "make_fixtures.py")
    make = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_fixtures", make)   # (its dataclasses look their module up)
    spec.loader.exec_module(sys.modules["make_fixtures"])
    make = sys.modules["make_fixtures"]
    s = make.new_session("omitted_display", CLAUDE, tmp_path / "run")
    signature = json.loads((FIXTURES / "omitted_display.jsonl").read_text().splitlines()[1])[
        "message"]["content"][0]["signature"]
    reply = oracle.refusing_changed_thinking({}, oracle.scripted(
        {"id": "msg_01OmittedA", "blocks": [
            {"type": "thinking", "thinking": "", "signature": signature},
            make.tool("toolu_omit_1", "Read", file_path=str(s.work / "notes.txt"))]},
        {"id": "msg_01OmittedB", "blocks": [
            {"type": "thinking", "thinking": "", "signature": signature[::-1]},
            {"type": "text", "text": "notes.txt says the answer is 42."}]}))
    first = s.claude("Read notes.txt", reply)
    assert first["result"] == "notes.txt says the answer is 42." and reply.refused == []
    main = s.written()[0]
    written = [b for line in main.read_text().splitlines()
               for b in (json.loads(line).get("message") or {}).get("content") or []
               if isinstance(b, dict) and b.get("type") == "thinking"]
    assert len(written) == 2 and all(b["thinking"] == "" and b["signature"] for b in written)
    index = Index(tmp_path)
    index.ingest(main)
    assert index.value("SELECT count(*) FROM thinking_faults") == 0
    run, again = resume(main.read_bytes(), s.session_id, CLAUDE, reply.returned)
    assert run.exit_code == 0 and again.refused == []


OLD = Path(os.environ.get("SESSION_INDEX_OLD_CLAUDES", "/nonexistent"))
OLD_BINARIES = sorted((p for p in OLD.glob("*/claude") if os.access(p, os.X_OK)),
                      key=lambda p: thinking.version_key(p.parent.name) or 0)


@pytest.mark.skipif(not OLD_BINARIES, reason="SESSION_INDEX_OLD_CLAUDES is not set")
@pytest.mark.parametrize("binary", OLD_BINARIES, ids=[p.parent.name for p in OLD_BINARIES])
def test_each_version_does_what_the_rule_says(binary):
    """SESSION_INDEX_OLD_CLAUDES=DIR (DIR/<version>/claude, as bench/ unpacks
    them from claude-agent-sdk wheels): each stays stuck on a fixture's
    refused block exactly when thinking.stays_stuck says so."""
    version = oracle.claude_version(str(binary))
    for name, fault in (("blanked_latest", "blanked"), ("unsigned_latest", "unsigned")):
        run, reply = resume((FIXTURES / f"{name}.jsonl").read_bytes(), session_id(name),
                            str(binary))
        stuck = bool(reply.refused) and run.exit_code != 0
        assert stuck == thinking.stays_stuck(version, fault), (version, name, run.exit_code,
                                                               reply.refused)
