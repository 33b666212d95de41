"""Keeping the caches behind ``leaves``, ``leaf_ancestry`` and ``orphans``
(and the ``sessions`` table) equal to their definitions.

The definitions are the ``*_definition`` views (views.py). Running them per
file at ingest cost about 40 us per record in SQLite (bench/ingest_speed.py),
more than parsing and storing the record; this module computes the same rows
with dictionary walks over each changed file's chain records, and the test
suite holds it to the SQL row for row. Change both together.

Ingest marks a file ``needs_derive`` in the same transaction as its new
lines; each such file is recomputed and unmarked in one transaction, so a
crash between the two leaves the file marked and the next run finishes it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from . import resume, views
from .db import write_lock
from .resume import CHAIN_TYPES

DERIVE_BATCH = 200
CACHES = tuple(f"{name}_cache" for name in views.CACHED_VIEWS)
MESSAGE_TYPES = resume.MESSAGE_TYPES

# Every record with a uuid in a batch of files, and every last-prompt record,
# in file order (the chain records among them are views._CHAIN_TYPES).
# ts_ms: the timestamp in epoch milliseconds (views.TIMESTAMP_MS), NULL when
# it is not one; the last-prompt fields read from the line itself.
UUID_RECORDS_SQL = f"""
SELECT r.id, r.file_id, r.line_no, r.uuid, r.parent_uuid, r.logical_parent_uuid,
       r.type, r.subtype, r.timestamp, r.is_sidechain, r.is_meta, r.team_name,
       r.message_id, r.is_tool_result, {views.TIMESTAMP_MS.format(r="r")} AS ts_ms,
       r.is_unreadable, r.leaf_uuid,
       CASE WHEN r.type = 'last-prompt' THEN {views.LAST_PROMPT_NULL_LEAF.format(r="r")} END,
       CASE WHEN r.type = 'last-prompt' THEN {views.LAST_PROMPT_EXPLICIT.format(r="r")} END
FROM records r
WHERE r.file_id IN (SELECT value FROM json_each(:file_ids))
  AND (r.uuid IS NOT NULL OR r.type = 'last-prompt')
ORDER BY r.file_id, r.line_no
""".strip()

# The transcript files of a batch (execution logs have no chain to derive).
FILES_SQL = f"""
SELECT id, kind, session_id FROM files
WHERE id IN (SELECT value FROM json_each(:file_ids)) AND kind IN {views.TRANSCRIPT_KINDS}
""".strip()

# sessions: one row per session id, summed from its files' running facts.
# main_file_id is the main transcript `claude --resume <id>` opens, and
# main_file_rule says why (views.MAIN_FILE_RULE_TEMPLATE: a file named
# <id>.jsonl on disk with messages, the one in its own cwd's project folder
# when there are several, else a session-store copy, else what is left);
# project_dir and cwd are the chosen file's. A session mirrored through the
# store and ingested from its file counts its local files and records once
# (the store copies when there are no local ones).
REFRESH_SESSION_SQL = f"""
WITH facts AS MATERIALIZED (
{views.MAIN_FILE_FACTS_TEMPLATE.format(where="f.session_id = :session_id")}
),
ruled AS (
  SELECT *, {views.MAIN_FILE_RULE_TEMPLATE.format(
      f="facts", loadable="(SELECT count(*) FROM facts WHERE named AND on_disk AND has_messages)")}
    AS rule
  FROM facts
),
chosen AS MATERIALIZED (
  SELECT file_id, rule FROM ruled
  ORDER BY {views.MAIN_FILE_RANK_TEMPLATE.format(rule="rule")}, named DESC, in_cwd_project DESC,
    mtime DESC, file_id DESC
  LIMIT 1
)
INSERT OR REPLACE INTO sessions (
  session_id, main_file_id, main_file_rule, project_dir, cwd, main_files, subagent_files,
  records, first_timestamp, last_timestamp, version, git_branch, deleted_at)
SELECT :session_id,
  (SELECT file_id FROM chosen),
  (SELECT rule FROM chosen),
  (SELECT project_dir FROM files WHERE session_id = :session_id AND kind IN {views.TRANSCRIPT_KINDS}
   ORDER BY id IS (SELECT file_id FROM chosen) DESC, kind = 'main' DESC, id LIMIT 1),
  (SELECT cwd FROM files WHERE session_id = :session_id AND cwd IS NOT NULL AND kind IN {views.TRANSCRIPT_KINDS}
   ORDER BY id IS (SELECT file_id FROM chosen) DESC, kind = 'main' DESC, id LIMIT 1),
  sum(kind = 'main' AND f.origin = counted.origin),
  sum(kind <> 'main' AND f.origin = counted.origin),
  sum(CASE WHEN f.origin = counted.origin THEN records END),
  min(first_timestamp), max(last_timestamp),
  (SELECT version FROM files WHERE session_id = :session_id AND version IS NOT NULL AND kind IN {views.TRANSCRIPT_KINDS}
   ORDER BY last_timestamp DESC LIMIT 1),
  (SELECT git_branch FROM files WHERE session_id = :session_id AND git_branch IS NOT NULL AND kind IN {views.TRANSCRIPT_KINDS}
   ORDER BY last_timestamp DESC LIMIT 1),
  CASE WHEN sum(kind = 'main') = sum(kind = 'main' AND deleted_at IS NOT NULL)
       AND sum(kind = 'main') > 0
       THEN max(deleted_at) END
FROM files f,
  -- count the local transcripts, or the store copies when there are none
  (SELECT min(origin) AS origin FROM files
   WHERE session_id = :session_id AND kind IN {views.TRANSCRIPT_KINDS}) counted
WHERE f.session_id = :session_id AND f.kind IN {views.TRANSCRIPT_KINDS}
""".strip()
# A change to the sessions rule refreshes every sessions row (no cache is
# recomputed for it): derive_pending compares this with index_meta.
SESSIONS_HASH = hashlib.sha256(REFRESH_SESSION_SQL.encode()).hexdigest()[:16]


@dataclass(slots=True)
class Rec:
    id: int
    file_id: int
    line_no: int
    uuid: str
    parent_uuid: str | None
    logical_parent_uuid: str | None
    type: str
    subtype: str | None
    timestamp: str | None
    is_sidechain: int
    is_meta: int
    team_name: str | None
    message_id: str | None
    is_tool_result: int
    ts_ms: int | None = None
    is_unreadable: int = 0

    @property
    def eff_parent(self) -> str | None:
        if self.type == "system" and self.subtype == "compact_boundary" and self.parent_uuid is None:
            return self.logical_parent_uuid
        return self.parent_uuid


def forget_file(conn, file_id: int) -> None:
    """Drop a file's cached rows (inside the caller's transaction)."""
    forget_files(conn, [file_id])


def forget_files(conn, file_ids: list[int]) -> None:
    """Drop these files' cached rows, one statement per cache."""
    ids = json.dumps(file_ids)
    for table in CACHES:
        conn.execute(
            f"DELETE FROM {table} WHERE file_id IN (SELECT value FROM json_each(?))", [ids])


def _walk(start: Rec, nodes: dict[str, Rec]) -> list[tuple[int, Rec]]:
    """(depth, record) from ``start`` up parent_uuid, stopping at a missing
    parent or the first revisited uuid (the SDK's walk)."""
    out, seen = [], {start.uuid}
    cur = start
    while True:
        out.append((len(out), cur))
        parent = nodes.get(cur.parent_uuid) if cur.parent_uuid is not None else None
        if parent is None or parent.uuid in seen:
            return out
        seen.add(parent.uuid)
        cur = parent


def _sdk_leaf(occ: list[Rec], nodes: dict[str, Rec]) -> tuple[Rec | None, int]:
    """The Agent SDK's leaf and the number of distinct main leaves."""
    parents = {r.parent_uuid for r in occ if r.parent_uuid is not None}
    best, best_key, main_leaves = None, None, set()
    for terminal in occ:
        if terminal.uuid in parents:
            continue
        cur, seen = terminal, {terminal.uuid}
        while cur.type not in MESSAGE_TYPES:
            cur = nodes.get(cur.parent_uuid) if cur.parent_uuid is not None else None
            if cur is None or cur.uuid in seen:
                cur = None
                break
            seen.add(cur.uuid)
        if cur is None:
            continue
        is_main = not cur.is_sidechain and cur.team_name is None and not cur.is_meta
        if is_main:
            main_leaves.add(cur.uuid)
        key = (is_main, nodes[cur.uuid].line_no, -terminal.line_no)
        if best_key is None or key > best_key:
            best, best_key = cur, key
    return best, len(main_leaves)


def compute_file(file_id: int, kind: str, session_id, with_uuid: list[Rec],
                 prompts: list[resume.Prompt] = ()) -> dict:
    """Every cache's rows for one file, from its records that have a uuid
    and its last-prompt records."""
    occ = [r for r in with_uuid if r.type in CHAIN_TYPES]
    nodes: dict[str, Rec] = {}
    for r in occ:
        nodes[r.uuid] = r
    sdk_leaf, branch_count = _sdk_leaf(occ, nodes)
    view = None
    if kind == "main":
        view = resume.cli_view(occ, list(prompts), nodes)
        resume_leaf, rule = resume.resume_leaf(view)
        resume_chain = resume.walk(view, resume_leaf) if resume_leaf is not None else []
    else:
        resume_leaf = sdk_leaf = next(
            (r for r in reversed(occ) if r.type in MESSAGE_TYPES), None)
        rule = "subagent_last_message" if resume_leaf is not None else "no_leaf"
        resume_chain = _walk(resume_leaf, nodes) if resume_leaf is not None else []
    resume_message = next((r for _, r in resume_chain if r.type in MESSAGE_TYPES), None)
    leaves_row = (
        file_id, session_id, kind,
        resume_leaf and resume_leaf.id, resume_leaf and resume_leaf.uuid,
        sdk_leaf and sdk_leaf.id, sdk_leaf and sdk_leaf.uuid,
        int((resume_message and resume_message.uuid) == (sdk_leaf and sdk_leaf.uuid)),
        branch_count, rule,
    )
    ancestry_rows = [(file_id, session_id, "resume", r.uuid, d, r.id) for d, r in resume_chain]
    if sdk_leaf is not None:
        ancestry_rows += [(file_id, session_id, "sdk", r.uuid, d, r.id)
                          for d, r in _walk(sdk_leaf, nodes)]
    orphan_rows = (_orphans(file_id, session_id, nodes, resume_chain, resume_message)
                   if kind == "main" else [])
    breaks = [(file_id, session_id, r.id, r.line_no, r.uuid, r.type, r.subtype, r.timestamp,
               r.parent_uuid) for r in occ
              if r.parent_uuid is not None and r.parent_uuid not in nodes]
    lines_of: dict[str, list[int]] = {}
    for r in with_uuid:
        lines_of.setdefault(r.uuid, []).append(r.line_no)
    duplicates = [(file_id, session_id, uuid, len(lines), ",".join(map(str, lines)), lines[-1])
                  for uuid, lines in lines_of.items() if len(lines) > 1]
    return {"leaves": [leaves_row], "leaf_ancestry": ancestry_rows, "orphans": orphan_rows,
            "chain_breaks": breaks, "duplicate_uuids": duplicates}


def _put_back(nodes: dict[str, Rec], message) -> set[str]:
    """The system and attachment records that hang from the leaf message
    through non-message records (progress passed through, as the CLI
    bridges it): the CLI loads them after its walk."""
    if message is None:
        return set()
    children: dict[str, list[Rec]] = {}
    for n in nodes.values():
        if n.parent_uuid is not None and n.type not in MESSAGE_TYPES:
            children.setdefault(n.parent_uuid, []).append(n)
    out, seen, todo = set(), {message.uuid}, [message.uuid]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c.uuid not in seen:
                seen.add(c.uuid)
                todo.append(c.uuid)
                if c.type != "progress":
                    out.add(c.uuid)
    return out


def _orphans(file_id, session_id, nodes: dict[str, Rec], chain, message):
    """Every non-sidechain chain record off the resume chain, with its cause
    and whether the CLI puts it back (restored)."""
    on_chain = {r.uuid: d for d, r in chain}
    by_depth = {d: r for d, r in chain}
    boundary_line = next(
        (r.line_no for _, r in chain if r.type == "system" and r.subtype == "compact_boundary"),
        None)
    chain_messages = {
        r.message_id for _, r in chain if r.type == "assistant" and r.message_id is not None}
    splice_points = {
        r.uuid for d, r in chain
        if d - 1 in by_depth and by_depth[d - 1].type == "system"
        and by_depth[d - 1].subtype == "api_error"}
    put_back = _put_back(nodes, message)

    off = [n for n in nodes.values() if n.uuid not in on_chain]
    parents = {n.uuid: n.eff_parent for n in off}
    children: dict[str, list[Rec]] = {}
    for n in off:
        if parents[n.uuid] is not None:
            children.setdefault(parents[n.uuid], []).append(n)

    # Top-down from each branch's first record: (branch_point, origin).
    reached: dict[str, tuple] = {}
    stack = []
    for n in off:
        p = parents[n.uuid]
        if p is None:
            stack.append((n, None, "unlinked"))
        elif p in on_chain:
            stack.append((n, p, "ancestry"))
        elif p not in nodes:
            stack.append((n, None, "dangling_parent"))
    for n, bp, origin in stack:
        todo = [n]
        while todo:
            cur = todo.pop()
            reached[cur.uuid] = (bp, origin)
            todo += [c for c in children.get(cur.uuid, ()) if c.uuid not in reached]

    rows = []
    for o in sorted(off, key=lambda n: n.line_no):
        if o.is_sidechain:
            continue
        bp, origin = reached.get(o.uuid, (None, None))
        parent = nodes.get(o.parent_uuid) if o.parent_uuid is not None else None
        if boundary_line is not None and o.line_no < boundary_line:
            cause = "compacted"
        elif o.type == "progress":
            cause = "progress"
        elif (o.type == "assistant" and o.message_id is not None
              and o.message_id in chain_messages) or (
                o.type == "user" and o.is_tool_result and parent is not None
                and parent.type == "assistant" and parent.message_id in chain_messages):
            cause = "parallel_tool_branch"
        elif bp is not None and bp in splice_points:
            cause = "api_error_splice"
        elif o.type == "system" and o.subtype == "api_error":
            cause = "api_error_record"
        elif origin == "dangling_parent":
            cause = "dangling_parent"
        elif origin == "unlinked":
            cause = "unlinked"
        elif origin == "ancestry":
            cause = "abandoned_branch"
        else:
            cause = "other"
        restored = int(cause == "parallel_tool_branch" or o.uuid in put_back)
        rows.append((file_id, session_id, o.uuid, o.type, o.subtype, o.timestamp, cause, bp,
                     o.id, o.line_no, o.message_id, restored))
    return rows


def derive_files(conn, file_ids: list[int]) -> None:
    """Recompute these files' cached rows (inside the caller's transaction)."""
    params = {"file_ids": json.dumps(file_ids)}
    by_file: dict[int, list[Rec]] = {i: [] for i in file_ids}
    prompts: dict[int, list[resume.Prompt]] = {i: [] for i in file_ids}
    for row in conn.execute(UUID_RECORDS_SQL, params):
        if row[6] == "last-prompt":
            prompts[row[1]].append(resume.Prompt(row[2], row[16], bool(row[17]), bool(row[18])))
        if row[3] is not None:
            by_file[row[1]].append(Rec(*row[:16]))
    rows: dict[str, list] = {name: [] for name in views.CACHED_VIEWS}
    forget_files(conn, file_ids)
    for file_id, kind, session_id in conn.execute(FILES_SQL, params).fetchall():
        computed = compute_file(file_id, kind, session_id, by_file[file_id], prompts[file_id])
        for name, file_rows in computed.items():
            rows[name] += file_rows
    for name, table_rows in rows.items():
        columns = getattr(views, f"{name.upper()}_COLUMNS")
        marks = ", ".join("?" * len(columns.split(",")))
        conn.executemany(f"INSERT INTO {name}_cache ({columns}) VALUES ({marks})", table_rows)


def derive_pending(db) -> int:
    """Recompute every file marked ``needs_derive`` (all of them when the
    definitions changed since the caches were built). Returns the count."""
    conn = db.conn
    stored = conn.execute(
        "SELECT value FROM index_meta WHERE key = 'definitions_hash'").fetchone()
    if stored is None or stored[0] != views.DEFINITIONS_HASH:
        with write_lock(db):
            conn.execute("UPDATE files SET needs_derive = 1")
            conn.execute("INSERT OR REPLACE INTO index_meta VALUES ('definitions_hash', ?)",
                         [views.DEFINITIONS_HASH])
    refresh_sessions_if_stale(db)
    pending = conn.execute(
        "SELECT id, CASE WHEN kind IN {kinds} THEN session_id END FROM files "
        "WHERE needs_derive ORDER BY id".format(kinds=views.TRANSCRIPT_KINDS)).fetchall()
    for i in range(0, len(pending), DERIVE_BATCH):
        batch = pending[i:i + DERIVE_BATCH]
        ids = [file_id for file_id, _ in batch]
        with write_lock(db):
            derive_files(conn, ids)
            for session_id in sorted({s for _, s in batch if s is not None}):
                conn.execute(REFRESH_SESSION_SQL, {"session_id": session_id})
            conn.executemany("UPDATE files SET needs_derive = 0 WHERE id = ?",
                             [(i,) for i in ids])
    return len(pending)


def refresh_sessions_if_stale(db) -> bool:
    """Refresh every sessions row if they were computed by another rule
    (index_meta.sessions_hash); True if it did."""
    stored = db.conn.execute(
        "SELECT value FROM index_meta WHERE key = 'sessions_hash'").fetchone()
    if stored is not None and stored[0] == SESSIONS_HASH:
        return False
    refresh_all_sessions(db)
    return True


def refresh_all_sessions(db) -> int:
    """Recompute every sessions row (after the rule changed), in batches."""
    conn = db.conn
    ids = [r[0] for r in conn.execute(
        "SELECT DISTINCT session_id FROM files WHERE session_id IS NOT NULL "
        f"AND kind IN {views.TRANSCRIPT_KINDS} ORDER BY session_id")]
    for i in range(0, len(ids), DERIVE_BATCH):
        with write_lock(db):
            for session_id in ids[i:i + DERIVE_BATCH]:
                conn.execute(REFRESH_SESSION_SQL, {"session_id": session_id})
    with write_lock(db):
        conn.execute("INSERT OR REPLACE INTO index_meta VALUES ('sessions_hash', ?)",
                     [SESSIONS_HASH])
    return len(ids)
