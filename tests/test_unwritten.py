"""Transcripts never written, stopped, or deleted with their folder left
(anthropics/claude-code #91284, #76829, #79369, #70219, #53417, #95403):
history.jsonl and the session folders read incrementally and losslessly, the
unwritten_transcripts class on every surface (its view, the listing, the
health page, the session page), check's `missing` with the cause, the
watcher's log line, and no finding where nothing is wrong.

The transcripts and history.jsonl of tests/fixtures/unwritten were written by
the real Claude Code 2.1.332 (interactive, against the fake Messages API of
indexer/repair/oracle.py); each shape is then made from them as the threads
describe it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import CORPUS
from oracle_checks import CLAUDE, resume_in
from indexer.cli import web
from indexer.cli.commands import cli
from indexer.index.db import open_db
from indexer.ingest import sidecars
from indexer.ingest.files import ingest
from indexer.repair.check import check
from indexer.signals import unwritten

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "unwritten"
OK = "4352fdca-f12b-432d-9c89-dc365315861e"        # written whole: the control
STOPPED = "719a1389-e329-4b50-a427-24a90d64af3a"   # #53417: the writer stopped after one turn
NEVER_PROMPTED = "aaaaaaaa-1111-4222-8333-444444444444"   # #91284: prompts, no transcript
NEVER_FOLDER = "cccccccc-1111-4222-8333-444444444444"     # #76829, #79369: a folder, no transcript
HUSK = "dddddddd-1111-4222-8333-444444444444"             # #95403: deleted, tool-results left
SLASH_ONLY = "bbbbbbbb-1111-4222-8333-444444444444"       # /exit in a fresh session: nothing to write
OLD_PROMPT = "eeeeeeee-1111-4222-8333-444444444444"       # a prompt past the cleanup period
SUBAGENTS_ONLY = "ffffffff-1111-4222-8333-444444444444"   # cleanup's leftover (2.1.88)
SUBAGENT_RAN = "abababab-1111-4222-8333-444444444444"     # a subagent's tool results, later
PROJECT = "-tmp-work"
HOUR_MS = 3_600_000


def history_line(session_id: str, display: str, at_ms: int, project: str = "/tmp/work") -> str:
    """A line as Claude Code 2.1.332 writes it (tests/fixtures/unwritten/history.jsonl)."""
    return json.dumps({"display": display, "pastedContents": {}, "timestamp": at_ms,
                       "project": project, "sessionId": session_id},
                      separators=(",", ":")) + "\n"


def cut_before_second_prompt(text: str) -> str:
    lines = text.splitlines(True)
    cut = next(i for i, line in enumerate(lines)
               if '"type":"user"' in line and '"second prompt here"' in line)
    return "".join(lines[:cut])


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A config dir holding every shape, ingested; the husk's transcript
    deleted after its first ingest, as #95403 reports."""
    config = tmp_path / "config"
    projects = config / "projects"
    proj = projects / PROJECT
    proj.mkdir(parents=True)
    shutil.copy(FIXTURES / f"{OK}.jsonl", proj)
    (proj / f"{STOPPED}.jsonl").write_text(
        cut_before_second_prompt((FIXTURES / f"{STOPPED}.jsonl").read_text()))
    husk_text = (FIXTURES / f"{OK}.jsonl").read_text().replace(OK, HUSK)
    (proj / f"{HUSK}.jsonl").write_text(husk_text)
    real = [json.loads(line) for line in (FIXTURES / "history.jsonl").read_text().splitlines()]
    now = int(time.time() * 1000)
    lines = []
    for h in real:   # the real prompts, as written; STOPPED's second one an hour later
        at = h["timestamp"] + (HOUR_MS if h["sessionId"] == STOPPED
                               and h["display"] == "second prompt here" else 0)
        lines.append(json.dumps(dict(h, timestamp=at), separators=(",", ":")) + "\n")
    lines += [history_line(NEVER_PROMPTED, "fix the build", now - HOUR_MS),
              history_line(NEVER_PROMPTED, "and run the tests", now - HOUR_MS // 2),
              history_line(SLASH_ONLY, "/exit", now - HOUR_MS),
              history_line(OLD_PROMPT, "an old question", now - 40 * 24 * HOUR_MS)]
    (config / "history.jsonl").write_text("".join(lines))
    folder = proj / NEVER_FOLDER   # #79369's signature: workflows and subagent meta, no .jsonl
    (folder / "tool-results").mkdir(parents=True)
    (folder / "tool-results" / "toolu_01ABC.txt").write_text("x" * 4000)
    (folder / "subagents").mkdir()
    (folder / "subagents" / "agent-a1b2c3.meta.json").write_text('{"agentType": "Explore"}')
    (folder / "workflows" / "scripts").mkdir(parents=True)
    (folder / "workflows" / "scripts" / "build-wf_1.js").write_text("// workflow")
    (proj / HUSK / "tool-results").mkdir(parents=True)
    (proj / HUSK / "tool-results" / "toolu_01DEF.txt").write_text("y" * 4000)
    ran = max(r["timestamp"] for r in map(json.loads, husk_text.splitlines())
              if isinstance(r.get("timestamp"), str))   # its tool ran while the session did
    at = datetime.fromisoformat(ran.replace("Z", "+00:00")).timestamp() - 1
    os.utime(proj / HUSK / "tool-results" / "toolu_01DEF.txt", (at, at))
    (proj / SUBAGENTS_ONLY / "subagents").mkdir(parents=True)   # a subagent transcript alone
    (proj / SUBAGENTS_ONLY / "subagents" / "agent-z9.jsonl").write_text(json.dumps(
        {"type": "user", "uuid": "u1", "parentUuid": None, "isSidechain": True,
         "sessionId": SUBAGENTS_ONLY, "timestamp": "2026-12-01T00:00:00.000Z",
         "message": {"role": "user", "content": "explore"}}) + "\n")
    # A session killed while its subagent ran for an hour: the main transcript
    # waits for the Task's answer, the subagent's transcript and tool results go on.
    (proj / f"{SUBAGENT_RAN}.jsonl").write_text(husk_text.replace(HUSK, SUBAGENT_RAN))
    main_end = max(r["timestamp"] for r in map(json.loads, husk_text.splitlines())
                   if isinstance(r.get("timestamp"), str))
    later = datetime.fromisoformat(main_end.replace("Z", "+00:00")).timestamp() + 3600
    (proj / SUBAGENT_RAN / "subagents").mkdir(parents=True)
    (proj / SUBAGENT_RAN / "subagents" / "agent-s1.jsonl").write_text(json.dumps(
        {"type": "assistant", "uuid": "s1", "parentUuid": None, "isSidechain": True,
         "sessionId": SUBAGENT_RAN, "agentId": "s1",
         "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(later)),
         "message": {"id": "msg_s1", "role": "assistant", "model": "claude-x",
                     "content": [{"type": "text", "text": "still exploring"}]}}) + "\n")
    (proj / SUBAGENT_RAN / "tool-results").mkdir()
    (proj / SUBAGENT_RAN / "tool-results" / "toolu_sub.txt").write_text("grep output")
    os.utime(proj / SUBAGENT_RAN / "tool-results" / "toolu_sub.txt", (later, later))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    monkeypatch.setenv("SESSION_INDEX_MANAGED_SETTINGS", str(tmp_path / "managed.json"))
    db_path = tmp_path / "index.db"
    db = open_db(db_path)
    ingest(db, [str(projects)])
    (proj / f"{HUSK}.jsonl").unlink()
    ingest(db, [str(projects)])
    return {"db": db, "path": db_path, "config": config, "projects": projects, "proj": proj}


EXPECTED = {NEVER_PROMPTED: "never_written", NEVER_FOLDER: "never_written",
            STOPPED: "stopped_writing", HUSK: "husk"}


def rows(db, sql, params=()):
    cur = db.conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def test_the_view_names_each_shape_and_nothing_else(world):
    found = {r["session_id"]: r for r in rows(world["db"], "SELECT * FROM unwritten_transcripts")}
    assert {s: r["cause"] for s, r in found.items()} == EXPECTED
    assert found[NEVER_PROMPTED]["prompts"] == 2 and found[NEVER_PROMPTED]["folder"] is None
    assert found[NEVER_FOLDER]["prompts"] == 0
    assert (found[NEVER_FOLDER]["tool_results"], found[NEVER_FOLDER]["subagent_files"],
            found[NEVER_FOLDER]["workflow_files"]) == (1, 1, 1)
    stopped = found[STOPPED]
    assert stopped["path"] == str(world["proj"] / f"{STOPPED}.jsonl")
    assert stopped["last_prompt_at"] > stopped["last_message_at"]
    assert found[HUSK]["tool_results"] == 1 and found[HUSK]["path"].endswith(f"{HUSK}.jsonl")


@pytest.mark.parametrize("session_id,cause", sorted(EXPECTED.items()))
def test_check_says_missing_with_the_cause(world, session_id, cause):
    verdict = check(world["db"], session_id, config_dir=world["config"])
    assert (verdict.verdict, verdict.exit_code, verdict.details["cause"]) == ("missing", 4, cause)
    issue = {"never_written": "#91284", "husk": "#95403", "stopped_writing": "#53417"}[cause]
    assert issue in verdict.reason
    result = CliRunner().invoke(cli, ["check", session_id, "--db", str(world["path"]), "--json"])
    assert result.exit_code == 4
    assert json.loads(result.output)["details"]["cause"] == cause


@pytest.mark.parametrize("session_id,cause", [(OK, "real_tail"), (SUBAGENT_RAN, "real_tail"),
                                              (SLASH_ONLY, "never_seen"),
                                              (OLD_PROMPT, "never_seen"),
                                              (SUBAGENTS_ONLY, "subagents_only")])
def test_controls_answer_as_before(world, session_id, cause):
    verdict = check(world["db"], session_id, config_dir=world["config"])
    assert verdict.details["cause"] == cause
    assert verdict.verdict == ("resumable" if cause == "real_tail" else "missing")


def test_the_listing(world):
    result = CliRunner().invoke(cli, ["unwritten", "--db", str(world["path"]), "--json"])
    assert result.exit_code == 1
    listed = json.loads(result.output)
    assert {r["session_id"]: r["cause"] for r in listed} == EXPECTED
    assert [r["evidence_at"] for r in listed] == sorted((r["evidence_at"] for r in listed),
                                                       reverse=True)
    result = CliRunner().invoke(cli, ["unwritten", "--help"])
    assert "history.jsonl" in result.output and "session-index unwritten --json" in result.output


def test_the_listing_at_another_time(world):
    """A prompt-only session leaves the listing once its last prompt is past the
    cleanup period (the transcript may then have been cleaned up legitimately)."""
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 40 * 86400))
    result = CliRunner().invoke(cli, ["unwritten", "--db", str(world["path"]), "--json",
                                      "--now", later])
    assert {r["session_id"] for r in json.loads(result.output)} == set(EXPECTED) - {NEVER_PROMPTED}


def site_get(db_path: Path, path: str, status: int = 200):
    ds = web.make_datasette(str(db_path))
    asyncio.run(ds.invoke_startup())
    response = asyncio.run(ds.client.get(path))
    assert response.status_code == status, (path, response.text[:1000])
    return response.text


def test_the_health_page_counts_them(world):
    html = site_get(world["path"], "/-/session-health")
    never = re.search(r'Transcripts never written \(history.jsonl, session folders\)</a>'
                      r'<div class="si-fix">[^<]+</div></td>\s*<td class="si-count">(\d+)</td>',
                      html)
    stopped = re.search(r'Transcripts that stopped while the session went on</a>'
                        r'<div class="si-fix">[^<]+</div></td>\s*<td class="si-count">(\d+)</td>',
                        html)
    assert never and stopped, html[html.index("Problems by class"):][:3000]
    assert (int(never.group(1)), int(stopped.group(1))) == (3, 1)
    missing = re.search(r'Missing: a resume opens no transcript</a>'
                        r'<div class="si-fix">[^<]+</div></td>\s*<td class="si-count">(\d+)</td>',
                        html)
    # every shape, and the subagents-only session (as before); the controls are not missing
    assert int(missing.group(1)) == len(EXPECTED) + 1


@pytest.mark.parametrize("session_id,cause", sorted(EXPECTED.items()))
def test_the_session_page_names_it(world, session_id, cause):
    html = site_get(world["path"], f"/-/sessions/{session_id}")
    assert f'data-cause="{cause}"' in html
    assert f'data-unwritten="{cause}"' in html
    if session_id in (NEVER_PROMPTED, STOPPED):
        assert "<h2>Prompts in history.jsonl</h2>" in html


def test_history_is_read_incrementally_and_losslessly(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    history = config / "history.jsonl"
    first = history_line(NEVER_PROMPTED, "one", 1_796_000_000_000)
    crlf = history_line(NEVER_PROMPTED, "two", 1_796_000_001_000).replace("\n", "\r\n")
    history.write_bytes((first + "not json\n\n" + crlf + '{"display": "partial').encode())
    db = open_db(tmp_path / "i.db")
    assert sidecars.ingest_history(db, str(history), str(config)) == 4
    stored = rows(db, "SELECT line_no, session_id, display, timestamp, error, raw "
                      "FROM history_prompts ORDER BY id")
    assert [(r["line_no"], r["display"], r["error"]) for r in stored] == [
        (1, "one", None), (2, None, "not JSON"), (3, None, "not JSON"), (4, "two", None)]
    assert stored[0]["timestamp"] == "2026-11-30T00:53:20.000Z" and stored[1]["raw"] == "not json"
    assert sidecars.ingest_history(db, str(history), str(config)) == 0   # unchanged: nothing read
    with history.open("a") as f:
        f.write('", "pastedContents": {}, "timestamp": 1796000002000, "project": "/p", '
                f'"sessionId": "{NEVER_PROMPTED}"}}\n')
    assert sidecars.ingest_history(db, str(history), str(config)) == 1   # the partial line, once
    assert rows(db, "SELECT display FROM history_prompts ORDER BY id")[-1]["display"] == "partial"
    data = history.read_bytes()
    rebuilt = b"".join((r["raw"].encode() if isinstance(r["raw"], str) else r["raw"]) + b"\n"
                       for r in rows(db, "SELECT raw FROM history_prompts ORDER BY line_no"))
    assert rebuilt == data   # every line kept, byte for byte
    history.write_text(history_line(OK, "rewritten", 1_796_000_003_000))   # shorter: rewritten
    assert sidecars.ingest_history(db, str(history), str(config)) == 1
    assert [(r["generation"], r["n"]) for r in rows(
        db, "SELECT generation, count(*) AS n FROM history_prompts GROUP BY generation")] == [
        (1, 5), (2, 1)]   # the earlier generation's lines are kept
    data = history.read_bytes()   # the same size, its last line changed, one appended
    history.write_bytes(data.replace(b"rewritten", b"rewrote!!") + history_line(
        OK, "more", 1_796_000_004_000).encode())
    assert sidecars.ingest_history(db, str(history), str(config)) == 2   # read again, whole
    assert [r["display"] for r in rows(db, "SELECT display FROM history_prompts "
                                           "WHERE generation = 3 ORDER BY line_no")] == [
        "rewrote!!", "more"]


def test_the_watcher_logs_each_once(world):
    from indexer.ingest import watch as watchmod

    log: list[str] = []
    watcher = watchmod.Watcher(world["path"], [str(world["projects"])], log=log.append)
    watcher.db = open_db(world["path"])
    for _ in range(2):
        watcher._full_ingest()
    said = [line for line in log if line.startswith("warning: unwritten transcript ")]
    assert sorted(line.split()[3:5] for line in said) == sorted(
        [s, f"({c}):"] for s, c in EXPECTED.items())
    with (world["config"] / "history.jsonl").open("a") as f:   # a new one: logged when it comes
        f.write(history_line("99999999-1111-4222-8333-444444444444", "hello",
                             int(time.time() * 1000)))
    watcher._run_ingest([str(world["proj"] / f"{OK}.jsonl")])
    said = [line for line in log if line.startswith("warning: unwritten transcript ")]
    assert len(said) == len(EXPECTED) + 1 and "99999999-1111" in said[-1]


def test_no_finding_on_real_transcripts(tmp_path):
    """The corpus and the real Claude Code fixtures (a session folder copied
    beside each, as Claude Code writes one) hold none of these shapes."""
    projects = tmp_path / "projects"
    for src in [p for p in sorted(CORPUS.rglob("*.jsonl"))][:200] + sorted(
            (FIXTURES.parent / "claude_code").glob("*/*.jsonl")):
        folder = projects / re.sub(r"[^A-Za-z0-9]", "-", str(src.parent))[-60:]
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, folder / src.name)
    db = open_db(tmp_path / "i.db")
    ingest(db, [str(projects)], config_dir=tmp_path)
    for main in rows(db, "SELECT session_id, path, last_timestamp FROM files "
                         "WHERE kind = 'main' AND last_timestamp IS NOT NULL"):
        sidecar = Path(main["path"]).with_suffix("") / "tool-results"
        sidecar.mkdir(parents=True, exist_ok=True)
        (sidecar / "toolu_x.txt").write_text("output")
        at = datetime.fromisoformat(main["last_timestamp"].replace("Z", "+00:00")).timestamp()
        os.utime(sidecar / "toolu_x.txt", (at, at))   # a tool result is written before its record
    ingest(db, [str(projects)], config_dir=tmp_path)
    assert rows(db, "SELECT count(*) AS n FROM session_folders")[0]["n"] > 0
    assert rows(db, "SELECT * FROM unwritten_transcripts") == []
    assert rows(db, "SELECT count(*) AS n FROM session_verdicts WHERE cause IN "
                    "('never_written', 'husk', 'stopped_writing')")[0]["n"] == 0
    assert unwritten.STOPPED_AFTER_MINUTES == 5


def test_session_folders_are_kept_current_without_writing_when_unchanged(world):
    db, proj = world["db"], world["proj"]
    before = rows(db, "SELECT * FROM session_folders ORDER BY path")
    changes = db.conn.total_changes
    ingest(db, [str(world["projects"])])
    assert rows(db, "SELECT * FROM session_folders ORDER BY path") == before
    assert db.conn.total_changes - changes <= 2   # the run's end (record_kinds), no folder
    (proj / NEVER_FOLDER / "tool-results" / "toolu_02XYZ.txt").write_text("z")
    shutil.rmtree(proj / HUSK)
    ingest(db, [str(world["projects"])])
    after = {r["session_id"]: r for r in rows(db, "SELECT * FROM session_folders")}
    assert after[NEVER_FOLDER]["tool_results"] == 2
    assert after[HUSK]["deleted_at"] is not None   # kept, marked gone
    husk = check(db, HUSK, config_dir=world["config"])
    assert husk.details["cause"] == "deleted"   # no tool results left: as before


def test_history_is_read_only_beside_a_projects_folder_ingested(world, tmp_path):
    """A prompt of a config dir whose transcripts were not all read would look
    unwritten: ingesting one project folder reads no history."""
    db = open_db(tmp_path / "one.db")
    ingest(db, [str(world["proj"])], config_dir=world["config"])
    assert rows(db, "SELECT count(*) AS n FROM history_prompts")[0]["n"] == 0
    assert {r["session_id"]: r["cause"] for r in rows(
        db, "SELECT * FROM unwritten_transcripts")} == {   # their folders say so by themselves
        NEVER_FOLDER: "never_written", HUSK: "never_written"}   # (never indexed here: #95403)


def test_the_husks_fix_restores_it(world):
    verdict = check(world["db"], HUSK, config_dir=world["config"])
    assert verdict.details["fix"] == f"session-index restore {HUSK}"
    result = CliRunner().invoke(cli, ["restore", HUSK, "--db", str(world["path"])])
    assert result.exit_code == 0, result.output
    verdict = check(world["db"], HUSK, config_dir=world["config"])
    assert (verdict.verdict, verdict.details["cause"]) == ("resumable", "real_tail")
    assert HUSK not in {r["session_id"] for r in rows(world["db"],
                                                       "SELECT * FROM unwritten_transcripts")}


# --- what the real Claude Code does with each (marker oracle) -----------------

@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
def test_the_real_cli_fails_or_loses_what_check_says(world, tmp_path):
    """Claude Code 2.1.332 on the same disk: the never-written and husk
    sessions are "No conversation found"; the stopped one loads only what
    was written before it stopped (its second prompt is not sent)."""
    config = tmp_path / "cli" / "config"
    shutil.copytree(world["config"], config)
    cwd = tmp_path / "cli" / "work"
    cwd.mkdir()
    # the CLI opens <projects>/<folder of the cwd>/<id>.jsonl, else scans every folder
    for session_id in (NEVER_PROMPTED, NEVER_FOLDER, HUSK):
        code, out, sent = resume_in(config, session_id, cwd)
        assert code != 0 and "No conversation found" in out and not sent, (session_id, out)
    code, out, sent = resume_in(config, STOPPED, cwd)
    assert code == 0 and sent, out
    said = json.dumps(sent[-1]["messages"])
    assert "run bigtool please" in said and "second prompt here" not in said
