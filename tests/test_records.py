"""The record model (indexer/transcripts/records.py): each rule in Python
held to its SQL twin, and the synthetic rule as Claude Code applies it
(message.model "<synthetic>", whatever the id) on every surface: check,
poisoned_sessions, show, repair, the session page and the SQL function."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sqlite3
import time
import uuid as uuidlib

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Transcript
from indexer.cli import web
from indexer.cli.commands import cli
from indexer.transcripts import lines, records
from session_index_web import cells as web_cells, format as web_format

SID = "11111111-2222-3333-4444-555555555555"


def _sql_answers(rows, template):
    """The SQL template's answer for each record row (type, subtype,
    parent_uuid, logical_parent_uuid, model), through a real SQLite."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, type TEXT, subtype TEXT, "
                 "parent_uuid TEXT, logical_parent_uuid TEXT, model TEXT)")
    conn.executemany("INSERT INTO records (type, subtype, parent_uuid, logical_parent_uuid, model) "
                     "VALUES (?, ?, ?, ?, ?)", rows)
    return [v for (v,) in conn.execute(
        f"SELECT {template.format(r='r')} FROM records r ORDER BY r.id")]


def _columns(entry: dict) -> tuple:
    """The columns the parser stores for an entry (lines.parse_line)."""
    _, fields = lines.parse_line(json.dumps(entry).encode())
    at = {name: fields[i] for i, name in enumerate(records.RECORD_FIELDS)}
    return at["type"], at["subtype"], at["parent_uuid"], at["logical_parent_uuid"], at["model"]


# Assistant records of every shape the rule must tell apart: Claude Code's
# placeholders, Anthropic replies, third-party providers' replies, odd ones.
MODELS = ["<synthetic>", "glm-5", "claude-sonnet-4-5", None, "", 5]
IDS = ["msg_01XFDUDYJgAACzvnptvVoYEL", str(uuidlib.UUID(int=7)), "chatcmpl-8f3a",
       "0123456789abcdef0123456789abcdef", None]


def generated_entries():
    for model, id_, api_error, type_ in itertools.product(
            MODELS, IDS, (False, True), ("assistant", "user")):
        message = {"role": type_, "content": [{"type": "text", "text": "x"}]}
        if model is not None:
            message["model"] = model
        if id_ is not None:
            message["id"] = id_
        yield {"type": type_, "uuid": "u", "parentUuid": None, "message": message,
               **({"isApiErrorMessage": True} if api_error else {})}
    yield {"type": "assistant", "uuid": "u", "message": "not an object"}
    yield {"type": "assistant", "uuid": "u"}


def corpus_entries():
    for path in sorted(CORPUS.rglob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                yield entry


def _agree(entries):
    entries = list(entries)
    rows = [_columns(e) for e in entries]
    sql = _sql_answers(rows, records.SYNTHETIC_RECORD)
    python = [records.is_synthetic_entry(e) for e in entries]
    assert [bool(v) for v in sql] == python
    # and the columns' rule, which the web UI applies, says the same
    assert [records.is_synthetic(r[0], r[4]) for r in rows] == python
    return python


def test_synthetic_rule_python_and_sql_agree_on_generated_records():
    python = _agree(generated_entries())
    # exactly the assistant records whose model is "<synthetic>", whatever their id
    assert sum(python) == len(IDS) * 2
    entries = list(generated_entries())
    assert {e["message"].get("id") for e, s in zip(entries, python) if s} == set(IDS)
    assert all(e["message"]["model"] == "<synthetic>" for e, s in zip(entries, python) if s)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_synthetic_rule_python_and_sql_agree_on_the_corpus():
    assistants = [e for e in corpus_entries() if e.get("type") == "assistant"]
    assert assistants
    _agree(assistants)


def test_effective_parent_and_predicates_agree_with_their_sql():
    shapes = [("system", "compact_boundary", None, "lp"), ("system", "compact_boundary", "p", "lp"),
              ("system", "api_error", "p", None), ("system", "api_error", None, "lp"),
              ("user", None, "p", "lp"), ("assistant", None, None, "lp"), (None, None, None, None)]
    rows = [(*s, None) for s in shapes]
    assert _sql_answers(rows, records.EFFECTIVE_PARENT) == [
        records.effective_parent(*s) for s in shapes] == ["lp", "p", "p", None, "p", None, None]
    assert [bool(v) for v in _sql_answers(rows, records.COMPACT_BOUNDARY_RECORD)] == [
        records.is_compact_boundary(s[0], s[1]) for s in shapes] == [
        True, True, False, False, False, False, False]
    assert [bool(v) for v in _sql_answers(rows, records.API_ERROR_RECORD)] == [
        records.is_api_error_record(s[0], s[1]) for s in shapes] == [
        False, False, True, True, False, False, False]
    assert records.CHAIN_TYPES_SQL == "('user','assistant','progress','system','attachment')"


def test_the_parser_gives_the_record_fields_in_order():
    entry = {"type": "assistant", "uuid": "u1", "parentUuid": "p1", "sessionId": SID,
             "isMeta": True, "isApiErrorMessage": True, "requestId": "req_1",
             "message": {"id": "m1", "model": "glm-5", "content": [{"type": "text", "text": "x"}],
                         "usage": {"input_tokens": 3, "output_tokens": 4}}}
    for parse in (lines.parse_line, lines.parse_line_bytes):
        _, fields = parse(json.dumps(entry).encode())
        row = dict(zip(records.RECORD_FIELDS, fields, strict=True))
        assert {k: row[k] for k in ("session_id", "uuid", "parent_uuid", "type", "is_meta",
                                    "message_id", "model", "request_id", "is_api_error",
                                    "has_usage", "input_tokens", "output_tokens")} == {
            "session_id": SID, "uuid": "u1", "parent_uuid": "p1", "type": "assistant",
            "is_meta": 1, "message_id": "m1", "model": "glm-5", "request_id": "req_1",
            "is_api_error": 1, "has_usage": 1, "input_tokens": 3, "output_tokens": 4}
    # The slow path (a field of an unexpected type) gives the same columns.
    _, slow = lines.parse_line(json.dumps(dict(entry, isSidechain="yes")).encode())
    assert dict(zip(records.RECORD_FIELDS, slow))["is_sidechain"] == 1
    assert dict(zip(records.RECORD_FIELDS, slow))["model"] == "glm-5"


# --- The rule on every surface -------------------------------------------------

def third_party_session(env):
    """Claude Code run against GLM-5 through ANTHROPIC_BASE_URL: real model
    names, ids that are not msg_ (32 hex digits, chatcmpl-), several turns."""
    t = Transcript(SID)
    parent = None
    for turn, id_ in enumerate(["0a1b2c3d4e5f60718293a4b5c6d7e8f9", "chatcmpl-7d0c", "3f2e1d0c"]):
        u = t.add(f"u{turn}", parent, "user", cwd="/nonexistent/project")
        a = t.add(f"a{turn}", u["uuid"], "assistant", message={
            "id": id_, "type": "message", "role": "assistant", "model": "glm-5",
            "content": [{"type": "text", "text": f"reply {turn}"}],
            "usage": {"input_tokens": 10, "output_tokens": 5}})
        parent = a["uuid"]
    return t


def synthetic_tail_session(env):
    t = third_party_session(env)
    t.add("u9", "a2", "user")
    # a placeholder a resume names as previous_message_id: no API error, a requestId
    t.add("s9", "u9", "assistant", requestId="req_s9", message={
        "id": "6b0c5a52-0000-4000-8000-000000000009", "type": "message", "role": "assistant",
        "model": "<synthetic>", "content": [{"type": "text", "text": "No response requested."}],
        "usage": {"input_tokens": 0, "output_tokens": 0}})
    return t


def _surfaces(env, transcript):
    path = transcript.write(env.projects / "-tmp-demo")
    old = time.time() - 600
    os.utime(path, (old, old))
    env.ingest(env.projects)

    def run(*args):
        return CliRunner().invoke(cli, [*args, "--db", str(env.path)], catch_exceptions=False)

    checked = run("check", SID, "--json")
    shown = run("show", SID, "--json")

    async def page():
        ds = web.make_datasette(env.path)
        return (await ds.client.get(f"/-/sessions/{SID}")).text

    return {"check": (checked.exit_code, json.loads(checked.output)),
            "poisoned": env.rows("SELECT session_id, uuid, at_resume_tail FROM poisoned_sessions"),
            "show": json.loads(shown.output), "page": asyncio.run(page()),
            "repair": run("repair", SID)}


def test_a_third_party_provider_session_is_real_on_every_surface(env):
    s = _surfaces(env, third_party_session(env))
    code, verdict = s["check"]
    assert (code, verdict["verdict"]) == (0, "resumable"), verdict
    assert s["poisoned"] == []
    messages = s["show"]["messages"] if isinstance(s["show"], dict) else s["show"]
    assert [m["uuid"] for m in messages] == ["u0", "a0", "u1", "a1", "u2", "a2"]
    assert not any(m["synthetic"] for m in messages)
    assert "synthetic" not in s["page"].lower()
    assert 'data-verdict="resumable"' in s["page"]


def test_a_synthetic_tail_is_poisoned_on_every_surface(env):
    s = _surfaces(env, synthetic_tail_session(env))
    code, verdict = s["check"]
    assert (code, verdict["verdict"]) == (5, "poisoned"), verdict
    # the third-party replies before it are real: there is something to cut back to
    assert verdict["details"]["nothing_to_cut_back_to"] is False
    assert "session-index repair" in verdict["reason"]
    assert s["poisoned"] == [{"session_id": SID, "uuid": "s9", "at_resume_tail": 1}]
    messages = s["show"]["messages"] if isinstance(s["show"], dict) else s["show"]
    assert [m["uuid"] for m in messages if m["synthetic"]] == ["s9"]
    assert 'data-verdict="poisoned"' in s["page"]
    assert s["page"].count("si-m-synthetic") == 1   # the one mark, on s9
    # repair cuts back to the last real assistant message, a2 (not a msg_ id)
    assert s["repair"].exit_code == 0
    assert s["repair"].output.startswith(
        "drop line 7 (u9)  [poisoned_tail]\ndrop line 8 (s9)  [poisoned_tail]\n"
        "resume chain: 8 records before"), s["repair"].output


def test_poisoned_sessions_reads_the_synthetic_index(env):
    env.ingest(env.projects)
    plan = [r[3] for r in env.db.conn.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM poisoned_sessions")]
    assert any("INDEX records_synthetic" in step for step in plan), plan
    [sql] = [r[0] for r in env.db.conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'records_synthetic'")]
    assert sql.endswith("WHERE " + records.SYNTHETIC_RECORD.replace("{r}.", ""))


def test_the_sql_function_and_the_badge_follow_the_model():
    assert [web_format.is_synthetic(t, m) for t, m in [
        ("assistant", "<synthetic>"), ("assistant", "glm-5"), ("user", "<synthetic>"),
        ("assistant", None), (None, "<synthetic>")]] == [1, 0, 0, 0, None]

    class Urls:
        def path(self, p):
            return p

    def cell(**row):
        return web_cells.render_cell(row, "chatcmpl-7d0c", "message_id", "records", "d", Urls())

    assert cell(type="assistant", model="glm-5") is None
    assert cell(model="glm-5") is None
    assert "synthetic" in cell(type="assistant", model="<synthetic>")
    assert cell(type="user", model="<synthetic>") is None
    assert cell(type="assistant") is None   # without the model there is no telling


def test_the_sql_function_in_datasette(env):
    third_party_session(env).write(env.projects / "-tmp-demo")
    synthetic_tail_session(env).write(env.projects / "-tmp-demo", name="other.jsonl")
    env.ingest(env.projects)

    async def query():
        ds = web.make_datasette(env.path)
        sql = ("select uuid from records where is_synthetic(type, model) order by uuid")
        return (await ds.client.get(f"/{env.path.stem}.json", params={
            "sql": sql, "_shape": "array"})).json()

    assert asyncio.run(query()) == [{"uuid": "s9"}]

