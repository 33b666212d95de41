"""The real Claude Code calls ``session-index mcp``: configured with the
server (--mcp-config), asked a question, it runs the tool the (fake)
Messages API asks for, and sends back the seed 000 session's verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from indexer.repair import oracle
from oracle_checks import CLAUDE

pytestmark = [pytest.mark.oracle,
              pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")]

FIXTURES = Path(__file__).parent / "fixtures"
SID = "11111111-2222-3333-4444-555555555555"
TOOL = "mcp__session-index__check_session"
PROMPT = f"May session {SID} be resumed?"
TOOL_USE_ID = "toolu_mcp_check_01"
# Claude Code 2.1.332 defers MCP tools behind its ToolSearch tool (the
# request offers a placeholder): with tool search off it offers them as
# tools of their own, which a scripted model can call in one turn.
NO_TOOL_SEARCH = {"ENABLE_TOOL_SEARCH": "false"}


def asks_the_index(body: dict) -> dict:
    """The model's part: to the prompt, a tool_use of check_session (when
    the CLI offers the tool); to anything else, one word."""
    sent = json.dumps(body.get("messages") or [])
    offered = {t.get("name") for t in body.get("tools") or []}
    if PROMPT in sent and TOOL_USE_ID not in sent and TOOL in offered:
        return {"id": "msg_mcp_01", "blocks": [{"type": "tool_use", "id": TOOL_USE_ID,
                                                "name": TOOL, "input": {"session_id": SID}}]}
    return oracle.one_word(body)


def tool_results(request: dict) -> list[dict]:
    return [b for m in request["body"].get("messages") or [] if m.get("role") == "user"
            and isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"
            and b.get("tool_use_id") == TOOL_USE_ID]


def test_claude_code_calls_check_session_and_gets_spliced(env, tmp_path):
    path = env.projects / "-tmp-demo" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes((FIXTURES / "seed000_splice.jsonl").read_bytes())
    env.ingest()
    config = {"mcpServers": {"session-index": {
        "command": sys.executable,
        "args": ["-m", "indexer", "mcp", "--db", str(env.path), "--config-dir",
                 str(env.config)]}}}
    home, cli_config, work = tmp_path / "home", tmp_path / "cli-config", tmp_path / "work"
    for folder in (home, cli_config, work):
        folder.mkdir()
    with oracle.FakeMessagesAPI(asks_the_index) as api:
        done = subprocess.run(
            [CLAUDE, "-p", PROMPT, "--output-format", "json", "--mcp-config",
             json.dumps(config), "--strict-mcp-config", "--allowedTools", TOOL],
            cwd=work, env=oracle.environment(home, cli_config, api, NO_TOOL_SEARCH),
            capture_output=True,
            text=True, timeout=oracle.RUN_TIMEOUT, stdin=subprocess.DEVNULL)
        requests = [r for r in api.take() if r["path"].endswith("/v1/messages")]
    assert done.returncode == 0, done.stderr[-2000:]
    asked = [r for r in requests if TOOL in {t.get("name") for t in r["body"].get("tools") or []}]
    assert asked, "the CLI never offered the MCP tool"
    results = [b for r in requests for b in tool_results(r)]
    assert len(results) == 1, [r["body"].get("messages") for r in requests][-1:]
    content = results[0]["content"]
    text = content if isinstance(content, str) else "".join(
        b.get("text", "") for b in content if isinstance(b, dict))
    assert not results[0].get("is_error"), text
    verdict = json.loads(text)
    assert (verdict["session_id"], verdict["verdict"]) == (SID, "spliced")
    assert verdict["revision"]["files"][0]["path"] == str(path.resolve())
