"""What Claude Code writes about a session besides its transcript: the prompt
history (``<config dir>/history.jsonl``) and the session folders
(``<project>/<session id>/``: ``tool-results/``, ``subagents/``,
``workflows/``).

They are the evidence that a session ran when its transcript was never
written, or stopped being written (anthropics/claude-code #91284, #76829,
#79369, #70219, #53417), or was deleted while its folder survived (#95403):
the ``unwritten_transcripts`` view (signals/unwritten.py) reads them.

``history.jsonl`` is read as transcripts are (files.py): incrementally, every
line kept as written (``history_prompts.raw``; a line that is not a JSON
object, a blank one included, has ``error`` set), a partial last line left
until its newline comes; a file that shrank, or whose first bytes or bytes
before the offset changed, is read again as a new generation, the earlier
generation's rows kept. Its lines, as Claude Code 2.1.332 writes
them (an interactive prompt; ``claude -p`` writes none):
``{"display": TEXT, "pastedContents": {}, "timestamp": EPOCH_MS,
"project": CWD, "sessionId": ID}``.

The session folders are scanned at every ingest of a ``projects`` folder
(a few ``scandir`` calls a session): their rows say what each holds now.
"""

from __future__ import annotations

import json
import os

from indexer.index.clock import iso, utcnow
from indexer.sql import dict_rows, write_lock
from indexer.transcripts import discover, retention
from indexer.transcripts.digests import blake2b
from indexer.transcripts.safefiles import NotRegular, open_regular

HISTORY_NAME = "history.jsonl"
HEAD_BYTES = 1024
READ_CHUNK = 1 << 20
# The folders of a session folder counted as sidecars, by column.
SIDECAR_DIRS = {"tool-results": "tool_results", "subagents": "subagent_files",
                "workflows": "workflow_files"}
# The folders whose files' mtimes say the session ran on (last_sidecar_at):
# a tool result is written as the tool returns, a workflow's script at its
# launch and its journal at its end. (A subagent file can outlive its main
# transcript's last line legitimately: a run killed mid-subagent.)
LIVE_DIRS = ("tool-results", "workflows")

HISTORY_FILE_SQL = "SELECT * FROM history_files WHERE path = ?"
INSERT_HISTORY_FILE_SQL = """
INSERT INTO history_files (path, config_dir, first_ingested_at) VALUES (?, ?, ?)
""".strip()
UPDATE_HISTORY_FILE_SQL = """
UPDATE history_files SET inode = ?, dev = ?, size = ?, mtime_ns = ?, ingested_offset = ?,
  generation = ?, head_digest = ?, tail_digest = ?, lines = ?, retention_days = ?,
  last_ingested_at = ?,
  deleted_at = NULL
WHERE id = ?
""".strip()
INSERT_PROMPT_SQL = """
INSERT OR IGNORE INTO history_prompts (history_file_id, generation, line_no, byte_offset,
  session_id, project, timestamp, display, error, raw)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
""".strip()
HISTORY_GONE_SQL = """
UPDATE history_files SET deleted_at = ? WHERE path = ? AND deleted_at IS NULL
""".strip()

FOLDERS_UNDER_SQL = """
SELECT * FROM session_folders WHERE path >= :prefix AND path < :prefix || x'ff'
""".strip()
# What a scan compares to know a folder unchanged (no write: a no-op ingest
# writes nothing for the folders).
FOLDER_FACTS = ("project_dir", "session_id", "tool_results", "subagent_files", "workflow_files",
                "other_files", "bytes", "first_mtime", "last_sidecar_at", "last_mtime",
                "signature")
UPSERT_FOLDER_SQL = """
INSERT INTO session_folders (path, project_dir, session_id, tool_results, subagent_files,
  workflow_files, other_files, bytes, first_mtime, last_sidecar_at, last_mtime, scanned_at,
  deleted_at, signature)
VALUES (:path, :project_dir, :session_id, :tool_results, :subagent_files, :workflow_files,
  :other_files, :bytes, :first_mtime, :last_sidecar_at, :last_mtime, :scanned_at, NULL,
  :signature)
ON CONFLICT(path) DO UPDATE SET tool_results = excluded.tool_results,
  subagent_files = excluded.subagent_files, workflow_files = excluded.workflow_files,
  other_files = excluded.other_files, bytes = excluded.bytes,
  first_mtime = excluded.first_mtime, last_sidecar_at = excluded.last_sidecar_at,
  last_mtime = excluded.last_mtime, scanned_at = excluded.scanned_at, deleted_at = NULL,
  signature = excluded.signature
""".strip()
# The folders of one session the index holds as on disk.
SESSION_FOLDERS_SQL = "SELECT path FROM session_folders WHERE session_id = ? AND deleted_at IS NULL"
FOLDER_GONE_SQL = "UPDATE session_folders SET deleted_at = ? WHERE path = ? AND deleted_at IS NULL"


def _digest(data: bytes) -> str:
    return blake2b(data, digest_size=16).hexdigest()


def _tail_digest(f, offset: int) -> str:
    """The digest of the HEAD_BYTES of ``f`` before ``offset``."""
    start = max(0, offset - HEAD_BYTES)
    f.seek(start)
    return _digest(f.read(offset - start))


# --- history.jsonl ----------------------------------------------------------

def history_paths(scanned_roots: list[str]) -> list[str]:
    """The history files of an ingest: ``<dir>/history.jsonl`` beside each
    scanned folder named ``projects`` (the config dirs ingest reads by
    default). Only there: a prompt of a config dir whose transcripts were
    not all read would look like a session whose transcript was never
    written."""
    dirs = [os.path.dirname(r.rstrip(os.sep)) for r in scanned_roots
            if os.path.basename(r.rstrip(os.sep)) == "projects"]
    return list(dict.fromkeys(os.path.join(d, HISTORY_NAME) for d in dirs))


def prompt_row(line: bytes) -> tuple:
    """(session_id, project, timestamp, display, error, raw) of one line."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, None, None, None, "not UTF-8", line
    try:
        value = json.loads(text.lstrip("\ufeff"))
    except (ValueError, RecursionError):
        return None, None, None, None, "not JSON", text
    if not isinstance(value, dict):
        return None, None, None, None, "not a JSON object", text

    def string(key):
        v = value.get(key)
        return v if isinstance(v, str) else None

    ts = value.get("timestamp")
    at = None
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        try:
            at = iso(ts / 1000)
        except (OverflowError, OSError, ValueError):
            at = None
    elif isinstance(ts, str):
        at = ts
    return string("sessionId"), string("project"), at, string("display"), None, text


def ingest_history(db, path: str, config_dir: str | None = None) -> int:
    """Read what is new in the history file ``path``; the number of prompt
    lines stored. A file gone is marked deleted (its rows kept)."""
    conn = db.conn
    rows = dict_rows(conn, HISTORY_FILE_SQL, [path])
    row = rows[0] if rows else None
    try:
        f = open_regular(path)
    except FileNotFoundError:
        if row is not None and row["deleted_at"] is None:
            with write_lock(db):
                conn.execute(HISTORY_GONE_SQL, [utcnow(), path])
        return 0
    except (OSError, NotRegular):
        return 0
    with f:
        st = os.fstat(f.fileno())
        if row is not None and row["deleted_at"] is None and (
                row["inode"], row["dev"], row["size"], row["mtime_ns"]) == (
                st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns):
            return 0
        head = f.read(HEAD_BYTES)
        days = retention.resolve(config_dir or os.path.dirname(path), None).days
        with write_lock(db):
            if row is None:
                file_id = conn.execute(INSERT_HISTORY_FILE_SQL,
                                       [path, config_dir, utcnow()]).lastrowid
                offset, generation, lines = 0, 1, 0
            else:
                file_id, offset = row["id"], row["ingested_offset"]
                generation, lines = row["generation"], row["lines"]
                if st.st_size < offset or (offset and (
                        _digest(head[:min(offset, HEAD_BYTES)]) != row["head_digest"]
                        or (row["tail_digest"] is not None   # (NULL: read before m037)
                            and _tail_digest(f, offset) != row["tail_digest"]))):
                    offset, generation, lines = 0, generation + 1, 0   # rewritten
            stored = 0
            f.seek(offset)
            pending = b""
            while chunk := f.read(READ_CHUNK):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:   # every line, as written (a blank one: not JSON)
                    lines += 1
                    conn.execute(INSERT_PROMPT_SQL, [file_id, generation, lines, offset,
                                                     *prompt_row(line)])
                    stored += 1
                    offset += len(line) + 1
            conn.execute(UPDATE_HISTORY_FILE_SQL, [
                st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, offset, generation,
                _digest(head[:min(offset, HEAD_BYTES)]), _tail_digest(f, offset), lines, days,
                utcnow(), file_id])
        return stored


# --- session folders --------------------------------------------------------

def _files_under(folder: str):
    """(top folder name, stat) of every regular file under ``folder``, links
    not followed."""
    try:
        with os.scandir(folder) as entries:
            found = list(entries)
    except OSError:
        return
    for entry in found:
        try:
            if entry.is_dir(follow_symlinks=False):
                for _, st in _files_under(entry.path):
                    yield entry.name, st
            elif entry.is_file(follow_symlinks=False):
                yield None, entry.stat(follow_symlinks=False)
        except OSError:
            continue


def signature(path: str) -> str | None:
    """A digest of the mtimes of ``path`` and of every folder under it (links
    not followed): files are added to and removed from a session folder,
    never rewritten (a tool result is written once), so an equal signature
    means its files need no stat. None when it cannot be read."""
    stamps = []

    def walk(folder, st):
        stamps.append(f"{folder}\0{st.st_mtime_ns}")
        try:
            with os.scandir(folder) as entries:
                dirs = [e for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for e in sorted(dirs, key=lambda e: e.name):
            try:
                walk(e.path, e.stat(follow_symlinks=False))
            except OSError:
                continue

    try:
        walk(path, os.stat(path))
    except OSError:
        return None
    return _digest("\n".join(stamps).encode("utf-8", "surrogateescape"))


def folder_row(path: str, project_dir: str, session_id: str) -> dict:
    """What a session folder holds now (a session_folders row)."""
    row = {"path": path, "project_dir": project_dir, "session_id": session_id,
           "tool_results": 0, "subagent_files": 0, "workflow_files": 0, "other_files": 0,
           "bytes": 0, "first_mtime": None, "last_sidecar_at": None, "last_mtime": None,
           "scanned_at": utcnow(), "signature": signature(path)}
    first = last = live = None
    try:
        with os.scandir(path) as entries:
            tops = list(entries)
    except OSError:
        tops = []
    for top in tops:
        try:
            is_dir = top.is_dir(follow_symlinks=False)
        except OSError:
            continue
        files = ([st for _, st in _files_under(top.path)] if is_dir
                 else [top.stat(follow_symlinks=False)] if top.is_file(follow_symlinks=False)
                 else [])
        column = SIDECAR_DIRS.get(top.name) if is_dir else None
        for st in files:
            row[column or "other_files"] += 1
            row["bytes"] += st.st_size
            first = st.st_mtime if first is None else min(first, st.st_mtime)
            last = st.st_mtime if last is None else max(last, st.st_mtime)
            if is_dir and top.name in LIVE_DIRS:
                live = st.st_mtime if live is None else max(live, st.st_mtime)
    row["first_mtime"] = iso(first) if first is not None else None
    row["last_mtime"] = iso(last) if last is not None else None
    row["last_sidecar_at"] = iso(live) if live is not None else None
    return row


def session_folders(root: str):
    """(path, project folder name, session id) of every session folder under
    ``root``: a folder named by a UUID in ``root`` (a project folder) or in
    one of its folders (a projects folder)."""
    def uuid_dirs(folder):
        try:
            with os.scandir(folder) as entries:
                for e in entries:
                    if discover.UUID_RE.match(e.name) and e.is_dir(follow_symlinks=False):
                        yield e.path, e.name
        except OSError:
            return

    root = root.rstrip(os.sep)
    if discover.UUID_RE.match(os.path.basename(root)):   # a session folder itself
        return [(root, os.path.basename(os.path.dirname(root)), os.path.basename(root))]
    found = [(p, os.path.basename(root), sid) for p, sid in uuid_dirs(root)]
    try:
        with os.scandir(root) as entries:
            projects = sorted(e.path for e in entries if e.is_dir(follow_symlinks=False)
                              and not discover.UUID_RE.match(e.name))
    except OSError:
        projects = []
    for project in projects:
        found += [(p, os.path.basename(project), sid) for p, sid in uuid_dirs(project)]
    return found


def scan_folders(db, roots: list[str]) -> None:
    """Bring session_folders up to date for the folders ``roots``."""
    conn = db.conn
    for root in roots:
        root = os.path.abspath(root)
        prefix = root.rstrip(os.sep) + os.sep
        known = {r["path"]: r for r in dict_rows(conn, FOLDERS_UNDER_SQL, {"prefix": prefix})}
        found = session_folders(root)
        seen = {path for path, _, _ in found}
        rows = [folder_row(path, project, sid) for path, project, sid in found
                if path not in known or known[path]["deleted_at"] is not None
                or known[path]["signature"] is None
                or signature(path) != known[path]["signature"]]
        changed = [r for r in rows if r["path"] not in known
                   or known[r["path"]]["deleted_at"] is not None
                   or any(known[r["path"]][k] != r[k] for k in FOLDER_FACTS)]
        gone = [p for p, r in known.items() if p not in seen and r["deleted_at"] is None]
        if not changed and not gone:
            continue
        with write_lock(db):
            for r in changed:
                conn.execute(UPSERT_FOLDER_SQL, r)
            now = utcnow()
            for path in gone:
                conn.execute(FOLDER_GONE_SQL, [now, path])


# --- the background jobs' state: a fork's parent -----------------------------

JOBS_DIR = "jobs"
LINKS_UNDER_SQL = """
SELECT * FROM session_links WHERE path >= :prefix AND path < :prefix || x'ff'
""".strip()
LINK_FACTS = ("session_id", "parent_session_id", "boundary_at", "mtime")
UPSERT_LINK_SQL = """
INSERT INTO session_links (path, session_id, parent_session_id, boundary_at, mtime, scanned_at,
  deleted_at)
VALUES (:path, :session_id, :parent_session_id, :boundary_at, :mtime, :scanned_at, NULL)
ON CONFLICT(path) DO UPDATE SET session_id = excluded.session_id,
  parent_session_id = excluded.parent_session_id, boundary_at = excluded.boundary_at,
  mtime = excluded.mtime, scanned_at = excluded.scanned_at, deleted_at = NULL
""".strip()
LINK_GONE_SQL = "UPDATE session_links SET deleted_at = ? WHERE path = ? AND deleted_at IS NULL"


def job_link(path: str) -> dict | None:
    """A session_links row from a job's state.json (2.1.332: ``sessionId``,
    ``forkSessionId`` the fork, ``forkParentSessionId`` the session it was
    forked from, ``forkBoundaryAt``), or None when it names no parent."""
    try:
        with open_regular(path) as f:
            state = json.loads(f.read(1 << 20).decode("utf-8"))
            mtime = iso(os.fstat(f.fileno()).st_mtime)
    except (OSError, NotRegular, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(state, dict):
        return None
    child = state.get("forkSessionId") or state.get("sessionId")
    parent = state.get("forkParentSessionId")
    if not (isinstance(child, str) and isinstance(parent, str) and child and parent
            and child != parent):
        return None
    at = state.get("forkBoundaryAt")
    return {"path": path, "session_id": child, "parent_session_id": parent,
            "boundary_at": at if isinstance(at, str) else None, "mtime": mtime,
            "scanned_at": utcnow()}


def scan_jobs(db, config_dir: str) -> None:
    """Bring session_links up to date with ``<config_dir>/jobs/*/state.json``."""
    conn = db.conn
    jobs = os.path.join(config_dir, JOBS_DIR)
    try:
        names = sorted(os.listdir(jobs))
    except OSError:
        names = []
    links = [r for r in (job_link(os.path.join(jobs, n, "state.json")) for n in names) if r]
    known = {r["path"]: r for r in dict_rows(conn, LINKS_UNDER_SQL, {"prefix": jobs + os.sep})}
    changed = [r for r in links if r["path"] not in known
               or known[r["path"]]["deleted_at"] is not None
               or any(known[r["path"]][k] != r[k] for k in LINK_FACTS)]
    seen = {r["path"] for r in links}
    gone = [p for p, r in known.items() if p not in seen and r["deleted_at"] is None]
    if not changed and not gone:
        return
    with write_lock(db):
        for r in changed:
            conn.execute(UPSERT_LINK_SQL, r)
        for path in gone:
            conn.execute(LINK_GONE_SQL, [utcnow(), path])


def refresh(db, scanned_roots: list[str]) -> None:
    """After an ingest of ``scanned_roots``: their session folders scanned,
    and beside each ``projects`` folder its history read and its job states
    scanned."""
    scan_folders(db, scanned_roots)
    for path in history_paths(scanned_roots):
        ingest_history(db, path, os.path.dirname(path))
        scan_jobs(db, os.path.dirname(path))


def refresh_session(db, session_id: str, config_dirs: list[str]) -> None:
    """For ``check``: the history files of ``config_dirs`` read, and the
    session's own folders in their projects folders scanned afresh."""
    if not session_id or any(c in session_id for c in "/\\*?[]"):
        return
    conn = db.conn
    for config_dir in config_dirs:
        ingest_history(db, os.path.join(config_dir, HISTORY_NAME), config_dir)
        projects = os.path.join(config_dir, "projects")
        try:
            folders = sorted(os.listdir(projects))
        except OSError:
            continue
        here = [(os.path.join(projects, d, session_id), d) for d in folders
                if os.path.isdir(os.path.join(projects, d, session_id))]
        known = [r["path"] for r in dict_rows(conn, SESSION_FOLDERS_SQL, [session_id])
                 if r["path"].startswith(projects + os.sep)]
        rows = [folder_row(path, d, session_id) for path, d in here]
        with write_lock(db):
            for r in rows:
                conn.execute(UPSERT_FOLDER_SQL, r)
            for path in set(known) - {r["path"] for r in rows}:
                conn.execute(FOLDER_GONE_SQL, [utcnow(), path])
