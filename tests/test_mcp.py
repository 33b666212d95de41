"""``session-index mcp``, driven by the MCP SDK's own client: the server runs
as a real subprocess over stdio (and once over streamable HTTP), on a real
index; every tool, bad inputs, and a session that changes between two calls."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from conftest import write_jsonl
from indexer.cli import mcp_server
from indexer.cli.commands import cli
from indexer.index import search as searchmod
from indexer.repair import check as checkmod

FIXTURES = Path(__file__).parent / "fixtures"
SID = "11111111-2222-3333-4444-555555555555"


def server_params(env, *extra):
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "indexer", "mcp", "--db", str(env.path), "--config-dir", str(env.config),
              *extra],
        env={"CLAUDE_CONFIG_DIR": str(env.config),
             "SESSION_INDEX_MANAGED_SETTINGS": os.environ["SESSION_INDEX_MANAGED_SETTINGS"]})


def answer(result) -> dict:
    assert not result.is_error, result.content[0].text
    data = json.loads(result.content[0].text)
    assert data == result.structured_content
    return data


def error(result) -> str:
    assert result.is_error
    text = result.content[0].text
    assert "\n" not in text and "Traceback" not in text, text
    return text


def session(env, steps, errlog=None):
    """Run ``await steps(client)`` against a server started for ``env``."""
    async def main():
        with open(errlog or os.devnull, "w") as log:
            async with stdio_client(server_params(env), errlog=log) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    return await steps(client)
    return anyio.run(main)


def cli_json(*args):
    result = CliRunner().invoke(cli, list(args))
    return json.loads(result.stdout), result.exit_code


@pytest.fixture
def seeded(env):
    """The seed 000 transcript (an api_error splice: spliced), ingested."""
    path = env.projects / "-tmp-demo" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes((FIXTURES / "seed000_splice.jsonl").read_bytes())
    env.ingest()
    env.transcript = path
    return env


def test_the_tools_are_listed_read_only(seeded):
    async def steps(client):
        return (await client.list_tools()).tools

    tools = {t.name: t for t in session(seeded, steps)}
    assert sorted(tools) == ["check_session", "problems", "search", "show_session", "usage"]
    assert all(t.annotations.read_only_hint for t in tools.values())
    assert tools["check_session"].input_schema["properties"]["session_id"]["maxLength"] == \
        mcp_server.MAX_ID


def test_check_session_is_check_json_with_its_revision(seeded):
    async def steps(client):
        return answer(await client.call_tool("check_session", {"session_id": SID}))

    got = session(seeded, steps)
    expected, code = cli_json("check", SID, "--db", str(seeded.path), "--json")
    assert code == checkmod.EXIT_CODES["spliced"] == got["exit_code"]
    assert got["verdict"] == "spliced"
    revision = got.pop("revision")
    for key in ("checked_in_ms",):
        got.pop(key), expected.pop(key)
    assert got == expected
    size = seeded.transcript.stat().st_size
    assert revision == {"files": [{"file_id": expected["details"]["main_file"]["file_id"],
                                   "path": str(seeded.transcript.resolve()), "generation": 1,
                                   "ingested_offset": size}]}


def test_check_session_with_a_cwd_and_an_unknown_uuid(seeded):
    other = "22222222-2222-3333-4444-555555555555"

    async def steps(client):
        return (answer(await client.call_tool("check_session", {"session_id": other})),
                answer(await client.call_tool("check_session",
                                              {"session_id": SID, "cwd": "/tmp/demo"})),
                error(await client.call_tool("show_session", {"session_id": other})))

    missing, with_cwd, no_show = session(seeded, steps)
    assert (missing["verdict"], missing["revision"]) == ("missing", {"files": []})
    assert f"session {other} has no main transcript in the index" in no_show
    expected, _ = cli_json("check", SID, "--db", str(seeded.path), "--json", "--cwd", "/tmp/demo")
    assert with_cwd["verdict"] == expected["verdict"] == "spliced"
    assert with_cwd["details"]["main_file"] == expected["details"]["main_file"]


def test_a_session_that_changes_between_two_calls(seeded):
    """The server never ingests: a changed transcript is answered for as the
    index holds it, with a warning, until an ingest (another process) reads
    it; then the revision says so."""
    before = seeded.transcript.stat().st_size
    last = json.loads(seeded.transcript.read_text().splitlines()[-1])
    more = [dict(last, uuid="bbbbbbbb-0000-0000-0000-000000000001", parentUuid=last["uuid"],
                 type="user", message={"role": "user", "content": "And the otter?"},
                 timestamp="2026-09-01T00:10:00.000Z")]

    async def steps(client):
        first = answer(await client.call_tool("check_session", {"session_id": SID}))
        with open(seeded.transcript, "ab") as f:
            f.write(b"".join(json.dumps(r).encode() + b"\n" for r in more))
        unread = answer(await client.call_tool("check_session", {"session_id": SID}))
        result = CliRunner().invoke(cli, ["ingest", "--db", str(seeded.path), "--silent",
                                          str(seeded.projects)])
        assert result.exit_code == 0, result.output
        read = answer(await client.call_tool("check_session", {"session_id": SID}))
        return first, unread, read

    first, unread, read = session(seeded, steps)
    after = seeded.transcript.stat().st_size
    assert [f["ingested_offset"] for f in first["revision"]["files"]] == [before]
    assert unread["revision"] == first["revision"]
    assert unread["warnings"] == [checkmod.UNREAD_WARNING.format(
        path=str(seeded.transcript.resolve()))]
    assert [f["ingested_offset"] for f in read["revision"]["files"]] == [after] != [before]
    assert read["warnings"] == []


def test_the_server_never_writes_the_index(seeded):
    with open(seeded.transcript, "ab") as f:   # changed on disk: check would ingest it
        f.write(b'{"type":"user","uuid":"x-1","parentUuid":null,"sessionId":"%s"}\n'
                % SID.encode())
    seeded.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    digest = hashlib.sha256(seeded.path.read_bytes()).hexdigest()

    async def steps(client):
        for name, args in (("check_session", {"session_id": SID}), ("usage", {}),
                           ("problems", {}), ("show_session", {"session_id": SID})):
            answer(await client.call_tool(name, args))

    session(seeded, steps)
    assert hashlib.sha256(seeded.path.read_bytes()).hexdigest() == digest
    wal = Path(str(seeded.path) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_search_hits_name_their_record_file_and_offset(seeded):
    async def off(client):
        return error(await client.call_tool("search", {"query": "otter"}))

    assert "search is not enabled" in session(seeded, off)
    searchmod.enable(seeded.db)

    async def steps(client):
        return (answer(await client.call_tool("search", {"query": "otter", "limit": 5})),
                answer(await client.call_tool("search", {"query": "\totter\n",
                                                         "session_id": SID})),
                error(await client.call_tool("search", {"query": "* \"\""})))

    found, in_session, empty = session(seeded, steps)
    data = seeded.transcript.read_bytes()
    assert found["hits"] and found["hits"] == in_session["hits"]
    for hit in found["hits"]:
        assert hit["session_id"] == SID and "[[" in hit["snippet"]
        line = data[hit["byte_offset"]:].split(b"\n", 1)[0]
        assert b"otter" in line.lower()
        assert json.loads(line)["uuid"] == seeded.value(
            "SELECT uuid FROM records WHERE id = ?", [hit["record_id"]])
    assert [f["path"] for f in found["revision"]["files"]] == [str(seeded.transcript.resolve())]
    assert "nothing to search for" in empty


def test_show_session_is_show_json_a_page_at_a_time(env):
    """A conversation longer than a page: the pages, put together, are
    `show --json`; each names the transcript's revision."""
    path = env.projects / "-tmp-demo" / f"{SID}.jsonl"
    n = mcp_server.PAGE_MESSAGES * 2 + 10
    records, parent = [], None
    for i in range(n):
        uuid = f"cccccccc-0000-0000-0000-{i:012d}"
        role = "user" if i % 2 == 0 else "assistant"
        message = ({"role": "user", "content": f"question {i}"} if role == "user" else
                   {"id": f"msg_{i}", "type": "message", "role": "assistant", "model": "claude-x",
                    "content": [{"type": "text", "text": f"answer {i}"}]})
        records.append({"parentUuid": parent, "isSidechain": False, "type": role,
                        "sessionId": SID, "cwd": "/tmp/demo", "uuid": uuid,
                        "timestamp": f"2026-09-01T00:{i // 60:02d}:{i % 60:02d}.000Z",
                        "message": message})
        parent = uuid
    write_jsonl(path, records)
    env.ingest()

    async def steps(client):
        pages, since = [], None
        while True:
            args = {"session_id": SID} | ({"since": since} if since else {})
            page = answer(await client.call_tool("show_session", args))
            pages.append(page)
            since = page["next"]
            if since is None:
                return pages, error(await client.call_tool(
                    "show_session", {"session_id": SID, "since": "not-a-message"}))

    pages, bad = session(env, steps)
    expected = json.loads(CliRunner().invoke(
        cli, ["show", SID, "--db", str(env.path), "--json"]).output)
    assert [len(p["messages"]) for p in pages] == [mcp_server.PAGE_MESSAGES] * 2 + [10]
    assert [m for p in pages for m in p["messages"]] == expected
    assert {p["total"] for p in pages} == {n}
    assert all(p["revision"]["files"][0]["ingested_offset"] == path.stat().st_size
               for p in pages)
    assert "is not a message of the conversation" in bad


def test_usage_is_the_usage_report(seeded):
    db = str(seeded.path)
    CliRunner().invoke(cli, ["usage", "--db", db])  # loads the packaged prices (a writer)

    async def steps(client):
        return (answer(await client.call_tool("usage", {})),
                answer(await client.call_tool("usage", {"period": "2026-09-01"})),
                answer(await client.call_tool("usage", {"period": "2099-01-01"})),
                answer(await client.call_tool("usage", {"project": "-tmp-demo"})),
                error(await client.call_tool("usage", {"period": "fortnight"})))

    everything, since, later, project, bad = session(seeded, steps)
    totals, _ = cli_json("usage", "--db", db, "--json")
    by_project, _ = cli_json("usage", "--db", db, "--json", "--by", "project")
    assert everything["totals"] == totals[0] and totals[0]["calls"] >= 1
    assert since["totals"] == totals[0] and since["since"] == "2026-09-01T00:00:00.000Z"
    assert later["totals"] is None
    assert [dict(project["totals"], project="-tmp-demo")] == [
        r for r in by_project if r["project"] == "-tmp-demo"]
    assert everything["revision"]["index"]["ingested_bytes"] == seeded.transcript.stat().st_size
    assert "period must be one of" in bad


def test_problems_are_the_health_page_classes(seeded):
    async def steps(client):
        return (answer(await client.call_tool("problems", {})),
                answer(await client.call_tool("problems", {"kind": "verdicts"})),
                error(await client.call_tool("problems", {"kind": "nope"})))

    everything, verdicts, bad = session(seeded, steps)
    spliced = [p for p in verdicts["problems"] if p["total"]]
    assert [(p["label"].split(":")[0], p["total"], [s["session_id"] for s in p["sessions"]])
            for p in spliced] == [("Spliced", 1, [SID])]
    assert spliced[0]["sessions"][0]["main_file"] == {
        "file_id": seeded.file_id(seeded.transcript), "path": str(seeded.transcript.resolve()),
        "generation": 1, "ingested_offset": seeded.transcript.stat().st_size}
    assert {p["label"] for p in verdicts["problems"]} <= {p["label"]
                                                         for p in everything["problems"]}
    assert len(everything["problems"]) > len(verdicts["problems"])
    assert everything["revision"]["index"]["max_record_id"] == seeded.value(
        "SELECT max(id) FROM records")
    assert "kind must be one of" in bad


HOSTILE = [
    ("check_session", {"session_id": "x" * 100_000}, "at most 200 characters"),
    ("check_session", {"session_id": "not-a-session"}, "neither a uuid nor a session id"),
    ("check_session", {"session_id": "../../etc/passwd"}, "neither a uuid nor a session id"),
    ("check_session", {"session_id": SID + "\x00"}, "control character"),
    ("check_session", {"session_id": SID, "cwd": "relative/dir"}, "absolute path"),
    ("check_session", {"session_id": 42}, "session_id"),
    ("check_session", {}, "session_id: Field required"),
    ("search", {"query": "q" * 10_000}, "at most 1000 characters"),
    ("search", {"query": "otter\x1b[2J"}, "control character"),
    ("search", {"query": "otter", "limit": 0}, "greater than or equal to 1"),
    ("search", {"query": "otter", "limit": 10**12}, "less than or equal to 100"),
    ("search", {"query": "otter", "limit": "all"}, "limit"),
    ("usage", {"project": "p" * 5000}, "at most 4096 characters"),
    ("problems", {"kind": "verdicts; DROP TABLE files"}, "kind must be one of"),
    ("no_such_tool", {}, "Unknown tool"),
]


def test_hostile_and_huge_inputs_are_one_line_tool_errors(seeded, tmp_path):
    async def steps(client):
        out = [error(await client.call_tool(name, args)) for name, args, _ in HOSTILE]
        # the server is still there and still answers
        answer(await client.call_tool("check_session", {"session_id": SID}))
        return out

    log = tmp_path / "server.log"
    errors = session(seeded, steps, errlog=log)
    for (name, _, words), text in zip(HOSTILE, errors):
        assert words in text, (name, text)
    assert "Traceback" not in log.read_text()
    assert seeded.value("SELECT count(*) FROM files") == 1


def test_streamable_http_on_loopback(seeded):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "indexer", "mcp", "--db", str(seeded.path), "--http",
           "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.1)

        async def main():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    return answer(await client.call_tool("check_session", {"session_id": SID}))

        assert anyio.run(main)["verdict"] == "spliced"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_mcp_on_no_index_is_one_line_exit_3(tmp_path):
    result = CliRunner().invoke(cli, ["mcp", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 3
    assert result.output.startswith("Error: no index at") and result.output.count("\n") == 1


def test_sessions_rows_of_an_older_session_index_are_said(seeded):
    seeded.db.conn.execute("UPDATE index_meta SET value = 'older' WHERE key = 'sessions_hash'")

    async def steps(client):
        return answer(await client.call_tool("check_session", {"session_id": SID}))

    assert session(seeded, steps)["warnings"] == [checkmod.OLD_SESSIONS_WARNING]


def test_an_index_replaced_while_served_is_opened_again(seeded, tmp_path):
    """A backup put back over the index (another file at the path): the
    server answers from it, not from the unlinked file it had open."""
    other_sid = "33333333-2222-3333-4444-555555555555"
    other = tmp_path / "other"
    write_jsonl(other / "-tmp-demo" / f"{other_sid}.jsonl",
                (FIXTURES / "seed000_splice.jsonl").read_text().replace(SID, other_sid)
                .splitlines())
    backup = tmp_path / "backup.db"
    result = CliRunner().invoke(cli, ["ingest", "--db", str(backup), "--silent", str(other)])
    assert result.exit_code == 0, result.output
    for conn in (sqlite3.connect(backup), seeded.db.conn):   # all in the main files
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    async def steps(client):
        before = answer(await client.call_tool("check_session", {"session_id": other_sid}))
        os.replace(backup, seeded.path)
        after = answer(await client.call_tool("check_session", {"session_id": other_sid}))
        os.remove(seeded.path)
        gone = error(await client.call_tool("check_session", {"session_id": other_sid}))
        return before, after, gone

    before, after, gone = session(seeded, steps)
    assert (before["verdict"], after["verdict"]) == ("missing", "spliced")
    assert after["revision"]["files"][0]["path"].endswith(f"{other_sid}.jsonl")
    assert "the index was replaced and cannot be read" in gone
