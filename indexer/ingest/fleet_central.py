"""``session-index ingest --from nats://...``: the central index of a fleet.

A durable JetStream consumer reads what the hosts' shippers sent (the
messages of fleet_wire) and writes each fetched batch into the index in one
transaction, with the stream position it reached, and acknowledges the
batch only after the commit. A crash before the commit leaves nothing and
the batch comes again; a crash after it and before the acknowledgement
brings the batch again too, and every line it holds is then at or before
its file's stored offset: skipped. So each complete line is stored once.

A host's file is a files row of origin 'fleet' named fleet://HOST/PATH, with
``host`` set: copies of one session on two hosts are two files, never merged.
A new generation from the host (it saw the file rewritten) supersedes the
stored one as a local rewrite does (generations.py keeps its lines).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sqlite3
import threading
import time
from collections import Counter
from datetime import datetime, timezone

from indexer.transcripts import discover
from indexer.ingest import fleet_nats, fleet_wire
from indexer.index import generations, record_kinds
from indexer.index.connection import connect
from indexer.index.db import OpenedFile, open_db
from indexer.ingest import derive
from indexer.transcripts import agents
from indexer.transcripts.lines import BadLine, parse_line_bytes
from indexer.transcripts.records import RECORD_FIELDS
from indexer.sql import dict_rows, write_lock
from indexer.index.clock import utcnow
from indexer.ingest.files import FORGET_LINES_SQL, LAST_INGEST_AT_SQL, RETRACT_UNTERMINATED_SQL
from indexer.ingest.linerows import RUNNING_FACTS_SET, insert_lines, running_facts

PATH_PREFIX = "fleet://"
# Messages per fetch, and how long a fetch waits for the first one: with
# nothing waiting that long, a drain (no --watch) is done. A batch is one
# transaction: a central behind its hosts (10,000 agents: about one line a
# file a batch) writes the index pages of the files a batch touches once per
# batch, so a bigger one shares them between more lines (1024 against 256:
# the commits' CPU down by about 40%, storing a line by 6-18%,
# docs/how-it-works/fleet-cost.md). New consumers allow 4x that unacknowledged;
# one made with 1024 (256 x 4) still takes whole batches.
FETCH_BATCH = 1024
MAX_ACK_PENDING = FETCH_BATCH * 4
# A central behind its hosts (a whole FETCH_BATCH or more still waiting at
# the server after what it fetched: ``behind``) fetches again at once, without
# gathering, up to BEHIND_FETCHES fetches (what MAX_ACK_PENDING lets it hold
# unacknowledged) or BEHIND_BYTES of messages, and writes them in one
# transaction: at 10,000 agents a batch holds about one line a file, and its
# commit (the pages of each touched file's index entries, 16 KB each) was half
# of what storing a batch cost (py-spy; docs/how-it-works/fleet-cost.md). The
# bytes bound the transaction (and its time against ACK_WAIT_S) when messages
# are large: a fetch of whole 512 KB messages is not extended.
BEHIND_FETCHES = 4
BEHIND_BYTES = 16 << 20
BEHIND_WAIT_S = 0.01
FETCH_WAIT_S = 1.0
# A fetched message not acknowledged this long (the consumer died before its
# commit) is delivered again. One whose file's earlier lines are not stored
# yet is held (fleet_held) and acknowledged: after ASK_AFTER_S the central
# asks the host to send the missing bytes again (every ASK_EVERY_S), and
# after GAP_WAIT_S (--gap-wait) records them as a gap and goes on.
ACK_WAIT_S = 10
RETRY_DELAY_S = 1.0
ASK_AFTER_S = ACK_WAIT_S + 2.0
ASK_EVERY_S = 5.0
GAP_WAIT_S = 60.0
# How often a watching consumer reads the hosts' heartbeats.
HEARTBEAT_READ_S = 2.0
# The caches (leaves, orphans, the sessions rows, the record kinds) are
# derived once per window while batches keep coming, and when none came for
# IDLE_S: at live traffic a batch is a message or two, and deriving after
# each one made the central's cost per line depend on how lines were batched
# (each session touched in the window is derived once; at live rates a
# session writes a line every few seconds, so a window of half a second
# derived each session about once a line, 4 s about once per 5-10 lines: the
# caches are that much behind the lines while they keep coming; a derived
# file's cost is mostly per file, about 28 statements whatever its lines, so
# 4 s against 2 s cut the derive's CPU a line by a third at one line a
# message, docs/how-it-works/fleet-cost.md). A window is at least
# DERIVE_WINDOW_S and at least DERIVE_GROWTH times as long as the last derive
# took (so deriving takes at most a quarter of the central's time however
# many sessions a window touches; at most DERIVE_WINDOW_MAX_S). A derive
# starts no new transaction past DERIVE_BUDGET_S: the central fetches and
# stores the next batch, then goes on deriving (lines are not held back by
# a derive of thousands of sessions).
DERIVE_WINDOW_S = 4.0
# A central behind its hosts (``behind``: a whole FETCH_BATCH or more still
# waiting at the server) stores first and derives once per DERIVE_BEHIND_S at most: a
# derived file's cost is mostly per file (about 28 statements whatever its
# lines), and at 10,000 agents a file writes a line every 4 s or so, so a
# derive of a 15 s window costs about as much per file as one of 30 s with
# twice the lines; deriving took 40-45% of a central behind at 10,000 agents
# (py-spy; docs/how-it-works/fleet-cost.md). The caches (leaves, orphans, the
# sessions rows: what check answers from) then trail the stored lines by up to
# this window plus its derive, while the central is behind; status says how
# many files wait to be derived (files_to_derive). Once it has caught up (less
# than a batch waiting), the windows are as above again.
DERIVE_BEHIND_S = 30.0
IDLE_S = 0.5
DERIVE_GROWTH = 3.0
DERIVE_WINDOW_MAX_S = 15.0
DERIVE_BUDGET_S = 0.1
# Files a derive transaction of the central takes (derive.derive_some): a
# step ends after its first transaction past DERIVE_BUDGET_S, and the lines
# that came meanwhile wait for it (with derive.DERIVE_BATCH, 200 files, a
# step took 0.3-0.5 s at 10,000 agents; with 50, 0.1-0.2 s).
DERIVE_STEP_FILES = 50
# A fetch that brought fewer than FETCH_BATCH messages waits until this long
# after the last batch was taken, then takes what came meanwhile (the time
# the central spent storing and deriving since counts: at 10,000 agents a
# whole GATHER_S after that work made the lines wait for both, a lag p50 of
# 0.77 s against 0.49 s, bench/fleet_sim.py). A batch is one transaction,
# and a transaction's cost is mostly the pages it writes (16 KB each: the
# records' indexes of each file it touches), which a bigger batch shares
# between more lines: at live rates (a host's line every few seconds) 0.3 s
# gathers three times the lines of 0.1 s into one commit, and each file's
# pages are written about a third as often (a batch's CPU a line at one line
# a message down by 25-30%; each line waits up to 0.2 s more before it is
# stored). What came is delivered on the pull request already open
# (fleet_nats.Pull: a request per message or two, as messages trickle in at
# live rates, cost the central as much as storing them).
GATHER_S = 0.3
# How long a fetch waits while a derive is under way (it goes on at once
# when nothing comes).
DERIVING_WAIT_S = 0.05

# A host's file as the central reads it (one, or a batch's: [[host, path], ...]).
_FLEET_FILE_COLUMNS = """f.id, f.ingested_offset, f.line_count, f.session_id, f.unterminated_tail,
  ff.remote_generation, ff.host, f.agent"""
FLEET_FILE_SQL = f"""
SELECT {_FLEET_FILE_COLUMNS}
FROM fleet_files ff JOIN files f ON f.id = ff.file_id
WHERE ff.host = :host AND ff.remote_path = :path
""".strip()
FLEET_FILES_SQL = f"""
SELECT ff.remote_path, {_FLEET_FILE_COLUMNS}
FROM json_each(:files) k
JOIN fleet_files ff ON ff.host = k.value ->> 0 AND ff.remote_path = k.value ->> 1
JOIN files f ON f.id = ff.file_id
""".strip()
CREATE_FLEET_FILE_SQL = """
INSERT INTO files (path, kind, origin, host, session_id, agent_id, project_dir,
                   first_ingested_at, needs_derive, agent)
VALUES (:path, :kind, 'fleet', :host, :session_id, :agent_id, :project_dir, :now, 1, :agent)
""".strip()
TRACK_FLEET_FILE_SQL = """
INSERT INTO fleet_files (file_id, host, remote_path, remote_generation)
VALUES (:file_id, :host, :path, :generation)
""".strip()
# A new generation from the host: the stored lines were kept (supersede) and
# deleted (FORGET_LINES_SQL); the file starts again from its first byte.
RESTART_FLEET_FILE_SQL = (
    "UPDATE fleet_files SET remote_generation = :generation WHERE file_id = :file_id",
    "DELETE FROM fleet_parts WHERE file_id = :file_id",
    """UPDATE files SET ingested_offset = 0, line_count = 0, size = 0, deleted_at = NULL,
       needs_derive = 1 WHERE id = :file_id""",
)
ADVANCE_FLEET_FILE_SQL = f"""
UPDATE files SET ingested_offset = :offset, size = :offset, line_count = :line_count,
  unterminated_tail = :unterminated,
  session_id = coalesce(session_id, :session_id), deleted_at = NULL,
  {RUNNING_FACTS_SET},
  last_ingested_at = :now, needs_derive = 1
WHERE id = :id
""".strip()
# A last line stored without its newline (a ``tail`` message): its bytes,
# to compare with the line when it comes again; then its newline is taken
# (SETTLE) or, the line having gone on, it is taken back (files.py's
# RETRACT_UNTERMINATED_SQL) and read again whole.
TAIL_RAW_SQL = "SELECT CAST(raw AS BLOB) FROM records WHERE file_id = :id AND byte_offset = :at"
SETTLE_TAIL_SQL = """
UPDATE files SET ingested_offset = :offset, size = :offset, unterminated_tail = 0,
  needs_derive = 1 WHERE id = :id
""".strip()
UNDO_TAIL_SQL = """
UPDATE files SET ingested_offset = :offset, size = :offset, line_count = line_count - 1,
  needs_derive = 1 WHERE id = :id
""".strip()
MARK_DELETED_SQL = """
UPDATE files SET deleted_at = :now, needs_derive = 1 WHERE id = :id AND deleted_at IS NULL
""".strip()
COUNT_GAP_SQL = "UPDATE fleet_files SET gaps = gaps + 1 WHERE file_id = :id"
# A message past what is stored of its file, held until the bytes before it
# come (once per range: one delivered again is not held twice); those of an
# older generation are dropped when a newer one starts.
HOLD_SQL = """
INSERT OR IGNORE INTO fleet_held (file_id, generation, offset, at, line, held_at, payload)
VALUES (:id, :generation, :offset, :at, :line, :now, :payload)
""".strip()
# The files with held messages (a batch looks for one to release in those only).
HELD_FILES_SQL = "SELECT DISTINCT file_id FROM fleet_held"
DROP_OLD_HELD_SQL = "DELETE FROM fleet_held WHERE file_id = :file_id AND generation < :generation"
# The file's first held message, when it now meets what is stored.
NEXT_HELD_SQL = """
SELECT generation, offset, at, payload FROM fleet_held
WHERE file_id = :id ORDER BY generation, offset, at LIMIT 1
""".strip()
DROP_HELD_SQL = """
DELETE FROM fleet_held WHERE file_id = :id AND generation = :generation AND offset = :offset
  AND at = :at
""".strip()
FLEET_FILE_BY_ID_SQL = """
SELECT f.id, f.ingested_offset, f.line_count, f.session_id, f.unterminated_tail,
  ff.remote_generation, ff.host, ff.remote_path
FROM fleet_files ff JOIN files f ON f.id = ff.file_id
WHERE f.id = :id
""".strip()
# Per file with held messages: its host, path and generation, what is
# stored of it (and where its last line starts: a last line stored without
# its newline is asked for again whole), the first held message's offset
# and line number, and since when the oldest has been held (the central
# waits GAP_WAIT_S from then).
WAITING_FILES_SQL = """
SELECT h.file_id, ff.host, ff.remote_path, ff.remote_generation AS generation,
  f.ingested_offset, f.ingested_offset - f.unterminated_tail AS line_start,
  min(h.held_at) AS since,
  (SELECT offset FROM fleet_held n WHERE n.file_id = h.file_id
   ORDER BY n.generation, n.offset, n.at LIMIT 1) AS next_offset,
  (SELECT line FROM fleet_held n WHERE n.file_id = h.file_id
   ORDER BY n.generation, n.offset, n.at LIMIT 1) AS next_line
FROM fleet_held h JOIN fleet_files ff ON ff.file_id = h.file_id JOIN files f ON f.id = h.file_id
GROUP BY h.file_id ORDER BY h.file_id
""".strip()
# The bytes that never came, recorded; the file goes on from the first held
# message (its lines numbered as the host numbers them; the pieces of a
# long line before it are dropped).
RECORD_GAP_SQL = """
INSERT INTO fleet_gaps (file_id, host, remote_path, generation, start, end, waited_since,
                        recorded_at, reason)
VALUES (:file_id, :host, :remote_path, :generation, :start, :end, :since, :now, :reason)
""".strip()
SKIP_GAP_SQL = (
    """UPDATE files SET ingested_offset = :end, size = :end, line_count = :line - 1,
       unterminated_tail = 0, needs_derive = 1 WHERE id = :file_id""",
    "DELETE FROM fleet_parts WHERE file_id = :file_id AND line_offset < :end",
)
# Pieces of a line too long for one message, until its last one arrives.
KEEP_PART_SQL = """
INSERT OR IGNORE INTO fleet_parts (file_id, line_offset, at, data)
VALUES (:id, :offset, :at, :data)
""".strip()
PARTS_SQL = "SELECT at, data FROM fleet_parts WHERE file_id = :id AND line_offset = :offset ORDER BY at"
DROP_PARTS_SQL = "DELETE FROM fleet_parts WHERE file_id = :id AND line_offset = :offset"
SEEN_HOST_SQL = """
INSERT INTO fleet_hosts (host, last_message_at, messages) VALUES (:host, :now, :n)
ON CONFLICT (host) DO UPDATE SET last_message_at = excluded.last_message_at,
  messages = messages + excluded.messages
""".strip()
HEARTBEAT_SQL = """
INSERT INTO fleet_hosts (host, last_heartbeat_at) VALUES (:host, :at)
ON CONFLICT (host) DO UPDATE SET last_heartbeat_at = excluded.last_heartbeat_at
""".strip()
POSITION_SQL = """
INSERT INTO fleet_consumers (name, stream_seq, updated_at) VALUES (:name, :seq, :now)
ON CONFLICT (name) DO UPDATE SET stream_seq = max(stream_seq, excluded.stream_seq),
  updated_at = excluded.updated_at
""".strip()

CONSUMER_POSITION_SQL = "SELECT stream_seq FROM fleet_consumers WHERE name = ?"
# The central's WAL is copied into the index (checkpointed) by a thread of its
# own, on a connection of its own, once it holds CHECKPOINT_BYTES: the
# consumer's commits no longer stop for it. In a commit (SQLite's
# autocheckpoint) it took about a third of the wall time of storing the
# batches at 10,000 agents (central_cost.py at 10,000 hosts: 8.6 s against
# 5.4 s without checkpoints, 6% of the CPU; docs/how-it-works/fleet-cost.md).
# A PASSIVE checkpoint takes no write lock: batches go on being committed
# meanwhile. But while they are, it never copies the whole WAL (frames come
# after it began), so the WAL is never started again from its beginning and
# grows; the consumer's connection (its autocheckpoint) copies the rest in a
# commit past CHECKPOINT_BACKSTOP_PAGES, and the next commit restarts the WAL.
# At 1 GB (65,536 pages) those commits took 0.6-0.8 s each at 10,000 agents,
# every 10 s or so, and set the lag's p99 (2.3 s; 0.25-0.35 s at 128 MB, the
# p99 1.4-1.5 s, bench/fleet_sim.py): the thread has copied most of it by then.
CHECKPOINT_BYTES = 64 << 20
CHECKPOINT_EVERY_S = 0.5
CHECKPOINT_SQL = "PRAGMA wal_checkpoint(PASSIVE)"
CHECKPOINT_BACKSTOP_PAGES = 8192   # (16 KB pages: 128 MB)
AUTOCHECKPOINT_SQL = "PRAGMA wal_autocheckpoint = {pages}"
# The central's temporary b-trees (an ORDER BY, a materialized CTE) in memory,
# not in temporary files: refreshing a sessions row (views.REFRESH_SESSION_SQL)
# makes several for one session, and at a live fleet's rates the central
# refreshes thousands a minute (in temporary files, about 0.4 ms each; in
# memory, 0.05 ms). Its transactions are small (a batch, a derive of
# derive.DERIVE_BATCH files), so are its temporary b-trees.
TEMP_STORE_SQL = "PRAGMA temp_store = MEMORY"
# The central's page cache (256 MB, not connection.connect's 32): each line
# it stores goes into its file's place in each records index, and at
# 10,000 agents a batch of 1,024 lines touched more index pages than 32 MB
# holds: a batch of 2,048 took 1.1 s (0.55 ms a line) against 0.19 s for
# 1,024, and the central read 310 MB/s of its own pages back from the file
# (/proc/PID/io). With 256 MB, 2,048 lines took 0.32 s and the reads fell to
# about 40 MB/s (bench/fleet_sim.py; the central's RSS about 390 MB there).
CACHE_SQL = "PRAGMA cache_size = -262144"
# A message or heartbeat the central cannot use: kept, once per (subject, seq).
QUARANTINE_SQL = """
INSERT OR IGNORE INTO fleet_quarantine (received_at, subject, stream_seq, host, reason,
                                        headers, data)
VALUES (:now, :subject, :seq, :host, :reason, :headers, :data)
""".strip()

_SESSION = RECORD_FIELDS.index("session_id")   # a parsed record's session id


def fleet_path(host: str, path: str) -> str:
    return f"{PATH_PREFIX}{host}{path if path.startswith('/') else '/' + path}"


class Summary:
    """What a drain did (``as_dict`` for --json)."""

    FIELDS = ("messages", "new_lines", "new_records", "bad_lines", "duplicates", "gaps",
              "recorded_gaps", "deleted_files", "new_generations", "bad_messages",
              "bad_heartbeats", "hosts", "seconds")

    def __init__(self):
        for name in self.FIELDS:
            setattr(self, name, 0)
        self.hosts = set()
        self.sent_at: dict[str, float] = {}   # per host, its newest message's sent_at (lag)

    def counts(self) -> dict:
        """The counters as they are (to put back: ``restore``)."""
        return {n: getattr(self, n) for n in self.FIELDS if n != "hosts"} | {
            "hosts": set(self.hosts)}

    def restore(self, counts: dict) -> None:
        for name, value in counts.items():
            setattr(self, name, value)

    def as_dict(self) -> dict:
        return {n: (sorted(self.hosts) if n == "hosts" else getattr(self, n))
                for n in self.FIELDS}


def _file(conn, header: dict, body: bytes, now: str, summary: Summary,
          lines: _Lines | None = None) -> dict | None:
    """The files row for the message's file at its generation (made, or
    restarted for a newer generation); None for an older generation. A new
    file is described by its path, and by its first lines as local ingest
    sniffs them (a `claude -p` log is an execution log, not a transcript).
    With ``lines`` (a batch's), a file's row is read once a batch and kept
    there as its messages change it."""
    host, path, generation = header["host"], header["path"], int(header["generation"])
    row = lines.rows.get((host, path)) if lines is not None else None
    if row is None:
        row = _read_file(conn, header, body, now)
        if lines is not None:
            lines.rows[host, path] = row
    if generation < row["remote_generation"]:
        return None
    if generation > row["remote_generation"]:
        if lines is not None:   # (what is stored of it so far, before it is superseded)
            lines.flush(conn)
        if row["ingested_offset"]:
            generations.supersede(conn, row["id"], "changed", now)
        derive.forget_file(conn, row["id"])
        for sql in FORGET_LINES_SQL:
            conn.execute(sql, {"id": row["id"], "now": now})
        for sql in (*RESTART_FLEET_FILE_SQL, DROP_OLD_HELD_SQL):
            conn.execute(sql, {"file_id": row["id"], "generation": generation})
        summary.new_generations += 1
        row.update(ingested_offset=0, line_count=0, unterminated_tail=0,
                   remote_generation=generation)
    return row


def _read_file(conn, header: dict, body: bytes, now: str) -> dict:
    """The message's file's row as stored, or made (at the message's generation)."""
    host, path, generation = header["host"], header["path"], int(header["generation"])
    cur = conn.execute(FLEET_FILE_SQL, {"host": host, "path": path})
    found = cur.fetchone()
    if found is None:
        cand = discover.describe(path)
        verdict = discover.sniff_lines(body) if header["kind"] == "lines" and \
            header["offset"] == 0 else None
        if verdict == discover.EXECUTION_LOG:
            cand = cand._replace(kind=discover.EXECUTION_LOG, session_id=None)
        elif header.get("agent") or verdict in (discover.CODEX, discover.GEMINI):
            # another agent's file: as the host says (fleet_wire), else its first line
            cand = agents.candidate(cand, header.get("agent") or verdict)
        file_id = conn.execute(CREATE_FLEET_FILE_SQL, {
            "path": fleet_path(host, path), "kind": cand.kind, "host": host,
            "session_id": cand.session_id, "agent_id": cand.agent_id,
            "project_dir": cand.project_dir, "now": now,
            "agent": cand.agent or agents.CLAUDE_CODE}).lastrowid
        conn.execute(TRACK_FLEET_FILE_SQL, {"file_id": file_id, "host": host, "path": path,
                                            "generation": generation})
        return {"id": file_id, "ingested_offset": 0, "line_count": 0, "unterminated_tail": 0,
                "session_id": cand.session_id, "remote_generation": generation, "host": host,
                "agent": cand.agent}
    return dict(zip([d[0] for d in cur.description], found))


class _Lines:
    """What a batch's messages store, written together (``flush``): the
    records and bad lines in message order, one executemany each, and each
    file's row once with what its messages added (its running facts over
    all of them: RUNNING_FACTS_SET folds in file order). ``rows``: the
    batch's files rows, read once a batch, as its messages change them.
    Whatever reads or writes a file's records or row otherwise flushes
    first."""

    __slots__ = ("records", "bads", "files", "rows")

    def __init__(self):
        self.records, self.bads, self.rows = [], [], {}
        self.files: dict[int, tuple[list, dict]] = {}   # file id: (facts, ADVANCE's values)

    def read(self, conn, headers: list[dict]) -> None:
        """The rows of these messages' files, with one query."""
        keys = sorted({(h["host"], h["path"]) for h in headers} - set(self.rows))
        if not keys:
            return
        cur = conn.execute(FLEET_FILES_SQL, {"files": json.dumps(keys)})
        names = [d[0] for d in cur.description][1:]
        for path, *row in cur:
            found = dict(zip(names, row))
            self.rows[found["host"], path] = found

    def add(self, file_id: int, records: list, bads: list, advance: dict) -> None:
        self.records += records
        self.bads += bads
        facts = [r[3:-1] for r in records]
        known = self.files.get(file_id)
        if known is not None:
            known[0].extend(facts)
            facts = known[0]
        self.files[file_id] = (facts, advance)

    def flush(self, conn) -> None:
        if self.records or self.bads:
            insert_lines(conn, self.records, self.bads)
        if self.files:
            conn.executemany(ADVANCE_FLEET_FILE_SQL, [
                {**advance, **running_facts(facts)} for facts, advance in self.files.values()])
        self.records, self.bads, self.files = [], [], {}

    def forget(self) -> None:
        """Drop what is not written (the message that added it was rolled back)."""
        self.records, self.bads, self.files, self.rows = [], [], {}, {}


def _hold(conn, row: dict, header: dict, payload: bytes, now: str, summary: Summary,
          held: set | None = None) -> None:
    """An earlier message of the file is not stored yet: keep this one until
    it comes (a batch delivered again, the host's re-send) or the central
    records the gap (resolve_gaps)."""
    if held is not None:
        held.add(row["id"])
    summary.gaps += 1
    conn.execute(COUNT_GAP_SQL, {"id": row["id"]})
    conn.execute(HOLD_SQL, {"id": row["id"], "generation": header["generation"],
                            "offset": header["offset"], "at": header.get("at", header["offset"]),
                            "line": header["line"], "now": now, "payload": bytes(payload)})


class Misaligned(Exception):
    """Lines that begin before what is stored of their file but not at a
    line of theirs: not the bytes stored (quarantined)."""


def _settle_tail(conn, row: dict, start: int, body: bytes, lines: _Lines | None = None) -> None:
    """The file's last line was stored without its newline (a ``tail``) and
    a message holds that line again (from ``start``): with its newline now,
    the newline is taken; gone on, the stored line is taken back to be read
    again whole (as local ingest does). (``lines``: the batch's, written
    first.)"""
    n = row.get("unterminated_tail") or 0
    at = row["ingested_offset"] - n
    if not n or not start <= at < start + max(len(body), 1):
        return   # (an empty body: a line that went on; it is taken back)
    if lines is not None:
        lines.flush(conn)
    i = at - start
    found = conn.execute(TAIL_RAW_SQL, {"id": row["id"], "at": at}).fetchone()
    if found is not None and body[i:i + n] == bytes(found[0]) and body[i + n:i + n + 1] == b"\n":
        offset = row["ingested_offset"] + 1
        conn.execute(SETTLE_TAIL_SQL, {"id": row["id"], "offset": offset})
        row.update(ingested_offset=offset, unterminated_tail=0)
        return
    for sql in RETRACT_UNTERMINATED_SQL:
        conn.execute(sql, {"id": row["id"], "offset": at})
    conn.execute(UNDO_TAIL_SQL, {"id": row["id"], "offset": at})
    row.update(ingested_offset=at, line_count=row["line_count"] - 1, unterminated_tail=0)


def _store_lines(conn, row: dict, start: int, body: bytes, now: str, summary: Summary,
                 tail: bool = False, lines: _Lines | None = None) -> bool:
    """Store the complete lines ``body`` (from byte ``start`` of the file)
    that are past what is stored, or with ``tail`` the file's last line
    without its newline; False if they do not meet what is stored. With
    ``lines`` (a batch's), they are written with the batch's others."""
    if not tail:
        _settle_tail(conn, row, start, body, lines)
    offset, end = row["ingested_offset"], start + len(body)
    if end <= offset:
        summary.duplicates += 1
        return True
    skip = offset - start
    if skip < 0:
        return False
    if skip and body[skip - 1:skip] != b"\n":
        raise Misaligned(f"lines from byte {start} that do not meet the {offset} bytes stored "
                         "at a line")
    if tail and (skip or row.get("unterminated_tail")):
        summary.duplicates += 1   # (a tail stored already, or lines past it)
        return True
    file_id, line_no, at = row["id"], row["line_count"], offset
    records, bads = [], []
    if lines is not None and row.get("agent") in agents.OTHER_AGENTS:
        lines.flush(conn)   # (its parser reads what is stored of the file)
    other = agents.line_parser(row.get("agent"), conn, file_id)   # a Codex or Gemini file's
    parse = other.parse_line if other is not None else parse_line_bytes
    for line in ([body] if tail else body[skip:].split(b"\n")[:-1]):
        line_no += 1
        try:
            raw, fields = parse(line)
            records.append((file_id, line_no, at, *fields, raw))
        except BadLine as exc:
            if tail:   # (not a record: it waits for its newline, as local ingest has it)
                return True
            bads.append((file_id, line_no, at, str(exc), line))
        at += len(line) + 1
    # (their kinds are counted once per window of batches, by catch_up: per
    # message, counting them cost more than storing a line)
    session_id = row["session_id"] or next(
        (r[3 + _SESSION] for r in records if r[3 + _SESSION]), None)
    unterminated = len(body) if tail else 0
    advance = {"id": file_id, "offset": end, "line_count": line_no, "session_id": session_id,
               "unterminated": unterminated, "now": now}
    if lines is None:
        insert_lines(conn, records, bads)
        conn.execute(ADVANCE_FLEET_FILE_SQL, {**advance,
                                              **running_facts([r[3:-1] for r in records])})
    else:
        lines.add(file_id, records, bads, advance)
    row.update(ingested_offset=end, line_count=line_no, session_id=session_id,
               unterminated_tail=unterminated)
    summary.new_lines += len(records) + len(bads)
    summary.new_records += len(records)
    summary.bad_lines += len(bads)
    return True


class _Later(Exception):
    """A piece of a line after the next one (held)."""


def _part(conn, row: dict, header: dict, body: bytes) -> bytes | None:
    """Keep one piece of a long line; the whole line once all are here."""
    offset, end = header["offset"], header["end"]
    if end <= row["ingested_offset"]:
        return None
    if offset < row["ingested_offset"]:
        raise Misaligned(f"a piece of a line at {offset}-{end} across the {row['ingested_offset']} "
                         "bytes stored")
    if offset != row["ingested_offset"]:
        raise _Later()   # pieces are kept only of the line that comes next
    conn.execute(KEEP_PART_SQL, {"id": row["id"], "offset": offset, "at": header["at"],
                                 "data": body})
    pieces, expected = [], offset
    for at, data in conn.execute(PARTS_SQL, {"id": row["id"], "offset": offset}):
        if at != expected:
            return None   # a piece before this one is still to come
        pieces.append(data)
        expected += len(data)
    if expected != end:
        return None
    conn.execute(DROP_PARTS_SQL, {"id": row["id"], "offset": offset})
    return b"".join(pieces)


class Incoming:
    """One message as fetched: its payload, stream sequence, subject and NATS
    headers (a dict, or None)."""

    __slots__ = ("data", "seq", "subject", "headers")

    def __init__(self, data: bytes, seq: int, subject: str, headers=None):
        self.data, self.seq, self.subject, self.headers = data, seq, subject, headers


def quarantine(conn, message: Incoming, reason: str, now: str) -> int:
    """Keep a message the central cannot use, with why (once per subject
    and sequence: 0 when it was kept already)."""
    return conn.execute(QUARANTINE_SQL, {
        "now": now, "subject": message.subject, "seq": message.seq,
        "host": fleet_wire.subject_host(message.subject), "reason": reason[:500],
        "headers": json.dumps(dict(message.headers or {}), sort_keys=True),
        "data": bytes(message.data)}).rowcount


def _usable(message: Incoming, hosts: set[str] | None) -> tuple[dict, bytes]:
    """The message's (header, body) when the central may store it; BadMessage
    (the reason) when not: not a shipper's message, a subject that is not its
    host's (a host's credentials allow it its own subject only: docs/guides/fleet.md), a
    message id that is not its own, a host this central does not take."""
    header, body = fleet_wire.decode(message.data)
    expected = fleet_wire.subject(header["host"], header["kind"])
    if message.subject != expected:
        raise fleet_wire.BadMessage(f"host {header['host'][:80]!r} on subject "
                                    f"{message.subject[:120]!r}, not its own ({expected})")
    msg_id = (message.headers or {}).get("Nats-Msg-Id")
    if msg_id is None:
        raise fleet_wire.BadMessage("no Nats-Msg-Id header")
    if msg_id != fleet_wire.message_id(header):
        raise fleet_wire.BadMessage(f"Nats-Msg-Id {str(msg_id)[:120]!r} is not this "
                                    "message's")
    if hosts is not None and header["host"] not in hosts:
        raise fleet_wire.BadMessage(f"host {header['host'][:80]!r} is not one this central "
                                    "takes (--hosts)")
    return header, body


# What storing a message that passed _usable can still meet in its values
# (a host and a path that make another file's fleet:// path, numbers past
# SQLite's): the message is quarantined, the rest of the batch goes on.
UNSTORABLE = (ValueError, TypeError, KeyError, OverflowError, UnicodeError,
              sqlite3.IntegrityError, Misaligned)


class _Alone(Exception):
    """A message of a batch written without savepoints cannot be stored:
    the batch is written again, each message in a savepoint of its own."""


class _Batch:
    """What the messages of one fetched batch share: its time, the hosts
    this central takes, each host's messages stored (its fleet_hosts row is
    written once a batch), the files that may have held messages (only
    those look for one to release), and what its messages store (written
    together: _Lines)."""

    __slots__ = ("now", "hosts", "seen", "held", "lines")

    def __init__(self, conn, now: str, hosts: set[str] | None):
        self.now, self.hosts, self.seen, self.lines = now, hosts, Counter(), _Lines()
        self.held = {file_id for (file_id,) in conn.execute(HELD_FILES_SQL)}


def _checked(message: Incoming, hosts: set[str] | None):
    """_usable's (header, body), or the BadMessage it raised."""
    try:
        return _usable(message, hosts)
    except fleet_wire.BadMessage as exc:
        return exc


def apply_message(conn, message: Incoming, batch: _Batch, summary: Summary,
                  alone: bool = True, checked=None) -> None:
    """One message, inside the caller's transaction: stored, held until the
    bytes before it come, or (one the central cannot use) quarantined
    (``checked``: what _checked made of it already).
    ``alone``: in a savepoint of its own, so that a message that cannot be
    stored is rolled back alone and quarantined; without it (a batch's first
    try), such a message raises _Alone and the batch is written again."""
    usable = _checked(message, batch.hosts) if checked is None else checked
    if isinstance(usable, fleet_wire.BadMessage):
        summary.bad_messages += 1
        quarantine(conn, message, str(usable), batch.now)
        return
    header, body = usable
    if not alone:
        try:
            _apply(conn, header, body, bytes(message.data), batch, summary)
        except UNSTORABLE:
            raise _Alone() from None
        batch.seen[header["host"]] += 1
        return
    conn.execute("SAVEPOINT message")   # (the batch's lines so far are written)
    before, held = summary.counts(), set(batch.held)
    try:
        _apply(conn, header, body, bytes(message.data), batch, summary)
        batch.lines.flush(conn)   # (inside its savepoint)
    except UNSTORABLE as exc:
        conn.execute("ROLLBACK TO message")
        conn.execute("RELEASE message")
        summary.restore(before)
        batch.held = held
        batch.lines.forget()
        summary.bad_messages += 1
        quarantine(conn, message, f"cannot be stored: {type(exc).__name__}: {exc}", batch.now)
        return
    conn.execute("RELEASE message")
    batch.seen[header["host"]] += 1


def _apply(conn, header: dict, body: bytes, payload: bytes, batch: _Batch,
           summary: Summary) -> None:
    summary.messages += 1
    summary.hosts.add(header["host"])
    sent = header.get("sent_at")
    if type(sent) is float and math.isfinite(sent) and \
            sent > summary.sent_at.get(header["host"], 0.0):
        summary.sent_at[header["host"]] = sent
    now = batch.now
    row = _file(conn, header, body, now, summary, batch.lines)
    if row is None:
        summary.duplicates += 1
        return
    if _take(conn, row, header, body, payload, now, summary, batch.held, batch.lines) and \
            row["id"] in batch.held:
        _release(conn, row, now, summary, batch.lines)


def _take(conn, row: dict, header: dict, body: bytes, payload: bytes, now: str,
          summary: Summary, held: set | None = None, lines: _Lines | None = None) -> bool:
    """Store a message of the row's file at its generation, or hold it (its
    file then joins ``held``); True when what is stored moved on. (``lines``:
    the batch's, _store_lines.)"""
    if header["kind"] == "deleted":
        if lines is not None:   # (its row as the lines before left it)
            lines.flush(conn)
        summary.deleted_files += conn.execute(MARK_DELETED_SQL, {"id": row["id"],
                                                                 "now": now}).rowcount
        return False
    start = header["offset"]
    if header["kind"] == "tail":
        if not _store_lines(conn, row, start, body, now, summary, tail=True, lines=lines):
            _hold(conn, row, header, payload, now, summary, held)
            return False
        return True
    if header["kind"] == "part":
        if row.get("unterminated_tail") and start == row["ingested_offset"] - \
                row["unterminated_tail"]:
            _settle_tail(conn, row, start, b"", lines)   # (a line that went on past a message)
        try:
            body = _part(conn, row, header, body)
        except _Later:
            _hold(conn, row, header, payload, now, summary, held)
            return False
        if body is None:
            return False
    if not _store_lines(conn, row, start, body, now, summary, lines=lines):
        _hold(conn, row, header, payload, now, summary, held)
        return False
    return True


def _release(conn, row: dict, now: str, summary: Summary, lines: _Lines | None = None) -> None:
    """Store the held messages of the file that now meet what is stored,
    in order (each taken once: it leaves fleet_held first). (``lines``: the
    batch's, written before each held message's savepoint.)"""
    while True:
        found = conn.execute(NEXT_HELD_SQL, {"id": row["id"]}).fetchone()
        if found is None:
            return
        generation, offset, at, payload = found
        if generation == row["remote_generation"] and offset > row["ingested_offset"]:
            return   # still to come
        conn.execute(DROP_HELD_SQL, {"id": row["id"], "generation": generation,
                                     "offset": offset, "at": at})
        if generation != row["remote_generation"]:
            continue
        header, body = fleet_wire.decode(payload)
        if lines is not None:
            lines.flush(conn)
        conn.execute("SAVEPOINT held")
        try:
            _take(conn, row, header, body, payload, now, summary, lines=lines)
        except Misaligned as exc:   # (held before what was stored since met it)
            conn.execute("ROLLBACK TO held")
            summary.bad_messages += 1
            quarantine(conn, Incoming(payload, None, fleet_wire.subject(row["host"],
                                                                        header["kind"])),
                       f"cannot be stored: {exc}", now)
        conn.execute("RELEASE held")


def apply_batch(db, messages: list[Incoming], consumer: str, summary: Summary,
                hosts: set[str] | None = None) -> None:
    """Write a fetched batch in one transaction, with the stream position it
    reaches and each host's row once: every message is then acknowledged.
    The batch is written without a savepoint per message; when one of its
    messages cannot be stored, it is written again with one each (that
    message quarantined alone)."""
    before = summary.counts()
    try:
        _write_batch(db, messages, consumer, summary, hosts, alone=False)
    except _Alone:   # (rolled back)
        summary.restore(before)
        _write_batch(db, messages, consumer, summary, hosts, alone=True)


def _write_batch(db, messages: list[Incoming], consumer: str, summary: Summary,
                 hosts: set[str] | None, alone: bool) -> None:
    now = utcnow()
    with write_lock(db) as conn:
        batch = _Batch(conn, now, hosts)
        checked = [_checked(m, hosts) for m in messages]
        batch.lines.read(conn, [c[0] for c in checked if not isinstance(c, Exception)])
        for message, usable in zip(messages, checked):
            apply_message(conn, message, batch, summary, alone, usable)
        if not alone:   # (alone, each message's lines were written in its savepoint)
            try:
                batch.lines.flush(conn)
            except UNSTORABLE:   # (rolled back: write_lock)
                raise _Alone() from None
        conn.executemany(SEEN_HOST_SQL, [{"host": host, "now": now, "n": n}
                                         for host, n in batch.seen.items()])
        conn.execute(POSITION_SQL, {"name": consumer, "now": now,
                                    "seq": max(m.seq for m in messages)})
        conn.execute(LAST_INGEST_AT_SQL, [now])   # (status, the health page: a central ingests)


class Waiting:
    """A file with held messages: its host, path, generation, what is stored
    (``stored``), the first held message's offset and line, since when."""

    __slots__ = ("file_id", "host", "remote_path", "generation", "ingested_offset",
                 "line_start", "since", "next_offset", "next_line")

    def __init__(self, **row):
        for name, value in row.items():
            setattr(self, name, value)


def waiting_files(db) -> list[Waiting]:
    return [Waiting(**row) for row in dict_rows(db.conn, WAITING_FILES_SQL)]


def record_gaps(db, files: list[Waiting], reason: str, summary: Summary) -> list[dict]:
    """Record the bytes each file waited for in vain as a gap, and go on
    with its held messages from the first one. Returns the gaps."""
    now = utcnow()
    gaps = []
    with write_lock(db) as conn:
        for w in files:
            gap = {"file_id": w.file_id, "host": w.host, "remote_path": w.remote_path,
                   "generation": w.generation, "start": w.ingested_offset,
                   "end": w.next_offset, "since": w.since, "now": now, "reason": reason}
            conn.execute(RECORD_GAP_SQL, gap)
            for sql in SKIP_GAP_SQL:
                conn.execute(sql, {"file_id": w.file_id, "end": w.next_offset,
                                   "line": w.next_line})
            summary.recorded_gaps += 1
            cur = conn.execute(FLEET_FILE_BY_ID_SQL, {"id": w.file_id})
            row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
            _release(conn, row, now, summary)
            gaps.append(gap)
    return gaps


def record_heartbeats(db, beats: list[tuple[str, float]], bad: list[tuple] = ()) -> int:
    """Store each host's last heartbeat; quarantine the values that are not
    heartbeats (``bad``: (Incoming, reason) pairs). Returns how many of
    those were new."""
    if not beats and not bad:
        return 0
    now = utcnow()
    with write_lock(db) as conn:
        for host, at in beats:
            conn.execute(HEARTBEAT_SQL, {"host": host, "at": _iso(at)})
        return sum(quarantine(conn, message, reason, now) for message, reason in bad)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


# How long one read of the heartbeat bucket may take (a server going away
# meanwhile: the heartbeats are read again next time).
HEARTBEAT_READ_WAIT_S = 5.0


async def _read_heartbeats(kv, hosts: set[str] | None = None
                           ) -> tuple[list[tuple[str, float]], list[tuple]]:
    """([(host, at)], [(Incoming, reason)]): each host's last heartbeat (of
    ``hosts`` only, when given), and the bucket's values that are not
    heartbeats (fleet_wire.heartbeat). One watcher streams every key's last
    value (not a request per key: a fleet has thousands)."""
    tokens = {fleet_wire.host_token(h) for h in hosts} if hosts else None
    beats, bad = [], []

    async def read():
        watcher = await kv.watchall(ignore_deletes=True)
        try:
            async for entry in watcher:   # every key's last value, then None
                if entry is None:
                    return
                if tokens is not None and entry.key not in tokens:
                    continue
                try:
                    host, at = fleet_wire.heartbeat(entry.key, entry.value or b"", time.time())
                    if hosts is None or host in hosts:
                        beats.append((host, at))
                except fleet_wire.BadMessage as exc:
                    bad.append((Incoming(entry.value or b"", entry.revision,
                                         f"$KV.{fleet_nats.HEARTBEAT_BUCKET}.{entry.key}"),
                                str(exc)))
        finally:
            try:
                await watcher.stop()
            except fleet_nats.TRANSIENT:
                pass

    try:
        await asyncio.wait_for(read(), HEARTBEAT_READ_WAIT_S)
    except (*fleet_nats.TRANSIENT, asyncio.TimeoutError):   # the server is away: next time
        pass
    return beats, bad


async def _reconcile(db, js, consumer: str) -> None:
    """A durable consumer that acknowledged more than this index holds (a
    new index under an old consumer name, or one restored from a backup)
    starts again from the stream's first message: what the index has is
    skipped by offset, what it lost is stored again."""
    from nats.js.errors import NotFoundError   # (nats-py: the optional fleet extra)

    row = db.conn.execute(CONSUMER_POSITION_SQL, [consumer]).fetchone()
    try:
        info = await js.consumer_info(fleet_wire.STREAM, consumer)
    except NotFoundError:
        return
    if info.ack_floor is not None and (info.ack_floor.stream_seq or 0) > (row[0] if row else 0):
        await js.delete_consumer(fleet_wire.STREAM, consumer)


def _tell(live, summary: Summary, before: dict) -> None:
    """What a batch (or a round of gap minding) did, to the process's
    metrics: messages, lines, quarantined, gaps, each host's lag."""
    if live is None:
        return
    for name, field in (("messages", "messages"), ("lines", "new_lines"),
                        ("quarantined", "bad_messages"), ("gaps", "recorded_gaps")):
        live.add(f"session_index_fleet_{name}_total", getattr(summary, field) - before[field])
    now = time.time()
    for host, sent in summary.sent_at.items():   # (of the hosts in this batch)
        live.set("session_index_fleet_lag_seconds", host, max(0.0, now - sent))
    summary.sent_at.clear()


def _epoch(iso_time: str) -> float:
    return datetime.fromisoformat(iso_time.replace("Z", "+00:00")).timestamp()


async def _mind_gaps(db, nc, js, gap_wait: float, asked: dict, summary: Summary, log,
                     live=None) -> bool:
    """The files that wait for bytes before their held messages: after
    ASK_AFTER_S (or half of ``gap_wait``) ask each one's host to send them
    again (a core NATS message on fleet_wire.resend_subject, every
    ASK_EVERY_S; a host that still has them does); after ``gap_wait``,
    record them as a gap, say so in the log, and go on. True when gaps were
    recorded (the caches are to be derived)."""
    waiting = waiting_files(db)
    if not waiting:
        asked.clear()
        return False
    now = time.time()
    due = []
    for w in waiting:
        held_for = now - _epoch(w.since)
        if held_for >= gap_wait:
            due.append(w)
        elif held_for >= min(ASK_AFTER_S, gap_wait / 2) and \
                now - asked.get(w.file_id, 0.0) >= ASK_EVERY_S:
            asked[w.file_id] = now
            if live is not None:
                live.add("session_index_fleet_resends_total")
            try:
                await nc.publish(fleet_wire.resend_subject(w.host), fleet_wire.resend_request(
                    w.host, w.remote_path, w.generation, w.line_start))
            except fleet_nats.TRANSIENT:   # the server is away: asked again later
                pass
    if not due:
        return False
    reason = await _why_missing(js, gap_wait)
    for gap in record_gaps(db, due, reason, summary):
        asked.pop(gap["file_id"], None)
        log(f"gap: host {gap['host']} {gap['remote_path']} generation {gap['generation']}: "
            f"bytes {gap['start']}-{gap['end']} never came ({reason}); going on from byte "
            f"{gap['end']}")
    return True


async def _why_missing(js, gap_wait: float) -> str:
    """Why bytes a file waited for are not coming, as far as the stream says."""
    why = f"not sent again by the host within {gap_wait:g} s"
    try:
        state = (await js.stream_info(fleet_wire.STREAM)).state
    except fleet_nats.TRANSIENT:
        return "not in the stream; " + why
    if (state.first_seq or 0) > 1 or state.num_deleted:
        deleted = f", {state.num_deleted} deleted" if state.num_deleted else ""
        return (f"not in the stream (it holds #{state.first_seq}-#{state.last_seq}{deleted}: "
                f"trimmed by its limits, purged, or lost by the server); {why}")
    return f"not in the stream (lost by the server, or sent to another stream); {why}"


# A JetStream message's reply subject (its acknowledgement's) as the server
# writes it without a domain: $JS.ACK.<stream>.<consumer>.<delivered>.<stream
# seq>.<consumer seq>.<time>.<pending> (pending: the consumer's messages the
# server holds after this one, not delivered yet).
ACK_TOKENS, ACK_STREAM_SEQ, ACK_PENDING = 9, 5, 8


def stream_seq(m) -> int:
    """The stream sequence of a fetched message, read from its reply
    subject (nats-py's ``metadata`` builds every field of it, a datetime
    too: 3% of the central's time at one line a message); any other form
    of reply (a domain's) through ``metadata``."""
    tokens = (m.reply or "").split(".")
    if len(tokens) == ACK_TOKENS and tokens[0] == "$JS" and tokens[1] == "ACK":
        return int(tokens[ACK_STREAM_SEQ])
    return m.metadata.sequence.stream


def pending_after(m) -> int:
    """How many of its consumer's messages the server still held, not
    delivered, when it delivered ``m`` (its reply subject, as stream_seq
    reads it; else ``metadata``)."""
    tokens = (m.reply or "").split(".")
    if len(tokens) == ACK_TOKENS and tokens[0] == "$JS" and tokens[1] == "ACK":
        return int(tokens[ACK_PENDING])
    return m.metadata.num_pending


def behind(msgs: list) -> bool:
    """A whole FETCH_BATCH or more was still waiting at the server after
    these messages (the central is behind its hosts)."""
    return bool(msgs) and pending_after(msgs[-1]) >= FETCH_BATCH


async def _fetch(pull: fleet_nats.Pull, wait: float, gather: float = GATHER_S) -> list:
    """A fetched batch, or [] when nothing came within ``wait``; once
    something came (fewer than FETCH_BATCH messages), what else comes within
    ``gather`` seconds joins it (up to FETCH_BATCH messages), delivered on
    the pull request already open (fleet_nats.Pull: not a request per
    message or two as they trickle in)."""
    return await pull.fetch(wait, gather)


async def _fetch_more(pull: fleet_nats.Pull, wait: float, was_behind: bool = False) -> list:
    """_fetch's batch (without gathering when the last one was ``behind``:
    what is waiting is taken at once); while the server still holds a whole
    batch after it (behind), what is waiting joins it, up to BEHIND_FETCHES
    fetches or BEHIND_BYTES (one transaction for them all)."""
    msgs = await _fetch(pull, wait, gather=0 if was_behind else GATHER_S)
    size = sum(len(m.data) for m in msgs)
    for _ in range(BEHIND_FETCHES - 1):
        if not behind(msgs) or size >= BEHIND_BYTES:
            break
        more = await _fetch(pull, BEHIND_WAIT_S, gather=0)
        if not more:
            break
        msgs += more
        size += sum(len(m.data) for m in more)
    return msgs


async def _subscribe(db, nc, consumer: str, hosts: list[str] | None):
    """(jetstream, the heartbeat bucket, [(consumer name, pull subscription)]):
    the stream made if missing, each consumer reconciled with the index."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy   # (nats-py: the optional fleet extra)
    from nats.js.errors import NotFoundError   # (nats-py: the optional fleet extra)

    js = nc.jetstream()
    await fleet_nats.ensure_stream(js)
    kv = await fleet_nats.heartbeats(js)
    subs = []
    for name, subject in fleet_wire.consumers(consumer, hosts):
        await _reconcile(db, js, name)
        try:
            await js.consumer_info(fleet_wire.STREAM, name)
        except NotFoundError:
            await js.add_consumer(fleet_wire.STREAM, ConsumerConfig(
                durable_name=name, filter_subject=subject, ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL, ack_wait=ACK_WAIT_S,
                max_ack_pending=MAX_ACK_PENDING))
        subs.append((name, await fleet_nats.Pull(nc, fleet_wire.STREAM, name,
                                                 FETCH_BATCH).start()))
    return js, kv, subs


async def consume(db, options: fleet_nats.ConnectOptions, *, consumer: str | None = None,
                  hosts: list[str] | None = None, watch: bool = False,
                  stop: asyncio.Event | None = None, after_batch=None,
                  log=lambda line: None, gap_wait: float = GAP_WAIT_S,
                  live=None) -> Summary:
    """Drain what is waiting (or with ``watch``, keep consuming until
    ``stop``); ``after_batch(summary)`` (derive the caches) runs after the
    batches of each window (DERIVE_WINDOW_S and longer), and when none is
    waiting; while it returns true (files left: its budget is spent) it
    runs again after the next fetch.
    With ``hosts``, only those hosts' messages (fleet_wire.consumers: a
    consumer per host, each with its own position). A file that waits
    ``gap_wait`` seconds for bytes the stream no longer holds gets a gap
    (_mind_gaps). ``live`` (a fleet_metrics.Live) is told each batch and each
    round of the loop (the metrics endpoint and /healthz)."""
    started = time.monotonic()
    db.conn.execute(TEMP_STORE_SQL)
    db.conn.execute(CACHE_SQL)
    checkpointer = None
    asked: dict[int, float] = {}   # file id: when its host was last asked to re-send
    summary = Summary()
    opened = OpenedFile(db.conn)
    consumer = consumer or fleet_wire.DEFAULT_CONSUMER
    stop = stop or asyncio.Event()
    taken = set(hosts) if hosts else None
    try:
        nc = await fleet_nats.connect(options, name="session-index central", follow=watch,
                                      stop=stop, log=log)
    except fleet_nats.Stopped:   # a signal before the server answered: nothing to do
        summary.seconds = round(time.monotonic() - started, 3)
        return summary
    try:
        while True:   # the stream, the heartbeats and the consumers
            try:
                js, kv, subs = await _subscribe(db, nc, consumer, hosts)
                break
            except fleet_nats.TRANSIENT as exc:   # a server that is (re)starting
                if not watch:
                    raise fleet_nats.FleetError(f"{options.url}: {type(exc).__name__}: "
                                                f"{str(exc) or 'no answer'}") from None
                log(f"NATS: subscribing: {type(exc).__name__}: {str(exc) or 'no answer'}: "
                    "retrying")
                try:   # a signal meanwhile: stop
                    await asyncio.wait_for(stop.wait(), RETRY_DELAY_S)
                except asyncio.TimeoutError:
                    continue
                summary.seconds = round(time.monotonic() - started, 3)
                return summary
        summary.bad_heartbeats += record_heartbeats(db, *await _read_heartbeats(kv, taken))
        if watch and opened.path:   # (a file index, followed: its WAL checkpointed aside)
            checkpointer = Checkpointer(db, opened.path).start()
        last_beats = derived_at = time.monotonic()
        underived = False   # batches committed since the caches were last current
        deriving = False    # after_batch said files are left to derive (its budget)
        window, spent = DERIVE_WINDOW_S, 0.0   # this window; the derive's time so far
        late = [False] * len(subs)   # each consumer's last batch: behind its hosts
        while not stop.is_set():
            if live is not None:
                live.beat()
            try:   # every consumer's next batch at once; each is written on its own
                wait = DERIVING_WAIT_S if deriving else IDLE_S if watch and underived \
                    else FETCH_WAIT_S
                fetched = await asyncio.gather(*(_fetch_more(sub, wait, was)
                                                 for (_, sub), was in zip(subs, late)))
            except fleet_nats.TRANSIENT as exc:
                if not watch:
                    raise fleet_nats.FleetError(f"{options.url}: {type(exc).__name__}: "
                                                f"{str(exc) or 'no answer'}") from None
                log(f"NATS: {type(exc).__name__}: {str(exc) or 'no answer'}: retrying")
                await asyncio.sleep(RETRY_DELAY_S)
                continue
            late = [behind(msgs) for msgs in fetched]
            is_behind = any(late)
            for (name, _), msgs in zip(subs, fetched):
                if not msgs:
                    continue
                before = summary.counts()
                apply_batch(db, [Incoming(m.data, stream_seq(m), m.subject, m.headers)
                                 for m in msgs], name, summary, taken)
                _tell(live, summary, before)
                opened.verify()   # committed into a file still the index, or none acked
                try:
                    for m in msgs:   # after the commit, never before
                        await m.ack()
                    await nc.flush()
                except fleet_nats.TRANSIENT as exc:   # they come again: skipped by offset
                    log(f"NATS: acknowledging: {type(exc).__name__}: {str(exc) or 'no answer'}")
                underived = True
            before = summary.counts()
            if await _mind_gaps(db, nc, js, gap_wait, asked, summary, log, live):
                underived = True
            _tell(live, summary, before)
            if after_batch is not None and (deriving and not is_behind or underived and (
                    not any(fetched) or time.monotonic() - derived_at >= (
                        max(window, DERIVE_BEHIND_S) if is_behind else window))):
                began = time.monotonic()
                if not deriving:   # a window's derive begins: what is committed so far
                    underived = False
                deriving = bool(after_batch(summary))   # each session touched since, once
                spent += time.monotonic() - began
                if not deriving:
                    derived_at = time.monotonic()
                    window = min(DERIVE_WINDOW_MAX_S, max(DERIVE_WINDOW_S, spent * DERIVE_GROWTH))
                    spent = 0.0
            if not watch and not any(fetched) and not deriving:
                break
            if time.monotonic() - last_beats >= HEARTBEAT_READ_S:
                summary.bad_heartbeats += record_heartbeats(db, *await _read_heartbeats(kv, taken))
                last_beats = time.monotonic()
        if after_batch is not None:
            while deriving:   # the window's derive, to its end
                deriving = bool(after_batch(summary))
            while underived:   # then what came during it
                underived = bool(after_batch(summary))
        if not watch:
            summary.bad_heartbeats += record_heartbeats(db, *await _read_heartbeats(kv, taken))
    finally:
        if checkpointer is not None:
            checkpointer.stop()
        await fleet_nats.close(nc)
    summary.seconds = round(time.monotonic() - started, 3)
    return summary


def catch_up(db) -> None:
    """After a window of batches, as after a local ingest run: the caches
    derived, the records' kinds counted (record-types; the kinds first seen
    are this window's)."""
    derive.derive_pending(db)
    record_kinds.after_ingest(db)


class CatchUp:
    """catch_up a step at a time, for a following central (its after_batch):
    the files marked when a window's derive begins are derived, at most
    ``budget_s`` a call (a transaction of DERIVE_STEP_FILES files at least);
    then the record kinds of the files changed by then are counted as
    catch_up does, at most ``budget_s`` a call too (COUNT_FILES files at
    least), and the run is ended. A call returns True while some are left
    (call again after the next batch: lines are not held back by a derive,
    or a count, of thousands of sessions). Files marked meanwhile are the
    next window's."""

    def __init__(self, db, budget_s: float = DERIVE_BUDGET_S):
        self.db, self.budget_s = db, budget_s
        self.left: list[int] | None = None   # this window's files still to derive
        self.uncounted: list[int] | None = None   # then, the files whose kinds to count

    def __call__(self) -> bool:
        if self.left is None:
            self.left = derive.pending_files(self.db)
        if self.left:
            self.left = derive.derive_some(self.db, self.left, self.budget_s,
                                           DERIVE_STEP_FILES)
            if self.left:
                return True
        if self.uncounted is None:
            self.uncounted = record_kinds.pending_files(self.db)
        self.uncounted = record_kinds.count_some(self.db, self.uncounted,
                                                 budget_s=self.budget_s)
        if self.uncounted:
            return True
        self.left = self.uncounted = None
        return False


class Checkpointer:
    """Checkpoints the index's WAL from a thread of its own (CHECKPOINT_BYTES
    and more, every CHECKPOINT_EVERY_S) while ``db``'s connection writes; the
    connection's own autocheckpoint is set to CHECKPOINT_BACKSTOP_PAGES until
    ``stop``, then put back. ``checkpoints``: how many it ran (tests)."""

    def __init__(self, db, path: str):
        self.db, self.wal = db, path + "-wal"
        self.path = path
        self.before = db.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        self.stopped = threading.Event()
        self.checkpoints = 0
        self.thread = threading.Thread(target=self._run, name="checkpointer", daemon=True)

    def start(self) -> "Checkpointer":
        self.db.conn.execute(AUTOCHECKPOINT_SQL.format(pages=CHECKPOINT_BACKSTOP_PAGES))
        self.thread.start()
        return self

    def _run(self) -> None:
        conn = connect(self.path)
        try:
            while not self.stopped.wait(CHECKPOINT_EVERY_S):
                try:
                    if os.path.getsize(self.wal) >= CHECKPOINT_BYTES:
                        conn.execute(CHECKPOINT_SQL).fetchall()
                        self.checkpoints += 1
                except (OSError, sqlite3.Error):   # (no WAL yet, busy: next time)
                    pass
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.db.conn.execute(AUTOCHECKPOINT_SQL.format(pages=self.before))


class Follower:
    """``consume(watch=True)`` in a thread of its own, with its own event
    loop and index connection (``serve --watch --from``); ``request_stop``
    from any thread ends it after its current batch."""

    def __init__(self, db_path: str, options: fleet_nats.ConnectOptions, *,
                 consumer: str | None, log, hosts: list[str] | None = None,
                 gap_wait: float = GAP_WAIT_S, live=None):
        self.db_path, self.options, self.consumer, self.log = db_path, options, consumer, log
        self.hosts, self.gap_wait, self.live = hosts, gap_wait, live
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()

    def run(self) -> Summary:
        db = open_db(self.db_path)
        step = CatchUp(db)
        try:
            return self.loop.run_until_complete(consume(
                db, self.options, consumer=self.consumer, hosts=self.hosts, watch=True,
                stop=self.stop, gap_wait=self.gap_wait, live=self.live,
                after_batch=lambda summary: self._batch(db, summary, step), log=self.log))
        finally:
            db.conn.close()
            self.loop.close()

    def _batch(self, db, summary: Summary, step: CatchUp) -> bool:
        self.log(f"batch: {summary.messages} messages, {summary.new_lines} new lines so far")
        return step()

    def request_stop(self, sig=None) -> None:
        try:
            self.loop.call_soon_threadsafe(self.stop.set)
        except RuntimeError:   # the loop is closed: it has stopped already
            pass
