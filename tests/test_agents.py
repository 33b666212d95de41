"""Codex CLI and Gemini CLI sessions in the index (issue 32), over files the
real binaries wrote against fake model APIs on loopback
(tests/fixtures/codex/, tests/fixtures/gemini/: their makers beside them,
with the fake APIs' logs of the calls they answered). The tests marked
``agents`` run the binaries again (npm @openai/codex, @google/gemini-cli)
and skip without them."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from indexer.cli.commands import cli
from indexer.cli import commands
from indexer.index import generations
from indexer.index.db import open_index
from indexer.ingest.files import ingest
from indexer.transcripts import agents, codex, discover, gemini

FIXTURES = Path(__file__).parent / "fixtures"
CODEX = FIXTURES / "codex"
CODEX_OLD = CODEX / "v0.130"
GEMINI = FIXTURES / "gemini" / "jsonl"
sys.path.insert(0, str(FIXTURES))


def _rollouts(folder: Path) -> list[Path]:
    return sorted((folder / "sessions").rglob("rollout-*.jsonl"))


def _calls(folder: Path) -> dict:
    return json.loads((folder / "calls.json").read_text())


def _run(*args, ok=(0,)):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code in ok, (result.exit_code, result.output, result.stderr)
    return result


@pytest.fixture()
def index(tmp_path):
    """An index of every fixture: Codex 0.171 and 0.130 rollouts, a Gemini
    0.61 chat."""
    db_path = tmp_path / "agents.db"
    db = open_index(str(db_path), create=True)
    summary = ingest(db, [str(CODEX / "sessions"), str(CODEX_OLD / "sessions"), str(GEMINI)])
    assert summary.errors == [] and summary.bad_lines == 0
    return db_path, db


def _file_ids(db) -> dict[str, int]:
    return {path: fid for fid, path in db.conn.execute("SELECT id, path FROM files")}


def test_every_line_is_stored_and_exported_byte_for_byte(index, tmp_path):
    db_path, db = index
    ids = _file_ids(db)
    files = _rollouts(CODEX) + _rollouts(CODEX_OLD) + sorted(GEMINI.rglob("*.jsonl"))
    assert len(files) == 6 and set(map(str, files)) == set(ids)
    for path in files:
        stored = b"".join(generations.generation_bytes(db.conn, ids[str(path)]))
        assert stored == path.read_bytes(), path
        lines = path.read_bytes().count(b"\n")
        assert db.conn.execute("SELECT count(*) FROM records WHERE file_id = ?",
                               [ids[str(path)]]).fetchone()[0] == lines
    for path in files:   # export (the main file on stdout): the same bytes
        sid = db.conn.execute("SELECT session_id FROM files WHERE id = ?",
                              [ids[str(path)]]).fetchone()[0]
        out = CliRunner().invoke(cli, ["export", sid, "--db", str(db_path), "--out", "-"])
        assert out.exit_code == 0 and out.stdout_bytes == path.read_bytes()


def test_files_and_sessions_carry_their_agent(index):
    db_path, db = index
    got = dict(db.conn.execute("SELECT path, agent FROM files"))
    assert {p: a for p, a in got.items()} == {
        **{str(p): "codex" for p in _rollouts(CODEX) + _rollouts(CODEX_OLD)},
        **{str(p): "gemini" for p in GEMINI.rglob("*.jsonl")}}
    rows = json.loads(_run("sessions", "--db", db_path, "--json").stdout)
    listed = {r["session_id"]: r for r in rows}
    log = _calls(CODEX)
    expected = {log["first_session"], *log["spawn_sessions"], _calls(CODEX_OLD)["first_session"]}
    assert expected <= set(listed)
    assert {r["agent"] for r in rows} == {"codex", "gemini"}
    for row in rows:   # no verdict: the resume checks are Claude Code's
        assert (row["verdict"], row["state"], row["cause"], row["fix"]) == (None,) * 4
    assert listed[log["first_session"]]["title"] == "Run the tool: echo codex-tool-output"
    (chat,) = [r for r in rows if r["agent"] == "gemini"]
    assert chat["title"] == "List this folder with your tool, please"
    # nor do Claude Code's retention, verdicts and listings count them
    for listing in ("expiring", "stale", "poisoned", "wedged", "forks"):
        out = _run(listing, "--db", db_path, "--json", ok=(0, 1))
        assert json.loads(out.stdout) == [] and out.exit_code == 0, listing
    assert db.conn.execute("SELECT count(*) FROM session_verdicts").fetchone()[0] == 0


def test_search_finds_each_agents_text(index):
    db_path, _ = index
    _run("search", "--enable", "--db", db_path)

    def found(query):
        return json.loads(_run("search", query, "--db", db_path, "--json").stdout)

    codex_hits = found("codex-tool-output")
    # the prompt, the tool call, its output and the answers, in two CLI versions' rollouts
    assert {h["type"] for h in codex_hits} == {"response_item"}
    assert {h["session_id"] for h in codex_hits} == {
        _calls(CODEX)["first_session"], _calls(CODEX_OLD)["first_session"]}
    gemini_hits = found("Resumed what was in the folder")
    assert [h["type"] for h in gemini_hits] == ["gemini.user"]
    assert found("helper counted") and found("gemini-notes.txt")


def _show(db_path, sid):
    return json.loads(_run("show", sid, "--db", db_path, "--json").stdout)


def test_show_gives_a_codex_conversation_in_order(index):
    db_path, _ = index
    turns = [(t["role"], t["text"]) for t in _show(db_path, _calls(CODEX)["first_session"])
             if not t["text"].startswith("<")]
    assert [(r, t[:40]) for r, t in turns if r != "developer"] == [
        ("user", "Run the tool: echo codex-tool-output"),
        ("tool call", 'exec_command {"cmd": "echo codex-tool-ou'),
        ("tool result", turns[2][1][:40]),
        ("assistant", "The tool printed codex-tool-output."),
        ("user", "Resumed: what did the tool print?"),
        ("assistant", "It printed codex-tool-output (resumed)."),
    ]
    assert "codex-tool-output" in turns[2][1]
    # the subagent's thread: the parent's history replayed, then its own task
    (child,) = _calls(CODEX)["spawn_sessions"][1:]
    said = [t["text"] for t in _show(db_path, child) if t["role"] in ("user", "assistant")]
    assert said[-3:] == ["Spawn a helper with our history", "Helper task: count to three",
                         "one, two, three (from the helper)"]


def test_show_gives_a_gemini_chat_as_the_cli_rebuilds_it(index):
    db_path, db = index
    sid = db.conn.execute("SELECT session_id FROM files WHERE agent = 'gemini'").fetchone()[0]
    turns = [(t["role"], t["text"]) for t in _show(db_path, sid)]
    said = [(r, t[:45]) for r, t in turns if not t.startswith("<") and r != "tool result"]
    assert said == [
        ("user", "List this folder with your tool, please"),
        ("tool call", 'list_directory {"dir_path": "."}'),
        ("assistant", "The folder holds gemini-notes.txt."),
        ("user", "Resumed: what was in the folder?"),
        ("assistant", "It held gemini-notes.txt (resumed)."),
    ]
    # the tool's results (the resume set the call's response into the history too)
    results = [i for i, (r, _) in enumerate(turns) if r == "tool result"]
    assert results and all("gemini-notes.txt" in turns[i][1] for i in results)
    assert [r for r, _ in turns[results[0] - 1:results[-1] + 2]] == [
        "tool call", *["tool result"] * len(results), "assistant"]
    # a reader of the $set records alone loses the user turn after the resume
    values = [json.loads(line) for line in next(GEMINI.rglob("*.jsonl")).read_text().splitlines()]
    set_only = [m for v in values if "$set" in v for m in v["$set"].get("messages", [])]
    assert "Resumed: what was in the folder?" not in json.dumps(set_only)
    assert "Resumed: what was in the folder?" in json.dumps(gemini.replay(values))


def _usage_calls(db_path) -> dict[str, dict]:
    db = open_index(str(db_path))
    rows = db.conn.execute("SELECT message_id, model, input_tokens, output_tokens, "
                           "cache_read_tokens, session_id FROM usage").fetchall()
    return {r[0]: dict(zip(("model", "input", "output", "cached", "session_id"), r[1:]))
            for r in rows}


def test_codex_usage_counts_each_model_call_once(index):
    """The fork and the subagent replay their parent's history (the subagent
    with two session_meta records): each call the fake API answered is
    counted once, with the tokens it said, under the thread that made it."""
    db_path, _ = index
    log = _calls(CODEX)
    got = {k: v for k, v in _usage_calls(db_path).items() if k.startswith("resp_")}
    assert sorted(got) == sorted(c["id"] for c in log["calls"])
    for call in log["calls"]:
        u = got[call["id"]]
        assert (u["model"], u["input"] + u["cached"], u["output"]) == (
            call["model"], call["usage"]["input_tokens"], call["usage"]["output_tokens"])
        # under the thread that made the call (whose rollout has its token_usage_record
        # first: a subagent's calls are its own, whatever cache key it shares)
        (own,) = [p for p in _rollouts(CODEX) if f'"response_id":"{call["id"]}"' in p.read_text()]
        assert u["session_id"] == codex.session_id_of(str(own))
    child = log["spawn_sessions"][1]
    metas = [json.loads(line) for line in next((CODEX / "sessions").rglob(f"*{child}.jsonl"))
             .read_text().splitlines() if '"type":"session_meta"' in line]
    assert [m["payload"]["id"] for m in metas] == [child, log["spawn_sessions"][0]]


def test_codex_usage_counts_re_emitted_totals_once(index):
    """codex-cli 0.130 writes no token_usage_record and emits token_count
    again with unchanged totals (after a tool call, at a resume): summing
    every event's last_token_usage counts calls twice; the index counts the
    calls the fake API answered."""
    db_path, _ = index
    log = _calls(CODEX_OLD)
    got = [v for k, v in _usage_calls(db_path).items() if k.startswith("codex-total:")]
    assert len(got) == len(log["calls"]) == 3
    assert sorted(u["input"] + u["cached"] for u in got) == sorted(
        c["usage"]["input_tokens"] for c in log["calls"])
    assert sum(u["output"] for u in got) == sum(c["usage"]["output_tokens"] for c in log["calls"])
    # each under the rollout's session (its session_meta), as usage --by session and the
    # status line read them
    assert {u["session_id"] for u in got} == {
        json.loads(path.read_text().splitlines()[0])["payload"]["id"]
        for path in _rollouts(CODEX_OLD)}
    naive = 0
    for path in _rollouts(CODEX_OLD):
        for line in path.read_text().splitlines():
            p = json.loads(line).get("payload") or {}
            if p.get("type") == "token_count" and p.get("info"):
                naive += p["info"]["last_token_usage"]["input_tokens"]
    assert naive > sum(c["usage"]["input_tokens"] for c in log["calls"])


def test_codex_usage_is_the_same_read_in_pieces(tmp_path):
    """Read a line at a time (each ingest from the last offset), a rollout's
    rows, model and call keys included, are those of one read."""
    source = _rollouts(CODEX)[0]
    whole = open_index(str(tmp_path / "whole.db"), create=True)
    ingest(whole, [str(source)])
    growing = tmp_path / "sessions" / source.name
    growing.parent.mkdir()
    pieces = open_index(str(tmp_path / "pieces.db"), create=True)
    for line in source.read_bytes().splitlines(keepends=True):
        with open(growing, "ab") as f:
            f.write(line)
        ingest(pieces, [str(growing)])
    cols = ("line_no, type, subtype, session_id, model, message_id, request_id, has_usage, "
            "input_tokens, output_tokens, raw")
    assert pieces.conn.execute(f"SELECT {cols} FROM records ORDER BY line_no").fetchall() == \
        whole.conn.execute(f"SELECT {cols} FROM records ORDER BY line_no").fetchall()
    assert pieces.conn.execute("SELECT agent, session_id FROM files").fetchall() == [
        ("codex", codex.session_id_of(str(source)))]


def test_check_and_repair_say_they_are_for_claude_code(index):
    db_path, db = index
    assert commands.NotClaudeCode.exit_code == agents.EXIT_NOT_CLAUDE_CODE == 13
    sessions = [_calls(CODEX)["first_session"],
                db.conn.execute("SELECT session_id FROM files WHERE agent = 'gemini'").fetchone()[0]]
    for sid, agent in zip(sessions, ("codex", "gemini")):
        for args in (["check", sid], ["check", sid, "--json"], ["repair", sid],
                     ["repair", sid, "--write"]):
            out = CliRunner().invoke(cli, [*args, "--db", str(db_path)])
            assert out.exit_code == 13, (args, out.output)
            assert out.stdout == ""
            assert out.stderr.strip() == "Error: " + agents.NOT_CLAUDE_CODE.format(
                session=sid, agent=agent)
    from indexer.repair import check

    with pytest.raises(agents.NotClaudeCode):
        check.check(db, sessions[0])


def test_check_exits_13_through_the_fast_path(index):
    """`session-index check` as a process (entry.py's fast path leaves it to click)."""
    import subprocess

    db_path, _ = index
    sid = _calls(CODEX)["first_session"]
    out = subprocess.run([sys.executable, "-m", "indexer", "check", sid, "--db", str(db_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 13 and "for Claude Code sessions only" in out.stderr
    assert "Traceback" not in out.stderr


def test_sniff_names_each_agents_files():
    for path in _rollouts(CODEX) + _rollouts(CODEX_OLD):
        assert discover.sniff(str(path)) == discover.CODEX
        assert codex.session_id_of(str(path)) in path.name
    for path in GEMINI.rglob("*.jsonl"):
        assert discover.sniff(str(path)) == discover.GEMINI
    json_chat = _one(FIXTURES / "gemini" / "json")   # the older .json form, walked in chats/
    assert discover.sniff(str(json_chat)) == discover.GEMINI
    assert str(json_chat) in discover.walk(str(FIXTURES / "gemini" / "json"))
    # a rollout whose session_meta is longer than a sniff reads
    head = _rollouts(CODEX)[0].read_bytes()[:200]
    assert discover.CODEX_HEAD.search(head)


# --- the real binaries, again -------------------------------------------------

def _maker(folder: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"make_{folder}",
                                                  FIXTURES / folder / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CODEX_MAKER, GEMINI_MAKER = _maker("codex"), _maker("gemini")
CODEX_BIN, GEMINI_BIN = CODEX_MAKER.find_codex(), GEMINI_MAKER.find_gemini()


@pytest.mark.agents
@pytest.mark.skipif(CODEX_BIN is None, reason="no Codex CLI (npm @openai/codex)")
def test_a_fresh_codex_run_is_counted_as_its_api_saw_it(tmp_path):
    log = CODEX_MAKER.make(CODEX_BIN, str(tmp_path))
    db = open_index(str(tmp_path / "i.db"), create=True)
    ingest(db, [str(tmp_path / "sessions")])
    got = _usage_calls(tmp_path / "i.db")
    ids = [c["id"] for c in log["calls"]]
    if any(k.startswith("resp_") for k in got):
        assert sorted(got) == sorted(ids)
    else:   # a CLI without token_usage_record: one call per cumulative total
        assert len(got) == len(ids)
    assert sum(u["output"] for u in got.values()) == sum(
        c["usage"]["output_tokens"] for c in log["calls"])


@pytest.mark.agents
@pytest.mark.skipif(GEMINI_BIN is None, reason="no Gemini CLI (npm @google/gemini-cli)")
def test_a_fresh_gemini_run_is_indexed(tmp_path):
    form, log = GEMINI_MAKER.make(GEMINI_BIN, str(tmp_path))
    if form != "jsonl":
        pytest.skip(f"this Gemini CLI writes the {form} form")
    db = open_index(str(tmp_path / "i.db"), create=True)
    ingest(db, [str(tmp_path / form)])
    sid = db.conn.execute("SELECT session_id FROM files").fetchone()[0]
    assert db.conn.execute("SELECT agent FROM sessions").fetchone()[0] == "gemini"
    got = _usage_calls(tmp_path / "i.db")
    assert len(got) == len(log["calls"])
    assert {u["session_id"] for u in got.values()} == {sid}
    assert shutil.which("node") is not None or os.path.exists(GEMINI_BIN)


def test_usage_prices_the_agents_models(index):
    """`usage` adds the packaged agent prices (agent_prices.json) and costs
    each call the fake APIs logged at its model's rates."""
    db_path, _ = index
    rows = json.loads(_run("usage", "--db", db_path, "--by", "model", "--json").stdout)
    by_model = {r["model"]: r for r in rows}
    rates = json.loads((Path(agents.__file__).parents[1] / "index" / "agent_prices.json")
                       .read_text())["models"]
    logged = {}
    for log in (_calls(CODEX), _calls(CODEX_OLD),
                json.loads((FIXTURES / "gemini" / "jsonl-calls.json").read_text())):
        for c in log["calls"]:
            u = c["usage"]
            tokens = (u["input_tokens"], u["output_tokens"]) if "input_tokens" in u else (
                u["promptTokenCount"], u["candidatesTokenCount"])
            logged.setdefault(c["model"], []).append(tokens)
    assert set(by_model) == set(logged) == {"gpt-5-codex", "gemini-2.5-pro"}
    for model, calls in logged.items():
        r = rates[model]
        assert by_model[model]["calls"] == len(calls)
        assert by_model[model]["unpriced_calls"] == 0
        assert by_model[model]["cost_usd"] == pytest.approx(
            sum(i * r["input"] + o * r["output"] for i, o in calls) / 1e6, abs=1e-6)


def test_verify_the_mcp_check_and_the_session_store_say_so_too(index):
    import asyncio

    from mcp.server.mcpserver.exceptions import ToolError

    from indexer.cli import mcp_server
    from indexer.index import db as dbmod
    from indexer.ingest.store import IndexSessionStore, NotClaudeCodeSession

    db_path, _ = index
    sid = _calls(CODEX)["first_session"]
    said = agents.NOT_CLAUDE_CODE.format(session=sid, agent="codex")
    out = CliRunner().invoke(cli, ["verify", sid, "--db", str(db_path)])
    assert (out.exit_code, out.stderr.strip()) == (13, "Error: " + said)
    tools = mcp_server.Tools(dbmod.open_readonly(str(db_path)))
    with pytest.raises(ToolError, match="for Claude Code sessions only"):
        tools.check_session(sid)
    # show_session is `show --json` for every agent: the turns, a page at a time.
    shown = json.loads(_run("show", sid, "--db", db_path, "--json").stdout)
    first = tools.show_session(sid)
    assert (first["messages"], first["total"], first["verdict"], first["next"]) == (
        shown, len(shown), None, None) and len(shown) > 2
    assert first["revision"]["files"] and tools.show_session(sid, since="#2")["messages"] == \
        shown[2:]
    with pytest.raises(ToolError, match="is not a message of the conversation"):
        tools.show_session(sid, since=f"#{len(shown) + 1}")
    store = IndexSessionStore(db_path)
    try:
        key = {"project_key": "-tmp-x", "session_id": sid}
        for call in (store.load(key), store.append(key, [{"type": "user"}])):
            with pytest.raises(NotClaudeCodeSession, match="for Claude Code sessions only"):
                asyncio.run(call)
    finally:
        store.close()


def test_ingest_reads_the_agents_folders_by_default(tmp_path, monkeypatch):
    """With no SOURCES: Claude Code's default projects folders and, where
    they exist, $CODEX_HOME/sessions and ~/.gemini/tmp; a config dir named
    ($CLAUDE_CONFIG_DIR, --config-dir) is read alone."""
    home = tmp_path / "home"
    shutil.copytree(CODEX / "sessions", tmp_path / "codex-home" / "sessions")
    archived = tmp_path / "codex-home" / "archived_sessions"   # (`codex archive` moves one there)
    archived.mkdir()
    shutil.copy(_rollouts(CODEX_OLD)[0], archived)
    shutil.copytree(GEMINI / "tmp", home / ".gemini" / "tmp")
    (home / ".claude" / "projects").mkdir(parents=True)
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    assert discover.default_sources([]) == [
        str(home / ".claude" / "projects"), str(tmp_path / "codex-home" / "sessions"),
        str(archived), str(home / ".gemini" / "tmp")]
    db_path = tmp_path / "i.db"
    _run("ingest", "--db", db_path)
    agents_of = dict(open_index(str(db_path)).conn.execute(
        "SELECT agent, count(*) FROM files GROUP BY agent"))
    assert agents_of == {"codex": 5, "gemini": 1}
    # a config dir named: its projects folder alone
    assert discover.default_sources([], str(home / ".claude")) == [
        str(home / ".claude" / "projects")]
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    assert discover.default_sources([]) == [str(home / ".claude" / "projects")]


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="no nats-server")
def test_ship_carries_the_agent_and_the_central_reads_its_lines(tmp_path):
    """`ship` sends a Codex rollout and a Gemini chat with their agent in the
    header (fleet_wire); the central's rows are local ingest's, byte for byte."""
    from test_fleet import Server, drain, exported, ship_once

    server = Server(tmp_path / "jetstream")
    server.start()
    try:
        folder = tmp_path / "host"
        shutil.copytree(CODEX / "sessions", folder / "codex")
        shutil.copytree(GEMINI / "tmp", folder / "gemini")
        shutil.copytree(GEMINI_FORMS / "json" / "tmp", folder / "gemini-json")
        ship_once(server, "box-1", folder, tmp_path)
        central = tmp_path / "central.db"
        drain(server, central)
        local = tmp_path / "local.db"
        shutil.rmtree(folder / "gemini-json")   # (a .json chat is not shipped)
        _run("ingest", folder, "--db", local)
        cols = ("agent, kind, session_id, records, first_timestamp, last_timestamp, cwd, "
                "version")
        rows = {db: open_index(str(db)).conn.execute(
            f"SELECT {cols} FROM files ORDER BY session_id").fetchall() for db in (central, local)}
        assert rows[central] == rows[local] and {r[0] for r in rows[local]} == {"codex",
                                                                                  "gemini"}
        usage = {db: open_index(str(db)).conn.execute(
            "SELECT message_id, session_id, model, input_tokens, output_tokens FROM usage "
            "ORDER BY 1").fetchall() for db in (central, local)}
        assert usage[central] == usage[local] and len(usage[local]) == 8 + 3
        for (sid,) in open_index(str(local)).conn.execute("SELECT session_id FROM files"):
            assert exported(central, sid) == exported(local, sid)
    finally:
        server.kill()


def test_the_session_page_of_another_agent_shows_its_conversation(index):
    import asyncio

    from indexer.cli import web
    from session_index_web.format import session_path

    db_path, db = index
    ds = web.make_datasette(str(db_path))
    asyncio.run(ds.invoke_startup())
    sid = _calls(CODEX)["first_session"]
    html = asyncio.run(ds.client.get(session_path(sid))).text
    assert 'data-agent="codex"' in html and "data-verdict" not in html
    assert "for Claude Code sessions only" in html
    turns = _show(db_path, sid)
    assert f'data-turns="{len(turns)}"' in html
    assert "Run the tool: echo codex-tool-output" in html
    assert "data-parent" not in html
    log = _calls(CODEX)
    parent, child = log["spawn_sessions"]
    html = asyncio.run(ds.client.get(session_path(child))).text
    assert f'<span data-parent="{parent}">subagent of' in html
    fork = next(c["prompt_cache_key"] for c in log["calls"]
                if c["prompt_cache_key"] not in (log["first_session"], parent, child))
    html = asyncio.run(ds.client.get(session_path(fork))).text
    assert f'<span data-parent="{log["first_session"]}">forked from' in html
    gid = db.conn.execute("SELECT session_id FROM files WHERE agent = 'gemini'").fetchone()[0]
    html = asyncio.run(ds.client.get(session_path(gid))).text
    assert 'data-agent="gemini"' in html and "Resumed: what was in the folder?" in html


GEMINI_FORMS = FIXTURES / "gemini"


def _one(folder: Path) -> Path:
    (path,) = folder.rglob("session-*.json*")
    return path


@pytest.mark.parametrize("form", ["json", "jsonl"])
def test_a_gemini_chat_resumed_is_kept_in_its_generations(tmp_path, form):
    """The resume rewrites a .json chat whole (Gemini CLI 0.30): the index
    keeps the first run's document as generation 1 and reads the new one
    as generation 2; it appends to a .jsonl chat (0.61): read on from the
    offset, one generation. Both: the conversation after the resume."""
    first, final = _one(GEMINI_FORMS / f"{form}-after-first-run"), _one(GEMINI_FORMS / form)
    chat = tmp_path / "tmp" / "project" / "chats" / final.name
    chat.parent.mkdir(parents=True)
    chat.write_bytes(first.read_bytes())
    db = open_index(str(tmp_path / "i.db"), create=True)
    assert ingest(db, [str(tmp_path / "tmp")]).new_records > 0
    chat.write_bytes(final.read_bytes())
    summary = ingest(db, [str(tmp_path / "tmp")])
    (file_id, agent, sid), = db.conn.execute("SELECT id, agent, session_id FROM files")
    assert agent == "gemini" and sid == json.loads(final.read_text().splitlines()[0]
                                                   if form == "jsonl" else final.read_text()
                                                   )["sessionId"]
    assert b"".join(generations.generation_bytes(db.conn, file_id)) == final.read_bytes()
    if form == "json":
        assert summary.rewritten_files == 1
        assert generations.generations(db.conn, file_id) == [1, 2]
        assert b"".join(generations.generation_bytes(db.conn, file_id, 1)) == first.read_bytes()
        assert db.conn.execute("SELECT type, length(raw) FROM records").fetchall() == [
            ("gemini.chat", len(final.read_text()))]
    else:
        assert summary.rewritten_files == 0
        assert generations.generations(db.conn, file_id) == [1]
    said = [(t["role"], t["text"]) for t in agent_turns(db, sid)
            if t["role"] in ("user", "assistant") and not t["text"].startswith("<")]
    assert said[0] == ("user", "List this folder with your tool, please")
    assert said[-2:] == [("user", "Resumed: what was in the folder?"),
                         ("assistant", "It held gemini-notes.txt (resumed).")]


def agent_turns(db, session_id):
    from indexer.repair import show

    return show.agent_conversation(db.conn, session_id, agents.session_agent(db.conn, session_id))


@pytest.mark.slow
def test_watch_follows_a_rollout_and_a_json_chat(tmp_path):
    """`ingest --watch` on a folder: a rollout written line by line is
    indexed as it grows; a Gemini .json chat rewritten whole becomes its
    second generation."""
    import sqlite3
    import test_watch

    src = tmp_path / "src"
    (src / "codex").mkdir(parents=True)
    chat = src / "gemini" / "tmp" / "p" / "chats" / _one(GEMINI_FORMS / "json").name
    chat.parent.mkdir(parents=True)
    db = tmp_path / "index.db"
    proc = test_watch.Proc(["ingest", "--watch", "--db", str(db), str(src)], tmp_path,
                           dict(os.environ, CLAUDE_CONFIG_DIR=str(tmp_path / "claude")))
    try:
        proc.wait_for_log(r" watching ")
        rollout = _rollouts(CODEX)[0]
        target = src / "codex" / rollout.name
        lines = rollout.read_bytes().splitlines(keepends=True)

        def value(sql):
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                row = conn.execute(sql).fetchone()
            return row[0] if row else None

        for n in (1, len(lines) // 2, len(lines)):
            target.write_bytes(b"".join(lines[:n]))
            test_watch.poll(lambda: value("SELECT count(*) FROM records r JOIN files f ON "
                                          "f.id = r.file_id AND f.agent = 'codex'") == n,
                            f"{n} rollout lines")
        chat.write_bytes(_one(GEMINI_FORMS / "json-after-first-run").read_bytes())
        test_watch.poll(lambda: value("SELECT generation FROM files WHERE agent = 'gemini'") == 1,
                        "the chat's first generation")
        chat.write_bytes(_one(GEMINI_FORMS / "json").read_bytes())
        test_watch.poll(lambda: value("SELECT generation FROM files WHERE agent = 'gemini'") == 2,
                        "the chat's second generation")
        assert proc.stop() == 0
    finally:
        proc.kill()


HOSTILE_ROLLOUT = [
    {"timestamp": "2026-12-01T00:00:00Z", "type": "session_meta",
     "payload": {"id": "01a23e03-0000-7000-8000-00000000dead", "cwd": "/w\ud800",
                 "git": ["not", "an", "object"]}},
    {"timestamp": 5, "type": "turn_context", "payload": {"model": "\ud800model"}},
    {"type": "token_usage_record", "payload": {"response_id": "resp_x", "usage": {
        "input_tokens": 2 ** 70, "cached_input_tokens": float("nan"),
        "output_tokens": float("inf")}}},
    {"type": "token_usage_record", "payload": {"response_id": "resp_y", "usage": [1, 2]}},
    {"type": "event_msg", "payload": {"type": "token_count", "info": "none"}},
    {"type": "response_item", "payload": {"type": "message", "role": 7, "content": {"x": 1}}},
    {"type": "response_item", "payload": "a string"},
    {"type": ["list"], "payload": None},
]
HOSTILE_CHAT = [
    {"sessionId": "dead0000-0000-4000-8000-00000000beef", "projectHash": "x", "kind": 3},
    {"$set": ["not", "an", "object"]},
    {"$set": {"messages": "not a list", "sessionId": 5}},
    {"id": "m1", "type": "gemini", "content": [None, {"functionCall": "x"}],
     "tokens": {"input": 2 ** 62, "tool": 2 ** 62, "output": -(2 ** 63), "thoughts": -1}},
    {"id": ["m2"], "type": None, "tokens": "many", "toolCalls": [None, 5]},
]


def test_hostile_lines_are_kept_and_never_stop_ingest(tmp_path):
    """NaN, infinities, numbers no SQLite integer holds, lone surrogates,
    fields of the wrong type: each line is stored as it is, read or NULL."""
    def lines(values):
        return "".join(json.dumps(v) + "\n" for v in values).encode()

    rollout = tmp_path / "codex" / "rollout-2026-12-01T00-00-00-01a23e03-0000-7000-8000-00000000dead.jsonl"
    chat = tmp_path / "gemini" / "p" / "chats" / "session-2026-12-01T00-00-dead0000.jsonl"
    for path, data in ((rollout, lines(HOSTILE_ROLLOUT)), (chat, lines(HOSTILE_CHAT))):
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
    db_path = tmp_path / "i.db"
    db = open_index(str(db_path), create=True)
    summary = ingest(db, [str(tmp_path / "codex"), str(tmp_path / "gemini")])
    assert (summary.errors, summary.new_records, summary.bad_lines) == (
        [], len(HOSTILE_ROLLOUT) + len(HOSTILE_CHAT), 0)
    for path in (rollout, chat):
        fid = db.conn.execute("SELECT id FROM files WHERE path = ?", [str(path)]).fetchone()[0]
        assert b"".join(generations.generation_bytes(db.conn, fid)) == path.read_bytes()
    assert db.conn.execute(
        "SELECT message_id, input_tokens, output_tokens, cache_read_tokens, model FROM records "
        "WHERE has_usage ORDER BY id").fetchall() == [   # (a count not read counts 0)
        ("resp_x", 0, 0, 0, "\\ud800model"), ("m1", None, None, 0, None)]
    for sid in ("01a23e03-0000-7000-8000-00000000dead", "dead0000-0000-4000-8000-00000000beef"):
        for args in (["show", sid], ["show", sid, "--json"], ["sessions"], ["usage"]):
            out = CliRunner().invoke(cli, [*args, "--db", str(db_path)])
            assert out.exit_code == 0 and out.exception is None, (args, out.output)
    _run("search", "--enable", "--db", db_path)


def test_the_status_line_of_another_agents_session_names_it_and_its_cost(index):
    """statusline: no verdict for a Codex or Gemini session (the checks are
    Claude Code's), its agent and the cost of its calls instead; exit 0."""
    from click.testing import CliRunner

    from indexer.cli.commands import cli

    db_path, db = index
    for agent in ("codex", "gemini"):
        (sid,) = db.conn.execute("SELECT session_id FROM files WHERE agent = ? ORDER BY id "
                                 "LIMIT 1", [agent]).fetchone()
        calls = db.conn.execute("SELECT count(DISTINCT message_id) FROM usage "
                                "WHERE session_id = ?", [sid]).fetchone()[0]
        out = CliRunner().invoke(cli, ["statusline", "--db", str(db_path)],
                                 input=json.dumps({"session_id": sid}))
        assert out.exit_code == 0, out.output
        assert out.output.startswith(f"{agent} session · $")
        assert f"({calls:,} call" in out.output and calls > 0
