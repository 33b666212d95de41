"""Session references: the session ids an application holds and means to
resume (``session-index refs import``)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from indexer.sql import write_lock
from indexer.index.clock import utcnow

FIELDS = ("session_id", "source", "key", "cached_at")

# A reference is (source, key, session_id); importing it again only refreshes
# cached_at, so re-importing a file adds nothing.
UPSERT_REF_SQL = """
INSERT INTO session_refs (source, key, session_id, cached_at, imported_from, imported_at)
VALUES (:source, :key, :session_id, :cached_at, :imported_from, :now)
ON CONFLICT (source, key, session_id) DO UPDATE SET cached_at = excluded.cached_at
WHERE session_refs.cached_at IS NOT excluded.cached_at
""".strip()


REF_EXISTS_SQL = """
SELECT 1 FROM session_refs WHERE source = :source AND key = :key AND session_id = :session_id
""".strip()


class RefsFileError(Exception):
    """The refs file cannot be read at all."""


@dataclass
class ImportResult:
    rows: int = 0          # rows read
    added: int = 0         # new references
    updated: int = 0       # references whose cached_at changed
    rejected: list = field(default_factory=list)   # (row number, reason)

    def as_dict(self) -> dict:
        return {"rows": self.rows, "added": self.added, "updated": self.updated,
                "rejected": [{"row": n, "error": e} for n, e in self.rejected]}


class Unreadable(str):
    """Why a row of a refs file could not be read (a JSONL line that is not
    JSON): told apart from a row that is itself a string, which is rejected
    as not an object."""


def _rows(path: Path):
    """(row number, the row's value or Unreadable) for every row of a CSV,
    JSON or JSONL file; the format is told by the extension, else by the
    content."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise RefsFileError(f"{path}: cannot read it ({exc})") from None
    suffix = path.suffix.lower()
    stripped = text.lstrip()
    if suffix == ".csv" or (suffix not in (".json", ".jsonl", ".ndjson")
                            and not stripped.startswith(("{", "["))):
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames or "session_id" not in [f.strip() for f in reader.fieldnames]:
            raise RefsFileError(f"{path}: a CSV refs file needs a header row with session_id")
        for row in reader:
            yield reader.line_num, {k.strip(): v for k, v in row.items() if k is not None}
        return
    if suffix == ".json" or (suffix not in (".jsonl", ".ndjson") and stripped.startswith("[")):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RefsFileError(f"{path}: not valid JSON ({exc})") from None
        if isinstance(data, dict):
            data = data.get("refs", data.get("sessions", [data]))
        if not isinstance(data, list):
            raise RefsFileError(f"{path}: expected a JSON array of objects")
        yield from enumerate(data, 1)
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except ValueError as exc:
            yield n, Unreadable(f"invalid JSON: {exc}")


def _check(obj) -> dict | str:
    """A clean reference, or why the row is rejected."""
    if isinstance(obj, Unreadable):
        return str(obj)
    if not isinstance(obj, dict):
        return f"not an object (a {type(obj).__name__})"
    sid = obj.get("session_id")
    if not isinstance(sid, str) or not sid.strip():
        return "session_id missing or not a non-empty string"
    ref = {"session_id": sid.strip()}
    for name in ("source", "key", "cached_at"):
        value = obj.get(name)
        if value is None or value == "":
            ref[name] = None if name == "cached_at" else ""
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            ref[name] = str(value).strip()
        else:
            return f"{name} is a {type(value).__name__}, not a string"
    return ref


def import_refs(db, path: str) -> ImportResult:
    """Record the references in ``path``; bad rows are listed, good ones kept."""
    path = Path(path)
    result = ImportResult()
    refs = []
    for n, obj in _rows(path):
        result.rows += 1
        ref = _check(obj)
        if isinstance(ref, str):
            result.rejected.append((n, ref))
        else:
            refs.append(ref)
    now = utcnow()
    with write_lock(db) as conn:
        for ref in refs:
            known = conn.execute(REF_EXISTS_SQL, ref).fetchone() is not None
            cur = conn.execute(UPSERT_REF_SQL, dict(ref, imported_from=str(path.resolve()), now=now))
            if not known:
                result.added += 1
            elif cur.rowcount:
                result.updated += 1
    return result
