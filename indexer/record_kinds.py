"""Format drift: which record kinds the transcripts hold, and which are new.

A kind is a record's ``type``, with a system record's ``subtype`` or an
attachment record's ``attachment.type`` (``system/away_summary``,
``attachment/hook_success``). The ``record_types`` view (views.py) lists
every kind with its count, its first and last Claude Code version and time,
whether the index models it (views.MODELED_KINDS) and whether the most
recent ingest run brought it (``new``).

Grouping the records table (1M rows, 2 GB of raw JSON) takes seconds, so the
counts are kept in small tables, brought up to date by the writer that stored
the records: at the end of every ingest run (``after_ingest``) and inside
every session-store append (``count_files``):

- ``record_kind_scans``: per transcript file, how far its records are
  counted: the file's generation and ingested_offset then, the last record
  counted (byte_offset and id), and the version and timestamp the next
  record without its own inherits;
- ``record_kind_files``: per file and kind, its records, lowest and highest
  version, first and last timestamp, and when the index last stored one;
- ``record_kinds``: per kind, its first sighting: the ingest run
  (``index_meta.ingest_runs``, one more at the end of every run) and the time.

Records past the last one counted are counted in file order; a rewritten
file (a new generation) or one whose last counted record went (an
unterminated last line taken back and read again) is counted again from its
first record, so the counts are those of the records the index holds. A
record without its own ``version`` or ``timestamp`` (metadata records carry
none) counts those of the nearest earlier record of its file that has one.
"""

from __future__ import annotations

import re

from .views import TRANSCRIPT_KINDS

# Records counted per transaction at the end of an ingest run (the write
# lock is let go between two), as ingest commits its slices.
CHUNK_RECORDS = 50_000

# Transcript files whose records changed since they were last counted.
PENDING_FILES_SQL = f"""
SELECT f.id FROM files f LEFT JOIN record_kind_scans s ON s.file_id = f.id
WHERE f.kind IN {TRANSCRIPT_KINDS}
  AND (s.file_id IS NULL OR s.generation IS NOT f.generation
       OR s.ingested_offset IS NOT f.ingested_offset)
ORDER BY f.id
""".strip()
# A file as it is now, and how far its records were counted.
FILE_SQL = f"SELECT generation, ingested_offset FROM files WHERE id = ? AND kind IN {TRANSCRIPT_KINDS}"
SCAN_SQL = """
SELECT generation, ingested_offset, last_offset, last_record_id, version, timestamp
FROM record_kind_scans WHERE file_id = ?
""".strip()
# The id of the record at a byte offset (is the last one counted still there?).
RECORD_AT_SQL = "SELECT id FROM records WHERE file_id = ? AND byte_offset = ?"
# The records after a byte offset, in file order, with what their kind is
# made of. raw is read for attachments only (NaN and the like are not JSON
# to SQLite: their attachment type is unknown).
NEW_RECORDS_SQL = """
SELECT id, byte_offset, type, subtype,
  CASE WHEN type = 'attachment' AND json_valid(raw) THEN raw ->> '$.attachment.type' END,
  version, timestamp
FROM records WHERE file_id = ? AND byte_offset > ? ORDER BY byte_offset
""".strip()
# Adds a batch of one file's records of one kind to its row.
ADD_FILE_KIND_SQL = """
INSERT INTO record_kind_files (file_id, type, subtype, records, first_version_key,
  last_version_key, first_timestamp, last_timestamp, last_ingested_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (file_id, type, subtype) DO UPDATE SET
  records = records + excluded.records,
  first_version_key = coalesce(min(first_version_key, excluded.first_version_key),
                               first_version_key, excluded.first_version_key),
  last_version_key = coalesce(max(last_version_key, excluded.last_version_key),
                              last_version_key, excluded.last_version_key),
  first_timestamp = coalesce(min(first_timestamp, excluded.first_timestamp),
                             first_timestamp, excluded.first_timestamp),
  last_timestamp = coalesce(max(last_timestamp, excluded.last_timestamp),
                            last_timestamp, excluded.last_timestamp),
  last_ingested_at = excluded.last_ingested_at
""".strip()
# A kind's first sighting; later ones change nothing.
SEEN_KIND_SQL = """
INSERT INTO record_kinds (type, subtype, first_run, first_ingested_at) VALUES (?, ?, ?, ?)
ON CONFLICT (type, subtype) DO NOTHING
""".strip()
SAVE_SCAN_SQL = """
INSERT OR REPLACE INTO record_kind_scans (file_id, generation, ingested_offset, last_offset,
  last_record_id, version, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?)
""".strip()
FORGET_FILE_SQL = (
    "DELETE FROM record_kind_files WHERE file_id = ?",
    "DELETE FROM record_kind_scans WHERE file_id = ?",
)
# The ingest runs that have ended (0 before the first).
RUNS_SQL = "SELECT CAST(value AS INTEGER) FROM index_meta WHERE key = 'ingest_runs'"
BUMP_RUNS_SQL = """
INSERT INTO index_meta (key, value) VALUES ('ingest_runs', 1)
ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1
""".strip()

# The kinds the most recent ingest run brought (or a store append since),
# most records first.
NEW_KINDS_SQL = "SELECT kind, records FROM record_types WHERE new ORDER BY records DESC, kind"
# session-index record-types: the view, newest kinds first; :new 1 for the
# new ones only; :since those first stored at or after it ('' for all).
LIST_SQL = """
SELECT * FROM record_types
WHERE (:new = 0 OR new) AND coalesce(first_ingested_at, '') >= :since
ORDER BY first_ingested_at IS NULL, first_ingested_at DESC, records DESC, kind
""".strip()

_NUMBER = re.compile(r"[0-9]+")


def version_key(version: str) -> str:
    """A key that sorts Claude Code versions number by number (2.1.100 after
    2.1.88), then a space, then the version as written."""
    return _NUMBER.sub(lambda m: m.group().zfill(12), version).replace(" ", "_") + " " + version


def kind_of(type_, subtype, attachment_type) -> tuple[str, str]:
    """(type, subtype) as the tables key them: '' for none; the subtype is a
    system record's subtype or an attachment's type, else ''."""
    if type_ == "system":
        sub = subtype or ""
    elif type_ == "attachment":
        sub = "" if attachment_type is None else str(attachment_type)
    else:
        sub = ""
    return (type_ or "", sub)


def current_run(conn) -> int:
    row = conn.execute(RUNS_SQL).fetchone()
    return row[0] if row and row[0] is not None else 0


def count_file(conn, file_id: int, *, run: int | None, now: str | None) -> int:
    """Count the records of one file not counted yet (all of them again if
    it was rewritten or its last counted record went), inside the caller's
    write transaction. Kinds never seen before are noted as first seen in
    ``run`` at ``now`` (None: already in the index before it counted kinds).
    Returns the records counted."""
    now_file = conn.execute(FILE_SQL, [file_id]).fetchone()
    if now_file is None:   # gone (a deleted store copy), or not a transcript
        forget_file(conn, file_id)
        return 0
    generation, ingested_offset = now_file
    scan = conn.execute(SCAN_SQL, [file_id]).fetchone()
    if scan is not None and scan[0] == generation and scan[1] == ingested_offset:
        return 0   # another writer counted it meanwhile
    after, last_id, version, timestamp = -1, None, None, None
    if scan is not None:
        same = scan[0] == generation and (scan[3] is None or conn.execute(
            RECORD_AT_SQL, [file_id, scan[2]]).fetchone() == (scan[3],))
        if same:
            after, last_id, version, timestamp = scan[2], scan[3], scan[4], scan[5]
        else:
            for sql in FORGET_FILE_SQL:
                conn.execute(sql, [file_id])
    kinds: dict[tuple[str, str], list] = {}
    keys: dict[str, str] = {}   # version -> its key, computed once per file
    n = 0
    vkey = version_key(version) if version else None
    for rid, offset, type_, subtype, attachment_type, v, ts in conn.execute(
            NEW_RECORDS_SQL, [file_id, after]):
        n += 1
        after, last_id = offset, rid
        if v and v != version:
            version = v
            vkey = keys.get(v)
            if vkey is None:
                vkey = keys[v] = version_key(v)
        if ts:
            timestamp = ts
        kind = kind_of(type_, subtype, attachment_type)
        k = kinds.get(kind)
        if k is None:
            kinds[kind] = [1, vkey, vkey, timestamp, timestamp]
            continue
        k[0] += 1
        if vkey is not None:
            if k[1] is None or vkey < k[1]:
                k[1] = vkey
            if k[2] is None or vkey > k[2]:
                k[2] = vkey
        if timestamp is not None:
            if k[3] is None or timestamp < k[3]:
                k[3] = timestamp
            if k[4] is None or timestamp > k[4]:
                k[4] = timestamp
    conn.executemany(ADD_FILE_KIND_SQL, [
        (file_id, t, s, c, fk, lk, ft, lt, now) for (t, s), (c, fk, lk, ft, lt) in kinds.items()])
    conn.executemany(SEEN_KIND_SQL, [(t, s, run, now) for t, s in kinds])
    conn.execute(SAVE_SCAN_SQL, [file_id, generation, ingested_offset, after, last_id,
                                 version, timestamp])
    return n


def count_files(conn, file_ids, *, run: int | None = None, now: str | None = None) -> int:
    """``count_file`` for each of ``file_ids`` in the caller's transaction:
    what a session-store append calls. A kind first seen here is new until
    the next ingest run ends (``run`` defaults to the current one)."""
    if now is None:
        from .ingest import utcnow
        now = utcnow()
    if run is None:
        run = current_run(conn)
    return sum(count_file(conn, file_id, run=run, now=now) for file_id in file_ids)


def after_ingest(db) -> None:
    """At the end of an ingest run: count the records of every file that
    changed, a transaction per CHUNK_RECORDS or so, and end the run (one
    more ``ingest_runs``). Kinds first seen now are that run's."""
    from .db import write_lock
    from .ingest import utcnow

    pending = [file_id for (file_id,) in db.conn.execute(PENDING_FILES_SQL)][::-1]
    while True:
        with write_lock(db) as conn:
            run, now, counted = current_run(conn) + 1, utcnow(), 0
            while pending and counted < CHUNK_RECORDS:
                counted += count_file(conn, pending.pop(), run=run, now=now)
            if not pending:
                conn.execute(BUMP_RUNS_SQL)
                return


def backfill(conn) -> None:
    """Count every transcript's records, as kinds already in the index
    (never new): what migration m023 does to an existing index."""
    for (file_id,) in conn.execute(PENDING_FILES_SQL).fetchall():
        count_file(conn, file_id, run=None, now=None)


def forget_file(conn, file_id: int) -> None:
    """A file's rows go (a deleted store copy); its kinds' first sightings stay."""
    for sql in FORGET_FILE_SQL:
        conn.execute(sql, [file_id])


def new_kinds(conn) -> list[tuple[str, int]]:
    """(kind, records) of the kinds the most recent ingest run brought."""
    return [tuple(row) for row in conn.execute(NEW_KINDS_SQL)]


def describe(kinds) -> str:
    """``mode (3), system/away_summary (1)``, or ``none``."""
    return ", ".join(f"{kind} ({n:,})" for kind, n in kinds) or "none"


def listing(db, *, new: bool = False, since: str | None = None) -> list[dict]:
    """The record_types rows, newest kinds first (session-index record-types)."""
    from .db import dict_rows

    return dict_rows(db.conn, LIST_SQL, {"new": 1 if new else 0, "since": since or ""})
