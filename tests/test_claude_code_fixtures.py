"""Transcripts written by the real Claude Code, kept as fixtures.

tests/fixtures/claude_code/make_fixtures.py ran the bundled Claude Code
(2.1.332) against the fake Messages API of indexer/repair/oracle.py: one
folder per scenario (a tool call, parallel calls, Skills, API errors, manual
and auto compaction, --max-turns, an interrupted tool, --resume turns), each
transcript byte for byte as the CLI wrote it, with manifest.json (the CLI
version, what was run). Here they are ingested and exported byte for byte,
listed as sessions, and (marker ``oracle``, with the binary) resumed again by
the real CLI and held to the index's resume chain.

The fake API's answers that make_fixtures.py scripts (errors with headers, a
large usage, the Nth request, compaction summaries) are tested at the end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import Index
from indexer.cli.commands import cli
from indexer.repair import oracle
from oracle_checks import CLAUDE, agree

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
SCENARIOS = sorted(p.parent.name for p in FIXTURES.glob("*/manifest.json"))


def manifest(name: str) -> dict:
    return json.loads((FIXTURES / name / "manifest.json").read_text())


def records(name: str) -> list[dict]:
    m = manifest(name)
    path = FIXTURES / name / f"{m['session_id']}.jsonl"
    return [json.loads(line) for line in path.read_bytes().splitlines()]


@pytest.fixture(scope="module")
def fixtures_index(tmp_path_factory):
    index = Index(tmp_path_factory.mktemp("claude_code"))
    index.ingest(FIXTURES)
    return index


def test_every_scenario_of_the_script_has_its_fixture():
    import importlib.util   # (the script is not a package module)
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script     # its dataclasses look their module up
    spec.loader.exec_module(script)
    assert SCENARIOS == sorted(script.SCENARIOS)
    for name in SCENARIOS:
        m = manifest(name)
        assert m["scenario"] == name and m["claude_version"] == "2.1.332", name
        assert m["session_id"] == script.session_uuid(name)
        assert m["description"] == " ".join(script.SCENARIOS[name].__doc__.split())
        files = {f["path"]: f["bytes"] for f in m["files"]}
        on_disk = {str(p.relative_to(FIXTURES / name)): p.stat().st_size
                   for p in (FIXTURES / name).rglob("*.jsonl")}
        assert files == on_disk and f"{m['session_id']}.jsonl" in files, name



def test_the_script_without_a_binary_says_so_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(FIXTURES / "make_fixtures.py"), "--claude",
                           str(tmp_path / "no-such-claude"), "--only", "one_tool"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr == f"Error: not an executable file: {tmp_path / 'no-such-claude'}\n"

@pytest.mark.parametrize("name", SCENARIOS)
def test_every_line_is_stored_and_exported_byte_for_byte(fixtures_index, tmp_path, name):
    m = manifest(name)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["export", m["session_id"], "--out", str(out),
                                      "--db", str(fixtures_index.path)])
    assert result.exit_code == 0, result.output
    for f in m["files"]:
        original = (FIXTURES / name / f["path"]).read_bytes()
        assert (out / name / f["path"]).read_bytes() == original, f["path"]
    main = (FIXTURES / name / f"{m['session_id']}.jsonl").read_bytes()
    raws = [r["raw"] for r in fixtures_index.rows(
        "SELECT r.raw FROM records r JOIN files f ON f.id = r.file_id "
        "WHERE f.path = ? ORDER BY r.line_no", [str(FIXTURES / name / f"{m['session_id']}.jsonl")])]
    assert [raw.encode() for raw in raws] == main.splitlines()


def test_the_session_list_holds_every_fixture_session(fixtures_index):
    result = CliRunner().invoke(cli, ["sessions", "--json", "--limit", "100",
                                      "--db", str(fixtures_index.path)])
    assert result.exit_code == 0, result.output
    listed = {s["session_id"]: s for s in json.loads(result.output)}
    assert sorted(listed) == sorted(manifest(n)["session_id"] for n in SCENARIOS)
    for name in SCENARIOS:
        assert listed[manifest(name)["session_id"]]["records"] == len(records(name)), name


@pytest.mark.parametrize("name, trigger", [("manual_compact", "manual"),
                                           ("auto_compact", "auto")])
def test_a_compaction_boundary_keeps_its_preserved_segment(fixtures_index, name, trigger):
    sid = manifest(name)["session_id"]
    rows = fixtures_index.rows(
        "SELECT parent_uuid, logical_parent_uuid, raw FROM records "
        "WHERE session_id = ? AND type = 'system' AND subtype = 'compact_boundary'", [sid])
    assert len(rows) == 1
    boundary = json.loads(rows[0]["raw"])
    meta = boundary["compactMetadata"]
    segment = meta["preservedSegment"]
    assert meta["trigger"] == trigger and rows[0]["parent_uuid"] is None
    assert rows[0]["logical_parent_uuid"] == boundary["logicalParentUuid"]
    by_uuid = {r["uuid"]: r for r in records(name) if r.get("uuid")}
    # The head is the last answer before the compaction; the anchor the summary.
    assert by_uuid[segment["headUuid"]]["message"]["content"] == [
        {"type": "text", "text": "Goodbye!"}]
    assert by_uuid[segment["anchorUuid"]]["isCompactSummary"] is True
    assert segment["tailUuid"] in by_uuid
    assert meta["preservedMessages"]["uuids"][0] == segment["headUuid"]
    assert meta["preservedMessages"]["uuids"][-1] == segment["tailUuid"]


def test_the_cli_wrote_the_shapes_the_scenarios_name():
    def assistants(name):
        return [r for r in records(name) if r.get("type") == "assistant"]

    # Parallel calls: one assistant record per block, one message.id.
    par = [r for r in assistants("parallel_reads") if r["message"]["id"] == "msg_par_1"]
    assert [b["type"] for r in par for b in r["message"]["content"]] == [
        "text", "tool_use", "tool_use", "tool_use"]
    # Given up after retries: one <synthetic> API-error record per status.
    errors = [r for r in assistants("api_errors_gave_up") if r["message"]["model"] == "<synthetic>"]
    assert [r["isApiErrorMessage"] for r in errors] == [True, True, True]
    assert [r["message"]["content"][0]["text"].split(" ", 2)[2][:5] for r in errors] == [
        "Reque", "529 O", "500 I"]
    # Retried then answered: api_error system records, no synthetic answer.
    retried = records("api_errors_retried")
    assert sum(r.get("subtype") == "api_error" for r in retried) == 3
    assert not any(r["message"]["model"] == "<synthetic>" for r in assistants("api_errors_retried"))
    # An interrupted tool: the resume writes "No response requested.", not an API error.
    placeholder = [r for r in assistants("interrupted_tool") if r["message"]["model"] == "<synthetic>"]
    assert [(r["message"]["content"][0]["text"], r["isApiErrorMessage"]) for r in placeholder] == [
        ("No response requested.", False)]
    # The Skill's body: an isMeta user record after the Skill's tool_result.
    for name in ("skill_alone", "skill_parallel", "skill_parallel_read_first"):
        bodies = [r for r in records(name) if r.get("type") == "user" and r.get("isMeta")
                  and "Ahoy" in json.dumps(r["message"]["content"])]
        assert len(bodies) == 1, name


# --- The real CLI resumes them ------------------------------------------------

# Where the index and the CLI differ today: none (the compaction fixtures
# differed until the relink of what a compaction keeps was modelled).
DIFFERS: dict = {}


@pytest.fixture(scope="module")
def api():
    with oracle.FakeMessagesAPI() as server:
        yield server


@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, raises=AssertionError,
                                            reason=DIFFERS[n])) if n in DIFFERS else n
    for n in SCENARIOS])
def test_the_cli_resumes_each_fixture_as_the_index_says(index, api, name):
    shutil.copytree(FIXTURES / name, index.projects / name)
    path = index.projects / name / f"{manifest(name)['session_id']}.jsonl"
    counts, sent = agree(index, api, path)
    assert counts["kept"] > 0 and sent.messages



@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
@pytest.mark.parametrize("name", ["skill_alone", "skill_parallel", "skill_parallel_read_first"])
def test_the_cli_sends_the_skill_body_and_the_index_keeps_it(index, api, name):
    # verify.compare reads tool ids and assistant text only: the Skill's body
    # (a user text record, anthropics/claude-code#81917) is checked here.
    shutil.copytree(FIXTURES / name, index.projects / name)
    path = index.projects / name / f"{manifest(name)['session_id']}.jsonl"
    counts, sent = agree(index, api, path)
    sent_user_text = [b.get("text", "") for m in sent.messages if m.get("role") == "user"
                      for b in (m["content"] if isinstance(m["content"], list) else [])]
    assert sum("Greet the user with the word Ahoy" in t for t in sent_user_text) == 1
    body = index.rows(
        "SELECT r.uuid, a.record_id IS NOT NULL AS on_chain, o.cause FROM records r "
        "LEFT JOIN leaf_ancestry a ON a.record_id = r.id AND a.rule = 'resume' "
        "LEFT JOIN orphans o ON o.record_id = r.id "
        "WHERE r.type = 'user' AND r.is_meta AND r.raw LIKE '%Greet the user with the word Ahoy%'")
    assert [(b["on_chain"], b["cause"]) for b in body] == [(1, None)]

# --- The fake API's scripted answers -------------------------------------------

def post(api, body: dict):
    request = urllib.request.Request(f"http://127.0.0.1:{api.port}/v1/messages",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def test_the_fake_api_answers_the_nth_request_with_errors_headers_and_usage():
    rate_limited = {"status": 429, "type": "rate_limit_error", "error": "slow down",
                    "headers": {"retry-after": "0"}}
    reply = oracle.scripted(rate_limited, lambda body: {
        "id": "msg_2", "blocks": [{"type": "text", "text": body["messages"][0]["content"]}],
        "usage": {"input_tokens": 190000}})
    with oracle.FakeMessagesAPI(reply) as api:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        status, headers, answer = post(api, body)
        assert (status, headers["retry-after"]) == (429, "0")
        assert answer == {"type": "error", "error": {"type": "rate_limit_error",
                                                     "message": "slow down"}}
        status, headers, answer = post(api, body)
        assert status == 200 and "retry-after" not in headers
        assert answer["content"] == [{"type": "text", "text": "hi"}]
        assert answer["usage"] == {"input_tokens": 190000, "output_tokens": 1}
        assert post(api, body)[2]["content"] == [{"type": "text", "text": oracle.REPLY}]
    assert reply.calls == 3


def test_the_fake_api_answers_a_compaction_request_with_a_summary():
    asks = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": f"...{oracle.SUMMARY_ASKED}, following this structure"}]}]}
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    assert oracle.asks_for_summary(asks) and not oracle.asks_for_summary(plain)
    with oracle.FakeMessagesAPI(oracle.summarising(summary="all about 42")) as api:
        text = post(api, asks)[2]["content"][0]["text"]
        assert text.endswith("<summary>all about 42</summary>")
        assert post(api, plain)[2]["content"] == [{"type": "text", "text": oracle.REPLY}]
