"""``session-index mcp``: the index as a Model Context Protocol server, so an
agent asks it itself whether a session may be resumed.

A thin layer over the library, built on the official ``mcp`` SDK
(MCPServer), read-only: the index is opened ``mode=ro`` (db.open_readonly)
and nothing is ever written; an ingest (``ingest --watch``) keeps it
current. Each tool is the answer of a command, from the same code:

- ``check_session``: ``check --json`` (repair/check.py, without its ingest:
  a transcript changed since the last ingest is answered for as the index
  holds it, with a warning);
- ``search``: ``search`` (index/search.py);
- ``show_session``: ``show --json`` (repair/show.py), a page at a time;
- ``usage``: ``usage`` (index/usage.py);
- ``problems``: the health page's problem classes (session_index_web/health.py).

Every answer names what it was computed from (``revision``): each file's
path, generation and ingested_offset (index/generations.py), or, for an
answer summed over the index, the index's (last ingest, highest record id,
files and bytes read; problems' sessions each name their main transcript's
too), so a caller can tell when it is stale. Each tool
call reads one snapshot (a read transaction). Inputs are bounded and
checked; a bad one is a tool error of one line (ToolError), never a
traceback.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from indexer.chain import mainfile
from indexer.transcripts import agents
from indexer.index import db as dbmod, generations, search as searchmod, usage as usagemod
from indexer.index.connection import IndexError_
from indexer.repair import check as checkmod, repair as repairmod, show as showmod
from indexer.repair.oracle import UUID_RE
from indexer.signals import classes, listings
from session_index_web import health

NAME = "session-index"
# Bounds on the inputs (characters, hits, messages).
MAX_ID = 200
MAX_PATH = 4096
MAX_QUERY = searchmod.MAX_QUERY_CHARS
MAX_LIMIT = 100
DEFAULT_LIMIT = 20
# A page of show_session: at most this many messages, and no more text than
# this (at least one message, however long).
PAGE_MESSAGES = 50
PAGE_CHARS = 200_000
# usage's periods: the last N days (all: every call), else an ISO-8601 time.
PERIODS = {"all": None, "day": 1, "week": 7, "month": 30}
# The problem classes the health page shows (those with a health row).
KINDS = {cls.name: cls for cls in classes.CLASSES if cls.health}
# What may be in an id or a path: no control character; in a query, no
# control character but tab and newline (search reads them as spaces).
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_CONTROL_IN_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True,
                            openWorldHint=False)

SessionId = Annotated[str, Field(min_length=1, max_length=MAX_ID,
                                 description="A session id (a uuid, or an id the index holds).")]


class _Rows(list):
    def first(self):
        return self[0] if self else None


class HealthReader:
    """The index as health.py's queries read a Datasette Database: ``await
    execute(sql, params)`` gives rows with names, and ``.first()``."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    async def execute(self, sql: str, params=None):
        cur = self.conn.cursor()
        cur.row_factory = sqlite3.Row
        return _Rows(cur.execute(sql, params or {}).fetchall())


class snapshot:
    """``with snapshot(conn):`` one read transaction: every query of a tool
    call sees the index as of one moment, so its revision is the answer's."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN")
        return self.conn

    def __exit__(self, *exc):
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")
        return False


def _text(value: str | None, what: str, limit: int, control=_CONTROL) -> str | None:
    if value is None:
        return None
    if len(value) > limit:
        raise ToolError(f"{what} is longer than {limit} characters")
    if control.search(value):
        raise ToolError(f"{what} holds a control character")
    return value


def session_id_of(conn, value: str) -> str:
    """``value``, if it is a uuid or a session id the index holds; else a
    ToolError."""
    _text(value, "session_id", MAX_ID)
    if UUID_RE.match(value) or conn.execute(mainfile.KNOWN_SESSION_SQL, [value]).fetchone():
        return value
    raise ToolError(f"session_id {value[:80]!r} is neither a uuid nor a session id in the index")


def since_of(period: str | None, now: str) -> str | None:
    """The start of ``period`` (PERIODS, or an ISO-8601 time) as usage's --since."""
    if period is None or period in PERIODS:
        days = PERIODS.get(period or "all")
        if days is None:
            return None
        moment = datetime.fromisoformat(now.replace("Z", "+00:00")) - timedelta(days=days)
        return listings.iso_now(moment.astimezone(timezone.utc).isoformat())
    try:
        return listings.iso_now(period)
    except listings.BadTime:
        raise ToolError(f"period must be one of {', '.join(PERIODS)} or an ISO-8601 time, "
                        f"not {period[:80]!r}") from None


def _revision(conn, file_ids) -> dict:
    return {"files": generations.file_revisions(conn, [f for f in file_ids if f is not None])}


def _index_revision(conn) -> dict:
    return {"index": generations.index_revision(conn)}


class Tools:
    """The tools over one read-only index (``db``: db.open_readonly's)."""

    def __init__(self, db, config_dir=None):
        self.db, self.conn, self.config_dir = db, db.conn, config_dir
        self.opened = dbmod.OpenedFile(db.conn)

    def snapshot(self) -> snapshot:
        """A read transaction on the index at the path: one that was deleted
        or replaced since it was opened (a backup put back) is opened again,
        so the server never answers from a file nobody writes any more. So
        is one opened immutable (a folder this user may not write, and no
        writer then: connection.connect_readonly) once a writer has made
        its -wal file: it reads the writer's -shm from then on."""
        try:
            self.opened.verify()
            why = "the index was opened by a writer" if self.db.immutable and os.path.exists(
                self.opened.path + "-wal") else None
        except dbmod.IndexReplaced:
            why = "the index was replaced"
        if why is not None:
            try:
                db = dbmod.open_readonly(self.opened.path)
            except IndexError_ as exc:
                raise ToolError(f"{why} and cannot be read: {exc}") from None
            self.conn.close()
            self.db, self.conn, self.opened = db, db.conn, dbmod.OpenedFile(db.conn)
        return snapshot(self.conn)

    def check_session(self, session_id: str, cwd: str | None = None) -> dict:
        _text(cwd, "cwd", MAX_PATH)
        if cwd is not None and not cwd.startswith("/"):
            raise ToolError("cwd must be an absolute path")
        with self.snapshot() as conn:
            session_id = session_id_of(conn, session_id)
            try:
                verdict = checkmod.check(self.db, session_id, config_dir=self.config_dir,
                                         cwd=cwd, freshen=False)
            except (mainfile.AmbiguousHost, agents.NotClaudeCode) as exc:
                raise ToolError(str(exc)) from None
            answer = verdict.as_dict()
            main = verdict.details.get("main_file") or {}
            answer["revision"] = _revision(conn, [main.get("file_id")])
        return answer

    def search(self, query: str, session_id: str | None = None,
               limit: int = DEFAULT_LIMIT) -> dict:
        _text(query, "query", MAX_QUERY, _CONTROL_IN_TEXT)
        with self.snapshot() as conn:
            if session_id is not None:
                session_id = session_id_of(conn, session_id)
            try:
                hits = searchmod.search(self.db, query, session=session_id, limit=limit)
            except (searchmod.SearchNotEnabled, searchmod.EmptyQuery,
                    searchmod.QueryRefused) as exc:
                raise ToolError(str(exc)) from None
            where = generations.record_files(conn, [h["record_id"] for h in hits])
            for hit in hits:
                hit["snippet"] = searchmod.marked(hit["snippet"])
                hit["file_id"], hit["byte_offset"] = where.get(hit["record_id"], (None, None))
            return {"hits": hits, "revision": _revision(conn, [h["file_id"] for h in hits])}

    def show_session(self, session_id: str, since: str | None = None) -> dict:
        _text(since, "since", MAX_ID)
        with self.snapshot() as conn:
            session_id = session_id_of(conn, session_id)
            agent = agents.session_agent(conn, session_id)
            if agent != agents.CLAUDE_CODE:   # a Codex or Gemini CLI session: `show`'s turns
                messages = showmod.agent_conversation(conn, session_id, agent)
                host, verdict = None, None
                revision = _revision(conn, showmod.agent_file_ids(conn, session_id, agent))
                cursors = [f"#{n}" for n in range(1, len(messages) + 1)]
                body = "text"
            else:
                host, messages, verdict, revision = self._conversation(conn, session_id)
                cursors = [m["uuid"] for m in messages]
                body = "message"
        start = 0
        if since is not None:
            if since not in cursors:
                raise ToolError(f"since {since[:80]!r} is not a message of the conversation "
                                "(give a page's next)")
            start = cursors.index(since) + 1
        page, size = [], 0
        for m in messages[start:start + PAGE_MESSAGES]:
            size += len(str(m[body]))
            if page and size > PAGE_CHARS:
                break
            page.append(m)
        left = len(messages) - start - len(page)
        return {"session_id": session_id, "host": host,
                "verdict": {k: verdict[k] for k in ("verdict", "reason", "fix")}
                if verdict else None,
                "messages": page, "total": len(messages),
                "next": cursors[start + len(page) - 1] if left > 0 and page else None,
                "revision": revision}

    def _conversation(self, conn, session_id: str) -> tuple:
        """A Claude Code session's (host, `show --json`'s messages, verdict,
        revision)."""
        try:
            host = mainfile.default_host(self.db, session_id)
        except mainfile.AmbiguousHost as exc:
            raise ToolError(str(exc)) from None
        main = conn.execute(repairmod.MAIN_FILE_SQL, [session_id, host]).fetchone()
        if main is None:
            raise ToolError(f"session {session_id} has no main transcript in the index: "
                            "no conversation to show (check_session says why)")
        try:
            messages = showmod.recovered_conversation(self.db, session_id, host)
        except repairmod.RepairError as exc:
            raise ToolError(str(exc)) from None
        return (host, messages, showmod.verdict_on(conn, session_id, host),
                _revision(conn, [main[0]]))

    def usage(self, period: str | None = None, project: str | None = None) -> dict:
        _text(period, "period", MAX_ID)
        _text(project, "project", MAX_PATH)
        with self.snapshot() as conn:
            since = since_of(period, listings.iso_now(None))
            if project is None:
                rows = usagemod.summary(self.db, since=since)
                comparison = usagemod.comparison_lines(usagemod.comparison(self.db, since=since))
            else:
                rows = [r for r in usagemod.summary(self.db, by="project", since=since)
                        if r["project"] == project]
                comparison = []
            return {"since": since, "project": project, "totals": rows[0] if rows else None,
                    "compared_with_claude_code": comparison,
                    "revision": _index_revision(conn)}

    async def problems(self, kind: str | None = None) -> dict:
        if kind is not None and kind not in KINDS:
            raise ToolError(f"kind must be one of {', '.join(KINDS)}, not {kind[:80]!r}")
        checks = health.checks_of(KINDS[kind]) if kind else health.CHECKS
        with self.snapshot() as conn:
            results, _ = await health.run_checks(HealthReader(conn), checks)
            named = json.dumps(sorted({row["session_id"] for r in results for row in r.rows
                                       if row["session_id"] is not None}))
            mains = dict(conn.execute(mainfile.MAIN_FILES_OF_SQL, {"session_ids": named}))
            files = {f["file_id"]: f for f in _revision(conn, mains.values())["files"]}
            answer = [{"label": r.check.label, "view": r.check.name,
                       "severity": r.check.severity, "fix": r.check.fix, "total": r.total,
                       "newest": r.newest, "error": r.error,
                       "sessions": [{"session_id": row["session_id"], "at": row["at"],
                                     "detail": row["detail"],
                                     "main_file": files.get(mains.get(row["session_id"]))}
                                    for row in r.rows]} for r in results]
            return {"kind": kind, "problems": answer, "revision": _index_revision(conn)}


def _one_line(name: str, exc: ValidationError) -> str:
    return f"{name}: bad arguments: " + "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())


class Server(MCPServer):
    """MCPServer whose every failure is one line: the SDK's argument
    validation (pydantic's several lines, with the value) and anything
    unexpected (which it would log with a traceback) become a ToolError."""

    async def call_tool(self, name, arguments, context=None):
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(_one_line(name, cause)) from None
            if isinstance(cause, ToolError):
                raise ToolError(str(cause)) from None
            if isinstance(cause, sqlite3.Error):
                raise ToolError(f"{name}: the index cannot be read: {cause}") from None
            if cause is not None and not isinstance(cause, ToolError):
                raise ToolError(f"{name} failed: {type(cause).__name__}: {cause}") from None
            raise


def build(db, config_dir=None) -> Server:
    """The server over ``db`` (opened read-only) with its five tools. Each
    is a coroutine: it runs on the event loop's thread, the one that opened
    the connection (the SDK runs a plain function on a worker thread), one
    call at a time."""
    tools = Tools(db, config_dir)
    server = Server(NAME, instructions=(
        "A read-only SQLite index of Claude Code session transcripts. Before resuming a "
        "session (claude --resume, the Agent SDK's resume), call check_session: a verdict "
        "other than resumable says what the resume would lose or why it would fail, and "
        "the fix."), log_level="WARNING")

    @server.tool(annotations=READ_ONLY)
    async def check_session(
            session_id: SessionId,
            cwd: Annotated[str | None, Field(max_length=MAX_PATH, description=(
                "The directory the resume runs from [default: the session's own]."))] = None,
    ) -> dict[str, Any]:
        """May this session be resumed? The verdict (resumable, missing, poisoned, wedged,
        spliced), its reason and fix, the transcript a resume opens and what it would drop:
        the answer of `session-index check --json`, with the revision (file, generation,
        byte offset) it was computed from."""
        return tools.check_session(session_id, cwd)

    @server.tool(annotations=READ_ONLY)
    async def search(
            query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY, description=(
                'Words, "quoted phrases", prefixes (word*); every term must match.'))],
            session_id: Annotated[str | None, Field(max_length=MAX_ID, description=(
                "Only records of this session."))] = None,
            limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    ) -> dict[str, Any]:
        """Records whose text matches the query, newest first: session, record, time,
        type, project and a snippet (matches in [[...]]), with each hit's file and byte
        offset. Search must be enabled on the index (`session-index search --enable`)."""
        return tools.search(query, session_id, limit)

    @server.tool(annotations=READ_ONLY)
    async def show_session(
            session_id: SessionId,
            since: Annotated[str | None, Field(max_length=MAX_ID, description=(
                "A page's `next` (the uuid of the last message seen; #N, the N-th, in a "
                "Codex or Gemini CLI session): the page after it."))
            ] = None,
    ) -> dict[str, Any]:
        """The conversation as a resume would load it (with the output an api_error splice
        orphaned put back and marked recovered), a page at a time: `next` is the cursor
        of the next page (null: the last). A Codex or Gemini CLI session's conversation
        as `show` reads it (id, role, time, text), with no verdict."""
        return tools.show_session(session_id, since)

    @server.tool(annotations=READ_ONLY)
    async def usage(
            period: Annotated[str | None, Field(max_length=MAX_ID, description=(
                "day, week, month (the last 1, 7, 30 days), all, or an ISO-8601 start "
                "time [default: all]."))] = None,
            project: Annotated[str | None, Field(max_length=MAX_PATH, description=(
                "Only this project folder (as in ~/.claude/projects)."))] = None,
    ) -> dict[str, Any]:
        """Calls, tokens by kind and cost of the API calls, as `session-index usage` gives
        them (priced from the index's prices table), and Claude Code's own figures."""
        return tools.usage(period, project)

    @server.tool(annotations=READ_ONLY)
    async def problems(
            kind: Annotated[str | None, Field(max_length=MAX_ID, description=(
                "One problem class: " + ", ".join(KINDS) + " [default: all]."))] = None,
    ) -> dict[str, Any]:
        """The problem classes as the health page shows them: each with its count, its
        newest problem, its severity and fix, and its newest sessions."""
        return await tools.problems(kind)

    return server


def serve(db, config_dir=None, http: bool = False, port: int = 8765) -> None:
    """Run the server: over stdio, or streamable HTTP on 127.0.0.1:``port``."""
    server = build(db, config_dir)
    logging.getLogger("mcp").setLevel(logging.WARNING)
    if http:
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()
