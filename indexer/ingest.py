"""Incremental, exactly-once ingest of transcript files.

Each file's new lines and its new offset commit in one ``BEGIN IMMEDIATE``
transaction, so a crash replays only uncommitted work; the unique key on
(file_id, byte_offset) is the second guard. Only ``\\n``-terminated lines are
consumed: a partial last line waits for its newline.

What a run does with each file, from a stat:
- unchanged (device, inode, size, mtime): nothing is read;
- grown, same inode, first and last ingested bytes unchanged: read from the offset;
- shrunk, or the first/last ingested bytes changed: rewritten, re-read from 0,
  its stale rows replaced in the same transaction as the first new ones;
- a new inode or a same-size touch: the whole ingested prefix is compared
  with the index; equal means appended-to (or restored), else rewritten;
- gone from a scanned folder: rows kept, ``deleted_at`` set.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable

from . import derive, discover
from .db import write_lock
from .lines import RECORD_FIELDS, BadLine, parse_line

READ_CHUNK = 1 << 20
BATCH_BYTES = 16 << 20
BATCH_LINES = 20_000
HEAD_BYTES = 1024
TAIL_BYTES = 4096


class SourceNotFound(Exception):
    """A SOURCE given to ingest does not exist and was never indexed."""


@dataclass
class Summary:
    files: int = 0            # transcript files looked at
    changed_files: int = 0    # files whose bytes were read
    skipped_files: int = 0    # .jsonl files that are not transcripts
    deleted_files: int = 0    # files newly found gone
    rewritten_files: int = 0  # files re-read from the start
    new_lines: int = 0
    new_records: int = 0
    bad_lines: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    errors: list = field(default_factory=list)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["seconds"] = round(self.seconds, 3)
        return d


def utcnow() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


INSERT_RECORD_SQL = (
    "INSERT INTO records (file_id, line_no, byte_offset, "
    + ", ".join(RECORD_FIELDS)
    + ", raw) VALUES (" + ", ".join("?" * (len(RECORD_FIELDS) + 4)) + ")"
)
INSERT_BAD_LINE_SQL = (
    "INSERT INTO bad_lines (file_id, line_no, byte_offset, error, raw) VALUES (?, ?, ?, ?, ?)"
)
# After a batch: how far the file is ingested, and what the bytes at its
# start and just before the offset hash to (checked at the next run).
ADVANCE_OFFSET_SQL = """
UPDATE files SET ingested_offset = :offset, line_count = :line_count,
  head_len = :head_len, head_hash = :head_hash, tail_len = :tail_len,
  tail_hash = :tail_hash, session_id = coalesce(session_id, :session_id),
  last_ingested_at = :now, needs_derive = needs_derive OR :changed
WHERE id = :id
""".strip()
# After the last batch: the stat the next run compares against.
RECORD_STAT_SQL = """
UPDATE files SET size = :size, mtime = :mtime, mtime_ns = :mtime_ns, dev = :dev,
  inode = :inode, deleted_at = NULL
WHERE id = :id
""".strip()
# The stored lines of a file in file order, to rebuild its bytes.
STORED_LINES_SQL = """
SELECT byte_offset, CAST(raw AS BLOB) FROM records WHERE file_id = :file_id
UNION ALL
SELECT byte_offset, raw FROM bad_lines WHERE file_id = :file_id
ORDER BY byte_offset
""".strip()


def stored_bytes(conn, file_id: int) -> Iterable[bytes]:
    """The file's ingested bytes, line by line, as the index holds them."""
    for _offset, raw in conn.execute(STORED_LINES_SQL, {"file_id": file_id}):
        yield bytes(raw) + b"\n"


def ingest(
    db,
    sources: list[str],
    progress: Callable[[int], None] | None = None,
    plan: Callable[[int], None] | None = None,
) -> Summary:
    """Bring the index up to date with ``sources`` (folders and/or files).

    ``plan(total_bytes)`` is called once with the bytes expected to be read;
    ``progress(n)`` after each batch with the bytes consumed.
    """
    started = time.monotonic()
    summary = Summary()
    conn = db.conn
    tracked = {row[1]: row for row in conn.execute("SELECT id, path FROM files")}

    candidates: dict[str, discover.Candidate] = {}
    scanned_roots: list[str] = []
    missing_files: list[str] = []
    for source in sources:
        path = os.path.abspath(source)
        if os.path.isdir(path):
            scanned_roots.append(path)
            for p in discover.walk(path):
                candidates[p] = discover.describe(p)
        elif os.path.isfile(path):
            candidates[path] = discover.describe(path)
        elif path in tracked:
            missing_files.append(path)
        elif any(t.startswith(path + os.sep) for t in tracked):
            scanned_roots.append(path)
        else:
            raise SourceNotFound(f"{source}: no such file or folder")

    work = []
    for path, cand in candidates.items():
        try:
            st = os.stat(path)
        except OSError:
            continue
        row = _file_row(conn, path)
        if row is None:
            verdict = discover.sniff(path)
            if verdict is None and not cand.named:
                continue
            if verdict == discover.EXECUTION_LOG or (
                    verdict == discover.OTHER and not cand.named):
                summary.skipped_files += 1
                continue
            row = _track(conn, cand, st)
        summary.files += 1
        work.append((row, st))

    plan and plan(sum(max(st.st_size - row["ingested_offset"], 0)
                      for row, st in work if not _unchanged(row, st)))
    changed_ids = []
    for row, st in work:
        try:
            if _ingest_file(conn, row, st, summary, progress):
                changed_ids.append(row["id"])
        except OSError as exc:
            summary.errors.append(f"{row['path']}: {exc.strerror or exc}")

    seen = set(candidates)
    gone = [p for p in missing_files]
    for root in scanned_roots:
        prefix = root.rstrip(os.sep) + os.sep
        gone += [p for p in tracked if p.startswith(prefix) and p not in seen]
    summary.deleted_files = _mark_deleted(conn, gone)

    derive.derive_pending(db)
    with write_lock(db) as c:
        c.execute("INSERT OR REPLACE INTO index_meta VALUES ('last_ingest_at', ?)", [utcnow()])
    summary.changed_files = len(changed_ids)
    summary.seconds = time.monotonic() - started
    return summary


def _file_row(conn, path):
    cur = conn.execute("SELECT * FROM files WHERE path = ?", [path])
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cur.description], row))


def _track(conn, cand: discover.Candidate, st) -> dict:
    with _immediate(conn):
        conn.execute(
            "INSERT OR IGNORE INTO files (path, kind, session_id, agent_id, project_dir, "
            "first_ingested_at) VALUES (?, ?, ?, ?, ?, ?)",
            [cand.path, cand.kind, cand.session_id, cand.agent_id, cand.project_dir, utcnow()],
        )
    return _file_row(conn, cand.path)


class _immediate:
    """BEGIN IMMEDIATE on a raw connection (see db.write_lock)."""

    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        from .db import _retry_locked
        _retry_locked(lambda: self.conn.execute("BEGIN IMMEDIATE"))
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


def _unchanged(row: dict, st) -> bool:
    return (
        row["inode"] == st.st_ino and row["dev"] == st.st_dev
        and row["size"] == st.st_size and row["mtime_ns"] == st.st_mtime_ns
        and row["deleted_at"] is None
    )


def _prefix_matches(conn, row: dict, f, whole: bool) -> bool:
    """Do the file's first ``ingested_offset`` bytes still say what we stored?"""
    offset = row["ingested_offset"]
    if offset == 0:
        return True
    if whole:
        h = hashlib.blake2b(digest_size=16)
        for line in stored_bytes(conn, row["id"]):
            h.update(line)
        f.seek(0)
        g = hashlib.blake2b(digest_size=16)
        remaining = offset
        while remaining:
            chunk = f.read(min(READ_CHUNK, remaining))
            if not chunk:
                return False
            g.update(chunk)
            remaining -= len(chunk)
        return h.digest() == g.digest()
    f.seek(0)
    if _digest(f.read(row["head_len"])) != row["head_hash"]:
        return False
    f.seek(offset - row["tail_len"])
    return _digest(f.read(row["tail_len"])) == row["tail_hash"]


def _ingest_file(conn, row: dict, st, summary: Summary, progress) -> bool:
    """Read what is new in one file. True if anything was stored or replaced."""
    if _unchanged(row, st):
        return False
    offset = row["ingested_offset"]
    with open(row["path"], "rb") as f:
        st = os.fstat(f.fileno())
        same_inode = row["inode"] == st.st_ino and row["dev"] == st.st_dev
        if st.st_size < offset:
            rewrite = True
        else:
            suspicious = (not same_inode) or row["deleted_at"] is not None or (
                st.st_size == row["size"] and st.st_mtime_ns != row["mtime_ns"])
            rewrite = not _prefix_matches(conn, row, f, whole=suspicious)
        if rewrite:
            offset, line_no = 0, 0
            summary.rewritten_files += 1
        else:
            line_no = row["line_count"]
        f.seek(offset)
        stored = _consume(conn, row, f, st, offset, line_no, rewrite, summary, progress)
    return stored or rewrite


def _consume(conn, row, f, st, offset, line_no, rewrite, summary, progress) -> bool:
    file_id = row["id"]
    session_id = row["session_id"]
    returned = row["deleted_at"] is not None  # back on disk: its session changes
    head_len, head_hash = row["head_len"], row["head_hash"]
    tail = b""
    if offset:
        f.seek(max(0, offset - TAIL_BYTES))
        tail = f.read(offset - max(0, offset - TAIL_BYTES))
        f.seek(offset)
    pending = b""
    records, bads = [], []
    batch_bytes = 0
    stored_any = False
    eof = False

    def flush(final: bool):
        nonlocal records, bads, batch_bytes, rewrite, stored_any, head_len, head_hash, session_id
        if not (records or bads or rewrite or final):
            return
        if session_id is None:
            session_id = next((r[3] for r in records if r[3]), None)
        if head_hash is None or rewrite:
            head = _head_bytes(f, offset)
            head_len, head_hash = len(head), _digest(head)
        with _immediate(conn):
            if rewrite:
                derive.forget_file(conn, file_id)
                conn.execute("DELETE FROM records WHERE file_id = ?", [file_id])
                conn.execute("DELETE FROM bad_lines WHERE file_id = ?", [file_id])
                conn.execute("UPDATE files SET rewrites = rewrites + 1 WHERE id = ?", [file_id])
            if records:
                conn.executemany(INSERT_RECORD_SQL, records)
            if bads:
                conn.executemany(INSERT_BAD_LINE_SQL, bads)
            conn.execute(ADVANCE_OFFSET_SQL, {
                "id": file_id, "offset": offset, "line_count": line_no,
                "head_len": head_len, "head_hash": head_hash,
                "tail_len": len(tail), "tail_hash": _digest(tail),
                "session_id": session_id, "now": utcnow(),
                "changed": 1 if (records or bads or rewrite or returned) else 0})
            if final:
                conn.execute(RECORD_STAT_SQL, {
                    "id": file_id, "size": st.st_size, "mtime": _iso(st.st_mtime),
                    "mtime_ns": st.st_mtime_ns, "dev": st.st_dev, "inode": st.st_ino})
        stored_any = stored_any or bool(records or bads) or rewrite
        summary.new_records += len(records)
        summary.bad_lines += len(bads)
        summary.new_lines += len(records) + len(bads)
        if progress:
            progress(batch_bytes)
        records, bads, batch_bytes, rewrite = [], [], 0, False

    while not eof:
        chunk = f.read(READ_CHUNK)
        if not chunk:
            eof = True
            break
        summary.bytes_read += len(chunk)
        data = pending + chunk if pending else chunk
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            line = data[start:nl]
            line_no += 1
            try:
                raw, fields = parse_line(line)
                records.append((file_id, line_no, offset, *fields, raw))
            except BadLine as exc:
                bads.append((file_id, line_no, offset, str(exc), line))
            consumed = nl + 1 - start
            offset += consumed
            batch_bytes += consumed
            start = nl + 1
            if batch_bytes >= BATCH_BYTES or len(records) + len(bads) >= BATCH_LINES:
                tail = (tail + data[max(0, start - TAIL_BYTES):start])[-TAIL_BYTES:]
                flush(False)
                data, start = data[start:], 0
        tail = (tail + data[max(0, start - TAIL_BYTES):start])[-TAIL_BYTES:]
        pending = data[start:]
    flush(True)
    return stored_any


def _head_bytes(f, offset_now: int) -> bytes:
    """The first bytes of the file, up to what has been consumed so far."""
    pos = f.tell()
    f.seek(0)
    head = f.read(min(HEAD_BYTES, offset_now))
    f.seek(pos)
    return head


def _mark_deleted(conn, paths: list[str]) -> int:
    if not paths:
        return 0
    now = utcnow()
    n = 0
    with _immediate(conn):
        for path in paths:
            cur = conn.execute(
                "UPDATE files SET deleted_at = ?, needs_derive = 1 "
                "WHERE path = ? AND deleted_at IS NULL", [now, path])
            n += cur.rowcount
    return n
