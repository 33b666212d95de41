"""One answer everywhere (issue 25): for every session, the verdict of
`check --json`, the verdict column of `sessions --json`, the session page,
the health page's class and `show`'s header are the same.

Over the real transcripts of ../shared/corpus, the demo, and generated
sessions of every shape the index knows: only subagent transcripts left, a
main transcript deleted beside its subagents, a transcript under another name,
a named file with no message, a third-party provider's ids (generated, and
as the real Claude Code wrote them: tests/fixtures/third_party), a synthetic
tail (with and without a real message before it), an api_error splice, a
late graft.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Transcript, write_jsonl
from indexer.cli import demo_data
from indexer.cli.commands import cli
from indexer.cli.web import make_datasette
from indexer.index.db import open_index
from indexer.ingest.files import ingest
from session_index_web import health

pytestmark = pytest.mark.xdist_group("one-answer")
FIXTURES = Path(__file__).parent / "fixtures" / "third_party"

VERDICTS = {"missing", "poisoned", "wedged", "spliced", "truncated", "resumable"}
SUBAGENTS_ONLY = "a0000000-0000-4000-8000-000000000001"
MAIN_DELETED = "a0000000-0000-4000-8000-000000000002"
OTHER_NAME = "a0000000-0000-4000-8000-000000000003"
NO_MESSAGES = "a0000000-0000-4000-8000-000000000004"
THIRD_PARTY = "a0000000-0000-4000-8000-000000000005"
SYNTHETIC_TAIL = "a0000000-0000-4000-8000-000000000006"
ONLY_SYNTHETIC = "a0000000-0000-4000-8000-000000000007"
SPLICED = "a0000000-0000-4000-8000-000000000008"
RESUMABLE = "a0000000-0000-4000-8000-000000000009"
LATE_GRAFT = "a0000000-0000-4000-8000-00000000000a"
TRUNCATED = "a0000000-0000-4000-8000-00000000000b"
EXPECTED = {
    SUBAGENTS_ONLY: ("missing", "subagents_only"), MAIN_DELETED: ("missing", "deleted"),
    OTHER_NAME: ("missing", "not_named"), NO_MESSAGES: ("missing", "no_messages"),
    THIRD_PARTY: ("resumable", "real_tail"), SYNTHETIC_TAIL: ("poisoned", "synthetic_tail"),
    ONLY_SYNTHETIC: ("poisoned", "synthetic_tail_uncuttable"),
    SPLICED: ("spliced", "api_error_splice"), RESUMABLE: ("resumable", "real_tail"),
    LATE_GRAFT: ("spliced", "late_graft"),
    TRUNCATED: ("truncated", "unreached_after_compaction"),
}


def glm(uuid, text="reply"):
    """An assistant message from a third-party provider through ANTHROPIC_BASE_URL."""
    return {"id": f"2025120315{uuid}d1f2a0c4e5b94d7e", "type": "message", "role": "assistant",
            "model": "glm-5", "content": [{"type": "text", "text": f"{text} {uuid}"}],
            "usage": {"input_tokens": 10, "output_tokens": 5}}


def placeholder(uuid, text="No response requested."):
    """A <synthetic> placeholder Claude Code writes (an API error's text, or
    one of its fixed texts)."""
    return {"id": f"{uuid}-5e0c-4b5e-9b1e-6a0f1d2c3b4a", "type": "message",
            "role": "assistant", "model": "<synthetic>",
            "content": [{"type": "text", "text": text}],
            "usage": {"input_tokens": 0, "output_tokens": 0}}


def generated(projects):
    """The generated sessions, one of each shape, under ``projects``; the
    main transcript of MAIN_DELETED is returned, to delete after the ingest."""
    folder = projects / "-tmp-demo"
    sub = Transcript(SUBAGENTS_ONLY)
    sub.add("s1", None, "user", isSidechain=True, agentId="x1")
    sub.add("s2", "s1", "assistant", isSidechain=True, agentId="x1")
    sub.write(folder / SUBAGENTS_ONLY / "subagents", "agent-x1.jsonl")
    gone = Transcript(MAIN_DELETED)
    gone.add("d1", None, "user")
    gone.add("d2", "d1", "assistant")
    main = gone.write(folder)
    side = Transcript(MAIN_DELETED)
    side.add("d3", None, "user", isSidechain=True, agentId="x2")
    side.write(folder / MAIN_DELETED / "subagents", "agent-x2.jsonl")
    other = Transcript(OTHER_NAME)
    other.add("o1", None, "user")
    other.add("o2", "o1", "assistant")
    other.write(folder, "renamed-by-hand.jsonl")
    write_jsonl(folder / f"{NO_MESSAGES}.jsonl", [
        {"type": "file-history-snapshot", "messageId": "m1", "sessionId": NO_MESSAGES,
         "snapshot": {"messageId": "m1", "trackedFileBackups": {}}}])
    third = Transcript(THIRD_PARTY)
    third.add("t1", None, "user")
    third.add("t2", "t1", "assistant", message=glm("01"), requestId="req_01")
    third.add("t3", "t2", "user")
    third.add("t4", "t3", "assistant", message=glm("02"))
    third.write(folder)
    tail = Transcript(SYNTHETIC_TAIL)
    tail.add("p1", None, "user")
    tail.add("p2", "p1", "assistant")
    tail.add("p3", "p2", "user")
    # named as previous_message_id (not an API error, a requestId): poisoned
    tail.add("p4", "p3", "assistant", message=placeholder("p4"), requestId="req_p4")
    tail.write(folder)
    only = Transcript(ONLY_SYNTHETIC)
    only.add("q1", None, "user")
    only.add("q2", "q1", "assistant", message=placeholder("q2"), requestId="req_q2")
    only.write(folder)
    splice = Transcript(SPLICED)   # seed 000: the reply is orphaned by late api_errors
    splice.add("e1", None, "user", ts="2026-09-01T00:00:00.000Z")
    splice.add("e2", "e1", "assistant", ts="2026-09-01T00:00:05.000Z")
    splice.add("e3", "e1", "system", ts="2026-09-01T00:00:02.000Z", subtype="api_error",
               level="error", error={"status": 429})
    splice.add("e4", "e3", "system", ts="2026-09-01T00:00:05.500Z",
               subtype="stop_hook_summary")
    splice.write(folder)
    graft = Transcript(LATE_GRAFT)   # #62301: a result written late onto an answered call
    graft.add("g1", None, "user", ts="2026-09-01T00:00:00.000Z")
    graft.add("g2", "g1", "assistant", ts="2026-09-01T00:00:01.000Z", message={
        "id": "msg_g2", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "tool_use", "id": "toolu_g", "name": "Bash", "input": {}}]})
    for uid, parent, ts, content in (("g3", "g2", "2026-09-01T00:05:00.000Z", "interrupted"),
                                     ("g6", "g2", "2026-09-03T00:00:00.000Z", "drained")):
        if uid == "g6":
            graft.add("g4", "g3", "user", ts="2026-09-02T00:00:00.000Z")
            graft.add("g5", "g4", "assistant", ts="2026-09-02T00:00:05.000Z")
        graft.add(uid, parent, "user", ts=ts, message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_g", "content": content}]})
    graft.write(folder)
    cut = Transcript(TRUNCATED)   # #46603: a post-compaction parent never written
    cut.add("k1", None, "user", ts="2026-09-01T00:00:00.000Z")
    cut.add("k2", "k1", "assistant", ts="2026-09-01T00:00:01.000Z")
    cut.add("k3", None, "system", subtype="compact_boundary", logicalParentUuid="k2",
            ts="2026-09-01T00:10:00.000Z")
    cut.add("k4", "k3", "user", isCompactSummary=True, ts="2026-09-01T00:10:01.000Z")
    cut.add("k5", "k4", "user", ts="2026-09-01T00:11:00.000Z")
    cut.add("k6", "k5", "assistant", ts="2026-09-01T00:11:01.000Z")
    cut.add("k7", "never-written", "user", ts="2026-09-01T00:20:00.000Z")
    cut.add("k8", "k7", "assistant", ts="2026-09-01T00:20:01.000Z")
    cut.write(folder)
    fine = Transcript(RESUMABLE)
    fine.add("r1", None, "user")
    fine.add("r2", "r1", "assistant")
    fine.write(folder)
    return main


# Sessions the real Claude Code 2.1.332 wrote against a third-party provider
# (tests/fixtures/third_party/README.md): their verdict.
REAL_THIRD_PARTY = {"glm5_session.jsonl": ("resumable", "real_tail"),
                    "glm5_session_request_ids.jsonl": ("resumable", "real_tail"),
                    # An API-error placeholder is never named as previous_message_id
                    # (Claude Code 2.1.132 and newer): the resume goes on.
                    "glm5_api_error_synthetic.jsonl": ("resumable", "real_tail")}


def real_third_party(projects) -> dict:
    """Copy the real binary's transcripts in under their session ids, as
    Claude Code names them; {session_id: expected (verdict, cause)}."""
    expected = {}
    for name, verdict in REAL_THIRD_PARTY.items():
        data = (FIXTURES / name).read_bytes()
        sid = json.loads(next(line for line in data.splitlines()
                              if b'"sessionId"' in line))["sessionId"]
        (projects / "-tmp-glm").mkdir(parents=True, exist_ok=True)
        (projects / "-tmp-glm" / f"{sid}.jsonl").write_bytes(data)
        expected[sid] = verdict
    return expected


def surfaces(db_path, config, sessions: list[str]) -> dict:
    """{session_id: {surface: verdict}} from the five surfaces."""
    runner = CliRunner()
    args = ["--db", str(db_path)]
    found = {sid: {} for sid in sessions}
    # check --json, per session (exit code and verdict agree).
    for sid in sessions:
        out = runner.invoke(cli, ["check", sid, *args, "--json", "--config-dir", str(config)])
        verdict = json.loads(out.stdout)
        assert out.exit_code == {"resumable": 0, "missing": 4, "poisoned": 5,
                                 "spliced": 6, "wedged": 11,
                                 "truncated": 12}[verdict["verdict"]], (sid, out.output)
        found[sid]["check"] = verdict["verdict"]
    # sessions --json: the verdict column.
    out = runner.invoke(cli, ["sessions", *args, "--json", "--limit", "100000"])
    assert out.exit_code == 0, out.output
    for row in json.loads(out.stdout):
        if row["session_id"] in found:
            found[row["session_id"]]["sessions"] = row["verdict"]
    # show's header: its first line is 'VERDICT: REASON', as check prints it.
    for sid in sessions:
        out = runner.invoke(cli, ["show", sid, *args])
        assert out.exit_code == 0, (sid, out.output)
        found[sid]["show"] = out.stdout.split(":", 1)[0]
    ds = make_datasette(db_path)
    name = db_path.stem

    async def pages():
        for sid in sessions:
            page = await ds.client.get(f"/-/sessions/{quote(sid, safe='')}")
            assert page.status_code == 200, sid
            [verdict] = re.findall(r'class="si-verdict si-verdict-(\w+)"', page.text)
            found[sid]["session page"] = verdict
        # The health page's classes: each verdict's class links to the
        # sessions it lists; a session in none of them is resumable.
        health = (await ds.client.get("/-/session-health")).text
        for sid in sessions:
            found[sid]["health page"] = "resumable"
        for verdict in sorted(VERDICTS - {"resumable"}):
            link = f"/{name}/session_verdicts?verdict={verdict}"
            assert f'href="{link}"' in health, verdict
            listed = await ds.client.get(
                f"/{name}/session_verdicts.json?verdict={verdict}&_shape=array&_size=max"
                "&_col=session_id&_col=host")
            for row in listed.json():
                if row["session_id"] in found and row["host"] == "":
                    assert found[row["session_id"]]["health page"] == "resumable", row
                    found[row["session_id"]]["health page"] = verdict

    asyncio.run(pages())
    return found


def assert_health_rows_are_the_views_filter(db_path):
    """Each verdict's health row (narrowed before the view is computed, for
    speed) lists exactly the sessions the view's filter does."""
    conn = sqlite3.connect(db_path)
    try:
        for check in health.CHECKS:
            if check.name != "session_verdicts":
                continue
            verdict = check.link.split("=", 1)[1]
            listed = sorted(r[0] for r in conn.execute(check.sql))
            assert listed == sorted(r[0] for r in conn.execute(
                "SELECT session_id FROM session_verdicts WHERE verdict = ?", [verdict])), verdict
    finally:
        conn.close()


def assert_one_answer(found: dict):
    differ = {sid: s for sid, s in found.items()
              if len(set(s.values())) != 1 or len(s) != 5 or not set(s.values()) <= VERDICTS}
    assert not differ, differ


def test_every_surface_gives_the_same_verdict_for_every_session(tmp_path):
    config = tmp_path / "claude"
    projects = config / "projects"
    main = generated(projects)
    expected = dict(EXPECTED, **real_third_party(projects))
    db_path = tmp_path / "sessions.db"
    db = open_index(db_path, create=True)
    sources = [str(projects)] + ([str(CORPUS)] if CORPUS.is_dir() else [])
    assert ingest(db, sources, config_dir=config).errors == []
    main.unlink()   # cleanup took the main transcript and left its subagents
    ingest(db, [str(projects)], config_dir=config)
    sessions = [r[0] for r in db.conn.execute(
        "SELECT session_id FROM sessions ORDER BY session_id")]
    db.conn.close()
    assert set(expected) <= set(sessions)
    if CORPUS.is_dir():
        assert len(sessions) > 60
    found = surfaces(db_path, config, sessions)
    assert_one_answer(found)
    assert_health_rows_are_the_views_filter(db_path)
    # The shapes are what they are meant to be, in every surface (and the
    # verdict's cause says why).
    for sid, (verdict, cause) in expected.items():
        assert set(found[sid].values()) == {verdict}, (sid, found[sid])
    out = CliRunner().invoke(cli, ["check", SUBAGENTS_ONLY, "--db", str(db_path), "--json",
                                   "--config-dir", str(config)])
    assert json.loads(out.stdout)["details"]["cause"] == "subagents_only"
    # show on a session with only subagent transcripts left: its verdict, and
    # that there is no conversation to show (it exited 3 before).
    out = CliRunner().invoke(cli, ["show", SUBAGENTS_ONLY, "--db", str(db_path)])
    assert out.exit_code == 0 and out.stdout.startswith(
        "missing: only subagent transcripts of this session are in the index (1)")
    assert "fix: start a new session" in out.stdout and "no conversation to show" in out.stdout
    causes = {r["session_id"]: r["cause"] for r in json.loads(CliRunner().invoke(
        cli, ["sessions", "--db", str(db_path), "--json", "--limit", "100000"]).stdout)}
    assert {sid: causes[sid] for sid in expected} == {
        sid: cause for sid, (_, cause) in expected.items()}


def test_the_demo_gives_one_answer_everywhere(tmp_path):
    db_path = demo_data.build_demo(tmp_path)
    db = open_index(db_path)
    sessions = [r[0] for r in db.conn.execute(
        "SELECT session_id FROM sessions ORDER BY session_id")]
    db.conn.close()
    found = surfaces(db_path, tmp_path, sessions)
    assert_one_answer(found)
    assert_health_rows_are_the_views_filter(db_path)
    # Every verdict is in the demo.
    assert {next(iter(s.values())) for s in found.values()} == VERDICTS
