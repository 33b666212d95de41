"""Repairing spliced, poisoned and wedged transcripts, and showing the
recovered conversation.

What changes is the ``repair_plan`` view (views.py). The repaired bytes are
the stored lines with each planned line re-parented (only its parentUuid
value is rewritten, every other byte kept), dropped, or stripped of the
thinking blocks the API refuses (the line written again as Claude Code
writes JSON, compact, checked to differ from the original in those blocks
only). ``--write`` keeps a
backup next to the file and the original bytes in the ``repairs`` table,
writes to a temporary name, renames into place, re-ingests and verifies; a
file that changed under it, or a repair that does not verify, is rolled back.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field

from indexer.transcripts.digests import sha256
from indexer.chain import definitions
from indexer.transcripts.safefiles import open_regular, temp_beside
from indexer.transcripts import agents, conversation
from indexer.sql import write_lock
from indexer.sql import dict_rows
from indexer.index.clock import utcnow
from indexer.index import views
from indexer.ingest.files import ingest, stored_bytes
from indexer.signals import classes, compaction

LIVE_SECONDS = 60
# A repair writes this machine's transcripts only (host ''): another host's
# copy is repaired there.
PLAN_SQL = (f"SELECT * FROM ({views.repair_plan_of('h.session_id = :session_id')}) "
            "WHERE session_id = :session_id AND host = :host ORDER BY line_no")
MAIN_FILE_SQL = """
SELECT f.id, f.path, f.size, f.mtime_ns, f.inode, f.deleted_at
FROM session_hosts s JOIN files f ON f.id = s.main_file_id
WHERE s.session_id = ? AND s.host = ?
""".strip()
CHAIN_LENGTH_SQL = "SELECT count(*) FROM leaf_ancestry WHERE file_id = ? AND rule = 'resume'"
ORPHAN_CAUSES_SQL = "SELECT uuid, cause FROM orphans WHERE file_id = ?"
LINES_SQL = """
SELECT line_no, CAST(raw AS BLOB) FROM records WHERE file_id = :file_id
UNION ALL SELECT line_no, raw FROM bad_lines WHERE file_id = :file_id
ORDER BY 1
""".strip()
# How the file ends: its last line, whether that line had no newline (an
# unterminated last record), and the partial line after it.
FILE_END_SQL = "SELECT line_count, unterminated_tail, pending_tail FROM files WHERE id = ?"
RECORD_REPAIR_SQL = """
INSERT INTO repairs (session_id, file_id, path, backup_path, created_at, status, reparented,
  dropped, chain_before, chain_after, recovered, message, original, repaired_sha256)
VALUES (:session_id, :file_id, :path, :backup_path, :now, :status, :reparented, :dropped,
  :chain_before, :chain_after, :recovered, :message, :original, :repaired_sha256)
""".strip()


class RepairError(Exception):
    """The session cannot be repaired as asked (not indexed, no file)."""


class Refused(Exception):
    """The transcript is live (recently modified or open): not touched."""


class RolledBack(Exception):
    """The repaired file did not verify, or changed while being replaced: the
    original is back in place."""


@dataclass
class Plan:
    session_id: str
    file_id: int
    path: str
    reparent: dict = field(default_factory=dict)   # line_no -> (old, new parent uuid)
    drop: set = field(default_factory=set)         # line_nos
    strip: dict = field(default_factory=dict)      # line_no -> content indexes to remove
    rehead: dict = field(default_factory=dict)     # line_no -> (old, new headUuid)
    rows: list = field(default_factory=list)       # the repair_plan rows
    orphaned: dict = field(default_factory=dict)   # uuid -> cause, before the repair
    chain_before: int = 0

    @property
    def empty(self) -> bool:
        return not self.reparent and not self.drop and not self.strip and not self.rehead

    def as_dict(self) -> dict:
        return {"session_id": self.session_id, "path": self.path,
                "reparented": len(self.reparent), "dropped": len(self.drop),
                "stripped": len(self.strip), "reheaded": len(self.rehead),
                "chain_before": self.chain_before, "changes": self.rows}


def plan(db, session_id: str, host: str = "") -> Plan:
    """The repair plan of the session's main transcript on ``host`` (''
    this machine: the one ``repair`` writes; another, a fleet's, for show).
    agents.NotClaudeCode for a Codex or Gemini CLI session."""
    agents.require_claude_code(db.conn, session_id)
    main = db.conn.execute(MAIN_FILE_SQL, [session_id, host]).fetchone()
    if main is None:
        raise RepairError(f"session {session_id} has no main transcript in the index")
    p = Plan(session_id, main[0], main[1])
    p.rows = dict_rows(db.conn, PLAN_SQL, {"session_id": session_id, "host": host})
    for row in p.rows:
        if row["action"] == "reparent":
            p.reparent[row["line_no"]] = (row["old_parent_uuid"], row["new_parent_uuid"])
        elif row["action"] == "strip":
            p.strip[row["line_no"]] = sorted(json.loads(row["blocks"]))
        elif row["action"] == "rehead":
            p.rehead[row["line_no"]] = (row["old_parent_uuid"], row["new_parent_uuid"])
        else:
            p.drop.add(row["line_no"])
    p.orphaned = dict(db.conn.execute(ORPHAN_CAUSES_SQL, [p.file_id]).fetchall())
    p.chain_before = db.conn.execute(CHAIN_LENGTH_SQL, [p.file_id]).fetchone()[0]
    return p


def _reparent_line(line: bytes, old: str | None, new: str) -> bytes:
    """The line with its top-level parentUuid set to ``new``, nothing else changed."""
    pattern = (rb'"parentUuid"\s*:\s*' +
               (re.escape(json.dumps(old).encode()) if old is not None else rb"null"))
    fixed, n = re.subn(pattern, b'"parentUuid":' + json.dumps(new).encode(), line, count=1)
    original, repaired = json.loads(line), json.loads(fixed) if n else None
    if not n or repaired.get("parentUuid") != new or \
            {k: v for k, v in repaired.items() if k != "parentUuid"} != \
            {k: v for k, v in original.items() if k != "parentUuid"}:
        raise RepairError(f"could not rewrite parentUuid in line {line[:80]!r}")
    return fixed


def _rehead_line(line: bytes, old: str | None, new: str) -> bytes:
    """The compact boundary line with its preservedSegment.headUuid set to
    ``new``, nothing else changed."""
    pattern = (rb'"headUuid"\s*:\s*' +
               (re.escape(json.dumps(old).encode()) if old is not None else rb"null"))
    fixed, n = re.subn(pattern, b'"headUuid":' + json.dumps(new).encode(), line, count=1)
    original, repaired = json.loads(line), json.loads(fixed) if n else None
    if n:
        segment = repaired.get("compactMetadata", {}).get("preservedSegment", {})
        expected = json.loads(line)
        expected["compactMetadata"]["preservedSegment"]["headUuid"] = new
    if not n or segment.get("headUuid") != new or repaired != expected or original == repaired:
        raise RepairError(f"could not rewrite headUuid in line {line[:80]!r}")
    return fixed


def _strip_line(line: bytes, blocks: list[int]) -> bytes:
    """The line with the content blocks at ``blocks`` (indexes in
    message.content) removed, written compact as Claude Code writes JSON;
    nothing else may change."""
    original = json.loads(line)
    content = original["message"]["content"]
    kept = [b for i, b in enumerate(content) if i not in set(blocks)]
    repaired = dict(original, message=dict(original["message"], content=kept))
    fixed = json.dumps(repaired, ensure_ascii=False, separators=(",", ":")).encode()
    if json.loads(fixed) != repaired or len(kept) != len(content) - len(set(blocks)):
        raise RepairError(f"could not remove thinking blocks from line {line[:80]!r}")
    return fixed


def repaired_bytes(db, p: Plan) -> bytes:
    """The main transcript as the index holds it, with the plan applied."""
    out = []
    last, unterminated, pending = db.conn.execute(FILE_END_SQL, [p.file_id]).fetchone()
    for line_no, raw in db.conn.execute(LINES_SQL, {"file_id": p.file_id}):
        raw = bytes(raw)
        if line_no in p.drop:
            continue
        if line_no in p.strip:
            raw = _strip_line(raw, p.strip[line_no])
        if line_no in p.reparent:
            raw = _reparent_line(raw, *p.reparent[line_no])
        if line_no in p.rehead:
            raw = _rehead_line(raw, *p.rehead[line_no])
        out.append(raw if unterminated and line_no == last else raw + b"\n")
    if pending:
        out.append(bytes(pending))
    return b"".join(out)


def _open_elsewhere(path: str) -> bool:
    """Is the file (its inode, by whatever name) open in another process
    (Linux /proc)?"""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return _holders(st.st_dev, st.st_ino, writing=False)


def _holders(dev: int, ino: int, writing: bool) -> bool:
    me = str(os.getpid())
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and p != me]
    except OSError:
        return False
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if (st.st_dev, st.st_ino) != (dev, ino):
                    continue
                if not writing:
                    return True
                with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                    flags = next(int(line.split()[1], 8) for line in info
                                 if line.startswith("flags:"))
                if flags & 3:   # O_WRONLY or O_RDWR
                    return True
            except (OSError, StopIteration, ValueError):
                continue
    return False


# After the swap, bytes still appended to the old file (by a writer that
# holds it open) are copied onto the repaired one until it has been quiet
# this long (longer with --force, when a writer may well be there); a writer
# that goes on past SWAP_DEADLINE_S gets the old file back, nothing lost.
SWAP_QUIET_S, SWAP_QUIET_FORCED_S, SWAP_DEADLINE_S = 0.1, 1.0, 10.0


def _append(path: str, ino: int, data: bytes) -> None:
    """Append ``data`` to ``path`` if it is still the inode ``ino``."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_ino != ino:
            raise Refused(f"{path} was replaced by another program during the repair")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _swap(path: str, old, size: int, data: bytes, tmp: str, backup: str, quiet_s: float):
    """Put the repaired file (``tmp``) in place of ``path``, whose open
    file ``old`` was read up to ``size``, keeping the original as ``backup``.
    Whatever a writer appends to the original meanwhile is folded onto the
    repaired file; one that keeps writing to the original (or holds it open
    for writing at the end) gets it back, with anything that reached the
    repaired file appended: no line is lost either way."""
    os.link(path, backup)            # the original stays reachable by its backup name
    os.replace(tmp, path)            # atomic: readers see the old file or the new one
    new_ino = os.stat(path).st_ino
    folded, quiet_since, started = size, time.monotonic(), time.monotonic()
    while True:
        grown = os.fstat(old.fileno()).st_size
        if grown > folded:
            old.seek(folded)
            _append(path, new_ino, old.read(grown - folded))
            folded, quiet_since = grown, time.monotonic()
        now = time.monotonic()
        if now - quiet_since >= quiet_s:
            break
        if now - started > SWAP_DEADLINE_S:
            _swap_back(path, backup, len(data) + folded - size)
            raise Refused(f"{path} is still being written: the original is back in place, "
                          "nothing lost (stop the writer and repair again)")
        time.sleep(0.02)
    st = os.fstat(old.fileno())
    if _holders(st.st_dev, st.st_ino, writing=True):
        _swap_back(path, backup, len(data) + folded - size)
        raise Refused(f"{path} is held open for writing by another process: the original is "
                      "back in place, nothing lost (stop the writer and repair again)")
    return folded - size


def _swap_back(path: str, backup: str, ours: int) -> None:
    """The original back at ``path``, with what others appended to the
    repaired file after its first ``ours`` bytes."""
    with open(path, "rb") as f:
        f.seek(ours)
        extra = f.read()
    if extra:
        _append(backup, os.stat(backup).st_ino, extra)
    os.replace(backup, path)


@dataclass
class Result:
    plan: Plan
    written: bool = False
    backup: str | None = None
    chain_after: int | None = None
    recovered: list = field(default_factory=list)
    appended_meanwhile: int = 0   # bytes a writer appended during the swap, folded in

    def as_dict(self) -> dict:
        return dict(self.plan.as_dict(), written=self.written, backup=self.backup,
                    chain_after=self.chain_after, recovered=len(self.recovered),
                    appended_meanwhile=self.appended_meanwhile)


# The repair_plan reasons of a wedged session, and the thinking the API
# refuses still on the resume chain after a repair (earlier messages'
# blocks removed, the latest message's cut off).
THINKING_REASONS = ("wedged_tail", "refused_thinking")
REFUSED_LEFT_SQL = (f"SELECT count(*) FROM ({classes.thinking_faults_where('h.main_file_id = :file_id')}) "
                    "WHERE file_id = :file_id AND (NOT latest OR :cut)")

# What a truncated resume of file :file_id loses (NULL: nothing): a relink
# must leave nothing lost.
TRUNCATION_SQL = f"SELECT {compaction.TRUNCATION_TEMPLATE.format(file=':file_id')}"

STUCK_SQL = f"""
SELECT 1 FROM poisoned_sessions p WHERE p.session_id = ? AND p.file_id = ? AND p.at_resume_tail
  AND {definitions.NOTHING_TO_CUT_TEMPLATE.format(file="p.file_id")}
""".strip()


def poisoned_beyond_repair(db, p: Plan) -> bool:
    """Is the session poisoned with nothing to cut back to (no plan can help)?"""
    return db.conn.execute(STUCK_SQL, [p.session_id, p.file_id]).fetchone() is not None


def write(db, p: Plan, *, force: bool = False) -> Result:
    """Apply the plan to the file on disk (see the module docstring)."""
    path = p.path
    data = repaired_bytes(db, p)
    original = b"".join(stored_bytes(db.conn, p.file_id, with_pending=True))
    try:
        st = os.stat(path)
    except OSError:
        raise RepairError(f"{path} is not on disk: restore it first") from None
    if os.path.islink(path):
        raise Refused(f"{path} is a symlink: repair the file it names, not the link")
    with open_regular(path) as old:
        on_disk = old.read(len(original) + 1)
        if on_disk != original:
            raise Refused(f"{path} differs from the index (ingest it first, or it is being "
                          "written)")
        if not force:
            age = time.time() - st.st_mtime
            if age < LIVE_SECONDS:
                raise Refused(f"{path} was modified {age:.0f} s ago: a session may be writing "
                              "it (wait, or --force)")
            if _open_elsewhere(path):
                raise Refused(f"{path} is open in a running process (close it, or --force)")
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        backup = f"{path}.session-index-backup-{stamp}"
        if os.path.lexists(backup):
            raise RepairError(f"{backup} exists already (a repair ran this second?): "
                              "nothing written; try again")
        out, tmp = temp_beside(path, ".repair-tmp")   # O_EXCL, a random name: no link followed
        try:
            with out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.utime(tmp, (st.st_atime, st.st_mtime))
            folded = _swap(path, old, len(original), data, tmp, backup,
                           SWAP_QUIET_FORCED_S if force else SWAP_QUIET_S)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    result = Result(p, written=True, backup=backup, appended_meanwhile=folded)
    try:
        _verify(db, p, result)
    except RolledBack as exc:
        _swap_back(path, backup, len(data) + folded)   # with what was appended since
        ingest(db, [path])
        _record(db, p, result, "rolled_back", str(exc), original, data)
        raise
    _record(db, p, result, "applied", None, original, data)
    return result


def _verify(db, p: Plan, result: Result) -> None:
    """Re-ingest; the repaired chain must read back what was orphaned."""
    ingest(db, [p.path])
    result.chain_after = db.conn.execute(CHAIN_LENGTH_SQL, [p.file_id]).fetchone()[0]
    after = dict(db.conn.execute(ORPHAN_CAUSES_SQL, [p.file_id]).fetchall())
    lost = [u for u, cause in p.orphaned.items() if cause in ("api_error_splice", "late_graft")]
    # Back on the resume chain, or a branch every reader puts back.
    still_off = [u for u in lost if after.get(u, "parallel_tool_branch") not in
                 ("parallel_tool_branch", "progress")]
    if still_off:
        raise RolledBack(f"{len(still_off)} previously orphaned record(s) are still off "
                         "the resume chain")
    entries = _entries(db, p.file_id)
    chain = {e["uuid"] for e in conversation.build_conversation_chain(entries)}
    messages = {e["uuid"] for e in entries if e.get("type") in ("user", "assistant")}
    unread = [u for u in lost if u in messages and u not in chain]
    if unread:
        raise RolledBack(f"the Agent SDK's reader still drops {len(unread)} recovered message(s)")
    result.recovered = lost
    if p.drop and db.conn.execute(
            "SELECT at_resume_tail FROM poisoned_sessions WHERE session_id = ?",
            [p.session_id]).fetchone() not in (None, (0,)):
        raise RolledBack("the resume chain still ends at a synthetic placeholder")
    if any(r["reason"] in ("unreached_after_compaction", "segment_not_relinked")
           for r in p.rows):
        left = db.conn.execute(TRUNCATION_SQL, {"file_id": p.file_id}).fetchone()[0]
        if left is not None:
            raise RolledBack(f"a resume still loses {json.loads(left)['lost']} conversation "
                             f"record(s) of the last compaction ({json.loads(left)['cause']})")
    cut = any(r["reason"] == "wedged_tail" for r in p.rows)
    refused = db.conn.execute(REFUSED_LEFT_SQL, {"file_id": p.file_id, "cut": cut}).fetchone()[0]
    if any(r["reason"] in THINKING_REASONS for r in p.rows) and refused:
        raise RolledBack(f"{refused} thinking block(s) the API refuses are still on the resume "
                         "chain")


def _entries(db, file_id: int):
    return conversation.parse_entries(
        raw for _, raw in db.conn.execute(
            "SELECT line_no, raw FROM records WHERE file_id = ? ORDER BY line_no", [file_id]))


def _record(db, p: Plan, result: Result, status, message, original, data):
    with write_lock(db) as conn:
        conn.execute(RECORD_REPAIR_SQL, {
            "session_id": p.session_id, "file_id": p.file_id, "path": p.path,
            "backup_path": result.backup if status == "applied" else None, "now": utcnow(),
            "status": status, "reparented": len(p.reparent), "dropped": len(p.drop),
            "chain_before": p.chain_before, "chain_after": result.chain_after,
            "recovered": len(result.recovered), "message": message, "original": original,
            "repaired_sha256": sha256(data).hexdigest()})
