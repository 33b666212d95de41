"""The rows a file's new lines become, as every writer of the index stores
them (ingest, the preload workers, the session store, a fleet's central):
the records and bad_lines rows, the running facts they add to their files
row, and the hashes of a file's head and of the bytes before its offset
that the next run checks."""

from __future__ import annotations

from indexer.transcripts.digests import blake2b
from indexer.transcripts.records import RECORD_FIELDS
from indexer.transcripts.rows import bindable

# A file's first bytes, and the bytes before its offset, that are hashed.
HEAD_BYTES = 1024
TAIL_BYTES = 4096

# Field positions in a parsed record (records.RECORD_FIELDS).
_TIMESTAMP = RECORD_FIELDS.index("timestamp")
_CWD, _VERSION, _BRANCH = (RECORD_FIELDS.index(k) for k in ("cwd", "version", "git_branch"))


def digest_of(data: bytes) -> str:
    """The hash of a file's head or tail bytes, as files.head_hash keeps it."""
    return blake2b(data, digest_size=16).hexdigest()


_INSERT_RECORD_SQL = (
    "INSERT INTO records (file_id, line_no, byte_offset, "
    + ", ".join(RECORD_FIELDS)
    + ", raw) VALUES (" + "?, " * (len(RECORD_FIELDS) + 3) + "{raw})"
)
# raw is text, or the line's UTF-8 bytes taken as text (lines.parse_line_bytes).
INSERT_RECORD_SQL = _INSERT_RECORD_SQL.format(raw="CAST(? AS TEXT)")
INSERT_BAD_LINE_SQL = (
    "INSERT INTO bad_lines (file_id, line_no, byte_offset, error, raw) VALUES (?, ?, ?, ?, ?)"
)
# A large line's row, its raw value a placeholder of the right length that
# _write_raw then fills from the read buffer (no copy of the line in Python).
INSERT_LARGE_RECORD_SQL = _INSERT_RECORD_SQL.format(raw="CAST(zeroblob(?) AS TEXT)")
INSERT_LARGE_BAD_LINE_SQL = INSERT_BAD_LINE_SQL[:-len("?)")] + "zeroblob(?))"


def insert_lines(conn, records: list, bads: list) -> None:
    """Store parsed lines: ``records`` and ``bads`` rows as lines.line_row
    makes them (in file order, each list)."""
    if records:
        conn.executemany(INSERT_RECORD_SQL, bindable(records))
    if bads:
        conn.executemany(INSERT_BAD_LINE_SQL, bads)


# The SET clauses that fold a batch's running_facts() into a files row
# (sessions are summed from these); shared with store.py.
RUNNING_FACTS_SET = """
  records = records + :new_records,
  first_timestamp = coalesce(min(first_timestamp, :first_ts), first_timestamp, :first_ts),
  last_timestamp = coalesce(max(last_timestamp, :last_ts), last_timestamp, :last_ts),
  cwd = coalesce(cwd, :cwd), version = coalesce(:version, version),
  git_branch = coalesce(:git_branch, git_branch)""".strip()


def running_facts(fields: list[tuple]) -> dict:
    """RUNNING_FACTS_SET's parameters for a batch of records' fields
    (records.RECORD_FIELDS order), in file order."""
    stamps = [f[_TIMESTAMP] for f in fields if f[_TIMESTAMP]]

    def first(i):
        return next((f[i] for f in fields if f[i]), None)

    def last(i):
        return next((f[i] for f in reversed(fields) if f[i]), None)

    return {"new_records": len(fields), "first_ts": min(stamps, default=None),
            "last_ts": max(stamps, default=None), "cwd": first(_CWD),
            "version": last(_VERSION), "git_branch": last(_BRANCH)}
