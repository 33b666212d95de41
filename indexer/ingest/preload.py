"""New files read and parsed on the second core, for a big ingest.

In a cold ingest the main process spent more than half its time in Python
on each line: parsing it, then binding its forty-odd fields to the INSERT.
Here WORKERS processes (``python -m indexer.ingest.preload FOLDER PLAN``) read the
new files in the order ingest will store them, parse their complete lines
exactly as ingest does (lines.line_row), derive their caches and fold their
record kinds, and write it all into batch files: plain SQLite files of
about BATCH_BYTES of lines each, in a private temporary folder. Ingest
attaches a batch between two of its transactions and copies each file's
rows with one ``INSERT … SELECT``, and at the commit the transaction's
caches, all in SQLite. A batch holds no line's text (writing the bytes
there, then copying them, was a third of a worker's time): its records
have each line's length, and ingest, which has the file open, takes the
bytes from its own read of the file as it copies them.

A file's preloaded rows are taken only when, under the write lock, the file
is still untracked and is the one the worker read: same device and inode,
no shorter, and the bytes up to where the worker stopped the same (their
CRC-32, ingest's read of them against the worker's). Whatever the worker
did not read (the bytes after the last newline, anything from the first
line over LARGE_LINE_BYTES on, what the file grew by since) ingest reads
itself from there, as always; a file the worker could
not read, or a worker that died, leaves ingest to read the whole file. So
the index ends as it would without the worker (tests/test_preload.py).

Flow: each worker gets its plan (its batches' files) in a JSON file,
announces each finished batch ``N`` on stdout, and runs at most AHEAD
batches ahead of what ingest has used (a line on its stdin per batch used).
"""

from __future__ import annotations

import gc
import json
import operator
import os
import sqlite3
import sys
import zlib

from indexer.chain import definitions, walk as chain
from indexer.chain.definitions import TRANSCRIPT_KIND_NAMES
from indexer.chain.walk import CACHE_COLUMNS, CACHE_TABLES
from indexer.index import record_kinds
from indexer.ingest import derive
from indexer.ingest.linerows import (
    HEAD_BYTES,
    INSERT_BAD_LINE_SQL,
    TAIL_BYTES,
    digest_of,
    running_facts,
)
from indexer.transcripts.records import (
    FORK_BRIEFING, FORK_BRIEFING_RECORD, HAS_TOOL_USE, PRESERVED, RECORD_FIELDS, TOOL_USE_MARK,
    is_compact_boundary)
from indexer.transcripts import thinking
from indexer.transcripts.rows import LARGE_LINE_BYTES, bindable
from indexer.transcripts.safefiles import open_regular

# Files bigger than this are read by ingest itself (the worker holds a
# whole file in memory).
MAX_FILE_BYTES = 16 << 20
# Lines per batch file: about one ingest transaction's worth (TXN_BYTES);
# the first is small so that ingest starts at once.
BATCH_BYTES = 8 << 20
FIRST_BATCH_BYTES = 1 << 20
# Worker processes, and the batches each may have ready that ingest has
# not used yet.
WORKERS = 2
AHEAD = 2
WORKER_NICE = 10
WORKER_MODULE = "indexer.ingest.preload"
SCHEMA = "preload"   # the batch's name in ingest's connection while attached

# Per file: where its rows are in the batch, and everything ingest writes
# to its files row for them (as _read_new_lines' store() would).
FILE_COLUMNS = ("key", "dev", "ino", "first_record", "last_record", "first_bad",
                "last_bad", "end_offset", "crc", "line_count", "new_records", "bad_lines",
                "head_len", "head_hash", "tail_len", "tail_hash", "session_id", "facts",
                "kinds", "derived")
# A batch's tables. Its records table is the index's own (ingest sends its
# CREATE TABLE): the same column types, so derive reads the same values
# from either, and its id is what derive's queries read as the record's id
# (shifted by ingest to the index's ids when it copies the caches); raw is
# empty there, raw_len holding the line's length in bytes.
CREATE_BATCH_SQL = (
    "ALTER TABLE records ADD COLUMN raw_len INTEGER",
    f"CREATE TABLE files ({', '.join(FILE_COLUMNS)})",
    "CREATE TABLE bad_lines (file_id, line_no, byte_offset, error, raw)",
)
RECORDS_TABLE_SQL = "SELECT sql FROM main.sqlite_master WHERE type = 'table' AND name = 'records'"
# The cache columns that hold a record's id (chain.CACHE_COLUMNS).
RECORD_ID_COLUMNS = frozenset({"resume_leaf_id", "sdk_leaf_id", "record_id",
                               "message_record_id"})
# The index's id of a file's first record, to check the shift.
FIRST_RECORD_SQL = "SELECT id FROM main.records WHERE file_id = ? AND byte_offset = 0"
BATCH_FILE_SQL = f"SELECT {', '.join(FILE_COLUMNS)} FROM {SCHEMA}.files WHERE key = ?"
ATTACH_SQL = f"ATTACH DATABASE ? AS {SCHEMA}"
DETACH_SQL = f"DETACH DATABASE {SCHEMA}"


RECORD_COLUMNS = ("file_id", "line_no", "byte_offset", *RECORD_FIELDS)
# A file's preloaded records into the index, in file order, each line's
# bytes (from :data, ingest's read of the file) as text, as ingest's own
# INSERT stores them.
COPY_RECORDS_SQL = (
    f"INSERT INTO main.records ({', '.join(RECORD_COLUMNS)}, raw) "
    f"SELECT :file_id, {', '.join(RECORD_COLUMNS[1:])}, "
    f"CAST(substr(:data, byte_offset + 1, raw_len) AS TEXT) FROM {SCHEMA}.records "
    f"WHERE rowid BETWEEN :first AND :last ORDER BY rowid")
# The worker's INSERT of a record: raw empty, raw_len its length.
INSERT_BATCH_RECORD_SQL = (
    f"INSERT INTO records ({', '.join(RECORD_COLUMNS)}, raw, raw_len) "
    f"VALUES ({', '.join('?' * len(RECORD_COLUMNS))}, '', ?)")


COPY_BAD_LINES_SQL = (
    "INSERT INTO main.bad_lines (file_id, line_no, byte_offset, error, raw) "
    f"SELECT :file_id, line_no, byte_offset, error, raw FROM {SCHEMA}.bad_lines "
    "WHERE rowid BETWEEN :first AND :last ORDER BY rowid")


def copy_cache_sql(name: str) -> str:
    """Preloaded rows of one cache into the index, for the files of :map (a
    JSON array of [key in the batch, file id, shift]): each row's file id,
    and its record ids shifted (the index's id of the file's first record
    less the batch's)."""
    columns = [c.strip() for c in CACHE_COLUMNS[name].split(",")]
    values = ["m.file_id" if c == "file_id" else f"c.{c} + m.shift" if c in RECORD_ID_COLUMNS
              else f"c.{c}" for c in columns]
    table = CACHE_TABLES[name]
    return (f"WITH m(key, file_id, shift) AS MATERIALIZED (SELECT value ->> 0, value ->> 1, "
            f"value ->> 2 FROM json_each(:map)) "
            f"INSERT INTO main.{table} ({', '.join(columns)}) SELECT {', '.join(values)} "
            f"FROM m JOIN {SCHEMA}.{table} c ON c.file_id = m.key")


COPY_CACHE_SQL = {name: copy_cache_sql(name) for name in CACHE_COLUMNS}

# thinking_cache's rows of a batch's main transcripts (thinking.cache_rows,
# from the lines the worker parsed: ingest need not read them back), and
# where each one's scan stopped (its last record's byte_offset): copied with
# the caches, so derive.scan_thinking reads only what ingest stored after it.
CREATE_THINKING_SQL = (
    "CREATE TABLE thinking_cache (file_id, record_id, block, kind, model, version)",
    "CREATE TABLE thinking_scans (file_id, scanned_offset)",
)
INSERT_THINKING_SQL = "INSERT INTO thinking_cache VALUES (?, ?, ?, ?, ?, ?)"
INSERT_THINKING_SCAN_SQL = "INSERT INTO thinking_scans VALUES (?, ?)"
_MAP = ("WITH m(key, file_id, shift) AS MATERIALIZED (SELECT value ->> 0, value ->> 1, "
        "value ->> 2 FROM json_each(:map)) ")
COPY_THINKING_SQL = (
    _MAP + "INSERT INTO main.thinking_cache (file_id, record_id, block, kind, model, version) "
    f"SELECT m.file_id, c.record_id + m.shift, c.block, c.kind, c.model, c.version "
    f"FROM m JOIN {SCHEMA}.thinking_cache c ON c.file_id = m.key",
    _MAP + "INSERT OR REPLACE INTO main.thinking_scans (file_id, generation, scanned_offset) "
    f"SELECT m.file_id, f.generation, c.scanned_offset FROM m "
    f"JOIN {SCHEMA}.thinking_scans c ON c.file_id = m.key JOIN main.files f ON f.id = m.file_id",
)
# Where a record row (RECORD_COLUMNS, then its line) holds what cache_rows reads.
_TYPE_AT, _MESSAGE_ID_AT, _MODEL_AT, _VERSION_AT, _OFFSET_AT = (
    RECORD_COLUMNS.index(c) for c in ("type", "message_id", "model", "version", "byte_offset"))


def _thinking_rows(key: int, first_record: int, records: list) -> list:
    """thinking.cache_rows of one main transcript's records (batch ids from
    ``first_record``, in file order), as derive.scan_thinking finds them in
    the index: assistant lines that mention thinking."""
    return thinking.cache_rows(
        (key, first_record + i, r[_MESSAGE_ID_AT], r[_MODEL_AT], r[_VERSION_AT], r[-1])
        for i, r in enumerate(records)
        if r[_TYPE_AT] == "assistant"
        and (b"thinking" if r[-1].__class__ is bytes else "thinking") in r[-1])

# The worker's writes to a batch.
INSERT_FILE_SQL = (f"INSERT INTO files ({', '.join(FILE_COLUMNS)}) VALUES "
                   f"({', '.join(':' + c for c in FILE_COLUMNS)})")
LAST_ROWID_SQL = "SELECT last_insert_rowid()"
CREATE_CACHE_SQL = {name: (f"CREATE TABLE {CACHE_TABLES[name]} ({CACHE_COLUMNS[name]})",
                           f"CREATE INDEX {CACHE_TABLES[name]}_file "
                           f"ON {CACHE_TABLES[name]}(file_id)")
                    for name in CACHE_COLUMNS}
MARK_DERIVED_SQL = "UPDATE files SET derived = 1 WHERE key IN (SELECT value FROM json_each(?))"


class Preloaded:
    """One file's preloaded lines, as the batch describes them."""

    __slots__ = FILE_COLUMNS

    def __init__(self, row):
        for name, value in zip(FILE_COLUMNS, row):
            setattr(self, name, value)


class _Worker:
    """One worker process, the batches it makes (in order), the last one
    it announced."""

    def __init__(self, folder: str, number: int, records_sql: str,
                 batches: list[tuple[int, list]]):
        import subprocess  # only for a big ingest: it costs start-up time

        self.ready = -1
        plan = os.path.join(folder, f"plan-{number}.json")   # (a pipe would make ingest wait)
        with open(plan, "w") as f:
            json.dump({"records": records_sql, "batches": batches}, f)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE, folder, plan],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def send(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except OSError:
            pass   # the worker is gone: ingest reads the files itself

    def wait_for(self, n: int) -> bool:
        """Until batch ``n`` is made: False if the worker ended first."""
        while self.ready < n:
            line = self.proc.stdout.readline()
            if not line:
                return False
            self.ready = int(line)
        return self.ready == n

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


class Preloader:
    """Ingest's side: the workers (batch N is worker N % WORKERS's), the
    batch attached now, and which batch holds which path."""

    def __init__(self, conn, batches: list[list[tuple]]):
        import tempfile   # (only when the workers run: start-up time)

        # path -> (its batch, its key there: its place in the batch)
        self.batch_of = {f[0]: (n, key) for n, files in enumerate(batches)
                         for key, f in enumerate(files)}
        self.dir = tempfile.mkdtemp(prefix="session-index-preload-")
        self.attached = None   # (batch number, connection)
        self.used = set()      # batches ingest is done with (file removed, worker told)
        self.kept = []         # (key, file id, record id shift) of caches to copy
        self.buffer = FileStart()   # the file being taken, as ingest read it
        count = min(WORKERS, len(batches))
        records_sql = conn.execute(RECORDS_TABLE_SQL).fetchone()[0]
        self.workers = [_Worker(self.dir, w, records_sql, [(n, b) for n, b in enumerate(batches)
                                                           if n % count == w])
                        for w in range(count)]

    def _path(self, n: int) -> str:
        return os.path.join(self.dir, f"{n}.db")

    def prepare(self, writer, path: str) -> None:
        """Before ``path``'s transaction: attach its batch, if it has one
        (ending the open transaction: ATTACH needs none open)."""
        n, _ = self.batch_of.get(path, (None, None))
        if n is None or (self.attached is not None and self.attached[0] == n):
            return
        writer.commit()
        self.release()
        for skipped in range(n):   # batches none of whose files needed reading
            self._done(skipped)
        if not self.workers[n % len(self.workers)].wait_for(n):
            # the worker ended early: its batches never come
            w = len(self.workers)
            self.batch_of = {p: b for p, b in self.batch_of.items() if b[0] % w != n % w}
            return
        writer.conn.execute(ATTACH_SQL, [self._path(n)])
        self.attached = (n, writer.conn)

    def take(self, conn, file_id: int, path: str, f, st) -> Preloaded | None:
        """Copy ``path``'s preloaded rows into the index as file ``file_id``
        (inside the caller's transaction), if they are still the file's."""
        n, key = self.batch_of.get(path, (None, None))
        if self.attached is None or n != self.attached[0]:
            return None
        row = conn.execute(BATCH_FILE_SQL, [key]).fetchone()
        if row is None:
            return None
        p = Preloaded(row)
        if (p.dev, p.ino) != (st.st_dev, st.st_ino) or st.st_size < p.end_offset:
            return None
        if self.buffer.read(f, p.end_offset) < p.end_offset:
            return None
        with memoryview(self.buffer.data)[:p.end_offset] as data:
            if zlib.crc32(data) != p.crc:
                return None   # rewritten since the worker read it
            if p.first_record is not None:
                conn.execute(COPY_RECORDS_SQL, {"file_id": file_id, "first": p.first_record,
                                                  "last": p.last_record, "data": data})
        if p.first_bad is not None:
            conn.execute(COPY_BAD_LINES_SQL, {"file_id": file_id, "first": p.first_bad,
                                              "last": p.last_bad})
        p.facts, p.kinds = json.loads(p.facts), json.loads(p.kinds)
        return p

    def keep_caches(self, conn, file_id: int, p: Preloaded) -> bool:
        """Copy, at the commit (``copy_caches``), the caches the worker
        derived for ``p``: the file's records and files row as the worker
        left them, nothing read since. False if it derived none."""
        if not p.derived or p.first_record is None or not conn.in_transaction:
            return False
        first = conn.execute(FIRST_RECORD_SQL, [file_id]).fetchone()
        if first is None:
            return False
        self.kept.append((p.key, file_id, first[0] - p.first_record))
        return True

    def copy_caches(self, conn) -> list[int]:
        """Copy the caches kept since the last commit (in its transaction,
        the one that stored their files' records): the files' ids."""
        if not self.kept:
            return []
        params = {"map": json.dumps(self.kept)}
        for name in CACHE_COLUMNS:
            conn.execute(COPY_CACHE_SQL[name], params)
        for sql in COPY_THINKING_SQL:
            conn.execute(sql, params)
        ids = [file_id for _, file_id, _ in self.kept]
        self.kept = []
        return ids

    def release(self) -> None:
        """Detach the batch in use (between transactions) and let it go."""
        self.kept = []   # (none once its transaction is committed or rolled back)
        if self.attached is not None:
            n, conn = self.attached
            self.attached = None
            conn.execute(DETACH_SQL)
            self._done(n)

    def _done(self, n: int) -> None:
        """Batch ``n`` is used: its file goes, its worker may make another."""
        if n not in self.used:
            self.used.add(n)
            try:
                os.unlink(self._path(n))
            except OSError:
                pass
            self.workers[n % len(self.workers)].send(b"\n")

    def close(self) -> None:
        """Stop the worker and remove its folder (after a failure, too)."""
        import shutil   # (only when the workers run: start-up time)

        if self.attached is not None:
            try:
                self.release()
            except Exception:
                self.attached = None
        for worker in self.workers:
            worker.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def plan(files: list[tuple[str, int, str, str | None]]) -> list[list[tuple]]:
    """Batches of the new files ingest will read, in its order, from
    (path, size, kind, session id from the name) tuples: files up to
    MAX_FILE_BYTES, about BATCH_BYTES a batch, each file as (path, kind,
    session id)."""
    batches, batch, size, limit = [], [], 0, FIRST_BATCH_BYTES
    for path, n, kind, session_id in files:
        if not 0 < n <= MAX_FILE_BYTES:
            continue
        batch.append((path, kind, session_id))
        size += n
        if size >= limit:
            batches.append(batch)
            batch, size, limit = [], 0, BATCH_BYTES
    if batch:
        batches.append(batch)
    return batches


def start(conn, files: list[tuple[str, int, str, str | None]]) -> Preloader | None:
    """Workers for these new files, to be stored through ``conn`` (None
    when there are none to give them)."""
    batches = plan(files)
    return Preloader(conn, batches) if batches else None


class FileStart:
    """A file's first bytes, read into memory kept from one file to the
    next (a new buffer for each would be new pages for the kernel to clear
    and map, for every file)."""

    def __init__(self):
        self.data = bytearray()

    def read(self, f, n: int) -> int:
        """Read up to the first ``n`` bytes of ``f`` into ``data``: how many."""
        if len(self.data) < n:
            self.data = bytearray(n)
        f.seek(0)
        got = 0
        with memoryview(self.data) as view:
            while got < n:
                read = f.readinto(view[got:n])
                if not read:
                    break
                got += read
        return got


# The worker.

_file_start = FileStart()


def _read_file(conn, path: str, key: int, out_records: list, out_bads: list):
    """One file's complete lines as ingest parses them, up to its last newline
    or its first large line: the files row values, or None if unreadable."""
    from indexer.transcripts.lines import line_row   # (msgspec: the worker's, which parses; ingest's side does not)

    try:
        with open_regular(path) as f:
            st = os.fstat(f.fileno())
            if st.st_size > MAX_FILE_BYTES:
                return None
            size = _file_start.read(f, st.st_size)
    except OSError:   # NotRegular is one: swapped since ingest's stat
        return None
    data = _file_start.data
    records, bads = [], []
    offset = line_no = 0
    with memoryview(data) as view:
        nl = data.find(b"\n", 0, size)
        while nl >= 0 and nl - offset <= LARGE_LINE_BYTES:
            line_no += 1
            line_row(view[offset:nl], key, line_no, offset, records, bads)
            offset = nl + 1
            nl = data.find(b"\n", offset, size)
        crc = zlib.crc32(view[:offset])
        head = bytes(view[:min(HEAD_BYTES, offset)])
        tail = bytes(view[max(0, offset - TAIL_BYTES):offset])
    session = RECORD_FIELDS.index("session_id")
    facts = [r[3:-1] for r in records]
    out_records += records
    out_bads += bads
    return {"key": key, "dev": st.st_dev, "ino": st.st_ino,
            "end_offset": offset, "crc": crc, "line_count": line_no, "new_records": len(records),
            "bad_lines": len(bads), "head_len": len(head), "head_hash": digest_of(head),
            "tail_len": len(tail), "tail_hash": digest_of(tail),
            "session_id": next((r[session] for r in facts if r[session]), None),
            "facts": json.dumps(running_facts(facts)),
            "kinds": json.dumps(record_kinds.fold_new(conn, records))}


# Where chain.UUID_RECORDS_SELECT's columns are in a records row as ingest
# inserts it (file_id, line_no, byte_offset, the RECORD_FIELDS, raw).
_REC_AT = [3 + RECORD_FIELDS.index(c) for c in (
    "uuid", "parent_uuid", "logical_parent_uuid", "type", "subtype", "timestamp",
    "is_sidechain", "is_meta", "team_name", "message_id", "is_tool_result")]
_UUID, _TYPE = _REC_AT[0], _REC_AT[3]
_rec_fields = operator.itemgetter(*_REC_AT)
_UNREADABLE, _LEAF, _SENT_AS, _ROWS_AHEAD, _AGENT, _SOURCE = (
    3 + RECORD_FIELDS.index(c) for c in (
        "is_unreadable", "leaf_uuid", "sent_as_uuid", "rows_ahead", "agent_id",
        "source_tool_assistant_uuid"))
_SUBTYPE = _REC_AT[4]


# What UUID_RECORDS_SELECT computes in SQL, with its own expressions: each
# timestamp (of a JSON array) in ms, and a last-prompt line's two fields.
TIMESTAMPS_MS_SQL = (f"SELECT t.timestamp, {definitions.TIMESTAMP_MS.format(r='t')} "
                     "FROM (SELECT value AS timestamp FROM json_each(?)) t")
PROMPT_FIELDS_SQL = (f"SELECT {definitions.LAST_PROMPT_NULL_LEAF.format(r='p')}, "
                     f"{definitions.LAST_PROMPT_EXPLICIT.format(r='p')}, "
                     f"{definitions.LAST_PROMPT_REWOUND.format(r='p')}, "
                     f"{definitions.LAST_PROMPT_CUT.format(r='p')} "
                     "FROM (SELECT CAST(? AS TEXT) AS raw) p")
# A compact boundary's preserved fields and whether an attachment is a fork
# briefing (raw, type), as UUID_RECORDS_SELECT reads them.
SCANNED_FIELDS_SQL = (f"SELECT {PRESERVED.format(r='p')}, {FORK_BRIEFING_RECORD.format(r='p')} "
                      "FROM (SELECT CAST(? AS TEXT) AS raw, ? AS type, "
                      "'compact_boundary' AS subtype) p")
HAS_TOOL_USE_SQL = (f"SELECT {HAS_TOOL_USE.format(r='p')} FROM (SELECT CAST(? AS TEXT) AS raw, "
                    "'assistant' AS type) p")
_MARKS = (TOOL_USE_MARK, TOOL_USE_MARK.encode())


def _chain_rows(rows: list, first_id: int, out: list, prompts: list,
                boundaries: list, lines: dict | None = None) -> None:
    """A file's rows as derive.UUID_RECORDS_SQL reads them from the index
    (its records with a uuid and its last-prompt records, in file order),
    made from the rows just inserted: ``first_id`` the first one's id. The
    timestamp in ms, the last-prompt fields and has_tool_use, which the
    query computes in SQL, are left for _computed_in_sql (has_tool_use holds
    the line's text meanwhile, when the line is an assistant record that
    names "tool_use", else 0); ``prompts`` gets (row, raw) of the
    last-prompt records, ``lines`` id -> (text, type) of the records whose
    tool calls resume.kin may read (chain.CALLS_OF_LINE_SQL)."""
    for i, r in enumerate(rows):
        if r[_UUID] is not None or r[_TYPE] == "last-prompt":
            raw = r[-1]
            tool_use = raw if r[_TYPE] == "assistant" and _MARKS[
                raw.__class__ is bytes] in raw else 0
            row = [first_id + i, r[0], r[1], *_rec_fields(r), None, r[_UNREADABLE], None, 0,
                   r[_LEAF], None, None, tool_use, r[_SENT_AS], None, None, r[_ROWS_AHEAD],
                   r[_AGENT], r[_SOURCE]]
            out.append(row)
            if lines is not None and r[_TYPE] in ("assistant", "user", "attachment"):
                lines[row[0]] = (r[-1], r[_TYPE])
            if r[_TYPE] == "last-prompt":
                prompts.append((row, r[-1]))
            elif is_compact_boundary(r[_TYPE], r[_SUBTYPE]) or (
                    r[_TYPE] == "attachment" and FORK_BRIEFING in (
                        r[-1] if r[-1].__class__ is str else r[-1].decode("utf-8", "replace"))):
                boundaries.append((row, r[-1]))


def _computed_in_sql(conn, rows: list, prompts: list, boundaries: list) -> None:
    """Fill in what UUID_RECORDS_SELECT computes in SQL, with its own
    expressions: each row's timestamp in ms, the last-prompt fields, a
    compact boundary's preserved fields, an attachment's fork briefing
    flag and an assistant record's has_tool_use, read from the line."""
    stamps = list({row[8] for row in rows if row[8] is not None})
    ms = dict(conn.execute(TIMESTAMPS_MS_SQL, [json.dumps(stamps)]))
    for row in rows:
        row[14] = ms.get(row[8])
    for row, raw in prompts:
        fields = conn.execute(PROMPT_FIELDS_SQL, [raw]).fetchone()
        row[19:21] = fields[:2]
        row[chain.REWOUND_AT:chain.CUT_AT + 1] = fields[2:]
    for row, raw in boundaries:
        row[16:18] = conn.execute(SCANNED_FIELDS_SQL, [raw, row[6]]).fetchone()
    for row in rows:
        if row[chain.HAS_TOOL_USE_AT] != 0:
            row[chain.HAS_TOOL_USE_AT] = conn.execute(
                HAS_TOOL_USE_SQL, [row[chain.HAS_TOOL_USE_AT]]).fetchone()[0]


def _derive(conn, files: dict[int, tuple], rows: list, prompts: list,
            boundaries: list, lines: dict) -> None:
    """The caches of the batch's transcripts (key: (kind, session id, lines,
    bytes)), as derive.derive_files computes them from the index, from
    their _chain_rows."""
    _computed_in_sql(conn, rows, prompts, boundaries)
    read = chain.read_rows(rows, list(files))
    calls = chain.calls_reader(
        lambda r: conn.execute(chain.CALLS_OF_LINE_SQL, lines[r.id]).fetchone()
        if r.id in lines else None,
        lambda r: conn.execute(chain.TOOL_IDS_OF_LINE_SQL, lines[r.id]).fetchone()
        if r.id in lines else None)
    out: dict[str, list] = {name: [] for name in chain.CACHE_COLUMNS}
    for key, (kind, session_id, n_lines, offset) in files.items():
        recs, file_prompts = read[key]
        for name, file_rows in derive.compute_file(key, kind, session_id, recs, file_prompts,
                                                   (n_lines, offset), calls).items():
            out[name] += file_rows
    for name, table_rows in out.items():
        create_table, create_index = CREATE_CACHE_SQL[name]
        conn.execute(create_table)
        chain.insert_rows(conn, name, table_rows)
        conn.execute(create_index)
    conn.execute(MARK_DERIVED_SQL, [json.dumps(list(files))])


def _batch_records(records: list):
    """Records rows as a batch stores them (lazily): the line's length in
    bytes for its text (raw: the line's bytes, or parse_line's exact text
    of them), None bound as NULL."""
    return ((*row[:-1], len(row[-1]) if row[-1].__class__ is bytes else len(row[-1].encode()))
            for row in bindable(records))


def write_batch(target: str, records_sql: str, files: list[list]) -> None:
    """Parse ``files`` ((path, kind, session id) each) into a new batch file
    at ``target``, with their caches (whole, then renamed)."""
    tmp = target + ".tmp"
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA page_size = 16384")
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN")
        for sql in (records_sql, *CREATE_BATCH_SQL):
            conn.execute(sql)
        for sql in CREATE_THINKING_SQL:
            conn.execute(sql)
        to_derive, chain_rows, prompts, boundaries, lines = {}, [], [], [], {}
        for key, (path, kind, named_session) in enumerate(files):
            records, bads = [], []
            row = _read_file(conn, path, key, records, bads)
            if row is None:
                continue
            row["first_record"] = row["last_record"] = row["first_bad"] = row["last_bad"] = None
            row["derived"] = 0
            if kind in TRANSCRIPT_KIND_NAMES and row["end_offset"]:
                to_derive[key] = (kind, named_session or row["session_id"], row["line_count"],
                                  row["end_offset"])
            for rows, sql, bound, first, last in (
                    (records, INSERT_BATCH_RECORD_SQL, _batch_records, "first_record",
                     "last_record"),
                    (bads, INSERT_BAD_LINE_SQL, bindable, "first_bad", "last_bad")):
                if rows:
                    conn.executemany(sql, bound(rows))
                    row[last] = conn.execute(LAST_ROWID_SQL).fetchone()[0]
                    row[first] = row[last] - len(rows) + 1
            if key in to_derive:
                _chain_rows(records, row["first_record"], chain_rows, prompts, boundaries, lines)
                if kind == "main" and records:
                    conn.executemany(INSERT_THINKING_SQL, _thinking_rows(
                        key, row["first_record"], records))
                    conn.execute(INSERT_THINKING_SCAN_SQL, [key, records[-1][_OFFSET_AT]])
            conn.execute(INSERT_FILE_SQL, row)
        if to_derive:
            _derive(conn, to_derive, chain_rows, prompts, boundaries, lines)
        conn.execute("COMMIT")
    finally:
        conn.close()
    os.rename(tmp, target)


def main(argv: list[str]) -> int:
    """The worker: FOLDER PLAN (its JSON file); on stdin a line per batch used."""
    import shutil   # (only when the workers run: start-up time)

    folder, plan_file = argv
    # Ingest, which stores what the workers make, is the one to wait for:
    # on a busy machine it runs before them.
    os.nice(WORKER_NICE)
    with open(plan_file) as f:
        plan = json.load(f)
    # A batch's rows are freed by their counts; the cycle collector, which
    # would walk them again and again as they are made, runs once a batch,
    # and after the first (the modules it imports loaded) only over what
    # is newer.
    gc.disable()
    try:
        for made, (n, files) in enumerate(plan["batches"]):
            if made >= AHEAD and not sys.stdin.buffer.readline():
                break   # stdin closed: ingest is gone (it kills a worker it is done with)
            write_batch(os.path.join(folder, f"{n}.db"), plan["records"], files)
            gc.collect()
            if not made:
                gc.freeze()
            sys.stdout.write(f"{n}\n")
            sys.stdout.flush()
        else:
            return 0
    except BrokenPipeError:
        pass
    shutil.rmtree(folder, ignore_errors=True)   # nobody else will, ingest being gone
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
