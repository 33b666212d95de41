"""The thinking-signature wedge (issue 27): the rule that tells a thinking
block the API refuses from the harmless shapes (thinking.py, Python and SQL
held equal), and every surface that names it: check (exit 11), the wedged
listing, the health page, the session page; the corpus has none.

The real Claude Code against a fake API that refuses as the real one does:
tests/test_wedged_oracle.py."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Index
from indexer.cli import web
from indexer.cli.commands import cli
from indexer.repair import check as checkmod
from indexer.transcripts import thinking
from session_index_web import format as web_format

FIXTURES = Path(__file__).parent / "fixtures" / "thinking"
SIG = "EqgCClkIDBgCKkB" + "Ab9+/" * 60           # whole: 315 base64 characters
STUCK, TODAY, OLDEST = "2.1.154", "2.1.332", "2.1.97"


def session_id(name: str) -> str:
    return json.loads((FIXTURES / f"{name}.jsonl").read_text().splitlines()[0])["sessionId"]


def entries_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- The rule -------------------------------------------------------------------

def reply(blocks, *, model="claude-opus-4-7", version=STUCK, message_id="msg_01A", n=0):
    return {"type": "assistant", "uuid": f"a{n}", "parentUuid": None, "sessionId": "s",
            "version": version, "timestamp": f"2026-05-28T00:00:{n:02d}.000Z",
            "message": {"id": message_id, "role": "assistant", "model": model,
                        "content": blocks}}


SHOWN = {"type": "thinking", "thinking": "Let me look.", "signature": SIG}
EMPTY_SIGNED = {"type": "thinking", "thinking": "", "signature": SIG}

# (name, entries, the faults expected: (entry, block, fault))
CASES = [
    ("omitted display: empty text, whole signature, nothing shown", [
        reply([EMPTY_SIGNED, {"type": "text", "text": "hi"}]), reply([EMPTY_SIGNED], n=1)], []),
    ("blanked: the same model and version showed thinking", [
        reply([SHOWN]), reply([EMPTY_SIGNED], n=1)], [(1, 0, "blanked")]),
    ("another model showed thinking: no evidence", [
        reply([SHOWN], model="claude-sonnet-4-5"), reply([EMPTY_SIGNED], n=1)], []),
    ("another version showed thinking: no evidence", [
        reply([SHOWN], version="2.1.71"), reply([EMPTY_SIGNED], n=1)], []),
    ("unsigned and empty (#68768)", [
        reply([{"type": "thinking", "thinking": "", "signature": ""},
               {"type": "text", "text": "x"}])], [(0, 0, "unsigned")]),
    ("no signature key", [reply([{"type": "thinking", "thinking": "why"}])],
     [(0, 0, "unsigned")]),
    ("a null signature", [reply([{"type": "thinking", "thinking": "why", "signature": None}])],
     [(0, 0, "unsigned")]),
    ("24 characters (#21726)", [reply([{"type": "thinking", "thinking": "a",
                                        "signature": SIG[:24]}])], [(0, 0, "truncated")]),
    ("cut with an ellipsis", [reply([{"type": "thinking", "thinking": "a",
                                      "signature": SIG[:250] + "\u2026"}])],
     [(0, 0, "truncated")]),
    ("shortest whole signature", [reply([{"type": "thinking", "thinking": "a",
                                          "signature": SIG[:thinking.MIN_SIGNATURE_CHARS]}])],
     []),
    ("redacted_thinking without data", [reply([{"type": "redacted_thinking"}])],
     [(0, 0, "unsigned")]),
    ("redacted_thinking with data", [reply([{"type": "redacted_thinking", "data": SIG}])], []),
    ("third party: text, no signature (GLM)", [
        reply([{"type": "thinking", "thinking": "think"}], model="glm-5",
              message_id="20251203151533d1f2a0c4e5b94d7e01")], []),
    ("a msg_ id on another provider's model", [
        reply([{"type": "thinking", "thinking": "think"}], model="deepseek-chat")], []),
    ("Bedrock ids are Anthropic's", [
        reply([{"type": "thinking", "thinking": "", "signature": ""}],
              message_id="msg_bdrk_01Rs9Xf5")], [(0, 0, "unsigned")]),
    ("odd content", [reply(["a string", 5, None, {"type": "thinking", "thinking": 7,
                                                 "signature": SIG}]),
                     reply("not a list", n=1)], []),
]


def _sql_faults(tmp_path, entries) -> list[tuple[int, int, str]]:
    index = Index(tmp_path)
    path = index.projects / "p" / "s.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    index.ingest()
    assert_cache_rows_agree(index)
    return sorted((r["line_no"] - 1, r["block"], r["fault"]) for r in index.rows(
        thinking.thinking_faults_sql("1")))


def assert_cache_rows_agree(index):
    """thinking_cache's rows as ingest classifies them in Python
    (thinking.cache_rows) are the SQL's (THINKING_CACHE_ROWS_TEMPLATE)."""
    conn = index.db.conn
    python = thinking.cache_rows(conn.execute(
        thinking.CACHE_CANDIDATES_TEMPLATE.format(files="1")))
    sql = conn.execute(thinking.THINKING_CACHE_ROWS_TEMPLATE.format(files="1")).fetchall()
    assert sorted(python, key=repr) == sorted(sql, key=repr)


@pytest.mark.parametrize("name, entries, expected", CASES, ids=[c[0] for c in CASES])
def test_the_rule_in_python_and_in_sql(tmp_path, name, entries, expected):
    assert thinking.faults(entries) == expected
    assert _sql_faults(tmp_path, entries) == expected


def test_the_rule_agrees_on_every_fixture_and_corpus_file(tmp_path):
    index = Index(tmp_path)
    paths = sorted(FIXTURES.glob("*.jsonl")) + (
        sorted(CORPUS.rglob("*.jsonl")) if CORPUS.is_dir() else [])
    index.ingest(*paths)
    for path in paths:
        file_id = index.file_id(path)
        entries = []
        for line in path.read_bytes().splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                entries.append(None)
        python = sorted((i + 1, j, f) for i, j, f in thinking.faults(entries))
        sql = sorted((r["line_no"], r["block"], r["fault"]) for r in index.rows(
            thinking.thinking_faults_sql("{a}.file_id = " + str(file_id))))
        assert python == sql, path
    assert_cache_rows_agree(index)


def _chained(n, blocks, *, model="claude-opus-4-7", version=STUCK, sid="s"):
    """A prompt and its reply with ``blocks``, the n-th turn of a chain."""
    prompt = {"type": "user", "uuid": f"u{n}", "parentUuid": f"a{n - 1}" if n else None,
              "sessionId": sid, "version": version,
              "timestamp": f"2026-05-28T00:{n:02d}:00.000Z",
              "message": {"role": "user", "content": f"turn {n}"}}
    answer = reply(blocks, model=model, version=version, message_id=f"msg_{n:04d}", n=n)
    answer.update(parentUuid=f"u{n}", sessionId=sid,
                  timestamp=f"2026-05-28T00:{n:02d}:01.000Z")
    return [prompt, answer]


def test_the_view_reads_what_ingest_keeps_as_lines_come(index):
    """Issue 29: thinking_faults reads thinking_cache, kept as derive adds
    records (a file's new records only, all of them when it is rewritten),
    equal to thinking_faults_definition (its SQL over the records) after
    every append: a blanked block shows once a later line shows thinking of
    its model and version; a rewrite drops what the old lines held."""
    sid = "27272727-2929-4000-8000-000000000000"
    path = index.projects / "p" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    turns = [
        _chained(0, [EMPTY_SIGNED, {"type": "text", "text": "hi"}], sid=sid),
        _chained(1, [{"type": "thinking", "thinking": "", "signature": SIG[:24]}], sid=sid),
        _chained(2, [{"type": "redacted_thinking"}], model="claude-sonnet-4-5", sid=sid),
        _chained(3, [SHOWN], sid=sid),                       # the evidence turn 0 was blanked
        _chained(4, [{"type": "thinking", "thinking": "", "signature": ""}], sid=sid),
    ]
    seen = []
    for turn in turns:
        with open(path, "a") as f:
            f.write("".join(json.dumps(e) + "\n" for e in turn))
        index.ingest()
        index.assert_caches_match_definitions()
        seen.append(sorted((r["line_no"], r["fault"], r["latest"]) for r in index.rows(
            "SELECT * FROM thinking_faults")))
    assert seen[0] == []            # no evidence yet: an omitted display
    assert seen[2] == [(4, "truncated", 0), (6, "unsigned", 1)]
    assert seen[3] == [(2, "blanked", 0), (4, "truncated", 0), (6, "unsigned", 0)]
    assert seen[4] == [(2, "blanked", 0), (4, "truncated", 0), (6, "unsigned", 0),
                       (10, "unsigned", 1)]
    assert index.value("SELECT count(*) FROM thinking_cache") > 0
    path.write_text("".join(json.dumps(e) + "\n" for e in turns[3]))   # rewritten shorter
    index.ingest()
    index.assert_caches_match_definitions()
    assert index.rows("SELECT * FROM thinking_faults") == []


@pytest.mark.parametrize("version, key, fault, stuck", [
    ("2.1.1", 2001001, "blanked", True), ("2.1.97", 2001097, "blanked", True),
    ("2.1.154", 2001154, "blanked", True), ("2.1.160", 2001160, "blanked", True),
    ("2.1.161", 2001161, "blanked", False), ("2.1.167", 2001167, "truncated", True),
    ("2.1.169", 2001169, "truncated", False), ("2.1.170", 2001170, "unsigned", True),
    ("2.1.183", 2001183, "unsigned", False), ("2.1.332", 2001332, "unsigned", False),
    ("10.2.3-beta", 10002003, "blanked", False), (None, None, "blanked", False),
    ("2.1", None, "unsigned", False), ("x.1.2", None, "unsigned", False),
    ("2.1.154", 2001154, "no such fault", False)])
def test_which_versions_stay_stuck_in_python_and_sql(index, version, key, fault, stuck):
    assert (thinking.version_key(version), thinking.stays_stuck(version, fault)) == (key, stuck)
    conn = index.db.conn
    assert conn.execute("SELECT " + thinking.VERSION_KEY.format(v=":v"),
                        {"v": version}).fetchone()[0] == key
    assert conn.execute("SELECT " + thinking.STAYS_STUCK.format(v=":v", fault=":f"),
                        {"v": version, "f": fault}).fetchone()[0] == int(stuck)


# --- The surfaces ---------------------------------------------------------------

@pytest.fixture
def fixtures_index(tmp_path):
    index = Index(tmp_path)
    folder = index.projects / "-home-dev-shop"
    folder.mkdir(parents=True)
    for path in FIXTURES.glob("*.jsonl"):
        target = folder / f"{session_id(path.stem)}.jsonl"
        shutil.copyfile(path, target)
        old = target.stat().st_mtime - 600
        os.utime(target, (old, old))
    index.ingest()
    index.config = tmp_path
    return index


def invoke(index, *args):
    return CliRunner().invoke(cli, [*args, "--db", str(index.path)], catch_exceptions=False)


def check(index, name, *extra):
    out = invoke(index, "check", session_id(name), "--config-dir", str(index.config), "--json",
                 *extra)
    return out.exit_code, json.loads(out.output)


# (fixture, its verdict and cause, the latest message's faults, earlier faults)
VERDICTS = [
    ("blanked_latest", "wedged", "thinking_refused", ["blanked"], ["blanked", "blanked"]),
    ("unsigned_latest", "wedged", "thinking_refused", ["unsigned"], ["unsigned"]),
    ("truncated_earlier", "resumable", "real_tail", [], ["truncated", "unsigned"]),
    ("omitted_display", "resumable", "real_tail", [], []),
]


@pytest.mark.parametrize("name, verdict, cause, latest, earlier", VERDICTS,
                         ids=[v[0] for v in VERDICTS])
def test_check_and_the_view_name_each_fixture(fixtures_index, name, verdict, cause, latest,
                                              earlier):
    code, answer = check(fixtures_index, name)
    assert (code, answer["verdict"], answer["details"]["cause"]) == (
        {"wedged": 11, "resumable": 0}[verdict], verdict, cause)
    rows = fixtures_index.rows("SELECT fault, latest, stuck FROM thinking_faults "
                               "WHERE session_id = ? ORDER BY line_no", [session_id(name)])
    assert sorted(r["fault"] for r in rows if r["latest"]) == latest
    assert sorted(r["fault"] for r in rows if not r["latest"]) == earlier
    assert all(r["stuck"] == r["latest"] for r in rows)   # both fixtures' versions stay stuck
    if verdict == "wedged":
        assert "Claude Code" in answer["reason"] and "repair" in answer["details"]["fix"]
        assert answer["details"]["thinking"]["fault"] == latest[0]
    else:
        assert "thinking" not in answer["details"] and not any(
            "thinking" in w for w in answer["warnings"])


def test_check_asks_the_version_that_will_resume(fixtures_index):
    code, answer = check(fixtures_index, "blanked_latest", "--claude-version", TODAY)
    assert (code, answer["verdict"]) == (0, "resumable")
    assert [w for w in answer["warnings"] if "thinking is lost" in w]
    code, answer = check(fixtures_index, "blanked_latest", "--claude-version", OLDEST)
    assert (code, answer["verdict"]) == (11, "wedged")
    # 2.1.169 recovers from a cut signature's 400, not yet from a missing one's
    code, answer = check(fixtures_index, "unsigned_latest", "--claude-version", "2.1.169")
    assert (code, answer["verdict"]) == (11, "wedged")
    assert "2.1.183 and newer strip" in answer["reason"]
    code, answer = check(fixtures_index, "unsigned_latest", "--claude-version", "2.1.183")
    assert (code, answer["verdict"]) == (0, "resumable")
    code, answer = check(fixtures_index, "omitted_display", "--claude-version", STUCK)
    assert (code, answer["verdict"], answer["warnings"]) == (0, "resumable", [])
    out = invoke(fixtures_index, "check", session_id("unsigned_latest"), "--config-dir",
                 str(fixtures_index.config))
    assert out.exit_code == 11 and out.output.startswith("wedged: the latest assistant message")


@pytest.mark.parametrize("version", ["bogus", "", "2.1", "x.1.2"])
def test_a_claude_version_that_is_not_one_is_a_usage_error(fixtures_index, version):
    # Read as None, it was taken for today's Claude Code: wedged became resumable.
    out = CliRunner().invoke(cli, ["check", session_id("blanked_latest"), "--config-dir",
                                   str(fixtures_index.config), "--db", str(fixtures_index.path),
                                   "--claude-version", version])
    assert out.exit_code == 2, out.output
    assert f"{version!r} is not a Claude Code version" in out.output
    with pytest.raises(thinking.NotAVersion):   # the library's check refuses it too
        checkmod.check(fixtures_index.db, session_id("blanked_latest"),
                       config_dir=fixtures_index.config, claude_version=version)


def test_check_help_and_readme_name_exit_11():
    out = CliRunner().invoke(cli, ["check", "--help"])
    text = " ".join(out.output.split())
    assert "wedged (11)" in text and "--claude-version" in text
    # the exit codes, in the CLI reference (docs/reference/cli.md; it was the README's)
    readme = (Path(__file__).parent.parent / "docs" / "reference" / "cli.md").read_text()
    assert "`11` `check`: wedged" in readme or "`11` the `check` verdict wedged" in readme


def test_the_wedged_listing(fixtures_index):
    out = invoke(fixtures_index, "wedged", "--json")
    assert out.exit_code == 1
    rows = json.loads(out.output)
    assert sorted((r["session_id"], r["fault"], r["stuck"]) for r in rows) == sorted([
        (session_id("blanked_latest"), "blanked", 1),
        (session_id("unsigned_latest"), "unsigned", 1)])


def test_no_listing_rows_exit_0(index):
    out = invoke(index, "wedged")
    assert (out.exit_code, out.output) == (0, "")


def _web(index):
    ds = web.make_datasette(index.path)
    asyncio.run(ds.invoke_startup())

    def get(path):
        response = asyncio.run(ds.client.get(path))
        assert response.status_code == 200, (path, response.text[:1000])
        return response.text
    return get


def test_the_health_page_and_the_session_page_name_it(fixtures_index):
    get = _web(fixtures_index)
    health = get("/-/session-health")
    assert "Wedged: the latest message" in health
    assert "Refused thinking in earlier messages" in health
    page = get(web_format.session_path(session_id("blanked_latest")))
    assert 'data-verdict="wedged"' in page and 'data-class="wedged" data-stuck="1"' in page
    assert 'data-class="thinking_faults"' in page      # the earlier blanked blocks
    page = get(web_format.session_path(session_id("truncated_earlier")))
    assert 'data-verdict="resumable"' in page and 'data-class="wedged"' not in page
    assert 'data-class="thinking_faults"' in page
    page = get(web_format.session_path(session_id("omitted_display")))
    assert 'data-class="wedged"' not in page and 'data-class="thinking_faults"' not in page


def test_repair_plans_the_cut_and_the_strips(fixtures_index):
    out = invoke(fixtures_index, "repair", session_id("blanked_latest"), "--json")
    plan = json.loads(out.output)
    reasons = sorted({(c["action"], c["reason"]) for c in plan["changes"]})
    assert reasons == [("drop", "refused_thinking"), ("drop", "wedged_tail"),
                       ("reparent", "refused_thinking")]
    out = invoke(fixtures_index, "repair", session_id("omitted_display"))
    assert out.output == "nothing to repair\n"


def test_repair_strips_a_refused_block_and_keeps_the_rest_of_the_line(tmp_path):
    index = Index(tmp_path)
    path = index.projects / "p" / "s.jsonl"
    path.parent.mkdir(parents=True)
    prompt = {"type": "user", "uuid": "u0", "parentUuid": None, "sessionId": "s",
              "version": STUCK, "timestamp": "2026-05-28T00:00:00.000Z",
              "message": {"role": "user", "content": "go \u00e9"}}
    first = dict(reply([{"type": "thinking", "thinking": "", "signature": ""},
                        {"type": "text", "text": "caf\u00e9 \u2603"}], n=1),
                 uuid="a1", parentUuid="u0")
    second = dict(reply([{"type": "text", "text": "done"}], message_id="msg_02", n=2),
                  uuid="a2", parentUuid="a1")
    path.write_text("".join(json.dumps(e, separators=(",", ":"), ensure_ascii=False) + "\n"
                            for e in (prompt, first, second)))
    old = path.stat().st_mtime - 600
    os.utime(path, (old, old))
    index.ingest()
    out = invoke(index, "repair", "s", "--write")
    assert out.exit_code == 0, out.output
    assert "remove thinking block(s) [0] from line 2" in out.output
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[1]["message"]["content"] == [{"type": "text", "text": "caf\u00e9 \u2603"}]
    assert dict(lines[1], message=None) == dict(first, message=None)
    assert lines[0] == prompt and lines[2] == second
    assert index.value("SELECT count(*) FROM thinking_faults") == 0


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_no_wedge_in_the_corpus(tmp_path):
    """Omitted-display thinking (empty, signed: Opus 4.7 under 2.1.114) and
    shown thinking of every model: no fault."""
    index = Index(tmp_path)
    index.ingest(CORPUS)
    assert index.value("SELECT count(*) FROM records WHERE type = 'assistant' "
                       "AND raw LIKE '%\"thinking\":\"\",\"signature\":\"E%'") > 0
    assert index.rows("SELECT * FROM thinking_faults") == []
    assert index.rows("SELECT * FROM session_verdicts WHERE verdict = 'wedged'") == []


@pytest.mark.skipif(not os.environ.get("SESSION_INDEX_ORACLE_DIR"),
                    reason="set SESSION_INDEX_ORACLE_DIR to a folder of transcripts")
def test_no_wedge_in_transcripts_not_seen(tmp_path):
    """The same on any folder of real transcripts (the held-out check):
    SESSION_INDEX_ORACLE_DIR=~/.claude/projects pytest -k not_seen."""
    index = Index(tmp_path)
    index.ingest(os.environ["SESSION_INDEX_ORACLE_DIR"])
    found = index.rows("SELECT session_id, uuid, fault, latest, version FROM thinking_faults")
    print(f"\n{index.value('SELECT count(*) FROM files')} transcripts, thinking faults: {found}")
    assert found == []


def test_the_demo_has_a_wedged_session_every_surface_names(tmp_path):
    from indexer.cli import demo_data

    db_path = demo_data.build_demo(tmp_path)
    sid = demo_data.session_id("wedged-thinking")
    out = CliRunner().invoke(cli, ["check", sid, "--db", str(db_path), "--config-dir",
                                   str(tmp_path)])
    assert out.exit_code == 11 and out.output.startswith("wedged:")
    out = CliRunner().invoke(cli, ["wedged", "--db", str(db_path), "--json"])
    assert [(r["session_id"], r["fault"], r["stuck"]) for r in json.loads(out.output)] == [
        (sid, "blanked", 1)]
    index = Index.__new__(Index)
    index.path = db_path
    get = _web(index)
    assert 'data-verdict="wedged"' in get(web_format.session_path(sid))
    assert "Wedged: the latest message" in get("/-/session-health")


def test_a_wedged_repair_that_does_not_verify_is_rolled_back(fixtures_index, monkeypatch):
    from indexer.repair import repair as repairmod

    path = next(fixtures_index.projects.rglob(f"{session_id('blanked_latest')}.jsonl"))
    before = path.read_bytes()
    # the check after the write finds refused thinking still on the chain
    monkeypatch.setattr(repairmod, "REFUSED_LEFT_SQL", "SELECT 1 + 0 * :file_id * :cut")
    out = invoke(fixtures_index, "repair", session_id("blanked_latest"), "--write")
    assert out.exit_code == 8 and "thinking block(s) the API refuses" in out.output
    assert path.read_bytes() == before
    assert fixtures_index.rows("SELECT status FROM repairs") == [{"status": "rolled_back"}]
    code, answer = check(fixtures_index, "blanked_latest")
    assert (code, answer["verdict"]) == (11, "wedged")
