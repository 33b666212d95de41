"""Extending a file's caches by the records appended to it.

A live session grows at the leaf of its chains, and then its caches change
only there: the new records join the resume and sdk walks (stored by height,
which the older records keep: definitions.LEAF_ANCESTRY_SQL), the new off-chain
records become orphans, and the few older rows near the leaf whose class can
change are classed again. ``extend`` does just that, reading the appended
records and, by uuid, the older records it touches (each lookup an index
probe), so its cost follows what was appended, not the file's size.

It gives up (``Bail``) on anything else, and derive.py recomputes the file
from all its records: a uuid that repeats, an appended record that an older
one names as parent, a leaf that moves to another branch (the new walk does
not come down to the old leaf), a compaction or an api_error record on the
new part of the chain, a walk that would take the timestamp fallback (or an
older chain that took it, or whose open top an appended record could now
extend), the leaf scan, or more than STEP_BOUND lookups. The randomized
tests hold both paths to the SQL definitions after every append.

Where the older rows can change, and what is classed again:
- older records that join the chain lose their orphans row, and their
  off-chain descendants get a new branch point;
- older records of an API message that joins the chain may become
  parallel_tool_branch (and their tool results);
- when the leaf message moves, what the CLI puts back moves with it;
- the lines of companion records put back with a parallel result
  (walk.put_back_with_results) whose records, anchor or response change
  (_WithResult: it gives up where a response's region on the chain could
  move, or a line hangs below a companion record outside one).
"""

from __future__ import annotations

import json
from collections import Counter

from indexer.chain import walk as chain, resume
from indexer.chain.walk import REC_COLUMNS, UUID_RECORDS_SELECT, Rec
from indexer.chain.resume import CHAIN_TYPES, CLI_NODE_TYPES, FALLBACK_MS
from indexer.transcripts import records
from indexer.transcripts.records import CHAIN_TYPES_SQL, MESSAGE_TYPES

# Lookups of older records one extension may make before it gives up.
STEP_BOUND = 4096
# Stored chain rows a leaf that moves may leave behind (a parallel tool
# call's sibling, a retry) before it counts as moved to another branch.
CUT_BOUND = 64
# Why extensions gave up since the process started (bench and tests read it).
BAILS: Counter = Counter()
# The rules an extension carries on from (the others recompute the file).
EXTENDABLE_RULES = ("checkpoint", "last_row", "subagent_last_message")

_PREVIOUS_COLUMNS = """resume_leaf_uuid, sdk_leaf_uuid, resume_rule, resume_length, sdk_length,
       branch_count, derive_state"""
# What extend asks of each file, asked of a batch of files at once (Known):
# their leaves rows (file_id, then what an extension carries on from), and
# which of them hold a record with a sentAsUuid (its renames are recomputed
# with the whole file) or a rowsAheadOfPutBack (those rows are found with
# the whole file: walk.rows_ahead_put_back, on the chain in the loader's
# order, walk.loader_chain, which a record written before its parent
# reorders), by the partial indexes
# records_sent_as and records_rows_ahead.
PREVIOUS_OF_FILES_SQL = f"""
SELECT file_id, {_PREVIOUS_COLUMNS} FROM leaves_cache
WHERE file_id IN (SELECT value FROM json_each(?))
""".strip()
SENT_AS_FILES_SQL = """
SELECT DISTINCT file_id FROM records
WHERE file_id IN (SELECT value FROM json_each(?)) AND sent_as_uuid IS NOT NULL
""".strip()
ROWS_AHEAD_FILES_SQL = """
SELECT DISTINCT file_id FROM records
WHERE file_id IN (SELECT value FROM json_each(?)) AND rows_ahead IS NOT NULL
""".strip()
# The lines after the ones the caches cover, of a batch of files (:files a
# JSON array of [file id, byte offset]; the records_file_offset index), each
# file's in file order.
APPENDED_SQL = UUID_RECORDS_SELECT.replace("FROM records r", """FROM json_each(:files) j
CROSS JOIN records r ON r.file_id = j.value ->> 0 AND r.byte_offset >= j.value ->> 1""") + """
WHERE r.uuid IS NOT NULL OR r.type = 'last-prompt'
ORDER BY j.key, r.byte_offset"""
# Does an assistant record of the file hold this tool_use id (a call a stray
# result answers: walk.stray_state)? The instr() test spares the JSON of the others.
HOLDER_SQL = f"""
SELECT 1 FROM records r WHERE r.file_id = ? AND r.type = 'assistant'
  AND instr(r.raw, '"' || ?2 || '"') > 0
  AND EXISTS (SELECT 1 FROM json_each({records.TOOL_IDS.format(r="r")}) j WHERE j.value = ?2)
LIMIT 1
""".strip()
# The files of a batch (:files a JSON array of [file id, lines covered, [the
# appended uuids]]) where an older record (at or before the lines covered)
# shares an appended uuid, or names one as its parent or logical parent.
CLASH_SQL = """
WITH appended AS MATERIALIZED (
  SELECT j.value ->> 0 AS file_id, j.value ->> 1 AS lines, u.value AS uuid
  FROM json_each(:files) j, json_each(j.value -> 2) u
)
SELECT a.file_id FROM appended a CROSS JOIN records r
  ON r.file_id = a.file_id AND r.uuid = a.uuid AND r.line_no <= a.lines
UNION
SELECT a.file_id FROM appended a CROSS JOIN records r
  ON r.file_id = a.file_id AND r.parent_uuid = a.uuid AND r.line_no <= a.lines
UNION
SELECT a.file_id FROM appended a CROSS JOIN records r
  ON r.file_id = a.file_id AND r.logical_parent_uuid = a.uuid
  AND r.logical_parent_uuid IS NOT NULL AND r.line_no <= a.lines
""".strip()
OLDER_BY_UUID_SQL = f"""
SELECT {REC_COLUMNS} FROM records r
WHERE r.file_id = ? AND r.uuid = ? AND r.type IN {CHAIN_TYPES_SQL} AND r.line_no <= ?
ORDER BY r.line_no DESC LIMIT 1
""".strip()
LINE_SQL = f"SELECT {REC_COLUMNS} FROM records r WHERE r.id = ?"
# OLDER_BY_UUID_SQL and OLDER_OF_MESSAGE_SQL for a batch of files (Known: :asked a
# JSON array of [file id, lines covered, uuid or message id]): j.key (the
# question), then the row(s) its own query gives (OLDER_OF_MESSAGE_SQL's in
# record order, as its index gives them).
OLDER_BY_UUIDS_SQL = f"""
SELECT j.key, {REC_COLUMNS} FROM json_each(:asked) j CROSS JOIN records r
  ON r.id = (SELECT o.id FROM records o
             WHERE o.file_id = j.value ->> 0 AND o.uuid = j.value ->> 2
               AND o.type IN {CHAIN_TYPES_SQL} AND o.line_no <= j.value ->> 1
             ORDER BY o.line_no DESC LIMIT 1)
""".strip()
OLDER_OF_MESSAGES_SQL = f"""
SELECT j.key, {REC_COLUMNS} FROM json_each(:asked) j CROSS JOIN records r
  ON r.file_id = j.value ->> 0 AND r.message_id = j.value ->> 2 AND r.type = 'assistant'
  AND r.line_no <= j.value ->> 1
ORDER BY j.key, r.id
""".strip()
OLDER_CHILDREN_SQL = f"""
SELECT {REC_COLUMNS} FROM records r
WHERE r.file_id = ? AND r.parent_uuid = ? AND r.type IN {CHAIN_TYPES_SQL} AND r.line_no <= ?
""".strip()
# Compact boundaries that hang from a uuid by their logicalParentUuid.
OLDER_LOGICAL_CHILDREN_SQL = f"""
SELECT {REC_COLUMNS} FROM records r
WHERE r.file_id = ? AND r.logical_parent_uuid = ? AND r.parent_uuid IS NULL
  AND {records.COMPACT_BOUNDARY_RECORD.format(r="r")} AND r.line_no <= ?
""".strip()
OLDER_OF_MESSAGE_SQL = f"""
SELECT {REC_COLUMNS} FROM records r
WHERE r.file_id = ? AND r.message_id = ? AND r.type = 'assistant' AND r.line_no <= ?
""".strip()
# A record's height on a stored chain (none: not on it).
HEIGHT_SQL = "SELECT height FROM leaf_ancestry_cache WHERE file_id = ? AND rule = ? AND uuid = ?"
CHAIN_AT_SQL = "SELECT uuid FROM leaf_ancestry_cache WHERE file_id = ? AND rule = ? AND height = ?"
# The stored rows above a height, which leave the chain.
CUT_SQL = """
SELECT uuid FROM leaf_ancestry_cache WHERE file_id = ? AND rule = ? AND height > ?
ORDER BY height
""".strip()
DROP_CUT_SQL = "DELETE FROM leaf_ancestry_cache WHERE file_id = ? AND rule = ? AND height > ?"
# The first user/assistant record at or below a height of the resume chain.
MESSAGE_BELOW_SQL = """
SELECT a.uuid FROM leaf_ancestry_cache a JOIN records r ON r.id = a.record_id
WHERE a.file_id = ? AND a.rule = 'resume' AND a.height <= ? AND r.type IN ('user', 'assistant')
ORDER BY a.height DESC LIMIT 1
""".strip()
# The lowest height of an assistant record of this message id on the
# stored resume chain (NULL: none).
CHAIN_MESSAGE_SQL = """
SELECT min(a.height) FROM records r
CROSS JOIN leaf_ancestry_cache a ON a.file_id = r.file_id AND a.rule = 'resume' AND a.uuid = r.uuid
WHERE r.file_id = ? AND r.message_id = ? AND r.type = 'assistant'
""".strip()
ORPHANS_AT_SQL = "SELECT uuid FROM orphans_cache WHERE file_id = ? AND branch_point_uuid = ?"
# The record just below a stored resume chain record (its child on the chain).
CHAIN_CHILD_SQL = """
SELECT r.type, r.subtype FROM leaf_ancestry_cache b
JOIN leaf_ancestry_cache c ON c.file_id = b.file_id AND c.rule = b.rule AND c.height = b.height + 1
JOIN records r ON r.id = c.record_id
WHERE b.file_id = ? AND b.rule = 'resume' AND b.uuid = ?
""".strip()
DROP_TERMINALS_SQL = """
DELETE FROM sdk_terminals WHERE file_id = ? AND uuid IN (SELECT value FROM json_each(?))
""".strip()
# The Agent SDK's leaf (chain.terminal_key's order) and its count of main leaves.
SDK_LEAF_SQL = """
SELECT message_record_id FROM sdk_terminals WHERE file_id = ?
ORDER BY is_main DESC, message_line DESC, terminal_line LIMIT 1
""".strip()
# Main-chain messages of the terminals that an append names as parent.
DROPPED_MAIN_SQL = """
SELECT DISTINCT t.message_uuid FROM json_each(?2) j
CROSS JOIN sdk_terminals t ON t.file_id = ?1 AND t.uuid = j.value
WHERE t.is_main
""".strip()
IS_MAIN_LEAF_SQL = """
SELECT 1 FROM sdk_terminals INDEXED BY sdk_terminals_message
WHERE file_id = ? AND message_uuid = ? AND is_main LIMIT 1
""".strip()
DROP_ORPHANS_SQL = """
DELETE FROM orphans_cache WHERE file_id = ? AND uuid IN (SELECT value FROM json_each(?))
""".strip()
UPDATE_LEAVES_SQL = """
UPDATE leaves_cache SET resume_leaf_id = :resume_leaf_id, resume_leaf_uuid = :resume_leaf_uuid,
  sdk_leaf_id = :sdk_leaf_id, sdk_leaf_uuid = :sdk_leaf_uuid, leaves_agree = :leaves_agree,
  branch_count = :branch_count, resume_rule = :resume_rule, resume_length = :resume_length,
  sdk_length = :sdk_length, derived_lines = :lines, derive_state = :state
WHERE file_id = :file_id
""".strip()


# Messages stored between the old leaf message (by id) and the appended
# records that are off the chain as abandoned branches.
LATE_BRANCH_SQL = """
SELECT 1 FROM records r JOIN orphans_cache o ON o.file_id = r.file_id AND o.uuid = r.uuid
WHERE r.id > ?2 AND r.id < ?3 AND r.file_id = ?1 AND r.type IN ('user', 'assistant')
  AND o.cause = 'abandoned_branch'
LIMIT 1
""".strip()
# Does the file hold a concurrent resume's branch?
CONCURRENT_IN_FILE_SQL = ("SELECT 1 FROM orphans_cache WHERE file_id = ? "
                          "AND cause = 'concurrent_resume' LIMIT 1")
# The first and last lines of the messages on the stored resume chain
# between two heights (toward the leaf: greater heights).
# (walk.is_concurrent's span: and the first prompt's line.)
CHAIN_SPAN_SQL = """
SELECT min(r.line_no), max(r.line_no),
       min(CASE WHEN r.type = 'user' AND NOT r.is_meta AND NOT r.is_tool_result
                 AND NOT EXISTS (SELECT 1 FROM records pp WHERE pp.file_id = r.file_id
                                 AND pp.uuid = r.parent_uuid AND pp.type = 'user')
                THEN r.line_no END),
       max(r.type = 'assistant')
FROM leaf_ancestry_cache a JOIN records r ON r.id = a.record_id
WHERE a.file_id = ? AND a.rule = 'resume' AND a.height > ? AND a.height <= ?
  AND r.type IN ('user', 'assistant')
""".strip()


class _Spans:
    """walk.is_concurrent's line spans as the append leaves the chain: a
    branch's messages (every record below its root off the chain, as
    derive._orphans reaches them) and the chain's below a branch point (the
    stored rows kept, up to ``top``, and the ``added`` ones)."""

    def __init__(self, g: _Graph, file_id: int, on_chain, added: list[Rec], top):
        self.g, self.file_id, self.on_chain, self.added, self.top = g, file_id, on_chain, added, top
        self._members: dict[str, list[Rec]] = {}
        self._below: dict[str, tuple | None] = {}

    def members(self, root: Rec) -> list[Rec]:
        if root.uuid not in self._members:
            out, todo, seen = [root], [root.uuid], {root.uuid}
            while todo:
                for c in self.g.eff_children(todo.pop()):
                    n = self.g.get(c.uuid)
                    if n is None or n.uuid in seen or self.on_chain(n.uuid):
                        continue
                    seen.add(n.uuid)
                    out.append(n)
                    todo.append(n.uuid)
            self._members[root.uuid] = out
        return self._members[root.uuid]

    def parent_of(self, r: Rec) -> Rec | None:
        return self.g.get(r.parent_uuid) if r.parent_uuid is not None else None

    def branch(self, root: Rec) -> tuple | None:
        return chain.message_span((r for r in self.members(root) if not r.is_sidechain),
                                  self.parent_of)

    def chain_below(self, bp: str) -> tuple | None:
        if bp not in self._below:
            index = next((i for i, r in enumerate(self.added) if r.uuid == bp), None)
            if index is not None:   # added[0] is the leaf
                span = chain.message_span(self.added[:index], self.parent_of)
            else:
                h = self.g.old_height("resume", bp)
                span = None
                if h is not None and self.top is not None:
                    row = self.g.query(CHAIN_SPAN_SQL, self.file_id, h, self.top, one=True)
                    if row and row[0] is not None:
                        span = tuple(row)
                for r in self.added:
                    span = chain.widen_span(span, r, r.type == "user"
                                            and chain.is_prompt(r, self.parent_of(r)))
            self._below[bp] = span
        return self._below[bp]


class Bail(Exception):
    """Not an append at the leaf: the file is recomputed instead."""


def main_state(view: resume.CliView, resume_chain, resume_message, boundary_line) -> dict:
    """What an extension of a main file carries on from, besides the lines
    and bytes covered: the CLI's file-order scan, whether the resume walk
    took the timestamp fallback, its top when an appended record could give
    that top a fallback parent ([time, sidechain]), the line of the compact
    boundary nearest the leaf, and the leaf message."""
    fallback = any(view.walk_parent.get(r.uuid) != view.parent.get(r.uuid)
                   for _, r in resume_chain)
    top_open = None
    if resume_chain and not fallback:
        top = resume_chain[-1][1]
        p = view.parent.get(top.uuid)
        if p is not None and p not in view.nodes and top.ts_ms is not None:
            top_open = [top.ts_ms, bool(top.is_sidechain)]
    last, newest = view.last_row, view.newest_row
    return {"last_row": last.uuid if last is not None else None,
            "checkpoint": view.checkpoint, "explicit": view.explicit,
            "ever_explicit": view.ever_explicit,
            "rewound_to_empty": view.rewound_to_empty,
            "trailing_snapshots": view.trailing_snapshots,
            "prompted": view.prompted,
            "newest_row": newest.uuid if newest is not None else None,
            "relinks": view.keeps,
            "fallback": fallback, "top_open": top_open, "boundary_line": boundary_line,
            "resume_message": resume_message.uuid if resume_message is not None else None}


class Known:
    """What extend asks of each file, asked of a batch of files with a
    query each (not several queries a file): their leaves rows, the files
    that hold a record with a sentAsUuid or a rowsAheadOfPutBack, the
    records appended past what each file's caches cover, and the files
    where an older record knows an appended uuid (CLASH_SQL). Each file's
    extension changes only its own cached rows, and no record: what is read
    here holds for each file until it is derived."""

    __slots__ = ("previous", "states", "sent_as", "rows_ahead", "appended", "clash", "primed")

    def __init__(self, conn, files: list[tuple]):
        """``files``: (file id, kind, ...) rows of derive.FILES_SQL."""
        ids = json.dumps([f[0] for f in files])
        self.previous = {row[0]: row[1:] for row in conn.execute(PREVIOUS_OF_FILES_SQL, [ids])}
        self.sent_as = {i for (i,) in conn.execute(SENT_AS_FILES_SQL, [ids])}
        self.rows_ahead = {i for (i,) in conn.execute(ROWS_AHEAD_FILES_SQL, [ids])}
        self.states = states = {}   # (each file's derive_state, read once)
        for file_id, kind, *_ in files:
            prev = self.previous.get(file_id)
            if kind in ("main", "subagent") and prev is not None and prev[-1] is not None:
                states[file_id] = json.loads(prev[-1])
        from_offset = [[i, st["offset"]] for i, st in states.items()
                       if st.get("lines") is not None and st.get("offset") is not None]
        self.appended = chain.read_rows(
            conn.execute(APPENDED_SQL, {"files": json.dumps(from_offset)}),
            [i for i, _ in from_offset]) if from_offset else {}
        asked = [[i, states[i]["lines"], [r.uuid for r in recs]]
                 for i, (recs, _) in self.appended.items() if recs]
        self.clash = {i for (i,) in conn.execute(CLASH_SQL, {"files": json.dumps(asked)})} \
            if asked else set()
        self.primed: dict[int, dict] = {}   # file id: _Graph.memo's answers, asked here
        self._prime(conn, states)

    def _prime(self, conn, states: dict) -> None:
        """The lookups of older records every extension of a file makes,
        made for all the files at once: the records its appended ones name
        as parent (the old leaf, mostly), its scan's last and newest rows and
        leaf message, and the older records of its appended API responses."""
        by_uuid, of_message = [], []
        for file_id, (recs, _) in self.appended.items():
            if not recs:
                continue
            lines = states[file_id]["lines"]
            new = {r.uuid for r in recs}
            wanted = {r.parent_uuid for r in recs if r.parent_uuid is not None} | {
                states[file_id].get(k) for k in ("last_row", "newest_row", "resume_message")}
            by_uuid += [[file_id, lines, u] for u in sorted(wanted - new - {None})]
            of_message += [[file_id, lines, m] for m in sorted(
                {r.message_id for r in recs if r.type == "assistant" and r.message_id})]
        for sql, rows_sql, asked, one in (
                (OLDER_BY_UUID_SQL, OLDER_BY_UUIDS_SQL, by_uuid, True),
                (OLDER_OF_MESSAGE_SQL, OLDER_OF_MESSAGES_SQL, of_message, False)):
            if not asked:
                continue
            found: dict[int, list] = {}
            for key, *row in conn.execute(rows_sql, {"asked": json.dumps(asked)}):
                found.setdefault(key, []).append(tuple(row))
            for key, (file_id, lines, value) in enumerate(asked):
                rows = found.get(key, [])
                self.primed.setdefault(file_id, {})[(sql, (file_id, value, lines))] = \
                    (rows[0] if rows else None) if one else rows


def extend(conn, file_id: int, kind: str, session_id, covers, known: Known | None = None
           ) -> bool:
    """Extend one file's caches by its appended records (inside the caller's
    transaction). False, having changed nothing, when the file must be
    recomputed instead. ``known``: the file's facts read with its batch's."""
    if known is None:
        known = Known(conn, [(file_id, kind)])
    prev = known.previous.get(file_id)
    if prev is None or prev[-1] is None or kind not in ("main", "subagent"):
        return False
    state = known.states[file_id]
    lines, offset = covers
    if state.get("lines") is None or lines is None or lines < state["lines"]:
        return False
    conn.execute("SAVEPOINT derive_append")
    try:
        _Extension(conn, file_id, kind, session_id, prev, state, covers, known).run()
    except Bail as why:
        BAILS[str(why)] += 1
        conn.execute("ROLLBACK TO derive_append")
        conn.execute("RELEASE derive_append")
        return False
    except BaseException:
        if conn.in_transaction:   # not when SQLite rolled it all back (a full disk)
            conn.execute("ROLLBACK TO derive_append")
            conn.execute("RELEASE derive_append")
        raise
    conn.execute("RELEASE derive_append")
    return True


class _Graph:
    """A file's chain records by uuid: the appended ones in memory, the
    older ones read from the index when asked for (counted: STEP_BOUND).
    No older record names an appended one as its parent or logical parent
    (_Extension.run gives up first: CLASH_SQL), so the children of an
    appended record are appended ones, known without a query."""

    def __init__(self, conn, file_id: int, lines: int, new: list[Rec], primed=None):
        self.conn, self.file_id, self.lines = conn, file_id, lines
        self.known: dict[str, Rec | None] = {r.uuid: r for r in new}
        self.new_uuids = set(self.known)
        self.new_by_id = {r.id: r for r in new}
        self.new_children: dict[str, list[Rec]] = {}
        self.new_logical_children: dict[str, list[Rec]] = {}
        for r in new:
            if r.parent_uuid is not None:
                self.new_children.setdefault(r.parent_uuid, []).append(r)
            elif r.eff_parent is not None:
                self.new_logical_children.setdefault(r.eff_parent, []).append(r)
        self.steps = 0
        self.memo: dict = dict(primed or {})   # (Known's answers, asked with its batch's)

    def query(self, sql: str, *params, one=False):
        key = (sql, params)
        if key not in self.memo:
            self.steps += 1
            if self.steps > STEP_BOUND:
                raise Bail("too many lookups")
            cur = self.conn.execute(sql, params)
            self.memo[key] = cur.fetchone() if one else cur.fetchall()
        return self.memo[key]

    def is_old(self, r: Rec) -> bool:
        return r.line_no <= self.lines

    def line(self, record_id: int) -> Rec:
        """The chain record line of that id (a duplicated uuid's earlier
        line too: the SDK's leaf can be one)."""
        if record_id in self.new_by_id:
            return self.new_by_id[record_id]
        return Rec(*self.query(LINE_SQL, record_id, one=True))

    def get(self, uuid: str | None) -> Rec | None:
        """The chain record of that uuid, or None."""
        if uuid is None:
            return None
        if uuid not in self.known:
            row = self.query(OLDER_BY_UUID_SQL, self.file_id, uuid, self.lines, one=True)
            self.known[uuid] = Rec(*row) if row else None
        return self.known[uuid]

    def _older(self, sql: str, *params) -> list[Rec]:
        out = []
        for row in self.query(sql, self.file_id, *params, self.lines):
            # Not into known: the line may be an earlier one of its uuid,
            # and get() answers the last.
            r = self.known.get(row[3]) or Rec(*row)
            out.append(r)
        return out

    def children(self, uuid: str) -> list[Rec]:
        """The chain records whose parent_uuid is ``uuid``."""
        if uuid in self.new_uuids:
            return list(self.new_children.get(uuid, []))
        return self._older(OLDER_CHILDREN_SQL, uuid) + self.new_children.get(uuid, [])

    def eff_children(self, uuid: str) -> list[Rec]:
        """The chain records whose eff_parent is ``uuid``."""
        if uuid in self.new_uuids:
            return self.children(uuid) + self.new_logical_children.get(uuid, [])
        return (self.children(uuid) + self._older(OLDER_LOGICAL_CHILDREN_SQL, uuid)
                + self.new_logical_children.get(uuid, []))

    def of_message(self, message_id: str) -> list[Rec]:
        return self._older(OLDER_OF_MESSAGE_SQL, message_id)

    def old_height(self, rule: str, uuid: str) -> int | None:
        row = self.query(HEIGHT_SQL, self.file_id, rule, uuid, one=True)
        return row[0] if row else None


_ABSENT = object()


class _Lazy:
    """A read-only mapping computed per key (``value_of`` returns _ABSENT
    for a key it does not hold); listing it gives up, since that needs
    every record (resume.resume_leaf's leaf scan)."""

    def __init__(self, value_of):
        self.value_of = value_of

    def get(self, key, default=None):
        v = self.value_of(key)
        return default if v is _ABSENT else v

    def __contains__(self, key) -> bool:
        return self.value_of(key) is not _ABSENT

    def __getitem__(self, key):
        v = self.value_of(key)
        if v is _ABSENT:
            raise KeyError(key)
        return v

    def __iter__(self):
        raise Bail("the leaf scan")

    values = items = keys = __iter__


def _lazy_view(g: _Graph, scanned: resume.Scanned) -> resume.CliView:
    """resume.CliView over the graph, each node and parent computed when
    asked for (resume.cli_view's rules)."""
    def node(u):
        r = g.get(u)
        if r is not None and r.type in CLI_NODE_TYPES and not r.is_unreadable:
            return r
        return _ABSENT

    nodes = _Lazy(node)

    def parent(u):
        r = node(u)
        return _ABSENT if r is _ABSENT else resume.bridged(r, g)

    def walk_parent(u):
        p = parent(u)
        if p is not None and p is not _ABSENT and p not in nodes and node(u).ts_ms is not None:
            raise Bail("the timestamp fallback")
        return p

    calls = chain.calls_reader(lambda r: g.query(chain.CALLS_SQL, r.id, one=True),
                               lambda r: g.query(chain.TOOL_IDS_SQL, r.id, one=True))
    return resume.CliView(nodes, _Lazy(parent), _Lazy(walk_parent), scanned.last_row,
                          scanned.checkpoint, scanned.explicit, scanned.rewound_to_empty,
                          scanned.trailing_snapshots, None, False, scanned.prompted,
                          scanned.newest_row, scanned.ever_explicit, calls)


class _Walk:
    """A rule's new walk: the records it adds above the stored chain (leaf
    first) and the height of the stored record it comes down to; the
    stored rows above that (``cut``) leave the chain."""

    def __init__(self, added: list[Rec], height: int | None, length: int):
        self.added, self.height = added, height
        self.cut = 0 if height is None else length - 1 - height
        self.length = len(added) + (0 if height is None else height + 1)
        self.uuids = {r.uuid for r in added}


class _Extension:
    def __init__(self, conn, file_id, kind, session_id, prev, state, covers, known: Known):
        self.conn, self.file_id, self.kind, self.session_id = conn, file_id, kind, session_id
        self.known = known
        (self.resume_leaf_uuid, self.sdk_leaf_uuid, self.rule, self.resume_length,
         self.sdk_length, self.branch_count, _) = prev
        self.state, self.covers = state, covers

    def run(self) -> None:
        conn, file_id = self.conn, self.file_id
        recs, prompts = self.known.appended.get(file_id, ([], []))
        lines, offset = self.covers
        if not recs and not prompts:  # bad lines, records without a uuid, or none
            self.state.update(lines=lines, offset=offset)
            conn.execute("UPDATE leaves_cache SET derived_lines = ?, derive_state = ? "
                         "WHERE file_id = ?", [lines, json.dumps(self.state), file_id])
            return
        new = [r for r in recs if r.type in CHAIN_TYPES]
        uuids = [r.uuid for r in recs]
        if len(set(uuids)) < len(uuids):
            raise Bail("a repeated uuid")
        if uuids and file_id in self.known.clash:
            raise Bail("an appended uuid an older record knows")
        if self.rule not in EXTENDABLE_RULES:
            raise Bail(f"rule {self.rule}")
        if self.kind == "main" and file_id in self.known.sent_as:
            raise Bail("a prompt stored anew (resume.sent_as_renames)")
        if self.kind == "main" and file_id in self.known.rows_ahead:
            raise Bail("rows ahead of a put-back result (walk.rows_ahead_put_back)")
        g = self.g = _Graph(conn, file_id, self.state["lines"], new,
                            self.known.primed.get(file_id))
        sdk_leaf, branch_count = self.sdk_terminals(new)
        if self.kind == "main":
            leaf, rule, resume_walk = self.resume_main(new, prompts)
            sdk_walk = self.climb(sdk_leaf, "sdk", self.sdk_length, lambda r: g.get(r.parent_uuid))
        else:
            leaf = next((r for r in reversed(new) if r.type in MESSAGE_TYPES), None)
            leaf = leaf or g.get(self.resume_leaf_uuid)
            rule, sdk_leaf = self.rule, leaf
            resume_walk = sdk_walk = self.climb(
                leaf, "resume", self.resume_length, lambda r: g.get(r.parent_uuid))
        message = self.leaf_message(resume_walk) if self.kind == "main" else leaf
        if self.kind == "main":
            self.orphans(new, resume_walk, message)
        self.write_ancestry("resume", resume_walk)
        self.write_ancestry("sdk", sdk_walk)
        chain.insert_rows(conn, "chain_breaks", [
            chain.chain_break_row(r, self.session_id) for r in new
            if r.parent_uuid is not None and g.get(r.parent_uuid) is None])
        message_uuid = message.uuid if message is not None else None
        self.state.update(lines=lines, offset=offset, resume_message=message_uuid)
        conn.execute(UPDATE_LEAVES_SQL, {
            "file_id": file_id,
            "resume_leaf_id": leaf and leaf.id, "resume_leaf_uuid": leaf and leaf.uuid,
            "sdk_leaf_id": sdk_leaf and sdk_leaf.id, "sdk_leaf_uuid": sdk_leaf and sdk_leaf.uuid,
            "leaves_agree": int(message_uuid == (sdk_leaf and sdk_leaf.uuid)),
            "branch_count": branch_count, "resume_rule": rule,
            "resume_length": resume_walk.length, "sdk_length": sdk_walk.length,
            "lines": lines, "state": json.dumps(self.state)})

    def sdk_terminals(self, new: list[Rec]):
        """Update sdk_terminals: the older terminals an appended record names
        as parent go, the appended terminals come. (SDK leaf, main leaves:
        the stored count less the main messages left with no terminal, plus
        the new ones.)"""
        conn, g, file_id = self.conn, self.g, self.file_id
        named = json.dumps(sorted({r.parent_uuid for r in new if r.parent_uuid is not None}))
        dropped = [m for (m,) in conn.execute(DROPPED_MAIN_SQL, [file_id, named])]
        conn.execute(DROP_TERMINALS_SQL, [file_id, named])

        def is_leaf(m):
            return conn.execute(IS_MAIN_LEAF_SQL, [file_id, m]).fetchone() is not None

        count = self.branch_count - sum(1 for m in dropped if not is_leaf(m))
        parents = {r.parent_uuid for r in new}
        rows = []
        for t in new:
            if t.uuid in parents:
                continue
            message = chain.message_of_terminal(t, g)
            if message is not None:
                rows.append((file_id, t.uuid, message.uuid, message.id,
                             int(message.is_main_message), message.line_no, t.line_no))
        gained = {r[2] for r in rows if r[4]}
        count += sum(1 for m in gained if not is_leaf(m))
        chain.insert_rows(conn, "sdk_terminals", rows)
        row = conn.execute(SDK_LEAF_SQL, [file_id]).fetchone()
        return (g.line(row[0]) if row else None), count

    def climb(self, leaf: Rec | None, rule: str, length: int, parent_of) -> _Walk:
        """Walk up from the new leaf (``parent_of``: a record's walk parent
        record, or None where the walk stops) until a record of the stored
        chain; more than CUT_BOUND stored rows above it is a leaf that moved
        to another branch."""
        if leaf is None:
            if length:
                raise Bail("the leaf goes")
            return _Walk([], None, 0)
        g = self.g
        added, seen, cur = [], set(), leaf
        while True:
            if g.is_old(cur):
                height = g.old_height(rule, cur.uuid)
                if height is not None:
                    break
            if rule == "resume" and records.is_compact_boundary(cur.type, cur.subtype):
                raise Bail("a compact_boundary joins the chain")
            added.append(cur)
            seen.add(cur.uuid)
            parent = parent_of(cur)
            if parent is None or parent.uuid in seen:
                raise Bail("the walk does not reach the stored chain")
            cur = parent
        walk = _Walk(added, height, length)
        if walk.cut > CUT_BOUND:
            raise Bail("the leaf moved to another branch")
        if walk.cut and self.state.get(f"{rule}_cycle"):
            raise Bail("the stored walk ended in a cycle")
        return walk

    def resume_main(self, new: list[Rec], prompts):
        """The CLI's leaf of a main file, its rule, and its walk."""
        g, state = self.g, self.state
        if state.get("fallback"):
            raise Bail("the stored walk took the timestamp fallback")
        top = state.get("top_open")
        if top is not None and any(
                r.type in CLI_NODE_TYPES and not r.is_unreadable and not resume.is_snapshot(r)
                and r.ts_ms is not None and bool(r.is_sidechain) == top[1]
                and top[0] - FALLBACK_MS <= r.ts_ms <= top[0] for r in new):
            raise Bail("an appended record may extend the chain's top")
        if "ever_explicit" not in state:
            raise Bail("a state from before ever_explicit")
        if "relinks" not in state or state["relinks"] or any(r.preserved for r in new):
            # A compaction's kept tail is put back (resume.relink): it moves
            # records between branches, so the file is derived whole.
            raise Bail("a compaction relinks what it kept")
        if state.get("held_not_last", True):
            # A progress or unreadable line's uuid on another line
            # (resume.progress_lines, resume.loader_nodes): the loader reads
            # a child under the progress line, or holds a line loaded before
            # the last; _Graph.get answers the last line; derived whole.
            raise Bail("a progress or unreadable line's uuid on another line")
        if state.get("cut", True) or any(p.rewound for p in prompts):
            # A rewind cut a record (resume.rewind_cut): derived whole.
            raise Bail("a rewind cut")
        if state.get("strays", True) is True:
            # A result off the chain its parent does not hold, of a call an
            # assistant record holds: the CLI may recover it by tool-call
            # id (walk.recovered_by_tool_use_id, walk.stray_state).
            raise Bail("a stray tool result")
        scanned = resume.scan_events(new, prompts, resume.Scanned(
            g.get(state["last_row"]), state["checkpoint"], state["explicit"],
            state["rewound_to_empty"], state["trailing_snapshots"], state["prompted"],
            g.get(state["newest_row"]) if state["newest_row"] is not None else None,
            state["ever_explicit"]))
        state.update(last_row=scanned.last_row.uuid if scanned.last_row is not None else None,
                     checkpoint=scanned.checkpoint, explicit=scanned.explicit,
                     rewound_to_empty=scanned.rewound_to_empty,
                     trailing_snapshots=scanned.trailing_snapshots, prompted=scanned.prompted,
                     ever_explicit=scanned.ever_explicit,
                     newest_row=(scanned.newest_row.uuid if scanned.newest_row is not None
                                 else None))
        view = _lazy_view(g, scanned)
        leaf, rule = resume.resume_leaf(view)
        if leaf is None or rule not in EXTENDABLE_RULES:
            raise Bail(f"rule {rule}")

        def parent_of(r):
            p = view.walk_parent.get(r.uuid)
            return view.nodes.get(p) if p is not None else None

        walk = self.climb(leaf, "resume", self.resume_length, parent_of)
        if walk.cut:
            cut = self.conn.execute(CUT_SQL, [self.file_id, "resume", walk.height]).fetchall()
            self.cut = [g.get(u) for u, in cut]
            if any(records.is_compact_boundary(r.type, r.subtype) for r in self.cut):
                raise Bail("a compact_boundary leaves the chain")
        else:
            self.cut = []
        return leaf, rule, walk

    def leaf_message(self, walk: _Walk) -> Rec | None:
        """The first user/assistant record of the resume walk."""
        message = next((r for r in walk.added if r.type in MESSAGE_TYPES), None)
        if message is None and walk.height is not None:
            row = self.conn.execute(MESSAGE_BELOW_SQL, [self.file_id, walk.height]).fetchone()
            message = self.g.get(row[0]) if row else None
        return message

    def orphans(self, new: list[Rec], walk: _Walk, message: Rec | None) -> None:
        """Class again the orphans rows the append can change (the module's
        docstring), and class the appended records off the chain."""
        g, state, added = self.g, self.state, walk.added
        top = walk.height  # stored rows at or below it stay on the chain

        def on_chain(u):
            if u in walk.uuids:
                return True
            h = g.old_height("resume", u)
            return h is not None and h <= top

        redo: dict[str, Rec] = {r.uuid: r for r in new if r.uuid not in walk.uuids}
        joined = [r for r in added if g.is_old(r)]
        redo.update((r.uuid, r) for r in self.cut)
        todo = [r.uuid for r in joined + self.cut]
        while todo:
            for c in g.eff_children(todo.pop()):
                if g.is_old(c) and c.uuid not in redo and not on_chain(c.uuid):
                    redo[c.uuid] = c
                    todo.append(c.uuid)
        added_messages = {r.message_id for r in added
                          if r.type == "assistant" and r.message_id is not None}
        cut_messages = {r.message_id for r in self.cut
                        if r.type == "assistant" and r.message_id is not None}
        for m in sorted(added_messages | cut_messages):
            for a in g.of_message(m):
                if not on_chain(a.uuid):
                    redo[a.uuid] = a
                for c in g.children(a.uuid):
                    if g.is_old(c) and c.type == "user" and not on_chain(c.uuid):
                        redo[c.uuid] = c

        def non_message_children(u):
            return [c for c in g.children(u) if c.type not in MESSAGE_TYPES]

        put_back = chain.put_back(non_message_children, message)
        moved = set(put_back)
        old_message = state.get("resume_message")
        if (message and message.uuid) != old_message:
            moved |= chain.put_back(non_message_children, g.get(old_message))
        for u in moved:
            r = g.get(u)
            if r is not None and not on_chain(u):
                redo[u] = r

        position = {r.uuid: i for i, r in enumerate(added)}
        bottom = self.resume_bottom(walk)

        def child_is_api_error(u):
            """Is u's child on the new chain an api_error record?"""
            if u in position:
                i = position[u]
                child = added[i - 1] if i else None
            elif u == bottom:
                child = added[-1] if added else None
            else:
                row = g.query(CHAIN_CHILD_SQL, self.file_id, u, one=True)
                return row is not None and records.is_api_error_record(*row)
            return child is not None and records.is_api_error_record(child.type, child.subtype)

        # The stored record the new walk comes down to may become, or stop
        # being, a splice point: its orphans are classed again.
        if bottom is not None:
            row = g.query(CHAIN_CHILD_SQL, self.file_id, bottom, one=True)
            was = row is not None and records.is_api_error_record(*row)
            if was or child_is_api_error(bottom):
                for (u,) in g.query(ORPHANS_AT_SQL, self.file_id, bottom):
                    r = g.get(u)
                    if r is not None:
                        redo[u] = r

        def in_chain_messages(m):
            if m in added_messages:
                return True
            row = g.query(CHAIN_MESSAGE_SQL, self.file_id, m, one=True)
            return row[0] is not None and row[0] <= top

        calls = chain.calls_reader(lambda r: g.query(chain.CALLS_SQL, r.id, one=True),
                                   lambda r: g.query(chain.TOOL_IDS_SQL, r.id, one=True))
        with_result = _WithResult(g, new, on_chain, in_chain_messages, chain.line_link(calls))
        # (a parallel record is no link: derive._orphans)
        with_result.class_again(redo, new, joined, self.cut, added,
                                added_messages | cut_messages, bottom and g.get(bottom))

        def chain_below(u):
            """The record below u on the new resume chain (toward the leaf)."""
            if u in walk.uuids:
                i = next(i for i, r in enumerate(added) if r.uuid == u)
                return added[i - 1] if i > 0 else None
            h = g.old_height("resume", u)
            if h < top:
                row = g.query(CHAIN_AT_SQL, self.file_id, "resume", h + 1, one=True)
                return g.get(row[0]) if row else None
            return added[-1] if added else None

        held = set(self.state["strays"])
        if held and any(set(calls(r).ids) & held for r in new
                        if r.type == "assistant" and r.has_tool_use):
            raise Bail("a stray tool result")
        # walk.is_concurrent compares a branch with the chain below its
        # branch point. A branch of messages written after the old leaf
        # message, off the chain, may become concurrent as messages join the
        # chain now; a concurrent one may stop being when the leaf moves:
        # those files are derived whole. Every branch the append touches is
        # classed again whole (_Spans.branch reads it).
        old_message = g.get(state.get("resume_message")) if state.get("resume_message") else None
        if old_message is not None and new and any(r.type in MESSAGE_TYPES for r in added) \
                and self.conn.execute(LATE_BRANCH_SQL, [self.file_id, old_message.id,
                                                        min(r.id for r in new)]).fetchone():
            raise Bail("a branch of messages after the leaf")
        if self.cut and self.conn.execute(CONCURRENT_IN_FILE_SQL, [self.file_id]).fetchone():
            raise Bail("the leaf moves off a concurrent resume's branch")
        spans = _Spans(g, self.file_id, on_chain, added, top)
        for o in list(redo.values()):
            if o.is_sidechain or on_chain(o.uuid):
                continue
            bp, origin, root = self.reach(o, on_chain)
            if origin == "ancestry":
                for r in spans.members(root):
                    redo.setdefault(r.uuid, r)
        rows = []
        for o in sorted(redo.values(), key=lambda r: r.line_no):
            if o.is_sidechain or on_chain(o.uuid):
                continue
            if o.type == "user" and o.is_tool_result:
                # (one under a record of a response on the chain too: an
                # earlier response may recover it, walk.recovered_by_tool_use_id)
                p = with_result.loaded_parent(o)
                held = calls(p).ids if p is not None and p.type == "assistant" else ()
                if calls(o).ids and not all(i in held for i in calls(o).ids):
                    self.stray(o, calls(o).ids)
            bp, origin, root = self.reach(o, on_chain)
            graft = origin == "ancestry" and chain.is_late_graft(root, chain_below(bp), calls)
            concurrent = origin == "ancestry" and chain.is_concurrent(
                root, spans.branch(root), spans.chain_below(bp))
            cause = chain.cause_of(o, g.get(o.parent_uuid), bp, origin,
                                   state.get("boundary_line"), in_chain_messages,
                                   child_is_api_error, with_result.put_back(o), graft,
                                   concurrent=concurrent)
            rows.append(chain.orphan_row(o, self.session_id, cause, bp, put_back))
        gone = sorted(set(redo) | {r.uuid for r in joined})
        self.conn.execute(DROP_ORPHANS_SQL, [self.file_id, json.dumps(gone)])
        chain.insert_rows(self.conn, "orphans", rows)

    def stray(self, o: Rec, ids) -> None:
        """A stray result (walk.stray_results) off the chain: carried on in
        the state when no assistant record of the file holds a call it
        answers (walk.stray_state), else give up."""
        for t in ids:
            if self.conn.execute(HOLDER_SQL, [self.file_id, t]).fetchone():
                raise Bail("a stray tool result")
        self.state["strays"] = sorted(set(self.state["strays"]) | set(ids))

    def resume_bottom(self, walk: _Walk) -> str | None:
        """The uuid of the stored record the new resume walk comes down to."""
        if walk.height is None:
            return None
        row = self.conn.execute(CHAIN_AT_SQL, [self.file_id, "resume", walk.height]).fetchone()
        return row[0] if row else None

    def reach(self, o: Rec, on_chain) -> tuple:
        """(branch point, origin, root) of an off-chain record: where the
        walk up its eff_parent leaves the chain, and the first record of its
        branch (derive._orphans' top-down walk)."""
        x, seen = o, {o.uuid}
        while True:
            p = x.eff_parent
            if p is None:
                return None, "unlinked", x
            if on_chain(p):
                return p, "ancestry", x
            q = self.g.get(p)
            if q is None:
                return None, "dangling_parent", x
            if q.uuid in seen:
                return None, None, None
            seen.add(q.uuid)
            x = q

    def write_ancestry(self, rule: str, walk: _Walk) -> None:
        if walk.cut:
            self.conn.execute(DROP_CUT_SQL, [self.file_id, rule, walk.height])
        chain.insert_rows(self.conn, "leaf_ancestry", [
            (self.file_id, self.session_id, rule, r.uuid, walk.length - 1 - i, r.id)
            for i, r in enumerate(walk.added)])


# How far an extension follows a line of companion records, or the chain
# up to another record of an API response, before it gives up.
LINE_BOUND = 64


class _WithResult:
    """walk.put_back_with_results over the graph, for the records an append
    can change, each computed when asked for: a record's line is walked up
    to the record it hangs from (the anchor) and down to its end. A line
    below a companion record on the chain (an anchor only inside an API
    response's region), and appends that move a response's region, give
    up (Bail)."""

    def __init__(self, g: _Graph, new: list[Rec], on_chain, in_chain_messages,
                 link=chain.is_companion):
        self.g, self.on_chain, self.in_chain_messages = g, on_chain, in_chain_messages
        self.link = link   # what a line's records may be (walk.line_link)
        self.new_of_message: dict[str, list[Rec]] = {}
        for r in new:
            if r.type == "assistant" and r.message_id is not None:
                self.new_of_message.setdefault(r.message_id, []).append(r)
        self.memo: dict[str, bool] = {}

    def members(self, m: str) -> list[Rec]:
        return self.g.of_message(m) + self.new_of_message.get(m, [])

    def visited(self, r: Rec) -> bool:
        return self.on_chain(r.uuid) or chain.is_parallel(
            r, self.g.get(r.parent_uuid), self.in_chain_messages)

    def children(self, uuid: str) -> list[Rec]:
        """The nodes the loader loads under uuid (the last line of each):
        those whose parent_uuid is uuid, and through the progress records
        (to the lines written after each) and unreadable records that hang
        from it, which it does not load (resume.bridged)."""
        out, todo, seen = {}, [(uuid, None)], {uuid}
        while todo:
            p, after = todo.pop()
            for c in self.g.children(p):
                n = self.g.get(c.uuid)
                if n is None or n.parent_uuid != p or (after is not None and n.line_no <= after):
                    continue
                if n.type == "progress" or n.is_unreadable:
                    if n.uuid not in seen:
                        if len(seen) > LINE_BOUND:
                            raise Bail("many progress records below a record")
                        seen.add(n.uuid)
                        todo.append((n.uuid, n.line_no if n.type == "progress" else None))
                else:
                    out[n.uuid] = n
        return list(out.values())

    def loaded_parent(self, r: Rec) -> Rec | None:
        """The record the loader reads r under (resume.bridged)."""
        return self.g.get(resume.bridged(r, self.g))

    def open_companion(self, r: Rec | None) -> bool:
        """Can r be a link of a put-back line: a companion record or a
        virtual call (self.link) off the chain, not parallel. (On the chain
        first: a user or assistant record's calls are read from its JSON
        for self.link, and the old leaf, asked about at every append, is
        on the chain.)"""
        return r is not None and not self.on_chain(r.uuid) and self.link(r) \
            and not self.visited(r)

    def response_of(self, r: Rec) -> str | None:
        """The message id of the response a parallel record is put back with."""
        if r.type == "assistant":
            return r.message_id
        p = self.g.get(r.parent_uuid)
        return p.message_id if p is not None else None

    def visited_by(self, anchor: Rec):
        """Is a record visited when the loader walks a line below ``anchor``:
        on the chain, or parallel with the anchor's own response. A parallel
        record of another response is visited only when the loader reached
        that response first (walk.put_back_with_results): give up."""
        own = anchor.message_id if anchor.type == "assistant" else (
            self.response_of(anchor) if anchor.type == "user" and anchor.is_tool_result
            else None)

        def visited(u: str) -> bool:
            r = self.g.get(u)
            if r is None or self.on_chain(r.uuid):
                return r is not None
            if not self.visited(r):
                return False
            if own is None or self.response_of(r) != own:
                raise Bail("a line meets a record of another response")
            return True
        return visited

    def start_of(self, r: Rec) -> Rec:
        """The top of the off-chain companion records r hangs below."""
        for _ in range(LINE_BOUND):
            p = self.loaded_parent(r)
            if not self.open_companion(p) or p.uuid == r.uuid:
                return r
            r = p
        raise Bail("a long line of companion records")

    def below(self, r: Rec) -> list[Rec]:
        """r and the off-chain companion records below it (the lines it
        starts or belongs to)."""
        out, todo = {r.uuid: r}, [r]
        while todo:
            for c in self.children(todo.pop().uuid):
                if c.uuid not in out and self.open_companion(c):
                    if len(out) >= LINE_BOUND:
                        raise Bail("a long line of companion records")
                    out[c.uuid] = c
                    todo.append(c)
        return list(out.values())

    def chain_parent(self, r: Rec) -> Rec:
        p = self.g.get(r.parent_uuid)
        if p is None or not self.on_chain(p.uuid):
            raise Bail("a response's region off the stored chain")
        return p

    def has_tool_use(self, m: str) -> bool:
        return any(a.has_tool_use for a in self.members(m))

    def is_anchor(self, p: Rec) -> bool:
        if p.type == "assistant" and p.message_id is not None:
            return self.in_chain_messages(p.message_id) and self.has_tool_use(p.message_id)
        if p.type == "user" and p.is_tool_result:
            q = self.g.get(p.parent_uuid)
            return (q is not None and q.type == "assistant" and q.message_id is not None
                    and self.in_chain_messages(q.message_id) and self.has_tool_use(q.message_id))
        if self.on_chain(p.uuid) and chain.is_companion(p):
            return self.in_region(p)
        return False

    def in_region(self, p: Rec) -> bool:
        """Is the companion record p on the chain in the region of an API
        response with a tool call? Yes when the records between p and the
        nearest assistant record above it are of that response's region;
        anything else (a region that may come back past p from a later
        record of a response) gives up."""
        x = p
        for _ in range(LINE_BOUND):
            q = self.chain_parent(x)
            if q.type == "assistant" and q.message_id is not None:
                if self.has_tool_use(q.message_id):
                    return True
                break
            if q.type == "assistant" or not chain.in_batch_region(q, ""):
                break
            x = q
        raise Bail("a line below a companion record on the chain")

    def put_back(self, o: Rec) -> bool:
        """Does the CLI put o back with a parallel tool result?"""
        if o.uuid in self.memo:
            return self.memo[o.uuid]
        if not self.open_companion(o):
            return False
        start = self.start_of(o)
        anchor = self.loaded_parent(start)
        line = []
        if anchor is not None and anchor.uuid != start.uuid:
            line = chain.companion_line(start, anchor, self.children,
                                        self.visited_by(anchor), self.link)
            if line and not self.is_anchor(anchor):
                line = []
        for u in line:
            self.memo[u] = True
        self.memo.setdefault(o.uuid, False)
        return self.memo[o.uuid]

    def class_again(self, redo: dict, new, joined, cut, added, messages, bottom) -> None:
        """Add to ``redo`` the older records whose line or anchor the append
        changes: the lines the appended, joined and cut records (and the
        records of the API responses that join or leave the chain) hang
        below or from, and the lines below those responses' records and
        their tool results."""
        g = self.g
        changed = list(new) + list(joined) + list(cut) + [
            r for r in redo.values() if r.type in MESSAGE_TYPES]
        for r in added:
            if r.type == "assistant" and r.message_id is not None and not g.is_old(r):
                self.same_region(r, r.message_id)
        if cut and bottom is not None:
            for m in {r.message_id for r in cut if r.type == "assistant"
                      and r.message_id is not None and self.in_chain_messages(r.message_id)}:
                self.same_region(bottom, m, at=True)
        for m, recs in self.new_of_message.items():
            if self.in_chain_messages(m) and any(a.has_tool_use for a in recs) and not any(
                    a.has_tool_use for a in g.of_message(m)) and g.of_message(m):
                # The response's first tool call: its region's records on the
                # chain become anchors of the lines below them.
                for r in self.region_above(recs, m):
                    changed += self.children(r.uuid)
        for m in messages | set(self.new_of_message):
            for a in self.members(m):
                changed.append(a)
                for t in self.children(a.uuid):
                    changed.append(t)
                    for c in self.children(t.uuid):
                        changed.append(c)
                for c in self.children(a.uuid):
                    changed.append(c)
        asked = set()   # (a record met twice is asked about once: the answer is the same)
        for z in changed:
            for x in (z, self.loaded_parent(z)):
                if x is None or x.id in asked:
                    continue
                asked.add(x.id)
                if g.is_old(x) and self.open_companion(x):
                    for r in self.below(self.start_of(x)):
                        if g.is_old(r):
                            redo.setdefault(r.uuid, r)

    def same_region(self, r: Rec, m: str, at: bool = False) -> None:
        """A record of API response ``m`` on the chain (an appended one; with
        ``at``, the stored record a new walk comes down to, when records of
        m leave the chain below it) must reach m's older records on the
        chain through records of m's region (else the region moves over
        older records: Bail)."""
        if not any(self.on_chain(a.uuid) for a in self.g.of_message(m)):
            return
        x = r
        if at and r.type == "assistant" and r.message_id == m:
            return
        if at and not chain.in_batch_region(r, m):
            raise Bail("a response's records apart on the chain")
        for _ in range(LINE_BOUND):
            p = self.g.get(x.parent_uuid)
            if p is None or not self.on_chain(p.uuid):
                break
            if p.type == "assistant" and p.message_id == m:
                return
            if not chain.in_batch_region(p, m):
                break
            x = p
        raise Bail("a response's records apart on the chain")

    def region_above(self, recs: list[Rec], m: str) -> list[Rec]:
        """The chain records from the appended records ``recs`` of response
        m up to its first older record on the chain."""
        older = {a.uuid for a in self.g.of_message(m) if self.on_chain(a.uuid)}
        low = [r for r in recs if self.on_chain(r.uuid)]
        if not low or not older:
            raise Bail("an older response's first tool call off the chain")
        out, x = [], low[-1]
        for _ in range(LINE_BOUND):
            out.append(x)
            older.discard(x.uuid)
            if not older:
                return out
            x = self.chain_parent(x)
        raise Bail("an older response's first tool call far down the chain")
