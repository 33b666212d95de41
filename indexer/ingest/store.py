"""The index as the Claude Agent SDK's ``SessionStore``: live mirroring.

``IndexSessionStore(db_path)`` implements the SDK's protocol
(``claude_agent_sdk.types.SessionStore``: ``append``, ``load``,
``list_sessions``, ``list_session_summaries``, ``delete``, ``list_subkeys``)
on the same tables ingest writes, so every view, ``session-index check`` and
the web UI see a mirrored session as its batches arrive:

- one ``files`` row per SessionKey, ``origin = 'store'``, kind ``main`` (no
  subpath) or ``subagent`` (a subpath), path
  ``store://<project_key>/<session_id>[/<subpath>]`` (key parts
  percent-encoded: it never names a real file), ``project_key`` and
  ``subpath`` as given, ``mtime`` NULL (a store copy is not swept by
  ``cleanupPeriodDays``);
- each stored entry is a ``records`` row, parsed by ``lines.parse_line`` from
  its one-line JSON serialization, ``line_no`` and ``byte_offset`` continuing
  as if the copy were a JSONL file (an entry that is not a JSON object goes to
  ``bad_lines``, and is still loaded back);
- ``uuid`` is the idempotency key: an entry whose uuid the key already holds
  is not stored again; entries without one are appended;
- each append is one ``BEGIN IMMEDIATE`` transaction that also recomputes the
  copy's caches and its ``sessions`` row (derive.py), so readers never see a
  batch without its leaves and orphans;
- ``store_keys`` holds, per copy, the storage write time of its last append
  (epoch ms: the clock ``list_sessions`` and the summaries share) and, for
  main keys, the SDK's folded session summary, verbatim.

The core package does not depend on the SDK: nothing here imports it at
module level. The summary fold is the SDK's own ``fold_session_summary``,
imported when a store opens; without the SDK, summaries are folded later, on
the first ``list_session_summaries``.

SQLite calls are blocking, so each store runs them on one worker thread of
its own (the connection never changes thread) and the async methods await
it: a busy index never stalls the agent's event loop. Several processes may
append to one index at once (WAL, ``BEGIN IMMEDIATE``, retries on
"database is locked"). Create one store per process; a forked child opens
its own connection on first use. An index file deleted or replaced while a
store has it open is not written into: each append or delete raises
``db.IndexReplaced`` (the SDK logs a failed mirror flush and the session
goes on), since its connection would write into the unlinked file.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import msgspec

from indexer.ingest.extras import install_hint
from indexer.ingest import derive
from indexer.index import record_kinds, search, views
from indexer.index.db import OpenedFile, open_db
from indexer.sql import retry_locked, write_lock
from indexer.index.clock import utcnow
from indexer.ingest.linerows import RUNNING_FACTS_SET, insert_lines, running_facts
from indexer.transcripts import agents
from indexer.transcripts.lines import BadLine, parse_line
from indexer.transcripts.records import RECORD_FIELDS

if TYPE_CHECKING:  # the SDK's types, for readers and type checkers only
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )

PATH_PREFIX = "store://"

# Field positions in a parsed record (records.RECORD_FIELDS).
_UUID = RECORD_FIELDS.index("uuid")

# The copy a key names, and where its next line goes.
STORE_FILE_SQL = """
SELECT f.id, f.line_count, f.ingested_offset, k.mtime_ms, k.summary
FROM files f LEFT JOIN store_keys k ON k.file_id = f.id
WHERE f.path = :path AND f.origin = 'store'
""".strip()
# A new copy: a files row that no ingest will ever stat (its path is not a
# filesystem path) and that derive_pending need not visit (append derives it).
CREATE_STORE_FILE_SQL = """
INSERT INTO files (path, kind, origin, project_key, subpath, session_id, agent_id,
                   project_dir, first_ingested_at, needs_derive)
VALUES (:path, :kind, 'store', :project_key, :subpath, :session_id, :agent_id,
        :project_key, :now, 0)
""".strip()
# Which of a batch's uuids the copy already holds (the records_file_uuid index).
STORED_UUIDS_SQL = """
SELECT DISTINCT uuid FROM records
WHERE file_id = :file_id AND uuid IN (SELECT value FROM json_each(:uuids))
""".strip()
# After a batch: how far the copy goes, and the running facts about its
# records that sessions are summed from (as ingest.ADVANCE_OFFSET_SQL).
# size is the bytes of its JSONL serialization; mtime stays NULL.
ADVANCE_STORE_FILE_SQL = f"""
UPDATE files SET ingested_offset = :offset, size = :offset, line_count = :line_count,
  {RUNNING_FACTS_SET},
  last_ingested_at = :now, needs_derive = 0
WHERE id = :id
""".strip()
# The storage write time of the copy's last append (epoch ms) and, for a main
# key, the SDK's folded summary (opaque JSON, kept verbatim).
UPSERT_STORE_KEY_SQL = """
INSERT INTO store_keys (file_id, mtime_ms, summary) VALUES (:file_id, :mtime_ms, :summary)
ON CONFLICT (file_id) DO UPDATE SET mtime_ms = excluded.mtime_ms, summary = excluded.summary
""".strip()
SET_SUMMARY_SQL = "UPDATE store_keys SET summary = :summary WHERE file_id = :file_id"
# A copy's entries in append order: records and the lines that were not JSON
# objects, by byte offset (as ingest.STORED_LINES_SQL rebuilds a file).
LOAD_SQL = """
SELECT byte_offset, raw, 0 AS bad FROM records WHERE file_id = :file_id
UNION ALL
SELECT byte_offset, raw, 1 FROM bad_lines WHERE file_id = :file_id
ORDER BY byte_offset
""".strip()
# Main keys of a project with their write times and summaries.
LIST_MAIN_KEYS_SQL = """
SELECT f.id, f.session_id, k.mtime_ms, k.summary
FROM files f JOIN store_keys k ON k.file_id = f.id
WHERE f.origin = 'store' AND f.project_key = :project_key AND f.subpath IS NULL
ORDER BY f.id
""".strip()
# The subpaths held under one session, in the order they were first written.
LIST_SUBKEYS_SQL = """
SELECT subpath FROM files
WHERE origin = 'store' AND project_key = :project_key AND session_id = :session_id
  AND subpath IS NOT NULL
ORDER BY id
""".strip()
# What a delete removes: a main key and every subpath under it, or one subpath.
KEY_COPIES_SQL = """
SELECT id FROM files
WHERE origin = 'store' AND project_key = :project_key AND session_id = :session_id
""".strip()
FORGET_COPY_SQL = (
    "DELETE FROM records WHERE file_id = :id",
    "DELETE FROM bad_lines WHERE file_id = :id",
    "DELETE FROM store_keys WHERE file_id = :id",
    "DELETE FROM files WHERE id = :id",
)
# Does the session still have a transcript (local or store) once a copy is gone?
SESSION_HAS_FILES_SQL = """
SELECT 1 FROM files WHERE session_id = :session_id AND kind IN ('main', 'subagent') LIMIT 1
""".strip()
DROP_SESSION_SQL = ("DELETE FROM sessions WHERE session_id = :session_id",
                    "DELETE FROM session_hosts WHERE session_id = :session_id")


class StoreError(Exception):
    """The session store cannot do what was asked."""


class NotClaudeCodeSession(StoreError):
    """The key names a Codex or Gemini CLI session the index holds: the
    session store is Claude Code's (agents.NOT_CLAUDE_CODE)."""


def _claude_code_only(conn, session_id: str) -> None:
    try:
        agents.require_claude_code(conn, session_id)
    except agents.NotClaudeCode as exc:
        raise NotClaudeCodeSession(str(exc)) from None


class InvalidKey(StoreError, ValueError):
    """A SessionKey without a string project_key and session_id."""


class InvalidEntry(StoreError, ValueError):
    """An entry that cannot be written as one line of JSON."""


def store_path(project_key: str, session_id: str, subpath: str | None = None) -> str:
    """The ``files.path`` of a store copy: never a filesystem path, and
    distinct for distinct keys (key parts are percent-encoded; the subpath,
    last, is kept as it is)."""
    path = f"{PATH_PREFIX}{quote(project_key, safe='')}/{quote(session_id, safe='')}"
    return f"{path}/{subpath}" if subpath else path


def _parts(key) -> tuple[str, str, str | None]:
    """(project_key, session_id, subpath or None) of a SessionKey; an empty
    subpath means the main transcript."""
    try:
        project_key, session_id = key["project_key"], key["session_id"]
        subpath = key.get("subpath") or None
    except (KeyError, TypeError, AttributeError):
        raise InvalidKey(f"not a SessionKey: {key!r}") from None
    if not (isinstance(project_key, str) and isinstance(session_id, str) and project_key
            and session_id) or not (subpath is None or isinstance(subpath, str)):
        raise InvalidKey(f"not a SessionKey: {key!r}")
    return project_key, session_id, subpath


def _agent_id(subpath: str | None) -> str | None:
    """``subagents/agent-<id>`` (or nested deeper) -> ``<id>``, as ingest
    names the agent of ``agent-<id>.jsonl``."""
    last = (subpath or "").rsplit("/", 1)[-1]
    return last[len("agent-"):] or None if last.startswith("agent-") else None


def _serialize(entry: Any) -> bytes:
    """One JSONL line (no newline): compact, non-ASCII kept as UTF-8 as
    Claude Code writes it; escaped when a string is not valid Unicode."""
    try:
        text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidEntry(f"entry is not JSON-serializable: {exc}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return json.dumps(entry, ensure_ascii=True, separators=(",", ":")).encode("ascii")


_DECODE = msgspec.json.Decoder()


def _deserialize(raw) -> Any:
    """An entry back from ``records.raw`` (text) or ``bad_lines.raw`` (bytes):
    msgspec when it can, ``json`` for what it refuses (NaN, lone surrogates)."""
    try:
        return _DECODE.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return json.loads(raw)


@functools.cache
def _fold_summary():
    """The SDK's ``fold_session_summary``, or None without the SDK (imported
    once, when a store opens, so no append pays for the import)."""
    try:
        from claude_agent_sdk import fold_session_summary   # (the Agent SDK: the optional store extra)
    except ImportError:
        return None
    return fold_session_summary


class _Backend:
    """The store's SQL, synchronous, on one connection (one thread)."""

    def __init__(self, db_path: str | os.PathLike):
        self.db = open_db(db_path)
        self.conn = self.db.conn
        self.opened = OpenedFile(self.conn)
        _fold_summary()

    def close(self) -> None:
        self.conn.close()

    # --- writes ------------------------------------------------------------

    def append(self, key, entries: list) -> None:
        if not entries:
            return
        project_key, session_id, subpath = _parts(key)
        _claude_code_only(self.conn, session_id)
        # Serialize and parse outside the write lock.
        lines = []
        for entry in entries:
            data = _serialize(entry)
            try:
                raw, fields = parse_line(data)
                lines.append((entry, data, raw, fields, None))
            except BadLine as exc:
                lines.append((entry, data, None, None, str(exc)))
        retry_locked(lambda: self._append(project_key, session_id, subpath, lines))

    def _append(self, project_key, session_id, subpath, lines) -> None:
        path = store_path(project_key, session_id, subpath)
        with write_lock(self.db) as conn:
            self.opened.verify()   # never into an index file deleted or replaced since
            row = conn.execute(STORE_FILE_SQL, {"path": path}).fetchone()
            if row is None:
                file_id = conn.execute(CREATE_STORE_FILE_SQL, {
                    "path": path, "kind": "subagent" if subpath else "main",
                    "project_key": project_key, "subpath": subpath,
                    "session_id": session_id, "agent_id": _agent_id(subpath),
                    "now": utcnow()}).lastrowid
                line_no = offset = last_mtime = 0
                summary = None
            else:
                file_id, line_no, offset, last_mtime, summary = row
            uuids = [fields[_UUID] for _, _, _, fields, _ in lines
                     if fields is not None and fields[_UUID] is not None]
            seen = {u for (u,) in conn.execute(
                STORED_UUIDS_SQL, {"file_id": file_id, "uuids": json.dumps(uuids)})
                    } if uuids else set()
            records, bads, kept = [], [], []
            for entry, data, raw, fields, error in lines:
                uuid = fields[_UUID] if fields is not None else None
                if uuid is not None:
                    if uuid in seen:
                        continue
                    seen.add(uuid)
                line_no += 1
                if fields is not None:
                    records.append((file_id, line_no, offset, *fields, raw))
                else:
                    bads.append((file_id, line_no, offset, error, data))
                offset += len(data) + 1
                kept.append(entry)
            if not kept:
                return  # every entry was already stored: nothing changes
            insert_lines(conn, records, bads)
            conn.execute(ADVANCE_STORE_FILE_SQL, {
                "id": file_id, "offset": offset, "line_count": line_no, "now": utcnow(),
                **running_facts([r[3:-1] for r in records])})
            # Storage write time: strictly increasing per key, so back-to-back
            # appends never share an mtime (list_sessions sorts by it).
            mtime_ms = max(int(time.time() * 1000), (last_mtime or 0) + 1)
            # The key's summary, folded by the SDK. Without the SDK there is
            # none to keep (the whole copy read back at every append, to fold
            # nothing, made an append cost what the copy holds: 85 ms at
            # 20,000 entries, bench/live_speed.py).
            if subpath is None and _fold_summary() is not None:
                folded = kept
                if summary is None and row is not None:  # earlier batches were not folded
                    folded = [_deserialize(r) for _o, r, _b in conn.execute(
                        LOAD_SQL, {"file_id": file_id}).fetchall()]
                summary = self._fold(summary, project_key, session_id, folded, mtime_ms)
            conn.execute(UPSERT_STORE_KEY_SQL, {
                "file_id": file_id, "mtime_ms": mtime_ms, "summary": summary})
            derive.derive_files(conn, [file_id])
            derive.keep_sql_caches(conn, [file_id])
            views.refresh_session(conn, session_id)
            record_kinds.count_files(conn, [file_id])
            search.catch_up_in(conn)   # the batch's text, when search is enabled

    @staticmethod
    def _fold(summary: str | None, project_key, session_id, entries, mtime_ms) -> str | None:
        """The key's summary JSON after ``entries``; None without the SDK
        (list_session_summaries folds it from the whole copy later)."""
        fold = _fold_summary()
        if fold is None:
            return None
        key = {"project_key": project_key, "session_id": session_id}
        prev = None
        if summary is not None:
            prev = {"session_id": session_id, "mtime": mtime_ms, "data": json.loads(summary)}
        folded = fold(prev, key, [e for e in entries if isinstance(e, dict)])
        return json.dumps(folded["data"], separators=(",", ":"))

    def delete(self, key) -> None:
        project_key, session_id, subpath = _parts(key)

        def run():
            with write_lock(self.db) as conn:
                self.opened.verify()
                if subpath is None:
                    ids = [i for (i,) in conn.execute(KEY_COPIES_SQL, {
                        "project_key": project_key, "session_id": session_id})]
                else:
                    row = conn.execute(STORE_FILE_SQL, {
                        "path": store_path(project_key, session_id, subpath)}).fetchone()
                    ids = [row[0]] if row else []
                if not ids:
                    return
                for file_id in ids:
                    derive.forget_file(conn, file_id)
                    record_kinds.forget_file(conn, file_id)
                    for sql in FORGET_COPY_SQL:
                        conn.execute(sql, {"id": file_id})
                derive.keep_usage_calls(conn, [])   # the calls whose lines went
                params = {"session_id": session_id}
                if conn.execute(SESSION_HAS_FILES_SQL, params).fetchone():
                    views.refresh_session(conn, session_id)
                else:
                    for sql in DROP_SESSION_SQL:
                        conn.execute(sql, params)

        retry_locked(run)

    # --- reads -------------------------------------------------------------

    def load(self, key) -> list | None:
        _claude_code_only(self.conn, _parts(key)[1])
        path = store_path(*_parts(key))
        conn = self.conn
        conn.execute("BEGIN")  # one snapshot for both statements
        try:
            row = conn.execute(STORE_FILE_SQL, {"path": path}).fetchone()
            if row is None:
                return None
            rows = conn.execute(LOAD_SQL, {"file_id": row[0]}).fetchall()
        finally:
            conn.execute("COMMIT")
        return [_deserialize(raw) for _offset, raw, _bad in rows]

    def list_sessions(self, project_key: str) -> list[dict]:
        rows = self.conn.execute(LIST_MAIN_KEYS_SQL, {"project_key": project_key}).fetchall()
        return [{"session_id": sid, "mtime": mtime} for _id, sid, mtime, _summary in rows]

    def list_session_summaries(self, project_key: str) -> list[dict]:
        rows = self.conn.execute(LIST_MAIN_KEYS_SQL, {"project_key": project_key}).fetchall()
        out = []
        for file_id, session_id, mtime, summary in rows:
            if summary is None:  # appended without the SDK: fold the whole copy now
                summary = self._refold(file_id, project_key, session_id)
                if summary is None:
                    raise StoreError("session summaries need claude-agent-sdk "
                                     f"({install_hint('store')})")
            out.append({"session_id": session_id, "mtime": mtime, "data": json.loads(summary)})
        return out

    def _refold(self, file_id: int, project_key: str, session_id: str) -> str | None:
        entries = self.load({"project_key": project_key, "session_id": session_id}) or []
        summary = self._fold(None, project_key, session_id, entries, 0)
        if summary is not None:
            def run():
                with write_lock(self.db) as conn:
                    conn.execute(SET_SUMMARY_SQL, {"file_id": file_id, "summary": summary})
            retry_locked(run)
        return summary

    def list_subkeys(self, key) -> list[str]:
        try:
            project_key, session_id = key["project_key"], key["session_id"]
        except (KeyError, TypeError):
            raise InvalidKey(f"not a SessionKey: {key!r}") from None
        return [s for (s,) in self.conn.execute(LIST_SUBKEYS_SQL, {
            "project_key": project_key, "session_id": session_id})]


class IndexSessionStore:
    """A ``claude_agent_sdk`` SessionStore that writes into the index at
    ``db_path`` (created if need be).

    Example::

        from claude_agent_sdk import ClaudeAgentOptions, query
        from indexer.ingest.store import IndexSessionStore

        store = IndexSessionStore("sessions.db")
        options = ClaudeAgentOptions(session_store=store)

    Not a subclass of the SDK's Protocol (the core package does not import
    the SDK): the SDK duck-types stores, and every optional method is here.
    """

    def __init__(self, db_path: str | os.PathLike):
        self.db_path = Path(db_path)
        self._lock = threading.Lock()
        self._pid = None
        self._executor = None
        self._backend = None
        self._call(lambda b: None)  # open (and create or upgrade) the index now

    # The worker thread that owns the connection; a new one after a fork.
    def _call(self, fn, *args):
        with self._lock:
            if self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="session-index-store")
                self._backend = self._executor.submit(_Backend, self.db_path).result()
                self._pid = os.getpid()
            executor, backend = self._executor, self._backend
        return executor.submit(fn, backend, *args).result()

    async def _run(self, fn, *args):
        import anyio  # a dependency of the SDK (and of datasette's httpx)

        return await anyio.to_thread.run_sync(self._call, fn, *args)

    # --- the SessionStore protocol -----------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Mirror a batch: entries whose uuid the key already holds are
        skipped, the rest stored in order, in one transaction with the
        copy's caches."""
        await self._run(_Backend.append, key, list(entries))

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every stored entry of the key in append order, or None if the key
        was never written (or was deleted)."""
        return await self._run(_Backend.load, key)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """Main keys of ``project_key``: session_id and the epoch-ms write
        time of their last append."""
        return await self._run(_Backend.list_sessions, project_key)

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's folded summaries of the project's main keys, ``mtime``
        on the same clock as ``list_sessions``."""
        return await self._run(_Backend.list_session_summaries, project_key)

    async def delete(self, key: SessionKey) -> None:
        """Remove a copy (a main key takes its subpaths with it) and its rows
        from every table; the session's row goes when nothing else holds it."""
        await self._run(_Backend.delete, key)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths held under a session (its subagent transcripts)."""
        return await self._run(_Backend.list_subkeys, key)

    # --- lifetime -----------------------------------------------------------

    def close(self) -> None:
        """Close the connection and stop the worker thread."""
        with self._lock:
            if self._executor is not None and self._pid == os.getpid():
                self._executor.submit(_Backend.close, self._backend).result()
                self._executor.shutdown()
            self._executor = self._backend = None
            self._pid = None

    async def __aenter__(self) -> IndexSessionStore:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"IndexSessionStore({str(self.db_path)!r})"
