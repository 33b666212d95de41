"""``session-index statusline``: one short line for Claude Code's status bar.

Claude Code runs the ``statusLine`` command of its settings after each
assistant message and pipes it a JSON object on stdin: ``session_id``,
``transcript_path``, ``cwd``, ``model`` (``id``, ``display_name``),
``workspace`` (``current_dir``, ``project_dir``), ``version``, ``cost``
(``total_cost_usd``, durations, lines added and removed)... It shows the
first line the command prints; a command that fails shows nothing.

The line: the session's verdict as ``check`` gives it (repair/check.py,
the verdicts of signals/verdict.py), its cost as the index counts its calls
(usage_report.session_cost: the calls in the session's own transcripts, each
once), and Claude Code's own ``cost.total_cost_usd`` beside it when the
two differ by a cent or more (Claude Code counts this process's calls only:
not those before a resume). Nothing is ingested: the answer is the index's
as it stands (an ``ingest --watch`` keeps it current), and says so when the
transcript changed since; ``freshen`` ingests the changed transcript first
(a write, as ``check`` does), and the statusLine JSON's ``transcript_path``
with it (a session not indexed yet). Every failure is a line too, never an
exception: a status line must print something.
"""

from __future__ import annotations

import json
import math
import os

from indexer.chain import mainfile
from indexer.index import db as dbmod
from indexer.index import usage_report
from indexer.index.connection import IndexError_
from indexer.repair import check as checkmod
from indexer.transcripts import agents

PREFIX = "session-index"
DIFFERS_USD = 0.01


def _money(usd: float) -> str:
    return f"${usd:,.2f}"


def line(db_path, payload: str, freshen: bool = False) -> str:
    """The status line for the statusLine JSON ``payload`` (module docstring)."""
    try:
        data = json.loads(payload)
    except ValueError:
        return f"{PREFIX}: stdin is not Claude Code's statusLine JSON"
    session_id = data.get("session_id") if isinstance(data, dict) else None
    if not isinstance(session_id, str) or not session_id:
        return f"{PREFIX}: no session_id on stdin"
    try:
        db = (dbmod.open_index(db_path) if freshen else dbmod.open_readonly(db_path))
    except IndexError_ as exc:
        return f"{PREFIX}: {exc}"
    # An index this user may only read is answered from as it stands.
    freshen = freshen and not dbmod.read_only(db)
    path = data.get("transcript_path")
    try:
        if freshen and isinstance(path, str) and os.path.isfile(path):
            from indexer.ingest import files as ingestmod   # (the parser: --freshen only)

            ingestmod.ingest(db, [path])   # a new session's first lines, too
        if db.conn.execute(mainfile.KNOWN_SESSION_SQL,
                                           [session_id]).fetchone() is None:
            return f"{PREFIX}: session not indexed yet (session-index ingest)"
        cost = usage_report.session_cost(db, session_id)
        try:
            verdict = checkmod.check(db, session_id, freshen=freshen)
        except agents.NotClaudeCode:   # another agent's session: no verdict, its cost
            verdict = None
            parts = [f"{agents.session_agent(db.conn, session_id)} session"]
    except (IndexError_, OSError, mainfile.AmbiguousHost) as exc:
        return f"{PREFIX}: {exc}"
    if verdict is not None:
        parts = [verdict.verdict]
        if any(w.endswith(checkmod.UNREAD_WARNING.split("}", 1)[1]) for w in verdict.warnings):
            parts[0] += " (as of the last ingest)"
        if verdict.verdict != "resumable":
            parts.append(f"session-index check {session_id}")
    calls = cost["calls"] or 0
    figure = _money(cost["cost_usd"] or 0.0) + ("+" if cost["unpriced_calls"] else "")
    parts.append(f"{figure} ({calls:,} call{'' if calls == 1 else 's'})")
    reported = (data.get("cost") or {}).get("total_cost_usd") \
        if isinstance(data.get("cost"), dict) else None
    if isinstance(reported, (int, float)) and not isinstance(reported, bool) \
            and 0 <= reported < math.inf \
            and abs(reported - (cost["cost_usd"] or 0.0)) >= DIFFERS_USD:   # (not NaN, inf, < 0)
        parts.append(f"Claude Code: {_money(reported)}")
    return " · ".join(parts)
