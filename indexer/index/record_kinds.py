"""Format drift: which record kinds the transcripts hold, and which are new.

A kind is a record's ``type``, with a system record's ``subtype`` or an
attachment record's ``attachment.type`` (``system/away_summary``,
``attachment/hook_success``). The ``record_types`` view (views.py) lists
every kind with its count, its first and last Claude Code version and time,
whether the index models it (records.MODELED_KINDS) and whether the most
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
- ``record_kinds``: per kind, the sums of its record_kind_files rows (what
  the view reads: a few rows, however large the index), added to as rows are
  counted and computed again from them when a file's rows go; and its first
  sighting: the ingest run (``index_meta.ingest_runs``, one more at the end
  of every run) and the time.

Records past the last one counted are counted in file order; a rewritten
file (a new generation) or one whose last counted record went (an
unterminated last line taken back and read again) is counted again from its
first record, so the counts are those of the records the index holds. A
record without its own ``version`` or ``timestamp`` (metadata records carry
none) counts those of the nearest earlier record of its file that has one.
"""

from __future__ import annotations

import json
import re
import time

from indexer.transcripts.records import RECORD_FIELDS
from indexer.chain.definitions import TRANSCRIPT_KINDS
from indexer.index.clock import utcnow
from indexer.sql import dict_rows, write_lock

# Positions in a row as ingest inserts it (file_id, line_no, byte_offset,
# then the RECORD_FIELDS, then raw).
_TYPE, _SUBTYPE, _VERSION, _TIMESTAMP = (
    3 + RECORD_FIELDS.index(k) for k in ("type", "subtype", "version", "timestamp"))

# Records counted per transaction at the end of an ingest run (the write
# lock is let go between two), as ingest commits its slices.
CHUNK_RECORDS = 50_000
# Files counted with one query each (count_many).
COUNT_FILES = 500

# Transcript files whose records changed since they were last counted.
PENDING_FILES_SQL = f"""
SELECT f.id FROM files f
LEFT JOIN record_kind_scans s ON s.file_id = f.id
WHERE f.kind IN {TRANSCRIPT_KINDS}
  AND (s.file_id IS NULL OR s.generation IS NOT f.generation
       OR s.ingested_offset IS NOT f.ingested_offset)
ORDER BY f.id
""".strip()
# A file as it is now, and how far its records were counted.
FILE_SQL = (f"SELECT generation, ingested_offset FROM files "
            f"WHERE id = ? AND kind IN {TRANSCRIPT_KINDS}")
SCAN_SQL = """
SELECT generation, ingested_offset, last_offset, last_record_id, version, timestamp
FROM record_kind_scans WHERE file_id = ?
""".strip()
# The id of the record at a byte offset (is the last one counted still there?).
RECORD_AT_SQL = "SELECT id FROM records WHERE file_id = ? AND byte_offset = ?"
# The records after a byte offset, in file order, each with its kind as the
# tables key it: (type, subtype), '' for none, the subtype a system record's
# subtype or an attachment's attachment.type, else ''. raw is read for
# attachments only (a line SQLite does not take for JSON, with NaN say, has
# no attachment type).
NEW_RECORDS_SQL = """
SELECT id, byte_offset, coalesce(type, ''),
  CASE type WHEN 'system' THEN coalesce(subtype, '')
    WHEN 'attachment' THEN coalesce(CASE WHEN json_valid(raw)
                                    THEN CAST(raw ->> '$.attachment.type' AS TEXT) END, '')
    ELSE '' END,
  version, timestamp
FROM records WHERE file_id = ? AND byte_offset > ? ORDER BY byte_offset
""".strip()
# count_file's first reads for a batch of files at once (count_many; :ids a
# JSON array): per file, in the array's order, its generation and
# ingested_offset now (NULL: gone, or not a transcript), whether it was
# counted before, how far (SCAN_SQL's columns), and whether the last record
# counted is still there (RECORD_AT_SQL; 1 when none was).
FILES_STATE_SQL = f"""
SELECT j.value, f.generation, f.ingested_offset, s.file_id IS NOT NULL,
  s.generation, s.ingested_offset, s.last_offset, s.last_record_id, s.version, s.timestamp,
  s.last_record_id IS NULL OR EXISTS (
    SELECT 1 FROM records r WHERE r.file_id = j.value AND r.byte_offset = s.last_offset
      AND r.id = s.last_record_id)
FROM json_each(:ids) j
LEFT JOIN files f ON f.id = j.value AND f.kind IN {TRANSCRIPT_KINDS}
LEFT JOIN record_kind_scans s ON s.file_id = j.value
ORDER BY j.key
""".strip()
# The kinds a batch of files have rows for (FILE_KINDS_SQL, :ids a JSON array).
FILES_KINDS_SQL = """
SELECT file_id, type, subtype FROM record_kind_files
WHERE file_id IN (SELECT value FROM json_each(:ids))
""".strip()
# NEW_RECORDS_SQL for a batch of files (:files a JSON array of [file id,
# byte offset]), file by file in the array's order, each file's in file order.
NEW_RECORDS_MANY_SQL = """
SELECT r.file_id, r.id, r.byte_offset, coalesce(r.type, ''),
  CASE r.type WHEN 'system' THEN coalesce(r.subtype, '')
    WHEN 'attachment' THEN coalesce(CASE WHEN json_valid(r.raw)
                                    THEN CAST(r.raw ->> '$.attachment.type' AS TEXT) END, '')
    ELSE '' END,
  r.version, r.timestamp
FROM json_each(:files) j CROSS JOIN records r
  ON r.file_id = j.value ->> 0 AND r.byte_offset > j.value ->> 1
ORDER BY j.key, r.byte_offset
""".strip()
# An attachment's type, as NEW_RECORDS_SQL reads it (raw bound twice).
ATTACHMENT_TYPE_SQL = "SELECT CASE WHEN json_valid(?) THEN CAST(? ->> '$.attachment.type' AS TEXT) END"
# The running facts of a kind, and how a batch's fold into them.
_FACTS = ("records", "first_version_key", "last_version_key", "first_timestamp",
          "last_timestamp", "last_ingested_at")
_MERGE = ",\n  ".join(
    f"{c} = {c} + excluded.{c}" if c == "records" else
    f"{c} = excluded.{c}" if c == "last_ingested_at" else
    f"{c} = coalesce({'min' if c.startswith('first') else 'max'}({c}, excluded.{c}), "
    f"{c}, excluded.{c})"
    for c in _FACTS)
# Adds a batch of one file's records of one kind to its row.
ADD_FILE_KIND_SQL = f"""
INSERT INTO record_kind_files (file_id, type, subtype, {", ".join(_FACTS)})
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (file_id, type, subtype) DO UPDATE SET
  {_MERGE}
""".strip()
# Adds the same batch to the kind's sums (files: 1 when the file had none of
# it before); a kind never seen before is noted with its first sighting.
ADD_KIND_SQL = f"""
INSERT INTO record_kinds (type, subtype, first_run, first_ingested_at, files, {", ".join(_FACTS)})
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (type, subtype) DO UPDATE SET
  files = files + excluded.files,
  {_MERGE}
""".strip()
# A kind's sums computed again from record_kind_files (a file's rows went).
RECOUNT_KIND_SQL = """
UPDATE record_kinds SET (records, files, first_version_key, last_version_key,
    first_timestamp, last_timestamp, last_ingested_at) = (
  SELECT coalesce(sum(f.records), 0), count(*), min(f.first_version_key),
    max(f.last_version_key), min(f.first_timestamp), max(f.last_timestamp),
    max(f.last_ingested_at)
  FROM record_kind_files f WHERE f.type = :type AND f.subtype = :subtype)
WHERE type = :type AND subtype = :subtype
""".strip()
# The kinds a file has rows for.
FILE_KINDS_SQL = "SELECT type, subtype FROM record_kind_files WHERE file_id = ?"
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
    held: set = set()   # the kinds the file has rows for
    if scan is not None:
        same = scan[0] == generation and (scan[3] is None or conn.execute(
            RECORD_AT_SQL, [file_id, scan[2]]).fetchone() == (scan[3],))
        if same:
            after, last_id, version, timestamp = scan[2], scan[3], scan[4], scan[5]
            held = {tuple(k) for k in conn.execute(FILE_KINDS_SQL, [file_id])}
        else:
            forget_file(conn, file_id)
    kinds: dict[tuple[str, str], list] = {}
    n, after, last_id, version, timestamp = _fold(
        kinds, conn.execute(NEW_RECORDS_SQL, [file_id, after]), after, last_id, version,
        timestamp)
    _save(conn, file_id, kinds, held, run, now,
          (generation, ingested_offset, after, last_id, version, timestamp))
    return n


def count_many(conn, file_ids: list[int], *, run: int | None, now: str | None,
               limit: int | None = None) -> tuple[int, int]:
    """count_file for each of ``file_ids`` in turn (inside the caller's write
    transaction), with a query each for all of them rather than several a
    file (a fleet's central counts thousands of files a minute, a few
    records each): the same rows written. A file counted again from its
    first record (rewritten, or its last counted record went) or gone is
    left to count_file. With ``limit``, no file is begun once that many
    records are counted. Returns (records counted, files done: the first
    that many of ``file_ids``)."""
    state = conn.execute(FILES_STATE_SQL, {"ids": json.dumps(file_ids)}).fetchall()
    plain = []   # (file id, generation, ingested_offset, after, last id, version, timestamp)
    for (file_id, generation, offset, scanned, s_generation, s_offset, after, last_id,
         version, timestamp, there) in state:
        if generation is None or scanned and (s_generation != generation or not there):
            plain.append((file_id, None))   # gone, or counted again whole: count_file
        elif scanned and s_offset == offset:
            plain.append((file_id, False))   # counted meanwhile
        elif scanned:
            plain.append((file_id, (generation, offset, after, last_id, version, timestamp)))
        else:
            plain.append((file_id, (generation, offset, -1, None, None, None)))
    counted_before = [row[0] for row in state if row[3]]
    held: dict[int, set] = {}
    if counted_before:
        for file_id, t, st in conn.execute(FILES_KINDS_SQL, {"ids": json.dumps(counted_before)}):
            held.setdefault(file_id, set()).add((t, st))
    rows = iter(conn.execute(NEW_RECORDS_MANY_SQL, {"files": json.dumps(
        [[i, todo[2]] for i, todo in plain if todo])}))
    row = next(rows, None)
    n = done = 0
    file_kinds, kinds_rows, scans = [], [], []
    for file_id, todo in plain:
        if limit is not None and n >= limit:
            break
        done += 1
        if todo is None:
            n += count_file(conn, file_id, run=run, now=now)
            continue
        if todo is False:
            continue
        generation, offset, after, last_id, version, timestamp = todo

        def own():
            nonlocal row
            while row is not None and row[0] == file_id:
                yield row[1:]
                row = next(rows, None)

        kinds: dict[tuple[str, str], list] = {}
        k, after, last_id, version, timestamp = _fold(kinds, own(), after, last_id, version,
                                                     timestamp)
        n += k
        mine = held.get(file_id, set())
        file_kinds += [(file_id, t, st, *facts, now) for (t, st), facts in kinds.items()]
        kinds_rows += [(t, st, run, now, 0 if (t, st) in mine else 1, *facts, now)
                       for (t, st), facts in kinds.items()]
        scans.append((file_id, generation, offset, after, last_id, version, timestamp))
    conn.executemany(ADD_FILE_KIND_SQL, file_kinds)
    conn.executemany(ADD_KIND_SQL, kinds_rows)
    conn.executemany(SAVE_SCAN_SQL, scans)
    return n, done


def _fold(kinds: dict, rows, after, last_id, version, timestamp):
    """Add records ((id, byte_offset, type, subtype, version, timestamp), in
    file order, as NEW_RECORDS_SQL gives them) to ``kinds``: (type, subtype)
    -> [records, lowest version key, highest, first timestamp, last]. A
    record without a version or timestamp counts the last one before it.
    Returns (records, the last one's byte_offset and id, version, timestamp)."""
    keys: dict[str, str] = {}   # version -> its key, computed once
    vkey = version_key(version) if version else None
    n = 0
    for rid, offset, type_, subtype, v, ts in rows:
        n += 1
        after, last_id = offset, rid
        if v and v != version:
            version = v
            vkey = keys.get(v)
            if vkey is None:
                vkey = keys[v] = version_key(v)
        if ts:
            timestamp = ts
        k = kinds.get((type_, subtype))
        if k is None:
            kinds[type_, subtype] = [1, vkey, vkey, timestamp, timestamp]
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
    return n, after, last_id, version, timestamp


def _save(conn, file_id: int, kinds: dict, held: set, run, now, scan: tuple) -> None:
    """Write a file's counted kinds and how far it is counted (``scan``:
    generation, ingested_offset, last byte_offset, last id, version, timestamp)."""
    conn.executemany(ADD_FILE_KIND_SQL, [
        (file_id, t, s, *facts, now) for (t, s), facts in kinds.items()])
    conn.executemany(ADD_KIND_SQL, [
        (t, s, run, now, 0 if (t, s) in held else 1, *facts, now)
        for (t, s), facts in kinds.items()])
    conn.execute(SAVE_SCAN_SQL, [file_id, *scan])


def fold_new(conn, records) -> list:
    """A new file's ``records`` (rows as ingest inserts them) folded as
    count_stored folds them, in a form JSON keeps: its ``folded`` argument.
    ``conn`` reads attachments' types (any connection: it reads no table)."""
    kinds: dict[tuple[str, str], list] = {}
    n, last_offset, _, version, timestamp = _fold(
        kinds, _as_scanned(conn, records), -1, None, None, None)
    return [n, last_offset, version, timestamp, [[*k, *v] for k, v in kinds.items()]]


def count_stored(conn, file_id: int, stored_offset: int, new_offset: int, records,
                 now: str, folded: list | None = None) -> bool:
    """What ingest calls for a slice of lines it has just inserted (inside
    its transaction, before the file's new offset is written): count the
    slice's ``records`` (rows as ingest inserts them: file_id, line_no,
    byte_offset, the RECORD_FIELDS, raw) from what ingest parsed, without
    reading them back, when the file is counted exactly up to the slice
    (``stored_offset``: the file's ingested_offset before it). False, and
    nothing written, otherwise: after_ingest counts the file then. With
    ``folded`` (fold_new of a new file's first lines, done elsewhere) in
    place of ``records``, only a file with nothing counted yet is counted."""
    row = conn.execute(FILE_SQL, [file_id]).fetchone()
    if row is None or row[1] != stored_offset:
        return False
    generation = row[0]
    scan = conn.execute(SCAN_SQL, [file_id]).fetchone()
    if scan is None:
        if stored_offset != 0:
            return False
        after, last_id, version, timestamp, held = -1, None, None, None, set()
    else:
        if scan[0] != generation or scan[1] != stored_offset or (
                scan[3] is not None
                and conn.execute(RECORD_AT_SQL, [file_id, scan[2]]).fetchone() != (scan[3],)):
            return False
        after, last_id, version, timestamp = scan[2], scan[3], scan[4], scan[5]
        held = {tuple(k) for k in conn.execute(FILE_KINDS_SQL, [file_id])}
    if folded is not None:
        if after != -1:
            return False
        n, last_offset, version, timestamp, rows = folded
        kinds = {(t, s): facts for t, s, *facts in rows}
    else:
        if not records:
            return False
        kinds = {}
        n, last_offset, _, version, timestamp = _fold(
            kinds, _as_scanned(conn, (r for r in records if r[2] > after)), after, last_id,
            version, timestamp)
    if n:   # (records at or before the last one counted are counted already)
        after, last_id = last_offset, conn.execute(
            RECORD_AT_SQL, [file_id, last_offset]).fetchone()[0]
    _save(conn, file_id, kinds, held, current_run(conn) + 1, now,
          (generation, new_offset, after, last_id, version, timestamp))
    return True


def _as_scanned(conn, records):
    """Ingest's rows as NEW_RECORDS_SQL reads them (the id is not known
    here: None). An attachment's type is read from raw by SQLite's JSON
    functions, as the query does (attachments are few)."""
    for r in records:
        type_ = r[_TYPE] or ""
        if type_ == "system":
            subtype = r[_SUBTYPE] or ""
        elif type_ == "attachment":
            raw = r[-1]
            subtype = conn.execute(ATTACHMENT_TYPE_SQL, [raw, raw]).fetchone()[0] or ""
        else:
            subtype = ""
        yield None, r[2], type_, subtype, r[_VERSION], r[_TIMESTAMP]


def count_files(conn, file_ids, *, run: int | None = None, now: str | None = None) -> int:
    """``count_file`` for each of ``file_ids`` in the caller's transaction:
    what a session-store append calls. A kind first seen here is new until
    the next ingest run ends (``run`` defaults to the current one)."""
    if now is None:
        now = utcnow()
    if run is None:
        run = current_run(conn)
    return sum(count_file(conn, file_id, run=run, now=now) for file_id in file_ids)


def after_ingest(db, now: str | None = None, at_end=None) -> None:
    """At the end of an ingest run: count the records of every file that
    changed and ingest has not counted as it stored them (count_stored), a
    transaction per CHUNK_RECORDS or so, and end the run (one more
    ``ingest_runs``; ``at_end(conn)``, if given, in the same transaction).
    Kinds first seen now are that run's, at ``now`` (the run's time:
    default, the clock)."""
    count_some(db, pending_files(db), now, at_end)


def pending_files(db) -> list[int]:
    """The transcript files whose records changed since they were last counted."""
    return [file_id for (file_id,) in db.conn.execute(PENDING_FILES_SQL)]


def count_some(db, pending: list[int], now: str | None = None, at_end=None,
               budget_s: float | None = None) -> list[int]:
    """after_ingest's count of ``pending`` (pending_files), and the run's
    end once none is left. With ``budget_s``, no more files are begun once
    that many seconds are spent: what is counted is committed, the run is
    not ended, and the files still to count are returned (a fleet's
    central counts between its batches: at 10,000 agents one count of a
    window's files took 1.9 s, and no line was stored meanwhile); a call
    counts one count_many's files at least. The next call with them goes on
    in the same run. [] once the run is ended."""
    now = now or utcnow()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    pending, begun = list(pending), False
    while True:
        with write_lock(db) as conn:
            run, counted = current_run(conn) + 1, 0
            while pending and counted < CHUNK_RECORDS:
                if begun and deadline is not None and time.monotonic() >= deadline:
                    return pending   # (committed: write_lock)
                n, done = count_many(conn, pending[:COUNT_FILES], run=run, now=now,
                                     limit=CHUNK_RECORDS - counted)
                counted += n
                del pending[:done]
                begun = True
            if not pending:
                conn.execute(BUMP_RUNS_SQL)
                if at_end is not None:
                    at_end(conn)
                return []


def forget_file(conn, file_id: int) -> None:
    """A file's rows go (a deleted store copy, or to be counted again), and
    its kinds' sums are computed again without it; their first sightings stay."""
    kinds = conn.execute(FILE_KINDS_SQL, [file_id]).fetchall()
    for sql in FORGET_FILE_SQL:
        conn.execute(sql, [file_id])
    conn.executemany(RECOUNT_KIND_SQL, [{"type": t, "subtype": s} for t, s in kinds])


def new_kinds(conn) -> list[tuple[str, int]]:
    """(kind, records) of the kinds the most recent ingest run brought."""
    return [tuple(row) for row in conn.execute(NEW_KINDS_SQL)]


def describe(kinds) -> str:
    """``mode (3), system/away_summary (1)``, or ``none``."""
    return ", ".join(f"{kind} ({n:,})" for kind, n in kinds) or "none"


def listing(db, *, new: bool = False, since: str | None = None) -> list[dict]:
    """The record_types rows, newest kinds first (session-index record-types)."""
    return dict_rows(db.conn, LIST_SQL, {"new": 1 if new else 0, "since": since or ""})
