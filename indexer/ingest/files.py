"""Incremental, exactly-once ingest of transcript files.

A file's new lines and its new offset always commit in the same
``BEGIN IMMEDIATE`` transaction (one transaction holds many small files, or
one slice of a big one), so a crash replays only uncommitted work; the unique
key on (file_id, byte_offset) is the second guard. Lines end with ``\\n``; the
bytes after the last one are a line too when they parse as a whole JSON
object (Claude Code reads such a last record, and writes the ``\\n`` before
its next append): stored once, with ``files.unterminated_tail`` its length,
so the ``\\n`` that ends it later is skipped, and a last line that turns out
to go on (more bytes, no ``\\n`` first) is taken back and read again whole.
Any other partial last line waits for its newline.

What a run does with each file, from a stat:
- unchanged (device, inode, size, mtime): nothing is read;
- grown, same inode, first and last ingested bytes unchanged: read from the offset;
- shrunk, or the first/last ingested bytes changed: rewritten, re-read from 0;
  in the same transaction as the first new lines its rows move to the
  superseded generation (generations.py), so nothing is lost;
- a new inode, back after deletion, or a same-size touch: the whole ingested
  prefix is compared with the index; equal means appended-to (or restored),
  else rewritten;
- gone from a scanned folder: rows kept, ``deleted_at`` set.
"""

from __future__ import annotations

import json
import os
import time

TYPE_CHECKING = False  # typing costs start-up time
if TYPE_CHECKING:
    from typing import Callable

from indexer.ingest import derive_worker, sidecars
from indexer.ingest.log import counted
from indexer.transcripts import agents, discover, retention
from indexer.index import generations, record_kinds, search_state, views
from indexer.index.clock import iso, utcnow
from indexer.index.db import JOURNAL_MODE_SQL, background_checkpoints
from indexer.sql import retry_locked, write_lock
from indexer.transcripts.digests import blake2b
from indexer.transcripts.safefiles import NotRegular, open_regular, regular_stat
from indexer.index.generations import stored_bytes
from indexer.ingest.linerows import (
    HEAD_BYTES,
    INSERT_LARGE_BAD_LINE_SQL,
    INSERT_LARGE_RECORD_SQL,
    RUNNING_FACTS_SET,
    TAIL_BYTES,
    digest_of,
    insert_lines,
    running_facts,
)
from indexer.transcripts.records import RECORD_FIELDS
from indexer.transcripts.rows import LARGE_LINE_BYTES, BadLine, NeedsText

READ_CHUNK = 1 << 20
# Commit after this many bytes of new lines: long enough to amortize the
# commit, short enough to hold the write lock well under a second.
TXN_BYTES = 8 << 20
# The session id's position in a parsed record (records.RECORD_FIELDS).
_SESSION = RECORD_FIELDS.index("session_id")

TRACKED_COLUMNS = ("path", "inode", "dev", "size", "mtime_ns", "deleted_at", "ingested_offset")
TRACKED_FILES_SQL = f"SELECT {', '.join(TRACKED_COLUMNS)} FROM files"
LAST_INGEST_AT_SQL = "INSERT OR REPLACE INTO index_meta VALUES ('last_ingest_at', ?)"


class SourceNotFound(Exception):
    """A SOURCE given to ingest does not exist and was never indexed."""


class Summary:
    """What one run did (``session-index ingest --json`` prints it):
    files: transcript and execution-log files looked at; changed_files: those
    whose bytes were read; skipped_files: .jsonl files that are not
    transcripts; not_regular_files: FIFOs, devices, sockets (each also in
    errors), never read; deleted_files: newly found gone; rewritten_files: re-read
    from the start; errors: files that could not be read; warnings:
    retention settings to look at."""

    COUNTS = ("files", "changed_files", "skipped_files", "not_regular_files", "deleted_files",
              "rewritten_files", "new_lines", "new_records", "bad_lines", "bytes_read")
    __slots__ = COUNTS + ("seconds", "errors", "warnings", "changed")

    def __init__(self):
        for name in self.COUNTS:
            setattr(self, name, 0)
        self.seconds = 0.0
        self.errors, self.warnings = [], []
        self.changed = []   # (path, session id or None) of each changed file, for the watch log

    def as_dict(self) -> dict:
        d = {name: getattr(self, name) for name in self.__slots__ if name != "changed"}
        d["seconds"] = round(self.seconds, 3)
        return d


TRACK_FILE_SQL = """
INSERT INTO files (path, kind, session_id, agent_id, project_dir, first_ingested_at, agent)
VALUES (:path, :kind, :session_id, :agent_id, :project_dir, :now, :agent)
""".strip()
# A rewritten file starts again from nothing, as a new generation (the old
# one's lines were kept by generations.supersede; its caches go with derive,
# and it is derived again even when the new generation has no line yet: a
# file emptied by its rewrite still has its rows, 'no_leaf').
FORGET_LINES_SQL = (
    "DELETE FROM records WHERE file_id = :id",
    "DELETE FROM bad_lines WHERE file_id = :id",
    """UPDATE files SET rewrites = rewrites + 1, generation = generation + 1,
       generation_started_at = :now, unterminated_tail = 0, pending_tail = NULL,
       records = 0, first_timestamp = NULL, last_timestamp = NULL, cwd = NULL,
       version = NULL, git_branch = NULL, needs_derive = 1 WHERE id = :id""",
)
# A last record stored without its newline that then went on (more bytes,
# no newline first): its row goes and it is read again as the line it is
# now; the running facts are recounted from the records that remain.
RETRACT_UNTERMINATED_SQL = (
    "DELETE FROM records WHERE file_id = :id AND byte_offset = :offset",
    # a line the caches covered changes: derive recomputes the file
    "UPDATE leaves_cache SET derive_state = NULL WHERE file_id = :id",
    """UPDATE files SET unterminated_tail = 0,
       records = (SELECT count(*) FROM records WHERE file_id = :id),
       first_timestamp = (SELECT min(timestamp) FROM records WHERE file_id = :id),
       last_timestamp = (SELECT max(timestamp) FROM records WHERE file_id = :id),
       cwd = (SELECT cwd FROM records WHERE file_id = :id AND cwd IS NOT NULL
              ORDER BY line_no LIMIT 1),
       version = (SELECT version FROM records WHERE file_id = :id AND version IS NOT NULL
                  ORDER BY line_no DESC LIMIT 1),
       git_branch = (SELECT git_branch FROM records WHERE file_id = :id
                     AND git_branch IS NOT NULL ORDER BY line_no DESC LIMIT 1)
       WHERE id = :id""",
)
# After each slice of lines: how far the file is ingested (and whether its
# last line is a record still without its newline), what the bytes at its
# start and just before the offset hash to (checked at the next run), and
# running facts about its records.
ADVANCE_OFFSET_SQL = f"""
UPDATE files SET ingested_offset = :offset, line_count = :line_count,
  unterminated_tail = :unterminated,
  head_len = :head_len, head_hash = :head_hash, tail_len = :tail_len,
  tail_hash = :tail_hash, session_id = coalesce(session_id, :session_id),
  {RUNNING_FACTS_SET},
  last_ingested_at = :now, needs_derive = 1
WHERE id = :id
""".strip()


# A file's row, read again once the write lock is held (another process may
# have tracked or moved it on since the run's first read).
FILE_ROW_SQL = "SELECT * FROM files WHERE path = ?"
# Where a file stands: checked each time the lock is taken again mid-file.
FILE_POSITION_SQL = "SELECT ingested_offset, generation FROM files WHERE id = ?"
# At the end of a file: the stat the next run compares against.
RECORD_STAT_SQL = """
UPDATE files SET size = :size, mtime = :mtime, mtime_ns = :mtime_ns, dev = :dev,
  inode = :inode, deleted_at = NULL, needs_derive = needs_derive OR :returned,
  pending_tail = :pending_tail
WHERE id = :id
""".strip()
class Overtaken(Exception):
    """Another process moved the file on while this one had let go of the
    write lock between two slices: it stops this file (the other has it)."""


class _Writer:
    """One write transaction at a time, committed every TXN_BYTES of lines.

    Callers only ever end a unit of work (rows plus the offset that covers
    them) before calling ``maybe_commit``, so every commit is consistent.
    ``guard``, when set, runs each time the write lock is taken again: it
    checks that what the caller read before is still so (or raises)."""

    def __init__(self, conn, progress):
        self.conn, self.progress = conn, progress
        self.open, self.pending = False, 0
        self.guard = None
        self.background = None   # derive_worker.Background: told of each commit
        self.preload = None      # preload.Preloader: new files' lines parsed ahead
        self.run_at = utcnow()   # the run's time (record_kinds: when a kind was stored)
        self.search = False      # search on: each transaction indexes its records' text

    def begin(self):
        if not self.open:
            retry_locked(lambda: self.conn.execute("BEGIN IMMEDIATE"))
            self.open = True
            if self.guard is not None:
                self.guard()

    def maybe_commit(self, n: int):
        self.pending += n
        if self.pending >= TXN_BYTES:
            self.commit()

    def commit(self):
        if self.open:
            derived = self.preload.copy_caches(self.conn) if self.preload is not None else []
            if derived:   # their sessions' rows again, the files unmarked
                from indexer.ingest import derive   # (only when there is something to derive: a no-op run's start-up time)

                derive.finish_files(self.conn, derived)
            if self.search:   # the text of the records it stored, in the same transaction
                from indexer.index import search   # (only when search is on: start-up time)

                search.catch_up_in(self.conn, search.IN_TRANSACTION_BATCH)
            if self.guard is not None:
                self.guard.capture()
            self.conn.execute("COMMIT")
            self.open = False
            if self.background is not None:
                self.background.committed()
        if self.progress and self.pending:
            self.progress(self.pending)
        self.pending = 0

    def rollback(self):
        # SQLite may have rolled back already (a full disk): then the error
        # that brought us here is the one to report, not "no transaction".
        if self.open and self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        self.open = False
        self.pending = 0
        if self.preload is not None:
            self.preload.kept = []   # their records are gone too


def ingest(
    db,
    sources: list[str],
    progress: Callable[[int], None] | None = None,
    plan: Callable[[int], None] | None = None,
    config_dir: str | os.PathLike | None = None,
    search_new: bool = False,
) -> Summary:
    """Bring the index up to date with ``sources`` (folders and/or files).

    ``plan(total_bytes)`` is called once with the bytes expected to be read;
    ``progress(n)`` after each commit with the bytes consumed. The retention
    in force (retention.py) is resolved against ``config_dir`` (default
    $CLAUDE_CONFIG_DIR, else ~/.claude). ``search_new``: on an index
    nothing was ingested into and search never turned on or off in, turn
    search on by words (search.enable(code=False)) first, as
    `session-index ingest` does unless --no-search.
    """
    started = time.monotonic()
    summary = Summary()
    conn = db.conn
    if search_new and search_state.untouched(conn):
        from indexer.index import search   # (a new index only: start-up time of every other run)

        search.enable(db, code=False)   # (nothing to index yet: _end_run catches up)
    # What a run needs of each tracked file to see that it is unchanged
    # (_unchanged); _ingest_file reads the whole row again under the lock.
    # (tuples: a dict is made only for a file that needs work)
    tracked = {row[0]: row for row in conn.execute(TRACKED_FILES_SQL)}
    found, scanned_roots, missing_files = _under_sources(sources, tracked)
    work = _needing_work(found, tracked, summary)
    if plan:
        plan(sum(max(st.st_size - (row["ingested_offset"] if row else 0), 0)
                 for _, row, st in work))
    writer = _Writer(conn, progress)
    writer.search = search_state.state(conn) is not None
    wal = _start_workers(db, writer, work)
    with background_checkpoints(conn, enabled=wal):   # the WAL copied into the index on the other core meanwhile
        _ingest_files(writer, work, summary)
        _end_files(db, writer, summary, _gone(tracked, found, scanned_roots, missing_files))
    sidecars.refresh(db, scanned_roots)   # history.jsonl, the session folders, job states
    _end_run(db, writer, summary, config_dir)
    summary.seconds = time.monotonic() - started
    return summary


def _under_sources(sources: list[str], tracked: dict) -> tuple[list, list, list]:
    """(the paths under the sources, described only if they need work; the
    folders scanned; the tracked files given by name that are gone).
    SourceNotFound for a source that does not exist and was never indexed."""
    found: list[str] = []
    scanned_roots: list[str] = []
    missing_files: list[str] = []
    for source in sources:
        if not source:   # (os.path.abspath would make it the current folder)
            raise SourceNotFound(discover.not_found(source))
        path = os.path.abspath(source)
        if os.path.isdir(path):
            scanned_roots.append(path)
            found.extend(discover.walk(path))
        elif os.path.exists(path):   # a file, or a FIFO or device: noted below
            found.append(path)
        elif path in tracked:
            missing_files.append(path)
        elif any(t.startswith(path + os.sep) for t in tracked):
            scanned_roots.append(path)
        else:
            raise SourceNotFound(discover.not_found(source))
    return list(dict.fromkeys(found)), scanned_roots, missing_files   # a file under two sources once


def _needing_work(found: list[str], tracked: dict, summary: Summary) -> list[tuple]:
    """(candidate, its tracked row or None, its stat) of each file that is
    new or changed and is a transcript or an execution log; the others are
    counted in ``summary``. Rows read here only decide what to look at:
    _ingest_file reads each again under the write lock before it writes."""
    work = []
    for path in found:
        # (a tracked path is UTF-8: it was stored; the no-op run spares the test)
        if path not in tracked and (shown := discover.not_utf8(path)) is not None:
            summary.errors.append(f"{shown}: {discover.NOT_UTF8}")
            continue
        try:
            st = regular_stat(path)
        except NotRegular as exc:   # a FIFO would hang the read, /dev/zero never end
            summary.not_regular_files += 1
            summary.errors.append(f"{path}: {exc.what}, not a regular file: skipped")
            continue
        except OSError:
            continue
        row = tracked.get(path)
        if row is not None:
            if _same_stat(*row[1:6], st):
                summary.files += 1
                continue
            row = dict(zip(TRACKED_COLUMNS, row))
        cand = discover.describe(path)
        if row is None:
            verdict = discover.sniff(path)
            if verdict is None and not cand.named:
                continue  # no complete line yet: decide at a later run
            if verdict == discover.OTHER and not cand.named:
                summary.skipped_files += 1
                continue
            if verdict == discover.EXECUTION_LOG:
                cand = cand._replace(kind=discover.EXECUTION_LOG, session_id=None)
            elif verdict in (discover.CODEX, discover.GEMINI):   # another agent's (agents.py)
                cand = agents.candidate(cand, verdict)
        summary.files += 1
        work.append((cand, row, st))
    return work


def _start_workers(db, writer: _Writer, work: list[tuple]) -> bool:
    """For a big ingest of new files: their caches derived and their lines
    parsed ahead on the other core (derive_worker.py, preload.py), told to
    ``writer``. Returns whether the index is in WAL mode for it (then its
    WAL is checkpointed from a thread meanwhile)."""
    conn = writer.conn
    bulk = sum(st.st_size for _, row, st in work if row is None) >= derive_worker.MIN_BYTES
    # A fresh_build.py build has no WAL: no checkpoints, and no derive worker
    # (it reads the index as it is written; its read would hold up the commits).
    wal = bulk and conn.execute(JOURNAL_MODE_SQL).fetchone()[0] == "wal"
    if bulk:
        background = derive_worker.start(db)   # new files' caches on the other core
        writer.background = background if wal else None
        if background is not None:   # (not for an in-memory index either)
            from indexer.ingest import preload   # (only for a big ingest of new files: start-up time)

            writer.preload = preload.start(conn, [   # and their lines parsed there, ahead
                (cand.path, st.st_size, cand.kind, cand.session_id)
                for cand, row, st in work if row is None and cand.agent is None])
    return wal


def _ingest_files(writer: _Writer, work: list[tuple], summary: Summary) -> None:
    """Read what is new in each file of ``work``, and commit. On any error
    the open transaction is rolled back and the derive worker stopped; the
    preload workers are stopped whatever happens."""
    try:
        for cand, row, st in work:
            try:
                if _ingest_file(writer, cand, row, st, summary):
                    summary.changed_files += 1
                    summary.changed.append((cand.path, cand.session_id))
            except OSError as exc:
                summary.errors.append(f"{cand.path}: {exc.strerror or exc}")
            except Overtaken:
                pass  # the other process stores what is left of it
            finally:
                writer.guard = None
        writer.commit()
    except BaseException:
        writer.rollback()
        if writer.background is not None:
            writer.background.close()
        raise
    finally:
        if writer.preload is not None:
            writer.preload.close()


def _gone(tracked: dict, found: list[str], scanned_roots: list[str],
          missing_files: list[str]) -> list[str]:
    """The tracked files no longer there: given by name, or under a folder
    scanned and not found in it."""
    seen = set(found)
    gone = list(missing_files)
    for root in scanned_roots:
        prefix = root.rstrip(os.sep) + os.sep
        gone += [p for p in tracked if p.startswith(prefix) and p not in seen]
    return gone


def _end_files(db, writer: _Writer, summary: Summary, gone: list[str]) -> None:
    """Mark ``gone`` deleted and take the derive worker's caches; the worker
    is never left running, whatever happened."""
    try:
        summary.deleted_files = _mark_deleted(db, gone)
        if writer.background is not None:
            derive_worker.apply(db, writer.background)
    finally:
        if writer.background is not None:
            writer.background.close()


def _end_run(db, writer: _Writer, summary: Summary, config_dir) -> None:
    """What follows the files: their caches derived, the retention in force
    stored, search's text caught up, the kinds counted, and the run's end."""
    conn = db.conn
    if not views.nothing_to_derive(conn):
        from indexer.ingest import derive   # (only when there is something to derive: a no-op run's start-up time)

        derive.derive_pending(db)
    summary.warnings = retention.apply(
        db, config_dir or retention.default_config_dir())
    if search_state.behind(search_state.state(conn)):   # search enabled (search.py)
        from indexer.index import search   # (only when search is enabled: start-up time)

        search.catch_up(db)   # the new records' text
    # The kinds not counted yet; the run ends, and when (one transaction: a
    # no-op run's only write).
    record_kinds.after_ingest(db, writer.run_at, at_end=lambda c: c.execute(
        LAST_INGEST_AT_SQL, [utcnow()]))


def report(summary: Summary, as_json: bool, out, err, style=lambda text: text,
           db_path: str | None = None) -> None:
    """Print a run's summary as ``session-index ingest`` does (``style``
    marks the loud warnings, on a terminal), naming the index file."""
    for error in summary.errors:
        err.write(f"warning: {error}\n")
    for warning in summary.warnings:
        err.write(style(f"WARNING: {warning}") + "\n")
    if as_json:
        data = summary.as_dict()
        if db_path is not None:
            data["db"] = os.path.abspath(db_path)
        out.write(json.dumps(data, indent=2) + "\n")
        return
    d = summary
    out.write(
        f"{counted(d.files, 'file')} ({d.changed_files:,} changed, {d.deleted_files:,} newly "
        f"deleted, {d.rewritten_files:,} rewritten, {d.skipped_files:,} not transcripts): "
        f"{counted(d.new_records, 'new record')}, {counted(d.bad_lines, 'bad line')}, "
        f"{counted(d.bytes_read, 'byte')} read in {d.seconds:.2f}s"
        + (f"; {counted(d.not_regular_files, 'not regular file')} skipped"
           if d.not_regular_files else "")
        + (f"; index {os.path.abspath(db_path)}" if db_path is not None else "")
        + "\n")


def _unchanged(row: dict, st) -> bool:
    return _same_stat(row["inode"], row["dev"], row["size"], row["mtime_ns"], row["deleted_at"],
                      st)


def _same_stat(inode, dev, size, mtime_ns, deleted_at, st) -> bool:
    """A tracked file (its files row's stat) is unchanged: nothing to read."""
    return (inode == st.st_ino and dev == st.st_dev and size == st.st_size
            and mtime_ns == st.st_mtime_ns and deleted_at is None)


def prefix_matches(conn, row: dict, f, whole: bool) -> bool:
    """Do the file's first ``ingested_offset`` bytes still say what we stored?"""
    offset = row["ingested_offset"]
    if offset == 0:
        return True
    if whole:
        h = blake2b(digest_size=16)
        for line in stored_bytes(conn, row["id"]):
            h.update(line)
        f.seek(0)
        g = blake2b(digest_size=16)
        remaining = offset
        while remaining:
            chunk = f.read(min(READ_CHUNK, remaining))
            if not chunk:
                return False
            g.update(chunk)
            remaining -= len(chunk)
        return h.digest() == g.digest()
    f.seek(0)
    if digest_of(f.read(row["head_len"])) != row["head_hash"]:
        return False
    f.seek(offset - row["tail_len"])
    return digest_of(f.read(row["tail_len"])) == row["tail_hash"]


def _ingest_file(writer: _Writer, cand, row: dict | None, st, summary: Summary) -> bool:
    """Read what is new in one file. True if anything was stored or replaced."""
    conn = writer.conn
    with open_regular(cand.path) as f:   # NotRegular if it was swapped since the stat
        st = os.fstat(f.fileno())
        if writer.preload is not None:
            writer.preload.prepare(writer, cand.path)
        writer.begin()
        cur = conn.execute(FILE_ROW_SQL, [cand.path])
        found = cur.fetchone()
        row = dict(zip([d[0] for d in cur.description], found)) if found else None
        if row is not None and _unchanged(row, st):
            return False  # another process has just stored it
        if row is None:
            cur = conn.execute(TRACK_FILE_SQL, {
                "path": cand.path, "kind": cand.kind, "session_id": cand.session_id,
                "agent_id": cand.agent_id, "project_dir": cand.project_dir, "now": utcnow(),
                "agent": cand.agent or agents.CLAUDE_CODE})
            row = {"id": cur.lastrowid, "session_id": cand.session_id, "ingested_offset": 0,
                   "line_count": 0, "head_len": 0, "head_hash": None, "deleted_at": None,
                   "unterminated_tail": 0, "agent": cand.agent, "path": cand.path}
            rewrite = None
        elif st.st_size < row["ingested_offset"]:
            rewrite = "shrunk"
        else:
            suspicious = (row["inode"] != st.st_ino or row["dev"] != st.st_dev
                          or row["deleted_at"] is not None
                          or (st.st_size == row["size"] and st.st_mtime_ns != row["mtime_ns"]))
            rewrite = None if prefix_matches(conn, row, f, whole=suspicious) else "changed"
        if rewrite:
            summary.rewritten_files += 1
            now = utcnow()
            generations.supersede(conn, row["id"], rewrite, now)
            from indexer.ingest import derive   # (only when there is something to derive: a no-op run's start-up time)

            derive.forget_file(conn, row["id"])
            for sql in FORGET_LINES_SQL:
                conn.execute(sql, {"id": row["id"], "now": now})
            row = dict(row, ingested_offset=0, line_count=0, head_hash=None, unterminated_tail=0)
        writer.guard = _PositionGuard(conn, row["id"])
        whole = row["ingested_offset"] == 0
        preloaded = (_take_preloaded(writer, row, cand.path, f, st, summary)
                     if writer.preload is not None and found is None else None)
        stored, pending_tail = _read_new_lines(writer, row, f, summary)
        if preloaded is not None and not stored and writer.preload.keep_caches(
                conn, row["id"], preloaded):
            pass   # its caches too, as the worker read it: copied at the commit
        elif writer.background is not None and whole:
            writer.background.finished(cand.path)   # read whole: the worker may derive it
        conn.execute(RECORD_STAT_SQL, {
            "id": row["id"], "size": st.st_size, "mtime": iso(st.st_mtime),
            "mtime_ns": st.st_mtime_ns, "dev": st.st_dev, "inode": st.st_ino,
            "returned": 1 if row["deleted_at"] is not None else 0,
            "pending_tail": pending_tail or None})
        writer.maybe_commit(0)
    return stored or preloaded is not None or bool(rewrite)


def _take_preloaded(writer: _Writer, row: dict, path: str, f, st, summary: Summary):
    """A new file's lines as the preload worker parsed them, copied into the
    index with their offset (``row`` then stands where they end): the
    preload.Preloaded, or None if it has none for this file as it is now."""
    p = writer.preload.take(writer.conn, row["id"], path, f, st)
    if p is None or p.end_offset == 0:
        return None
    session_id = row["session_id"] or p.session_id
    if p.new_records:   # (before the offset moves: it counts from the file's)
        record_kinds.count_stored(writer.conn, row["id"], 0, p.end_offset, None, writer.run_at,
                                  folded=p.kinds)
    writer.conn.execute(ADVANCE_OFFSET_SQL, {
        "id": row["id"], "offset": p.end_offset, "line_count": p.line_count,
        "unterminated": 0, "head_len": p.head_len, "head_hash": p.head_hash,
        "tail_len": p.tail_len, "tail_hash": p.tail_hash, "session_id": session_id,
        "now": utcnow(), **p.facts})
    # (a head shorter than HEAD_BYTES is hashed again by the next slice, as
    # it would be had ingest read these lines itself)
    row.update(ingested_offset=p.end_offset, line_count=p.line_count, head_len=p.head_len,
               head_hash=p.head_hash if p.head_len == HEAD_BYTES else None,
               session_id=session_id)
    summary.new_records += p.new_records
    summary.bad_lines += p.bad_lines
    summary.new_lines += p.new_records + p.bad_lines
    summary.bytes_read += p.end_offset
    writer.pending += p.end_offset   # committed with the file's caches, at its end
    return p


class _PositionGuard:
    """A _Writer guard for one file: when the lock is taken again, the
    file's stored offset and generation are still those this run committed,
    else Overtaken (another process stored its next lines meanwhile)."""

    def __init__(self, conn, file_id: int):
        self.conn, self.file_id = conn, file_id
        self.committed = None

    def capture(self):
        """Just before a commit: where this run leaves the file."""
        self.committed = self.conn.execute(FILE_POSITION_SQL, [self.file_id]).fetchone()

    def __call__(self):
        if self.committed is not None and self.conn.execute(
                FILE_POSITION_SQL, [self.file_id]).fetchone() != self.committed:
            raise Overtaken(self.file_id)


def _write_raw(conn, table: str, rowid: int, f, start: int, length: int) -> None:
    """Fill a placeholder raw value with the line's bytes, read again from
    the file a piece at a time (the read buffer is gone by then)."""
    position = f.tell()
    f.seek(start)
    with conn.blobopen(table, "raw", rowid) as blob:
        for done in range(0, length, READ_CHUNK):
            blob.write(f.read(min(READ_CHUNK, length - done)))
    f.seek(position)


def _read_new_lines(writer: _Writer, row: dict, f, summary: Summary) -> tuple[bool, bytes]:
    """Store every complete line after the file's offset, one slice of at most
    TXN_BYTES at a time, each slice with the offset that covers it, then the
    bytes after the last newline if they are a whole record. Returns (stored
    or changed anything, the bytes after the last line: the pending tail)."""
    from indexer.transcripts import lines   # (msgspec: only when there are lines to read)

    parser = agents.line_parser(row.get("agent"), writer.conn, row["id"], row.get("path")) \
        or lines
    reader = _NewLines(writer, row, f, summary, parser)
    reader.settle_unterminated()
    reader.start_reading()
    if getattr(parser, "whole_document", False):   # a Gemini .json chat: one record, all of it
        if reader.offset == 0 and (data := f.read()):
            reader.summary.bytes_read += len(data)
            reader.buf = bytearray(data)
            reader.take_tail_record()
        reader.store()
        return reader.stored_any, bytes(reader.buf)
    while True:
        chunk = f.read(READ_CHUNK)
        if not chunk:
            break
        reader.consume(chunk)
    if reader.buf:
        reader.take_tail_record()
    reader.store()
    return reader.stored_any, bytes(reader.buf)


class _NewLines:
    """One file's new lines on their way into the index (_read_new_lines):
    where the file stands (offset, line_no, the hashes' bytes), the lines
    parsed and not stored yet, and the read buffer."""

    def __init__(self, writer: _Writer, row: dict, f, summary: Summary, lines):
        self.writer, self.conn, self.f, self.summary, self.lines = (
            writer, writer.conn, f, summary, lines)
        self.file_id, self.offset, self.line_no = (
            row["id"], row["ingested_offset"], row["line_count"])
        self.stored_offset = self.offset   # files.ingested_offset as the index has it now
        self.head_len, self.head_hash = row["head_len"], row["head_hash"]
        self.session_id = row["session_id"]
        # The last line stored is a record that had no newline yet: the next
        # byte either is its newline (skipped: not a line) or shows it went on
        # (its row goes, and it is read again as the line it is now).
        self.unterminated = row.get("unterminated_tail") or 0
        self.settled = False  # the offset moved without a new line: store it anyway
        self.tail = b""
        self.records, self.bads = [], []
        self.large_fields, self.large_bads = [], 0   # large lines already inserted in this slice
        self.large_pending = []                      # parsed large lines, inserted once the buffer is freed
        self.slice_bytes = 0
        self.stored_any = False
        self.buf = bytearray()
        self.start = 0  # where the unconsumed bytes of buf begin

    def settle_unterminated(self) -> None:
        """A last line stored without its newline: its newline is skipped now,
        or, if it went on, its row goes and it is read again."""
        if not self.unterminated:
            return
        self.f.seek(self.offset)
        after = self.f.read(1)
        if after == b"\n":
            self.offset += 1
            self.summary.bytes_read += 1
        elif after:
            self.offset -= self.unterminated
            self.line_no -= 1
            for sql in RETRACT_UNTERMINATED_SQL:
                self.conn.execute(sql, {"id": self.file_id, "offset": self.offset})
            if self.head_len > self.offset:
                self.head_hash = None
        if after:
            self.unterminated, self.settled = 0, True

    def start_reading(self) -> None:
        """The TAIL_BYTES before the offset (hashed with each slice), and the
        file positioned at the offset."""
        if self.offset:
            self.f.seek(self.offset - min(self.offset, TAIL_BYTES))
            self.tail = self.f.read(min(self.offset, TAIL_BYTES))
        self.f.seek(self.offset)

    def current_tail(self) -> bytes:
        """The TAIL_BYTES bytes just before ``offset``."""
        return (self.tail + self.buf[max(0, self.start - TAIL_BYTES):self.start])[-TAIL_BYTES:]

    def consume(self, chunk: bytes) -> None:
        """Parse every line ``chunk`` completes; store a slice once it holds
        TXN_BYTES. (The loop over lines keeps its state in locals: it runs
        once per line of every file.)"""
        self.summary.bytes_read += len(chunk)
        buf, records, bads, file_id = self.buf, self.records, self.bads, self.file_id
        line_row = self.lines.line_row
        line_no, offset, slice_bytes, start = (
            self.line_no, self.offset, self.slice_bytes, self.start)
        search_from = len(buf)
        buf += chunk
        nl = buf.find(b"\n", search_from)
        while nl >= 0:
            with memoryview(buf) as view:
                line = view[start:nl]
                line_no += 1
                if not (len(line) > LARGE_LINE_BYTES and self.parse_large(line, line_no, offset)):
                    line_row(line, file_id, line_no, offset, records, bads)
                line.release()
            consumed = nl + 1 - start
            offset += consumed
            slice_bytes += consumed
            start = nl + 1
            nl = buf.find(b"\n", start)
        self.line_no, self.offset, self.slice_bytes, self.start = (
            line_no, offset, slice_bytes, start)
        if start:
            # Keep only the partial line; a fresh buffer frees a huge one
            # before its parsed copy is stored.
            self.tail = self.current_tail()
            if start > READ_CHUNK:
                self.buf = bytearray(buf[start:])
            else:
                del buf[:start]
            self.start = 0
        if self.large_pending:
            self.insert_large()
        if self.slice_bytes >= TXN_BYTES:
            self.store()

    def parse_large(self, line, line_no: int, offset: int) -> bool:
        """Parse a large line from the buffer; False to parse it as text."""
        try:
            fields = self.lines.parse_large_line(line)
        except NeedsText:
            return False
        except BadLine as exc:
            self.large_pending.append((None, str(exc), line_no, offset, len(line)))
        else:
            self.large_pending.append((fields, None, line_no, offset, len(line)))
        return True

    def insert_large(self) -> None:
        """Insert the parsed large lines, their bytes copied from the file into
        SQLite piece by piece: at most one copy of a long line is in memory."""
        conn, f, file_id = self.conn, self.f, self.file_id
        self.writer.begin()
        for fields, error, at_line, at, length in self.large_pending:
            if fields is None:
                cur = conn.execute(INSERT_LARGE_BAD_LINE_SQL, (file_id, at_line, at, error, length))
                _write_raw(conn, "bad_lines", cur.lastrowid, f, at, length)
                self.large_bads += 1
            else:
                cur = conn.execute(INSERT_LARGE_RECORD_SQL, (file_id, at_line, at, *fields, length))
                _write_raw(conn, "records", cur.lastrowid, f, at, length)
                self.large_fields.append(fields)
        self.large_pending.clear()

    def take_tail_record(self) -> bool:
        """At the end of the file: are the bytes after the last newline a whole
        record? Then queue them as the last line, unterminated."""
        buf = self.buf
        if not bytes(buf[-64:]).rstrip().endswith(b"}"):
            return False  # cheap: a whole JSON object ends with its brace
        with memoryview(buf) as view:
            fields = None
            if len(view) > LARGE_LINE_BYTES:
                try:
                    fields = self.lines.parse_large_line(view)
                except BadLine:
                    return False
                except NeedsText:
                    pass
            if fields is not None:
                self.large_pending.append((fields, None, self.line_no + 1, self.offset, len(view)))
            else:
                try:
                    raw, fields = self.lines.parse_line(view)
                except BadLine:
                    return False
                self.records.append((self.file_id, self.line_no + 1, self.offset, *fields, raw))
        n = len(buf)
        self.line_no += 1
        self.offset += n
        self.slice_bytes += n
        self.unterminated = n
        self.tail, self.buf = (self.tail + bytes(buf[-TAIL_BYTES:]))[-TAIL_BYTES:], bytearray()
        if self.large_pending:
            self.insert_large()
        return True

    def store(self) -> None:
        """Store the slice read so far with the offset that covers it (and
        commit when TXN_BYTES are pending)."""
        if not (self.records or self.bads or self.large_fields or self.large_bads
                or self.settled):
            return
        conn, records, bads = self.conn, self.records, self.bads
        facts = [r[3:-1] for r in records] + self.large_fields
        if self.session_id is None:
            self.session_id = next((r[_SESSION] for r in facts if r[_SESSION]), None)
        if self.head_hash is None:
            pos = self.f.tell()
            self.f.seek(0)
            head = self.f.read(min(HEAD_BYTES, self.offset))
            self.f.seek(pos)
            self.head_len, self.head_hash = len(head), digest_of(head)
        end = self.current_tail()
        self.writer.begin()
        insert_lines(conn, records, bads)
        if records and not self.large_fields:   # their kinds, from what was parsed
            record_kinds.count_stored(conn, self.file_id, self.stored_offset, self.offset,
                                      records, self.writer.run_at)
        conn.execute(ADVANCE_OFFSET_SQL, {
            "id": self.file_id, "offset": self.offset, "line_count": self.line_no,
            "unterminated": self.unterminated,
            "head_len": self.head_len, "head_hash": self.head_hash,
            "tail_len": len(end), "tail_hash": digest_of(end),
            "session_id": self.session_id, "now": utcnow(), **running_facts(facts)})
        self.stored_offset = self.offset
        bad_lines = len(bads) + self.large_bads
        self.summary.new_records += len(facts)
        self.summary.bad_lines += bad_lines
        self.summary.new_lines += len(facts) + bad_lines
        self.stored_any, self.settled = True, False
        n, self.records, self.bads, self.slice_bytes = self.slice_bytes, [], [], 0
        self.large_fields, self.large_bads = [], 0
        self.writer.maybe_commit(n)


def _mark_deleted(db, paths: list[str]) -> int:
    if not paths:
        return 0
    now = utcnow()
    n = 0
    with write_lock(db) as conn:
        for path in paths:
            cur = conn.execute(
                "UPDATE files SET deleted_at = ?, needs_derive = 1 "
                "WHERE path = ? AND deleted_at IS NULL", [now, path])
            n += cur.rowcount
    return n
