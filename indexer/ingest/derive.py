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

import json
import time
from collections import Counter

from indexer.chain import walk as chain, resume
from indexer.ingest import derive_append
from indexer.chain import definitions
from indexer.index import views
from indexer.chain.walk import UUID_RECORDS_SELECT, Rec
from indexer.sql import write_lock
from indexer.chain.resume import CHAIN_TYPES
from indexer.signals import forks, verdict
from indexer.transcripts import records, thinking

DERIVE_BATCH = 200
CACHES = tuple(chain.CACHE_TABLES.values())
# How each file was derived since the process started ("appended": extended
# by derive_append, "recomputed": from all its records); bench and tests read it.
STATS: Counter = Counter()
MESSAGE_TYPES = records.MESSAGE_TYPES

# Every record with a uuid in a batch of files, and every last-prompt record,
# in file order.
UUID_RECORDS_SQL = UUID_RECORDS_SELECT + """
WHERE r.file_id IN (SELECT value FROM json_each(:file_ids))
  AND (r.uuid IS NOT NULL OR r.type = 'last-prompt')
ORDER BY r.file_id, r.line_no"""

# The transcript files of a batch (execution logs have no chain to derive).
FILES_SQL = f"""
SELECT id, kind, session_id, line_count, ingested_offset FROM files
WHERE id IN (SELECT value FROM json_each(:file_ids)) AND kind IN {definitions.TRANSCRIPT_KINDS}
""".strip()

# The sessions a batch of files belongs to, and unmarking the files once
# derived (finish_files).
SESSIONS_OF_FILES_SQL = f"""
SELECT DISTINCT session_id FROM files
WHERE id IN (SELECT value FROM json_each(?)) AND session_id IS NOT NULL
  AND kind IN {definitions.TRANSCRIPT_KINDS}
ORDER BY session_id
""".strip()
# The files whose caches are to be derived (ingest marks them).
PENDING_FILES_SQL = "SELECT id FROM files WHERE needs_derive ORDER BY id"
UNMARK_FILES_SQL = "UPDATE files SET needs_derive = 0 WHERE id IN (SELECT value FROM json_each(?))"
SESSIONS_HASH = views.SESSIONS_HASH


# thinking_cache (transcripts/thinking.py): kept for main transcripts by
# scan_thinking, from where thinking_scans says the last scan stopped.
THINKING_TABLES = ("thinking_cache", "thinking_scans")
# fork_heads_cache (signals/forks.py): a main transcript's row again.
FORK_HEADS_SQL = (f"INSERT OR REPLACE INTO fork_heads_cache ({forks.FORK_HEADS_COLUMNS})\n"
                  + forks.FORK_HEADS_TEMPLATE.format(
                      files="f.id IN (SELECT value FROM json_each(:file_ids))"))
# sent_names_cache (definitions.SENT_NAMES_TEMPLATE): a main transcript's rows again.
SENT_NAMES_SQL = (f"INSERT INTO sent_names_cache ({definitions.SENT_NAMES_COLUMNS})\n"
                  + definitions.SENT_NAMES_TEMPLATE.format(
                      files="f.id IN (SELECT value FROM json_each(:file_ids))"))
FORGET_SENT_NAMES_SQL = ("DELETE FROM sent_names_cache "
                         "WHERE file_id IN (SELECT value FROM json_each(:file_ids))")
# verdict_facts_cache (signals/verdict.py, VERDICT_FACTS_TEMPLATE): a main
# transcript's row again, after every other cache of the file (its facts
# read them). A row whose chain lost its old top (a rewind) is dropped;
# a row left (an append grew its chain at the top) is brought up to date
# from what the append added (verdict.APPENDED_FACTS_ARGS: flat); a file
# with no row is computed from the start.
_BATCH = "f.id IN (SELECT value FROM json_each(:file_ids))"
KEEP_VERDICT_FACTS_SQLS = (
    "DELETE FROM verdict_facts_cache AS o WHERE file_id IN "
    f"(SELECT value FROM json_each(:file_ids)) AND NOT ({verdict.STILL_TOPPED})",
    f"INSERT OR REPLACE INTO verdict_facts_cache ({verdict.VERDICT_FACTS_COLUMNS})\n"
    + verdict.VERDICT_FACTS_TEMPLATE.format(files=_BATCH, **verdict.APPENDED_FACTS_ARGS),
    f"INSERT INTO verdict_facts_cache ({verdict.VERDICT_FACTS_COLUMNS})\n"
    + verdict.VERDICT_FACTS_TEMPLATE.format(
        files=_BATCH + " AND NOT EXISTS (SELECT 1 FROM verdict_facts_cache c "
                       "WHERE c.file_id = f.id)", **verdict.FACTS_ARGS),
)
SQL_CACHE_TABLES = THINKING_TABLES + ("fork_heads_cache", "usage_scans", "sent_names_cache",
                                      "verdict_facts_cache")
# A file's kind and generation, and how far its thinking was scanned (NULL:
# never, or its rows were forgotten).
THINKING_SCAN_STATE_SQL = """
SELECT f.kind, f.generation, s.generation, s.scanned_offset
FROM files f LEFT JOIN thinking_scans s ON s.file_id = f.id WHERE f.id = ?
""".strip()
# The records to classify (thinking.cache_rows): the file's after :after
# (a byte_offset; -1: all).
THINKING_CANDIDATES_SQL = thinking.CACHE_CANDIDATES_TEMPLATE.format(
    files="r.file_id = :file_id AND r.byte_offset > :after")
INSERT_THINKING_SQL = ("INSERT INTO thinking_cache (file_id, record_id, block, kind, model, "
                       "version) VALUES (?, ?, ?, ?, ?, ?)")
FORGET_THINKING_SQL = "DELETE FROM thinking_cache WHERE file_id = ?"
# Where the scan stopped: the file's last record (by the records_file_offset index).
SAVE_THINKING_SCAN_SQL = """
INSERT OR REPLACE INTO thinking_scans (file_id, generation, scanned_offset)
SELECT :file_id, :generation, coalesce(max(byte_offset), :after) FROM records
WHERE file_id = :file_id
""".strip()


def scan_thinking(conn, file_ids) -> None:
    """Bring these files' thinking_cache rows up to date (inside the
    caller's transaction): a main transcript's records after the last scan
    of its generation, all of them when it has none (a new, rewritten or
    recomputed file: forget_files drops its scan)."""
    for file_id in file_ids:
        row = conn.execute(THINKING_SCAN_STATE_SQL, [file_id]).fetchone()
        if row is None or row[0] != "main":
            continue
        _kind, generation, scanned_generation, scanned = row
        after = scanned if scanned_generation == generation else -1
        if after == -1:
            conn.execute(FORGET_THINKING_SQL, [file_id])
        params = {"file_id": file_id, "after": after, "generation": generation}
        conn.executemany(INSERT_THINKING_SQL, thinking.cache_rows(
            conn.execute(THINKING_CANDIDATES_SQL, params)))
        conn.execute(SAVE_THINKING_SCAN_SQL, params)


# usage_calls (views.USAGE_CALLS_TEMPLATE's rows, migrations.m090_usage_calls):
# each file's usage lines after where usage_scans says its last scan of its
# generation stopped (all of them when none did: a new, rewritten or
# recomputed file), and the lines deleted since (usage_dropped, noted by a
# trigger), name the calls to pick again from all their copies.
# A file's generation and where its last scan stopped (NULL: none of this generation).
USAGE_SCAN_STATE_SQL = """
SELECT f.generation, CASE WHEN s.generation = f.generation THEN s.scanned_offset END
FROM files f LEFT JOIN usage_scans s ON s.file_id = f.id WHERE f.id = ?
""".strip()
# The usage lines of a file (message id, and id when it has none): all of
# them (by records_usage), or those after a byte offset (records_file_offset).
USAGE_LINES_OF_FILE_SQL = """
SELECT message_id, CASE WHEN message_id IS NULL THEN id END
FROM records INDEXED BY records_usage WHERE has_usage AND file_id = ?
""".strip()
USAGE_LINES_AFTER_SQL = """
SELECT message_id, CASE WHEN message_id IS NULL THEN id END
FROM records WHERE file_id = ? AND byte_offset > ? AND has_usage
""".strip()
SAVE_USAGE_SCAN_SQL = """
INSERT OR REPLACE INTO usage_scans (file_id, generation, scanned_offset)
SELECT :file_id, :generation, coalesce(max(byte_offset), -1) FROM records WHERE file_id = :file_id
""".strip()
TAKE_USAGE_DROPPED_SQL = "SELECT DISTINCT message_id, record_id FROM usage_dropped"
CLEAR_USAGE_DROPPED_SQL = "DELETE FROM usage_dropped"
# The calls of the message ids :ids and of the lines :lines (ids of lines
# without one) out, then picked again from the records: first every DELETE,
# then the INSERTs (a kept line's id is unique in usage_calls).
_REPICKED = {
    "ids": (" AND message_id IN (SELECT value FROM json_each(:ids))",
            "INDEXED BY records_usage_message"),
    "lines": (" AND message_id IS NULL AND id IN (SELECT value FROM json_each(:lines))",
              "NOT INDEXED"),
}
UNPICK_USAGE_SQLS = (
    "DELETE FROM usage_calls WHERE message_id IN (SELECT value FROM json_each(:ids))",
    "DELETE FROM usage_calls WHERE message_id IS NULL "
    "AND record_id IN (SELECT value FROM json_each(:lines))",
)
PICK_USAGE_SQLS = tuple(
    views.KEEP_USAGE_CALLS_TEMPLATE.format(calls=views.USAGE_CALLS_TEMPLATE.format(
        indexed=index, files="", where=where))
    for where, index in _REPICKED.values())

# The calls of usage_calls picked again (the message ids :ids, the lines :lines).
_PICKED = (" WHERE message_id IN (SELECT value FROM json_each(:ids)) OR (message_id IS NULL "
           "AND record_id IN (SELECT value FROM json_each(:lines)))")
# The calls just picked, priced (views.REPRICE_USAGE_CALLS_TEMPLATE).
REPRICE_PICKED_SQL = views.REPRICE_USAGE_CALLS_TEMPLATE.format(
    priced=views.USAGE_PRICED_CALLS_TEMPLATE.format(where=_PICKED))
# usage_day_sums: the calls about to be picked again taken out of their
# sums, then the calls picked and priced added (views.SUBTRACT_USAGE_DAY_SUMS_TEMPLATE).
UNSUM_PICKED_SQL = views.SUBTRACT_USAGE_DAY_SUMS_TEMPLATE.format(where=_PICKED)
SUM_PICKED_SQLS = tuple(t.format(where=_PICKED) for t in views.ADD_USAGE_DAY_SUMS_TEMPLATES)


def keep_usage_calls(conn, file_ids) -> None:
    """Bring usage_calls up to date after these files' records changed and
    any were deleted (inside the caller's transaction): every call with a
    line added to them since their last scan, or deleted anywhere, is picked
    again from all its copies, and its sums per day, project and model
    (usage_day_sums) follow."""
    ids, lines = set(), set()
    for file_id in file_ids:
        state = conn.execute(USAGE_SCAN_STATE_SQL, [file_id]).fetchone()
        if state is None:
            continue
        generation, scanned = state
        found = (conn.execute(USAGE_LINES_OF_FILE_SQL, [file_id]) if scanned is None
                 else conn.execute(USAGE_LINES_AFTER_SQL, [file_id, scanned]))
        for message_id, line in found:
            (ids.add(message_id) if message_id is not None else lines.add(line))
        conn.execute(SAVE_USAGE_SCAN_SQL, {"file_id": file_id, "generation": generation})
    dropped = conn.execute(TAKE_USAGE_DROPPED_SQL).fetchall()
    if dropped:
        conn.execute(CLEAR_USAGE_DROPPED_SQL)
        for message_id, line in dropped:
            (ids.add(message_id) if message_id is not None else lines.add(line))
    if not ids and not lines:
        return
    params = {"ids": json.dumps(sorted(ids)), "lines": json.dumps(sorted(lines))}
    for sql in ((UNSUM_PICKED_SQL,) + UNPICK_USAGE_SQLS + PICK_USAGE_SQLS
                + (REPRICE_PICKED_SQL,) + SUM_PICKED_SQLS):
        conn.execute(sql, params)


def keep_sql_caches(conn, file_ids) -> None:
    """The caches kept in SQL for these files, after their records changed
    (inside the caller's transaction): thinking_cache, fork_heads_cache,
    sent_names_cache, usage_calls, and last verdict_facts_cache (it reads
    the others)."""
    scan_thinking(conn, file_ids)
    ids = {"file_ids": json.dumps(list(file_ids))}
    conn.execute(FORK_HEADS_SQL, ids)
    conn.execute(FORGET_SENT_NAMES_SQL, ids)
    conn.execute(SENT_NAMES_SQL, ids)
    keep_usage_calls(conn, file_ids)
    for sql in KEEP_VERDICT_FACTS_SQLS:
        conn.execute(sql, ids)


def forget_file(conn, file_id: int) -> None:
    """Drop a file's cached rows (inside the caller's transaction)."""
    forget_files(conn, [file_id])


def forget_files(conn, file_ids: list[int]) -> None:
    """Drop these files' cached rows, one statement per cache."""
    ids = json.dumps(file_ids)
    for table in CACHES + SQL_CACHE_TABLES:
        conn.execute(
            f"DELETE FROM {table} WHERE file_id IN (SELECT value FROM json_each(?))", [ids])


def _sdk_leaf(occ: list[Rec], nodes: dict[str, Rec]):
    """The Agent SDK's leaf, the number of distinct main leaves, and the
    sdk_terminals rows: each terminal (a chain record no record names as
    parent) with the message it walks up to."""
    parents = {r.parent_uuid for r in occ if r.parent_uuid is not None}
    best, best_key, main_leaves, terminals = None, None, set(), []
    for terminal in occ:
        if terminal.uuid in parents:
            continue
        message = chain.message_of_terminal(terminal, nodes)
        if message is None:
            continue
        line = nodes[message.uuid].line_no
        terminals.append((terminal.file_id, terminal.uuid, message.uuid, message.id,
                          int(message.is_main_message), line, terminal.line_no))
        if message.is_main_message:
            main_leaves.add(message.uuid)
        key = chain.terminal_key(terminal, message, line)
        if best_key is None or key > best_key:
            best, best_key = message, key
    return best, len(main_leaves), terminals


def compute_file(file_id: int, kind: str, session_id, with_uuid: list[Rec],
                 prompts: list[resume.Prompt] = (), covers: tuple = (None, None),
                 calls=None) -> dict:
    """Every cache's rows for one file, from its records that have a uuid
    and its last-prompt records; ``covers``: (lines, bytes) of the file
    they are read from, where derive_append.py carries on; ``calls``: Rec
    -> resume.Calls (chain.calls_reader), what resume.kin reads."""
    occ = [r for r in with_uuid if r.type in CHAIN_TYPES]
    nodes: dict[str, Rec] = {}
    for r in occ:
        nodes[r.uuid] = r
    sdk_leaf, branch_count, terminals = _sdk_leaf(occ, nodes)
    state = {"lines": covers[0], "offset": covers[1]}
    if kind == "main":
        held = resume.loader_nodes(occ)
        cli_occ, cli_nodes = resume.cli_lines(occ, held)
        view = resume.cli_view(cli_occ, list(prompts), cli_nodes, calls)
        resume_leaf, rule = resume.resume_leaf(view)
        resume_chain = resume.walk(view, resume_leaf) if resume_leaf is not None else []
    else:
        resume_leaf = sdk_leaf = next(
            (r for r in reversed(occ) if r.type in MESSAGE_TYPES), None)
        rule = "subagent_last_message" if resume_leaf is not None else "no_leaf"
        resume_chain = chain.walk(resume_leaf, nodes) if resume_leaf is not None else []
    resume_message = next((r for _, r in resume_chain if r.type in MESSAGE_TYPES), None)
    boundary_line = next(
        (r.line_no for _, r in resume_chain
         if records.is_compact_boundary(r.type, r.subtype)), None)
    sdk_chain = chain.walk(sdk_leaf, nodes) if sdk_leaf is not None else []
    state["sdk_cycle"] = chain.ends_in_cycle(sdk_chain, lambda r: r.parent_uuid)
    if kind == "main":
        state.update(derive_append.main_state(view, resume_chain, resume_message, boundary_line))
        state["resume_cycle"] = chain.ends_in_cycle(
            resume_chain, lambda r: view.walk_parent.get(r.uuid))
    else:
        state["resume_cycle"] = state["sdk_cycle"]
    orphan_rows = []
    if kind == "main":
        orphan_rows, strays = _orphans(session_id, cli_nodes, resume_chain, resume_message,
                                       boundary_line, calls, view.parent, view.cut,
                                       lambda: resume.loader_places(cli_occ))
        state["cut"] = bool(view.cut)   # derive_append gives up on a rewind cut
        # and on a progress or unreadable line whose uuid another line has
        state["held_not_last"] = resume.held_not_last(occ)
        # Results off the chain a later append could have recovered by
        # tool-call id (derive_append gives up on such a file).
        state["strays"] = chain.stray_state(strays, view.parent, cli_nodes, calls)
    leaves_row = (
        file_id, session_id, kind,
        resume_leaf and resume_leaf.id, resume_leaf and resume_leaf.uuid,
        sdk_leaf and sdk_leaf.id, sdk_leaf and sdk_leaf.uuid,
        int((resume_message and resume_message.uuid) == (sdk_leaf and sdk_leaf.uuid)),
        branch_count, rule, len(resume_chain), len(sdk_chain), covers[0],
        json.dumps(state),
    )
    ancestry_rows = [(file_id, session_id, "resume", r.uuid, len(resume_chain) - 1 - d, r.id)
                     for d, r in resume_chain]
    ancestry_rows += [(file_id, session_id, "sdk", r.uuid, len(sdk_chain) - 1 - d, r.id)
                      for d, r in sdk_chain]
    breaks = [chain.chain_break_row(r, session_id) for r in occ
              if r.parent_uuid is not None and r.parent_uuid not in nodes]
    lines_of: dict[str, list[int]] = {}
    for r in with_uuid:
        lines_of.setdefault(r.uuid, []).append(r.line_no)
    duplicates = [(file_id, session_id, uuid, len(lines), ",".join(map(str, lines)), lines[-1])
                  for uuid, lines in lines_of.items() if len(lines) > 1]
    return {"leaves": [leaves_row], "leaf_ancestry": ancestry_rows, "orphans": orphan_rows,
            "chain_breaks": breaks, "duplicate_uuids": duplicates, "sdk_terminals": terminals}


def calls_in(conn):
    """resume.Calls of the index's records, read by id (for resume.kin)."""
    return chain.calls_reader(lambda r: conn.execute(chain.CALLS_SQL, [r.id]).fetchone(),
                              lambda r: conn.execute(chain.TOOL_IDS_SQL, [r.id]).fetchone())


def _orphans(session_id, nodes: dict[str, Rec], resume_chain, message, boundary_line, calls,
             loaded: dict, cut=frozenset(), first_loaded=dict):
    """(rows, strays): every non-sidechain chain record off the resume chain,
    with its cause and whether the CLI puts it back (restored), and the
    stray results off the chain (walk.stray_results); ``calls``: Rec ->
    resume.Calls (the tool ids walk.is_late_graft compares); ``loaded``:
    uuid -> parent of the records the loader loads (resume.CliView.parent);
    ``cut``: the records a rewind cut (resume.rewind_cut), never put back;
    ``first_loaded()``: uuid -> its place in the loader's Map
    (resume.loader_places), asked only when a record names rows ahead."""
    on_chain = {r.uuid: d for d, r in resume_chain}
    by_depth = {d: r for d, r in resume_chain}
    chain_messages = {
        r.message_id for _, r in resume_chain if r.type == "assistant" and r.message_id is not None}
    splice_points = {
        r.uuid for d, r in resume_chain
        if d - 1 in by_depth
        and records.is_api_error_record(by_depth[d - 1].type, by_depth[d - 1].subtype)}
    children_of: dict[str, list[Rec]] = {}
    for n in nodes.values():
        if n.parent_uuid is not None:
            children_of.setdefault(n.parent_uuid, []).append(n)
    put_back = chain.put_back(
        lambda u: [c for c in children_of.get(u, ()) if c.type not in MESSAGE_TYPES], message,
        cut)

    def parallel(n):
        return chain.is_parallel(n, nodes.get(n.parent_uuid), chain_messages.__contains__)

    # Results recovered by tool-call id (uuid -> the response's message id);
    # message_at: each response on the chain, the depth of its first record.
    message_at: dict[str, int] = {}
    for d, r in resume_chain:
        if r.type == "assistant" and r.message_id is not None:
            message_at[r.message_id] = max(d, message_at.get(r.message_id, d))
    strays = chain.stray_results(loaded, nodes, calls, lambda r: r.uuid not in on_chain)
    recovered = chain.recovered_by_tool_use_id(strays, loaded, nodes, on_chain, message_at,
                                               parallel, calls)

    def response_of(u):
        """The message id of the response a parallel record is put back
        with (walk.is_parallel, or recovered by tool-call id), None for the
        others."""
        n = nodes[u]
        if u in on_chain:
            return None
        if u in recovered:
            return recovered[u]
        if not parallel(n):
            return None
        return n.message_id if n.type == "assistant" else nodes[n.parent_uuid].message_id

    def is_visited(u):
        return u in on_chain or u in cut or response_of(u) is not None

    # The put-back lines follow the parents the loader reads (``loaded``:
    # resume.CliView.parent): through progress and unreadable records
    # (resume.bridged), which it does not load, a sentAsUuid read as the
    # record stored anew, and as a compaction's relink moves them.
    loaded_children: dict[str, list[Rec]] = {}
    for u, p in loaded.items():
        if p is not None:
            loaded_children.setdefault(p, []).append(nodes[u])
    link = chain.line_link(calls)
    ahead = any(n.rows_ahead is not None for n in nodes.values())
    trace: dict | None = {} if ahead else None
    with_result = chain.put_back_with_results(
        resume_chain, nodes, lambda u: loaded_children.get(u, ()), is_visited,
        lambda r: response_of(r.uuid) is None and link(r), response_of, recovered, trace)
    # The rows a result on the loader's chain names in rowsAheadOfPutBack.
    if ahead:
        # (the resume chain, the records put back with a response on it,
        # directly or recovered by tool-call id, and the put-back lines, in
        # the order RRr() hands them to Krn())
        put_back_by = {u: response_of(u) for u in loaded
                       if u not in cut and u not in on_chain and response_of(u) is not None}
        first = {u: line for u, line in first_loaded().items() if u in loaded}
        # (a recovered result the loader reads under a record of its
        # response is one of its results: placed by its own line)
        lifted = {u: m for u, m in recovered.items()
                  if not (loaded.get(u) in nodes and nodes[loaded[u]].type == "assistant"
                          and nodes[loaded[u]].message_id == m)}
        loader_chain = [u for u in chain.loader_chain(resume_chain, trace, put_back_by,
                                                      lifted, first, nodes)
                        if u not in cut]
        with_result = with_result | chain.rows_ahead_put_back(
            loader_chain, set(loader_chain) | set(cut), nodes, loaded, calls)

    off = [n for n in nodes.values() if n.uuid not in on_chain]
    parents = {n.uuid: n.eff_parent for n in off}
    children: dict[str, list[Rec]] = {}
    for n in off:
        if parents[n.uuid] is not None:
            children.setdefault(parents[n.uuid], []).append(n)

    # Top-down from each branch's first record: (branch_point, origin, root).
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
            reached[cur.uuid] = (bp, origin, n)
            todo += [c for c in children.get(cur.uuid, ()) if c.uuid not in reached]

    # walk.is_concurrent's spans: each branch's (by its root; sidechains
    # aside), and the chain's below each depth (toward the leaf).
    members: dict[str, list[Rec]] = {}
    for u, (bp, origin, root) in reached.items():
        if origin == "ancestry" and not nodes[u].is_sidechain:
            members.setdefault(root.uuid, []).append(nodes[u])
    def parent_of(r):
        return nodes.get(r.parent_uuid) if r.parent_uuid is not None else None

    branch_span = {root: chain.message_span(recs, parent_of) for root, recs in members.items()}
    below_span: dict[int, tuple | None] = {}
    span = None
    for d in sorted(by_depth):
        below_span[d] = span
        r = by_depth[d]
        span = chain.widen_span(span, r, r.type == "user" and chain.is_prompt(r, parent_of(r)))

    rows = []
    for o in sorted(off, key=lambda n: n.line_no):
        if o.is_sidechain:
            continue
        bp, origin, root = reached.get(o.uuid, (None, None, None))
        parent = nodes.get(o.parent_uuid) if o.parent_uuid is not None else None
        below = by_depth.get(on_chain[bp] - 1) if origin == "ancestry" else None
        concurrent = origin == "ancestry" and chain.is_concurrent(
            root, branch_span.get(root.uuid), below_span[on_chain[bp]])
        cause = chain.cause_of(o, parent, bp, origin, boundary_line,
                               chain_messages.__contains__, splice_points.__contains__,
                               o.uuid in with_result,
                               root is not None and chain.is_late_graft(root, below, calls),
                               o.uuid in recovered, concurrent)
        rows.append(chain.orphan_row(o, session_id, cause, bp, put_back))
    return rows, strays


def derive_files(conn, file_ids: list[int]) -> None:
    """Bring these files' cached rows up to date (inside the caller's
    transaction): extended by what was appended where derive_append.py can
    (a chain grown at its leaf), else recomputed from all their records."""
    files = conn.execute(FILES_SQL, {"file_ids": json.dumps(file_ids)}).fetchall()
    known = derive_append.Known(conn, files)
    extended = {file_id for file_id, kind, session_id, *covers in files
                if derive_append.extend(conn, file_id, kind, session_id, covers, known)}
    STATS["appended"] += len(extended)
    todo = [i for i in file_ids if i not in extended]
    if not todo:
        return
    params = {"file_ids": json.dumps(todo)}
    read = chain.read_rows(conn.execute(UUID_RECORDS_SQL, params), todo)
    rows: dict[str, list] = {name: [] for name in chain.CACHE_COLUMNS}
    forget_files(conn, todo)
    for file_id, kind, session_id, *covers in files:
        if file_id in extended:
            continue
        STATS["recomputed"] += 1
        recs, prompts = read[file_id]
        computed = compute_file(file_id, kind, session_id, recs, prompts, covers,
                                calls_in(conn))
        for name, file_rows in computed.items():
            rows[name] += file_rows
    for name, table_rows in rows.items():
        chain.insert_rows(conn, name, table_rows)


def derive_pending(db) -> int:
    """Recompute every file marked ``needs_derive`` (all of them when the
    definitions changed since the caches were built). Returns the count."""
    pending = pending_files(db)
    derive_some(db, pending)
    return len(pending)


def pending_files(db) -> list[int]:
    """The files marked ``needs_derive`` (every file, marked, when the
    definitions changed since the caches were built)."""
    mark_all_if_definitions_changed(db)
    refresh_sessions_if_stale(db)
    refresh_usage_calls_if_stale(db)
    refresh_usage_prices_if_stale(db)
    refresh_verdict_facts_if_stale(db)
    return [i for (i,) in db.conn.execute(PENDING_FILES_SQL)]


def derive_some(db, file_ids: list[int], budget_s: float | None = None,
                batch: int = DERIVE_BATCH) -> list[int]:
    """Derive these files, a transaction per ``batch``; with ``budget_s``,
    no new transaction starts once that many seconds are spent (a fleet's
    central derives between its batches, so that lines keep coming in).
    Returns the files left."""
    started = time.monotonic()
    for i in range(0, len(file_ids), batch):
        if budget_s is not None and i and time.monotonic() - started >= budget_s:
            return file_ids[i:]
        ids = file_ids[i:i + batch]
        with write_lock(db):
            derive_files(db.conn, ids)
            finish_files(db.conn, ids)
    return []


def finish_files(conn, file_ids: list[int]) -> None:
    """Once these files' caches are written (inside the caller's
    transaction): the caches kept in SQL (keep_sql_caches) and their
    sessions' rows again, and the files unmarked."""
    keep_sql_caches(conn, file_ids)
    ids = json.dumps(file_ids)
    for (session_id,) in conn.execute(SESSIONS_OF_FILES_SQL, [ids]).fetchall():
        views.refresh_session(conn, session_id)
    conn.execute(UNMARK_FILES_SQL, [ids])


def mark_all_if_definitions_changed(db) -> bool:
    """Mark every file for recomputing when the caches were built by other
    definitions (or another DERIVE_VERSION); True if it did."""
    conn = db.conn
    if views.caches_current(conn):
        return False
    with write_lock(db):
        conn.execute("UPDATE files SET needs_derive = 1")
        conn.execute("UPDATE leaves_cache SET derive_state = NULL")  # recompute each
        conn.execute("INSERT OR REPLACE INTO index_meta VALUES ('definitions_hash', ?)",
                     [views.CACHES_HASH])
    return True


# usage_calls again from its definition, and every file's usage lines
# read (after a change to the definition, or an index the migration filled).
REFILL_USAGE_CALLS_SQLS = (
    "DELETE FROM usage_calls",
    "DELETE FROM usage_dropped",
    views.KEEP_USAGE_CALLS_TEMPLATE.format(calls=views.USAGE_CALLS_DEFINITION),
    "DELETE FROM usage_scans",
    """INSERT INTO usage_scans (file_id, generation, scanned_offset)
       SELECT f.id, f.generation,
         coalesce((SELECT max(byte_offset) FROM records r WHERE r.file_id = f.id), -1)
       FROM files f""",
    *views.REPRICE_ALL_USAGE_CALLS_SQLS,
    "INSERT OR REPLACE INTO index_meta VALUES ('usage_calls_hash', :hash)",
)


def refresh_usage_calls_if_stale(db) -> bool:
    """Fill usage_calls again when it was filled by another definition
    (index_meta.usage_calls_hash); True if it did."""
    if views.usage_calls_current(db.conn):
        return False
    with write_lock(db) as conn:
        for sql in REFILL_USAGE_CALLS_SQLS:
            conn.execute(sql, {"hash": views.USAGE_CALLS_HASH} if ":hash" in sql else {})
    return True


# verdict_facts_cache again for every main transcript, from its definition
# (after a change to it, or an index the migration filled).
REFILL_VERDICT_FACTS_SQLS = (
    "DELETE FROM verdict_facts_cache",
    f"INSERT INTO verdict_facts_cache ({verdict.VERDICT_FACTS_COLUMNS})\n"
    + verdict.VERDICT_FACTS_DEFINITION_SQL,
    "INSERT OR REPLACE INTO index_meta VALUES ('verdict_facts_hash', :hash)",
)


def refresh_verdict_facts_if_stale(db) -> bool:
    """Fill verdict_facts_cache again when it was filled by another
    definition (index_meta.verdict_facts_hash); True if it did."""
    if views.verdict_facts_current(db.conn):
        return False
    with write_lock(db) as conn:
        for sql in REFILL_VERDICT_FACTS_SQLS:
            conn.execute(sql, {"hash": views.VERDICT_FACTS_HASH} if ":hash" in sql else {})
    return True


def refresh_usage_prices_if_stale(db) -> bool:
    """Price every call of usage_calls again when the prices table changed
    since they were priced (a trigger's note); True if it did."""
    if views.usage_prices_current(db.conn):
        return False
    with write_lock(db) as conn:
        views.reprice_usage_calls(conn)
    return True


def refresh_sessions_if_stale(db) -> bool:
    """Refresh every sessions row if they were computed by another rule
    (index_meta.sessions_hash); True if it did."""
    if views.sessions_current(db.conn):
        return False
    refresh_all_sessions(db)
    return True


def refresh_all_sessions(db) -> int:
    """Recompute every sessions row (after the rule changed), in batches."""
    conn = db.conn
    ids = [r[0] for r in conn.execute(
        "SELECT DISTINCT session_id FROM files WHERE session_id IS NOT NULL "
        f"AND kind IN {definitions.TRANSCRIPT_KINDS} ORDER BY session_id")]
    for i in range(0, len(ids), DERIVE_BATCH):
        with write_lock(db):
            for session_id in ids[i:i + DERIVE_BATCH]:
                views.refresh_session(conn, session_id)
    with write_lock(db):
        conn.execute("INSERT OR REPLACE INTO index_meta VALUES ('sessions_hash', ?)",
                     [SESSIONS_HASH])
    return len(ids)
