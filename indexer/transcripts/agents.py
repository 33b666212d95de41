"""The agents whose session files the index reads, defined once: Claude Code
(the transcripts everything else in this package models), the Codex CLI
(rollouts, codex.py) and the Gemini CLI (chats, gemini.py).

Each agent's lines are kept byte for byte like a transcript's; what a line
becomes in ``records`` (RECORD_FIELDS) is its agent's parser's: the
``type`` column holds the agent's own record type (a Gemini CLI one
prefixed ``gemini.``, so that no Claude Code definition mistakes its
``user`` messages for its own), ``uuid`` and the chain columns stay NULL
(the resume checks are Claude Code's), and the usage columns hold each
model call's tokens once. A parser is made per file (``line_parser``): the
Codex one carries the turn's model from line to line.
"""

from __future__ import annotations

import json
import os

from indexer.transcripts import codex, gemini

CLAUDE_CODE = "claude-code"
CODEX = "codex"
GEMINI = "gemini"
AGENTS = (CLAUDE_CODE, CODEX, GEMINI)
# The agents whose sessions the resume checks, repair and the session store
# do not model (their failure model is Claude Code's).
OTHER_AGENTS = (CODEX, GEMINI)
OTHER_AGENTS_SQL = "(" + ",".join(f"'{a}'" for a in OTHER_AGENTS) + ")"

# What `check`, `repair`, `verify` and the session store say of another
# agent's session (NotClaudeCode; `check` and `repair` exit
# EXIT_NOT_CLAUDE_CODE).
NOT_CLAUDE_CODE = ("{session} is a {agent} session: the resume checks, repair, verify and "
                   "the session store are for Claude Code sessions only (its lines are "
                   "indexed: sessions, search, show, export and usage cover it)")
EXIT_NOT_CLAUDE_CODE = 13
# The agent of a session's files when it is not Claude Code's (none: Claude Code's).
SESSION_AGENT_SQL = f"""
SELECT agent FROM files WHERE session_id = :session_id AND agent IN {OTHER_AGENTS_SQL}
ORDER BY id LIMIT 1
""".strip()


class NotClaudeCode(Exception):
    """A session of another agent, asked of what only Claude Code's have."""


def session_agent(conn, session_id: str) -> str:
    """CODEX or GEMINI when the index holds the session's files as theirs,
    else CLAUDE_CODE."""
    row = conn.execute(SESSION_AGENT_SQL, {"session_id": session_id}).fetchone()
    return row[0] if row else CLAUDE_CODE


def require_claude_code(conn, session_id: str) -> None:
    """NotClaudeCode (its message NOT_CLAUDE_CODE) for another agent's session."""
    agent = session_agent(conn, session_id)
    if agent != CLAUDE_CODE:
        raise NotClaudeCode(NOT_CLAUDE_CODE.format(session=session_id, agent=agent))

def candidate(cand, agent: str):
    """A discover.Candidate for a file ``agent``'s first line named: the
    session id its name carries (a Codex rollout's), else the one its first
    line gives at ingest."""
    session_id, project = None, None
    if agent == CODEX:
        session_id = codex.session_id_of(cand.path)
    else:   # <project>/chats/<file>
        project = os.path.basename(os.path.dirname(os.path.dirname(cand.path))) or None
    return cand._replace(agent=agent, kind="main", session_id=session_id, agent_id=None,
                         project_dir=project, named=True)


def line_parser(agent: str | None, conn=None, file_id: int | None = None,
                path: str | None = None):
    """The parser of a file of ``agent`` (None for Claude Code: its caller
    uses indexer.transcripts.lines), set up from what the index holds of
    the file already (``conn``, ``file_id``) when it is read on from an
    offset."""
    if agent == CODEX:
        return codex.RolloutLines(conn, file_id)
    if agent == GEMINI and path is not None and path.endswith(".json"):
        return gemini.JsonChat(conn, file_id)
    if agent == GEMINI:
        return gemini.ChatLines(conn, file_id)
    return None


# --- what a line says, for search and show ---------------------------------

def record_text(rtype: str, raw: str) -> str:
    """The text of another agent's record, for search ('' for none)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(value, dict):
        return ""
    turns = (gemini.turns(value) if rtype.startswith(gemini.TYPE_PREFIX)
             else codex.turns(value))
    return "\n".join(text for _, _, text in turns)
