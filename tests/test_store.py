"""The index as the Agent SDK's SessionStore (indexer/ingest/store.py): the SDK's
conformance suite, mirrored copies in the same tables as ingested files,
several real processes appending at once, and a resume from the store after
the local transcript is gone."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Transcript
from indexer.cli.commands import cli
from indexer.index.db import open_db
from indexer.transcripts.records import RECORD_FIELDS
from indexer.ingest.store import IndexSessionStore, InvalidKey, store_path

SID = "5e55a0e1-0000-4000-8000-00000000a001"
ROOT = Path(__file__).resolve().parent.parent


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def store(index):  # on conftest's index
    s = IndexSessionStore(index.path)
    yield s
    s.close()


def chain_session(sid=SID, cwd="/tmp/demo"):
    """A session with a parallel tool call (two tool_use records sharing a
    message.id, each answered on its own branch) and metadata lines."""
    t = Transcript(sid)
    t.add("u1", None, "user", cwd=cwd)
    for n, parent in (("1", "u1"), ("2", "a1")):
        t.add(f"a{n}", parent, "assistant", cwd=cwd, message={
            "id": "msg_tools", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "tool_use", "id": f"tu{n}", "name": "Read", "input": {"n": n}}]})
    for n in ("1", "2"):
        t.add(f"r{n}", f"a{n}", "user", cwd=cwd, message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"tu{n}", "content": f"result {n} ✓"}]})
    t.records.append({"type": "custom-title", "customTitle": "mirror me", "sessionId": sid})
    t.add("a3", "r2", "assistant", cwd=cwd)
    t.add("u2", "a3", "user", cwd=cwd)
    t.add("a4", "u2", "assistant", cwd=cwd)
    t.records.append({"type": "last-prompt", "lastPrompt": "prompt u2", "sessionId": sid})
    return t


# --- 1. the SDK's conformance suite ------------------------------------------

def test_sdk_conformance_suite_with_no_optional_method_skipped(tmp_path):
    from claude_agent_sdk.testing import run_session_store_conformance
    from claude_agent_sdk.testing.session_store_conformance import _has_optional

    made = []

    def make_store():
        made.append(IndexSessionStore(tmp_path / f"conformance-{len(made)}.db"))
        return made[-1]

    try:
        probe = make_store()
        optional = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")
        assert all(_has_optional(probe, m, frozenset()) for m in optional)
        run(run_session_store_conformance(make_store))
    finally:
        for s in made:
            s.close()
    assert len(made) == 1 + 1 + 14  # our probe, the suite's probe, one per contract


def test_the_core_package_does_not_import_the_sdk():
    code = ("import sys, indexer.ingest.store, indexer.cli.commands; "
            "assert not [m for m in sys.modules if m.startswith('claude_agent_sdk')]")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --- mirrored entries are records like any other ----------------------------

def test_a_mirrored_session_is_a_file_of_the_index_with_every_column_filled(index, store):
    t = chain_session()
    local = t.write(index.projects / "-tmp-demo")
    index.ingest()
    key = {"project_key": "-tmp-demo", "session_id": SID}
    for i in range(0, len(t.records), 3):  # batches, as the SDK sends them
        run(store.append(key, t.records[i:i + 3]))

    assert run(store.load(key)) == t.records
    f = index.rows("SELECT * FROM files WHERE origin = 'store'")[0]
    assert (f["path"], f["kind"], f["session_id"], f["project_key"], f["subpath"],
            f["project_dir"], f["mtime"], f["deleted_at"], f["needs_derive"]) == (
        f"store://-tmp-demo/{SID}", "main", SID, "-tmp-demo", None, "-tmp-demo", None, None, 0)
    assert (f["line_count"], f["records"], f["cwd"], f["version"]) == (
        len(t.records), len(t.records), "/tmp/demo", "2.1.247")
    assert f["ingested_offset"] == f["size"] == sum(
        len(json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode()) + 1
        for r in t.records)

    # Every extracted column as ingest fills it from the local file.
    cols = ", ".join(("line_no",) + RECORD_FIELDS)
    local_id, store_id = index.file_id(local), f["id"]
    by_file = {i: index.rows(f"SELECT {cols} FROM records WHERE file_id = ? ORDER BY line_no", [i])
               for i in (local_id, store_id)}
    assert by_file[store_id] == by_file[local_id]
    offsets = index.rows("SELECT byte_offset, raw FROM records WHERE file_id = ? ORDER BY line_no",
                         [store_id])
    assert offsets[0]["byte_offset"] == 0 and all(
        b["byte_offset"] == a["byte_offset"] + len(a["raw"].encode()) + 1
        for a, b in zip(offsets, offsets[1:]))

    # The caches are current after every append, for both copies alike.
    index.assert_caches_match_definitions()
    leaves = {r["file_id"]: r for r in index.rows("SELECT * FROM leaves")}
    assert {k: v for k, v in leaves[store_id].items() if k not in ("file_id", "resume_leaf_id",
            "sdk_leaf_id")} == {k: v for k, v in leaves[local_id].items()
                                if k not in ("file_id", "resume_leaf_id", "sdk_leaf_id")}
    assert index.causes(store_id) == index.causes(local_id) == {"r1": "parallel_tool_branch"}

    # Two copies of one session, not two sessions; the local file is the main one.
    s = index.rows("SELECT * FROM sessions")
    assert len(s) == 1 and s[0]["main_file_id"] == local_id and s[0]["main_files"] == 1
    assert s[0]["records"] == index.value("SELECT records FROM files WHERE id = ?", [local_id])
    assert index.rows("SELECT * FROM expired_transcripts WHERE file_id = ?", [store_id]) == []
    copies = index.rows("SELECT * FROM session_copies")
    assert [(c["local_file_id"], c["store_file_id"], c["local_only"], c["store_only"],
             c["diverged"]) for c in copies] == [(local_id, store_id, 0, 0, 0)]


def test_divergent_copies_say_how(index, store):
    t = chain_session()
    local = t.write(index.projects / "-tmp-demo")
    index.ingest()
    key = {"project_key": "-tmp-demo", "session_id": SID}
    run(store.append(key, [r for r in t.records if r.get("uuid") != "a4"]))
    run(store.append(key, [dict(t.records[-3], uuid="x1", parentUuid="u2",
                                timestamp="2026-09-01T01:00:00.000Z")]))
    c = index.rows("SELECT * FROM session_copies")[0]
    assert (c["local_only"], c["store_only"], json.loads(c["local_only_uuids"]),
            json.loads(c["store_only_uuids"]), c["diverged"]) == (1, 1, ["a4"], ["x1"], 1)
    assert (c["local_resume_leaf_uuid"], c["store_resume_leaf_uuid"]) == ("a4", "x1")
    result = CliRunner().invoke(cli, ["check", SID, "--db", str(index.path), "--json"])
    out = json.loads(result.output)
    assert result.exit_code == 0 and out["path"] == str(local.resolve())
    assert any("differs from this transcript: 1 uuid(s) only here, 1 only in the store" in w
               for w in out["warnings"])


def test_uuid_is_the_idempotency_key_and_odd_entries_round_trip(index, store):
    key = {"project_key": "p", "session_id": SID}
    batch = [{"type": "user", "uuid": "u1", "n": 1}, {"type": "tag", "tag": "x"},
             {"type": "user", "uuid": "u2", "parentUuid": "u1", "n": 2}]
    run(store.append(key, batch))
    run(store.append(key, batch))  # a retried batch: only the uuid-less entry again
    run(store.append(key, [{"type": "user", "uuid": "u2", "n": "changed"},
                           {"type": "user", "uuid": "u3", "n": 3},
                           {"type": "user", "uuid": "u3", "n": "twice in one batch"}]))
    odd = [{"type": "x", "s": "lone \ud800 surrogate, ünïcode, \x00 NUL", "big": 10 ** 30,
            "f": 1.5e-300, "nested": {"a": [None, True, {"b": []}]}},
           ["not", "an", "object"], "a string"]
    run(store.append(key, odd))
    assert run(store.load(key)) == [*batch, {"type": "tag", "tag": "x"},
                                    {"type": "user", "uuid": "u3", "n": 3}, *odd]
    assert index.value("SELECT count(*) FROM records r JOIN files f ON f.id = r.file_id "
                       "WHERE f.origin = 'store'") == 6
    assert [r["error"] for r in index.rows("SELECT error FROM bad_lines ORDER BY line_no")] == [
        "not a JSON object (a list)", "not a JSON object (a str)"]
    run(store.append(key, []))
    with pytest.raises(InvalidKey):
        run(store.append({"session_id": SID}, batch))
    assert store_path("a/b", "c") != store_path("a", "b/c")


def test_delete_takes_every_row_of_the_copy_and_keeps_the_local_file(index, store):
    t = chain_session()
    t.write(index.projects / "-tmp-demo")
    index.ingest()
    key = {"project_key": "-tmp-demo", "session_id": SID}
    sub = dict(key, subpath="subagents/agent-abc")
    run(store.append(key, t.records))
    run(store.append(sub, [{"type": "user", "uuid": "s1", "isSidechain": True}]))
    assert index.value("SELECT agent_id FROM files WHERE subpath IS NOT NULL") == "abc"
    assert run(store.list_subkeys(key)) == ["subagents/agent-abc"]
    run(store.delete(key))
    store_ids = "(SELECT id FROM files WHERE origin = 'store')"
    assert index.value("SELECT count(*) FROM files WHERE origin = 'store'") == 0
    for table in ("records", "bad_lines", "leaves_cache", "leaf_ancestry_cache", "orphans_cache",
                  "store_keys"):
        assert index.value(f"SELECT count(*) FROM {table} WHERE file_id NOT IN "
                           f"(SELECT id FROM files)") == 0, table
    assert index.value(f"SELECT count(*) FROM records WHERE file_id IN {store_ids}") == 0
    assert index.rows("SELECT main_files, subagent_files FROM sessions") == [
        {"main_files": 1, "subagent_files": 0}]
    run(store.append({"project_key": "q", "session_id": "only-in-store"}, [{"type": "x"}]))
    run(store.delete({"project_key": "q", "session_id": "only-in-store"}))
    assert index.value("SELECT count(*) FROM sessions WHERE session_id = 'only-in-store'") == 0
    index.assert_caches_match_definitions()


# --- 2. several processes at once --------------------------------------------

WRITER = r"""
import asyncio, json, os, random, sys, time
from indexer.ingest.store import IndexSessionStore

db, writer, batches, go, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
rng = random.Random(1000 + writer)
SHARED = "5e55a0e1-0000-4000-8000-000000000000"
keys = {"shared": {"project_key": "proj", "session_id": SHARED},
        "own": {"project_key": "proj", "session_id": f"5e55a0e1-0000-4000-8000-00000000000{writer + 1}"}}

def entry(name, i, parent):
    sid = keys[name]["session_id"]
    if rng.random() < 0.1:  # metadata without a uuid
        return {"type": "custom-title", "customTitle": f"w{writer} {i}", "sessionId": sid, "w": writer, "i": i}
    kind = "user" if i % 2 == 0 else "assistant"
    message = ({"role": "user", "content": f"prompt {writer}/{i}"} if kind == "user" else
               {"id": f"msg_{writer}_{name}_{i}", "type": "message", "role": "assistant",
                "model": "claude-x", "content": [{"type": "text", "text": "x" * rng.randint(10, 3000)}]})
    return {"parentUuid": parent, "isSidechain": False, "type": kind, "uuid": f"w{writer}-{name}-{i}",
            "sessionId": sid, "cwd": "/tmp/proj", "version": "2.1.247",
            "timestamp": f"2026-09-01T00:{i // 60 % 60:02d}:{i % 60:02d}.{writer:03d}Z",
            "message": message, "w": writer, "i": i}

async def main():
    store = IndexSessionStore(db)
    sent = {"shared": [], "own": []}
    parent = {"shared": None, "own": None}
    while not os.path.exists(go):
        time.sleep(0.002)
    for _ in range(batches):
        for name in rng.sample(["shared", "own"], 2):
            entries = []
            for _ in range(rng.randint(1, 12)):
                e = entry(name, len(sent[name]) + len(entries), parent[name])
                parent[name] = e.get("uuid", parent[name])
                entries.append(e)
            await store.append(keys[name], entries)
            sent[name] += entries
            if rng.random() < 0.2:  # the SDK retries a batch that may have landed
                await store.append(keys[name], [e for e in entries if "uuid" in e])
            await asyncio.sleep(rng.random() * 0.003)
    store.close()
    with open(out, "w") as f:
        json.dump(sent, f)

asyncio.run(main())
"""


@pytest.mark.xdist_group("timing")
def test_several_processes_append_interleaved_batches(index, tmp_path):
    writers, batches = 4, 25
    go = tmp_path / "go"
    procs = [subprocess.Popen(
        [sys.executable, "-c", WRITER, str(index.path), str(w), str(batches), str(go),
         str(tmp_path / f"sent-{w}.json")], cwd=ROOT, stderr=subprocess.PIPE)
        for w in range(writers)]
    time.sleep(0.5)  # let them start up and open the index, then all go at once
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    sent = [json.loads((tmp_path / f"sent-{w}.json").read_text()) for w in range(writers)]

    check = IndexSessionStore(index.path)
    try:
        shared = run(check.load({"project_key": "proj",
                                 "session_id": "5e55a0e1-0000-4000-8000-000000000000"}))
        for w in range(writers):
            # Each writer's entries, in its order, each exactly once.
            assert [e for e in shared if e["w"] == w] == sent[w]["shared"]
            own = run(check.load({"project_key": "proj",
                                  "session_id": f"5e55a0e1-0000-4000-8000-00000000000{w + 1}"}))
            assert own == sent[w]["own"]
        assert len(shared) == sum(len(s["shared"]) for s in sent)
        switches = sum(a["w"] != b["w"] for a, b in zip(shared, shared[1:]))
        assert switches > writers * 3, "the writers did not interleave"
        assert len(run(check.list_sessions("proj"))) == writers + 1
    finally:
        check.close()

    assert index.value("PRAGMA integrity_check") == "ok"
    # Every copy numbered 1..N, offsets where its lines start, caches current.
    for f in index.rows("SELECT id, line_count, ingested_offset, needs_derive FROM files"):
        lines = index.rows("SELECT line_no, byte_offset, length(CAST(raw AS BLOB)) AS n "
                           "FROM records WHERE file_id = ? ORDER BY line_no", [f["id"]])
        assert [r["line_no"] for r in lines] == list(range(1, f["line_count"] + 1))
        assert sum(r["n"] + 1 for r in lines) == f["ingested_offset"] and not f["needs_derive"]
    index.assert_caches_match_definitions()
    shared_leaves = index.rows("SELECT l.branch_count FROM leaves l JOIN files f ON f.id = l.file_id "
                               "WHERE f.session_id = '5e55a0e1-0000-4000-8000-000000000000'")
    assert shared_leaves == [{"branch_count": writers}]  # one chain per writer


# --- 3. resume from the store once the local file is gone --------------------

def test_resume_from_the_store_after_the_local_transcript_is_deleted(tmp_path, monkeypatch):
    from claude_agent_sdk import (ClaudeAgentOptions, get_session_messages,
                                  get_session_messages_from_store, get_subagent_messages,
                                  get_subagent_messages_from_store, project_key_for_directory)
    from claude_agent_sdk._internal.session_resume import materialize_resume_session
    from claude_agent_sdk._internal.session_store import file_path_to_session_key

    config, cwd = tmp_path / "claude", tmp_path / "work"
    cwd.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    monkeypatch.setenv("SESSION_INDEX_MANAGED_SETTINGS", str(tmp_path / "managed.json"))
    projects = config / "projects"
    folder = projects / project_key_for_directory(cwd)
    main = chain_session(cwd=str(cwd)).write(folder)
    agent = Transcript(SID)
    agent.add("s1", None, "user", isSidechain=True, agentId="abc", cwd=str(cwd))
    agent.add("s2", "s1", "assistant", isSidechain=True, agentId="abc", cwd=str(cwd))
    sub = agent.write(folder / SID / "subagents", "agent-abc.jsonl")
    expected = get_session_messages(SID, directory=str(cwd))
    expected_sub = get_subagent_messages(SID, "abc", directory=str(cwd))
    assert len(expected) == 8 and len(expected_sub) == 2

    # Mirror both files as the SDK's batcher does: key from the path, ~3 lines a batch.
    db = tmp_path / "sessions.db"
    store = IndexSessionStore(db)
    lines = {}
    for path in (main, sub):
        key = file_path_to_session_key(str(path), str(projects))
        lines[path] = [json.loads(line) for line in path.read_text().splitlines()]
        for i in range(0, len(lines[path]), 3):
            run(store.append(key, lines[path][i:i + 3]))

    def invoke(*args):
        result = CliRunner().invoke(cli, [*args, "--db", str(db)], catch_exceptions=False)
        return result.exit_code, result.output

    assert invoke("ingest", str(projects), "--silent")[0] == 0
    code, out = invoke("check", SID, "--json")
    assert code == 0 and "resume_from" not in json.loads(out)["details"]
    copies = open_db(db).conn.execute(
        "SELECT kind, local_only, store_only, diverged FROM session_copies ORDER BY kind").fetchall()
    assert copies == [("main", 0, 0, 0), ("subagent", 0, 0, 0)]

    main.unlink()  # cleanupPeriodDays, or a new machine
    sub.unlink()
    for rerun_ingest in (False, True):
        if rerun_ingest:  # the index learns the file is gone: the store copy stands in
            assert invoke("ingest", str(projects), "--silent")[0] == 0
        code, out = invoke("check", SID, "--json")
        verdict = json.loads(out)
        assert (code, verdict["verdict"], verdict["details"]["resume_from"]) == (
            0, "resumable", "store"), out
        assert "must load it from the store" in verdict["reason"]
        assert verdict["path"] == f"store://{folder.name}/{SID}"
    code, out = invoke("check", SID)
    assert code == 0 and out.startswith("resumable: the local transcript was deleted")

    # What the SDK reads back from the store is what it read from the file.
    key = {"project_key": folder.name, "session_id": SID}
    assert run(store.load(key)) == lines[main]
    assert run(get_session_messages_from_store(store, SID, directory=str(cwd))) == expected
    assert run(get_subagent_messages_from_store(store, SID, "abc", directory=str(cwd))) == expected_sub

    # And a store-backed resume materializes the same transcripts for the CLI.
    async def materialize():
        options = ClaudeAgentOptions(session_store=store, resume=SID, cwd=str(cwd),
                                     env={"CLAUDE_CONFIG_DIR": str(config)})
        return await materialize_resume_session(options)

    materialized = run(materialize())
    try:
        restored = materialized.config_dir / "projects" / folder.name
        assert [json.loads(x) for x in (restored / f"{SID}.jsonl").read_text().splitlines()] \
            == lines[main]
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(materialized.config_dir))
        assert get_session_messages(SID, directory=str(cwd)) == expected
        assert get_subagent_messages(SID, "abc", directory=str(cwd)) == expected_sub
    finally:
        run(materialized.cleanup())
        store.close()


def test_a_session_only_in_the_store_is_resumable_from_it(index, store, tmp_path):
    t = chain_session()
    run(store.append({"project_key": "p", "session_id": SID}, t.records))
    result = CliRunner().invoke(cli, ["check", SID, "--db", str(index.path), "--json",
                                      "--config-dir", str(tmp_path / "claude")])
    verdict = json.loads(result.output)
    assert result.exit_code == 0 and verdict["details"]["resume_from"] == "store"
    assert verdict["reason"].startswith("no local transcript was ever indexed, but the session "
                                        "store holds it (10 records")
    assert index.rows("SELECT * FROM stale_session_refs") == []
    # export and restore write files, which it has none of: they say the store holds it
    for args in (["export", SID, "--out", str(tmp_path / "out")],
                 ["restore", SID, "--config-dir", str(tmp_path / "claude")]):
        result = CliRunner().invoke(cli, [*args, "--db", str(index.path)])
        assert result.exit_code == 3 and result.stderr.strip() == (
            f"Error: session {SID} is in the index only as a session store copy "
            f"(store://p/{SID}): export and restore write transcript files, and no file of it "
            "was indexed (the SessionStore's load reads the copy)"), result.stderr
    assert not (tmp_path / "out").exists()


def test_a_poisoned_store_copy_is_poisoned(index, store, tmp_path):
    t = Transcript(SID)
    t.add("u1", None, "user")
    t.add("s1", "u1", "assistant", requestId="req_s1", message={   # named: poisoned
        "id": "0c8f5a0e-1111-4444-8888-000000000001", "type": "message", "role": "assistant",
        "model": "<synthetic>", "content": [{"type": "text", "text": "No response requested."}]})
    run(store.append({"project_key": "p", "session_id": SID}, t.records))
    result = CliRunner().invoke(cli, ["check", SID, "--db", str(index.path), "--json",
                                      "--config-dir", str(tmp_path / "claude")])
    verdict = json.loads(result.output)
    assert (result.exit_code, verdict["verdict"]) == (5, "poisoned")
    assert any("only the session store holds this session" in w for w in verdict["warnings"])


# --- the real corpus, mirrored -----------------------------------------------

@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_every_corpus_transcript_mirrors_to_the_same_chain(index, store):
    index.ingest(CORPUS)
    files = index.rows("SELECT id, path, kind, session_id FROM files "
                       "WHERE kind IN ('main', 'subagent') AND origin = 'file'")
    keys = {}
    for f in files:
        entries = []
        data = Path(f["path"]).read_bytes()
        for line in data.split(b"\n"):  # as ingested: the last one if it is a whole record
            try:
                value = json.loads(line.decode("utf-8").lstrip("\ufeff"))
            except ValueError:
                continue
            if isinstance(value, dict):
                entries.append(value)
        key = {"project_key": f"corpus-{f['id']}", "session_id": f["session_id"] or f"none-{f['id']}"}
        if f["kind"] == "subagent":
            key["subpath"] = f"subagents/agent-{f['id']}"
        for i in range(0, len(entries), 100):
            run(store.append(key, entries[i:i + 100]))
        keys[f["id"]] = key
    index.assert_caches_match_definitions()
    leaf_cols = "resume_leaf_uuid, sdk_leaf_uuid, leaves_agree, branch_count"
    same = 0
    for f in files:
        store_id = index.value("SELECT id FROM files WHERE path = ?", [store_path(**keys[f["id"]])])
        dups = index.value("SELECT count(*) FROM duplicate_uuids WHERE file_id = ?", [f["id"]])
        if dups:
            continue  # the store keeps the first line of a uuid, a file may repeat it
        assert index.rows(f"SELECT {leaf_cols} FROM leaves WHERE file_id = ?", [store_id]) == \
            index.rows(f"SELECT {leaf_cols} FROM leaves WHERE file_id = ?", [f["id"]]), f["path"]
        assert sorted(index.causes(store_id).items()) == sorted(index.causes(f["id"]).items())
        same += 1
    assert same > 50


def test_the_web_ui_shows_a_store_copy_as_it_arrives(index, store):
    from indexer.cli.web import make_datasette

    t = chain_session()
    key = {"project_key": "-tmp-demo", "session_id": SID}
    run(store.append(key, t.records[:3]))

    async def page():
        ds = make_datasette(index.path)
        await ds.invoke_startup()
        return (await ds.client.get(f"/-/sessions/{SID}")).text

    assert f"store://-tmp-demo/{SID}" in run(page())
    run(store.append(key, t.records[3:]))
    assert "prompt u2" in run(page())


def test_without_the_sdk_an_append_does_not_read_the_copy_back(index, monkeypatch):
    """No summary to fold without the SDK: an append costs its own entries,
    not the copy's (it read every stored entry back, then folded nothing)."""
    from indexer.ingest import store as storemod

    monkeypatch.setattr(storemod, "_fold_summary", lambda: None)
    backend = storemod._Backend(index.path)
    try:
        key = {"project_key": "-tmp-demo", "session_id": SID}
        records = chain_session().records
        backend.append(key, records[:4])
        statements = []
        backend.conn.set_trace_callback(statements.append)
        backend.append(key, records[4:])
        backend.conn.set_trace_callback(None)
        assert statements and not any(s.strip().startswith(storemod.LOAD_SQL.strip()[:40])
                                      for s in statements)
        assert backend.load(key) == records
        assert backend.conn.execute("SELECT summary FROM store_keys").fetchall() == [(None,)]
    finally:
        backend.close()


def test_an_index_deleted_under_the_store_is_not_written_into(index, tmp_path):
    """Its connection would go on appending into the unlinked file: the
    append raises instead (the SDK logs the failed flush), and a new store
    there makes a new index."""
    from indexer.index import db as dbmod
    from indexer.ingest import store as storemod

    backend = storemod._Backend(index.path)
    key = {"project_key": "-tmp-demo", "session_id": SID}
    records = chain_session().records
    try:
        backend.append(key, records[:4])
        for suffix in ("", "-wal", "-shm"):
            Path(f"{index.path}{suffix}").unlink(missing_ok=True)
        with pytest.raises(dbmod.IndexReplaced, match="was deleted or replaced while in use"):
            backend.append(key, records[4:])
        with pytest.raises(dbmod.IndexReplaced):
            backend.delete(key)
    finally:
        backend.close()
    again = storemod._Backend(index.path)
    try:
        again.append(key, records[4:])
        assert again.load(key) == records[4:]
    finally:
        again.close()
