"""A file's generations, and its bytes as the index holds them.

Every rewrite of a file (it shrank, or the bytes already ingested changed)
starts a new generation; the first is 1. The current generation's lines are
in ``records`` and ``bad_lines``, which every view reads. ``supersede`` moves
them, inside the transaction that replaces them, to ``superseded_lines``,
with a ``superseded_generations`` row saying when and why; so a rewrite
loses nothing, and ``generation_bytes`` rebuilds any generation byte for
byte (each line, its ``\\n`` unless it was an unterminated last record, then
the pending tail).
"""

from __future__ import annotations

import json

from indexer.sql import dict_rows
from indexer.transcripts.digests import sha256

TYPE_CHECKING = False  # typing costs start-up time
if TYPE_CHECKING:
    from typing import Iterable

# The current generation's lines in file order, as bytes.
STORED_LINES_SQL = """
SELECT byte_offset, CAST(raw AS BLOB) FROM records WHERE file_id = :file_id
UNION ALL
SELECT byte_offset, raw FROM bad_lines WHERE file_id = :file_id
ORDER BY byte_offset
""".strip()
# How the current generation ends: where its unterminated last record starts
# (if unterminated_tail > 0) and the bytes after its last line.
FILE_END_SQL = """
SELECT ingested_offset - unterminated_tail, unterminated_tail, pending_tail
FROM files WHERE id = :file_id
""".strip()
# A superseded generation's lines in file order, and how it ended.
SUPERSEDED_LINES_SQL = """
SELECT byte_offset, CAST(raw AS BLOB) FROM superseded_lines
WHERE file_id = :file_id AND generation = :generation
ORDER BY byte_offset
""".strip()
SUPERSEDED_END_SQL = """
SELECT bytes - coalesce(length(pending_tail), 0) - unterminated_tail, unterminated_tail,
  pending_tail
FROM superseded_generations WHERE file_id = :file_id AND generation = :generation
""".strip()
# The file's current generation number, and those kept superseded.
CURRENT_GENERATION_SQL = "SELECT generation FROM files WHERE id = :file_id"
KEPT_GENERATIONS_SQL = """
SELECT generation FROM superseded_generations WHERE file_id = :file_id
UNION SELECT generation FROM files WHERE id = :file_id
ORDER BY 1
""".strip()

# The row of the generation being superseded: the file's current row of the
# file_generations view (views.py), its sha256 and its end as files holds it.
SUPERSEDE_GENERATION_SQL = """
INSERT INTO superseded_generations (file_id, generation, started_at, superseded_at, reason,
  lines, bytes, sha256, mtime, unterminated_tail, pending_tail)
SELECT g.file_id, g.generation, g.started_at, :now, :reason, g.lines, :bytes, :sha256,
  g.mtime, f.unterminated_tail, f.pending_tail
FROM file_generations g JOIN files f ON f.id = g.file_id
WHERE g.file_id = :file_id AND g.current
""".strip()
# Its lines, copied before records and bad_lines lose them (raw keeps its
# storage class: TEXT for a record, BLOB for a bad line).
SUPERSEDE_LINES_SQL = """
INSERT INTO superseded_lines (file_id, generation, line_no, byte_offset, error, raw)
SELECT r.file_id, f.generation, r.line_no, r.byte_offset, NULL, r.raw
FROM records r JOIN files f ON f.id = r.file_id WHERE r.file_id = :file_id
UNION ALL
SELECT b.file_id, f.generation, b.line_no, b.byte_offset, b.error, b.raw
FROM bad_lines b JOIN files f ON f.id = b.file_id WHERE b.file_id = :file_id
""".strip()

# What an answer was computed from, so that a reader can tell when it is
# stale: each file's path, its current generation and how far it was read
# (ingested_offset: the bytes of that generation in the index).
FILE_REVISIONS_SQL = """
SELECT id AS file_id, path, generation, ingested_offset FROM files
WHERE id IN (SELECT value FROM json_each(:file_ids)) ORDER BY id
""".strip()
# A record's file, and the record's own byte offset in it.
RECORD_FILES_SQL = """
SELECT id AS record_id, file_id, byte_offset FROM records
WHERE id IN (SELECT value FROM json_each(:record_ids))
""".strip()
# The whole index, for an answer summed over it: the last ingest, the
# highest record id, the files and the bytes read of them (any ingest that
# reads a byte changes it).
INDEX_REVISION_SQL = """
SELECT (SELECT value FROM index_meta WHERE key = 'last_ingest_at') AS last_ingest_at,
  (SELECT max(id) FROM records) AS max_record_id,
  count(*) AS files, coalesce(sum(ingested_offset), 0) AS ingested_bytes
FROM files
""".strip()


class UnknownGeneration(Exception):
    """The index holds no such generation of the file."""


def _rebuild(rows, end) -> Iterable[bytes]:
    unterminated_at, unterminated, pending = end
    for offset, raw in rows:
        raw = bytes(raw)
        yield raw if unterminated and offset == unterminated_at else raw + b"\n"
    if pending:
        yield bytes(pending)


def stored_bytes(conn, file_id: int, *, with_pending: bool = False) -> Iterable[bytes]:
    """The current generation's ingested bytes, line by line (the first
    ``ingested_offset`` bytes of the file); with ``with_pending``, then the
    unterminated tail last seen after them."""
    at, unterminated, pending = conn.execute(FILE_END_SQL, {"file_id": file_id}).fetchone()
    rows = conn.execute(STORED_LINES_SQL, {"file_id": file_id})
    return _rebuild(rows, (at, unterminated, pending if with_pending else None))


def generations(conn, file_id: int) -> list[int]:
    """The numbers of the file's generations the index holds, oldest first."""
    return [g for (g,) in conn.execute(KEPT_GENERATIONS_SQL, {"file_id": file_id})]


def generation_bytes(conn, file_id: int, generation: int | None = None) -> Iterable[bytes]:
    """A generation's bytes as last seen (the current one by default), piece
    by piece. Raises UnknownGeneration when the index does not hold it."""
    row = conn.execute(CURRENT_GENERATION_SQL, {"file_id": file_id}).fetchone()
    if row is None:
        raise UnknownGeneration(f"no file {file_id} in the index")
    if generation is None or generation == row[0]:
        return stored_bytes(conn, file_id, with_pending=True)
    params = {"file_id": file_id, "generation": generation}
    end = conn.execute(SUPERSEDED_END_SQL, params).fetchone()
    if end is None:
        raise UnknownGeneration(f"file {file_id} has no generation {generation} in the index")
    return _rebuild(conn.execute(SUPERSEDED_LINES_SQL, params), end)


def file_revisions(conn, file_ids) -> list[dict]:
    """[{file_id, path, generation, ingested_offset}] of these files."""
    return dict_rows(conn, FILE_REVISIONS_SQL, {"file_ids": json.dumps(sorted(set(file_ids)))})


def record_files(conn, record_ids) -> dict[int, tuple[int, int]]:
    """{record id: (file id, byte offset)} of these records."""
    return {rid: (fid, at) for rid, fid, at in conn.execute(
        RECORD_FILES_SQL, {"record_ids": json.dumps(list(record_ids))})}


def index_revision(conn) -> dict:
    """{last_ingest_at, max_record_id, files, ingested_bytes} of the index."""
    return dict_rows(conn, INDEX_REVISION_SQL)[0]


def supersede(conn, file_id: int, reason: str, now: str) -> None:
    """Keep the file's current generation as superseded (inside the caller's
    transaction, before its lines are deleted): its row, its sha256 and its
    lines. ``reason``: shrunk or changed."""
    digest, size = sha256(), 0
    for piece in stored_bytes(conn, file_id, with_pending=True):
        digest.update(piece)
        size += len(piece)
    conn.execute(SUPERSEDE_GENERATION_SQL, {
        "file_id": file_id, "now": now, "reason": reason, "bytes": size,
        "sha256": digest.hexdigest()})
    conn.execute(SUPERSEDE_LINES_SQL, {"file_id": file_id})
