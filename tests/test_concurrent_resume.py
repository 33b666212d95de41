"""Concurrent resumes (issue 27 item 4, anthropics/claude-code#48270): two
processes resuming one session at once each append their own conversation
from the leaf they loaded, and the two interleave in the file. A resume
continues the branch written last; the other process's conversation is not
sent, though nobody abandoned it: its records are named
``concurrent_resume`` (walk.is_concurrent), in the caches and in the SQL
definitions alike, also when the file grows one line at a time; ``check``
warns, the health page and the session page name it. The shape here is the
one the real Claude Code 2.1.332 wrote (tests/fixtures/claude_code/
concurrent_resumes, made by make_fixtures.py)."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Transcript, write_jsonl
from indexer.cli.commands import cli
from indexer.ingest import derive
from oracle_checks import CLAUDE
from test_claude_code_fixtures import FIXTURES, manifest
from test_web import Web, session_url

FIXTURE = FIXTURES / "concurrent_resumes"
SID = manifest("concurrent_resumes")["session_id"]


def texts(path) -> dict[str, str]:
    """uuid -> the words of each text, tool_use and tool_result block."""
    out = {}
    for line in path.read_bytes().splitlines():
        r = json.loads(line)
        content = (r.get("message") or {}).get("content")
        if r.get("uuid") and isinstance(content, list):
            out[r["uuid"]] = " ".join(str(b.get("text") or b.get("tool_use_id") or b.get("id"))
                                      for b in content if isinstance(b, dict))
        elif r.get("uuid") and isinstance(content, str):
            out[r["uuid"]] = content
    return out


def fixture_file(index):
    path = index.projects / "-tmp-work" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURE / f"{SID}.jsonl", path)
    return path


def test_the_real_clis_concurrent_resumes_are_named(index, tmp_path):
    path = fixture_file(index)
    index.ingest()
    fid = index.file_id(path)
    words = texts(path)
    dropped = {u for u, cause in index.causes(fid).items() if cause == "concurrent_resume"}
    # What the first process wrote while the second wrote the branch a
    # resume takes: its answer, and its tool's result (with its call, when
    # the second loaded the file before the call was written).
    assert "alpha done." in {words[u] for u in dropped}
    assert all("alpha" in words[u] for u in dropped)
    chain = [words.get(u) for u in index.ancestry(fid)]
    assert "bravo done." in chain and "alpha done." not in chain
    index.assert_caches_match_definitions()

    out = CliRunner().invoke(cli, ["check", SID, "--db", str(index.path), "--json",
                                   "--config-dir", str(tmp_path / "claude")])
    verdict = json.loads(out.stdout)
    assert (out.exit_code, verdict["verdict"]) == (0, "resumable")
    assert verdict["details"]["concurrent_resume"]["messages"] == len(dropped)
    [warning] = [w for w in verdict["warnings"] if "#48270" in w]
    assert f"{len(dropped)} message(s)" in warning and f"session-index show {SID}" in warning

    site = Web(index.path)
    assert "Conversation of a concurrent resume dropped" in site.get("/-/session-health").text
    assert "concurrent_resume" in site.get(session_url(SID)).text
    listed = site.json(f"/{site.name}/orphans.json?cause=concurrent_resume&_shape=array")
    assert {r["uuid"] for r in listed} == dropped


def u(n: int) -> str:
    return f"eeeeeeee-0000-0000-0000-{n:012d}"


def two_branches(t: Transcript, interleaved: bool) -> None:
    """A prompt and answer, then two branches from the answer: A's prompt and
    answer and B's, written interleaved (two processes) or one after the
    other (a rewind: B after A ended)."""
    t.add(u(1), None, "user")
    t.add(u(2), u(1), "assistant")
    order = [(3, 2, "user"), (5, 2, "user"), (4, 3, "assistant"), (6, 5, "assistant")]
    if not interleaved:
        order = [(3, 2, "user"), (4, 3, "assistant"), (5, 2, "user"), (6, 5, "assistant")]
    for n, parent, kind in order:
        t.add(u(n), u(parent), kind)


@pytest.mark.parametrize("interleaved, cause", [(True, "concurrent_resume"),
                                                (False, "abandoned_branch")])
def test_interleaved_branches_are_concurrent_and_a_rewind_is_abandoned(index, interleaved,
                                                                       cause):
    t = Transcript(SID)
    two_branches(t, interleaved)
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    assert index.causes(index.file_id(path)) == {u(3): cause, u(4): cause}
    index.assert_caches_match_definitions()


def test_concurrent_branches_grown_one_line_at_a_time(index):
    """The fixture appended line by line, ingested after each: the caches
    equal the definitions at every step (derive_append gives up where an
    appended line can make a branch concurrent)."""
    lines = (FIXTURE / f"{SID}.jsonl").read_bytes().splitlines(keepends=True)
    path = index.projects / "-tmp-work" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    before = derive.STATS["appended"]
    for n, line in enumerate(lines, 1):
        with open(path, "ab") as f:
            f.write(line)
        index.ingest()
        if n % 4 == 0 or n == len(lines):
            index.assert_caches_match_definitions()
    assert derive.STATS["appended"] > before   # most steps still extend the caches
    causes = index.causes(index.file_id(path))
    words = texts(path)
    assert "alpha done." in {words[u] for u, c in causes.items() if c == "concurrent_resume"}


@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
def test_the_real_cli_sends_only_the_branch_written_last(index):
    from indexer.repair import oracle, verify

    path = fixture_file(index)
    index.ingest()
    with oracle.FakeMessagesAPI() as api:
        sent = oracle.resume_sent(path.read_bytes(), SID, api, CLAUDE)
    assert "bravo done." in sent.assistant_texts()
    assert "alpha done." not in sent.assistant_texts()
    kept_not_sent, sent_but_dropped, _ = verify.compare(index.db.conn, index.file_id(path), sent)
    assert (kept_not_sent, sent_but_dropped) == ([], [])


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_no_concurrent_resume_in_the_corpus(index):
    index.ingest(CORPUS)
    assert index.value("SELECT count(*) FROM orphans WHERE cause = 'concurrent_resume'") == 0
