"""A file's chain records as derive.py and derive_append.py walk them: the
record, the walks up ``parent_uuid``, the SDK's leaf terminals and the cause
an off-chain record is given. Pure functions over records; reading them from
the index is the callers' part."""

from __future__ import annotations

import json
from dataclasses import dataclass

from indexer.chain import definitions
from indexer.chain.resume import Calls, Prompt
from indexer.transcripts import records
from indexer.transcripts.records import MESSAGE_TYPES

# The columns Rec is built from (records r), in its field order; ts_ms: the
# timestamp in epoch milliseconds (definitions.TIMESTAMP_MS), NULL when not one;
# preserved: what a compact boundary says the compaction kept (records.PRESERVED);
# fork_briefing: a background fork's briefing (records.FORK_BRIEFING_RECORD).
REC_COLUMNS = f"""r.id, r.file_id, r.line_no, r.uuid, r.parent_uuid, r.logical_parent_uuid,
       r.type, r.subtype, r.timestamp, r.is_sidechain, r.is_meta, r.team_name,
       r.message_id, r.is_tool_result, {definitions.TIMESTAMP_MS.format(r="r")} AS ts_ms,
       r.is_unreadable, {records.PRESERVED.format(r="r")} AS preserved,
       {records.FORK_BRIEFING_RECORD.format(r="r")} AS fork_briefing"""
REC_FIELDS = 18
# Records with a uuid and last-prompt records, as read_rows() reads them:
# the Rec columns, then the last-prompt fields read from the line itself.
UUID_RECORDS_SELECT = f"""
SELECT {REC_COLUMNS}, r.leaf_uuid,
       CASE WHEN r.type = 'last-prompt' THEN {definitions.LAST_PROMPT_NULL_LEAF.format(r="r")} END,
       CASE WHEN r.type = 'last-prompt' THEN {definitions.LAST_PROMPT_EXPLICIT.format(r="r")} END
FROM records r
""".strip()

# What resume.kin reads of one record's tool calls (records.TOOL_IDS,
# HAS_TOOL_USE, VIRTUAL_CALL), by record id (CALLS_SQL), or from a line's
# text and type (CALLS_OF_LINE_SQL: a preload batch keeps no raw).
_CALLS = ", ".join(x.format(r="r") for x in (
    records.TOOL_IDS, records.HAS_TOOL_USE, records.VIRTUAL_CALL))
CALLS_SQL = f"SELECT {_CALLS} FROM records r WHERE r.id = ?"
CALLS_OF_LINE_SQL = f"SELECT {_CALLS} FROM (SELECT CAST(? AS TEXT) AS raw, ? AS type) r"


def calls_reader(row_of):
    """Rec -> resume.Calls, each record read once; ``row_of(rec)`` gives
    its CALLS_SQL row (None: not in the index)."""
    memo: dict = {}

    def calls(r) -> Calls:
        if r.id not in memo:
            row = row_of(r)
            memo[r.id] = Calls(tuple(json.loads(row[0])), bool(row[1]), bool(row[2])) \
                if row else Calls()
        return memo[r.id]
    return calls


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
    preserved: str | None = None   # a compact boundary's records.PRESERVED
    fork_briefing: int = 0         # records.FORK_BRIEFING_RECORD: a node, never a row

    @property
    def eff_parent(self) -> str | None:
        """The parent the cause walk follows: a compact_boundary with a null
        parentUuid hangs from its logicalParentUuid."""
        return records.effective_parent(self.type, self.subtype, self.parent_uuid,
                                        self.logical_parent_uuid)

    @property
    def is_main_message(self) -> bool:
        return not self.is_sidechain and self.team_name is None and not self.is_meta


def walk(start: Rec, nodes) -> list[tuple[int, Rec]]:
    """(depth, record) from ``start`` up parent_uuid, stopping at a missing
    parent or the first revisited uuid (the SDK's walk). ``nodes`` maps a
    uuid to its chain record (``.get``)."""
    out, seen = [], {start.uuid}
    cur = start
    while True:
        out.append((len(out), cur))
        parent = nodes.get(cur.parent_uuid) if cur.parent_uuid is not None else None
        if parent is None or parent.uuid in seen:
            return out
        seen.add(parent.uuid)
        cur = parent


def ends_in_cycle(walked: list[tuple[int, Rec]], parent_of) -> bool:
    """Did a walk stop because its top's parent (``parent_of(record)``: a
    uuid) is already on it?"""
    if not walked:
        return False
    return parent_of(walked[-1][1]) in {r.uuid for _, r in walked}


def message_of_terminal(terminal: Rec, nodes) -> Rec | None:
    """The first user/assistant record at or above a terminal, following
    parent_uuid (None at a missing parent or a cycle): the leaf the SDK
    considers for it."""
    cur, seen = terminal, {terminal.uuid}
    while cur.type not in MESSAGE_TYPES:
        cur = nodes.get(cur.parent_uuid) if cur.parent_uuid is not None else None
        if cur is None or cur.uuid in seen:
            return None
        seen.add(cur.uuid)
    return cur


def terminal_key(terminal: Rec, message: Rec, message_line: int) -> tuple:
    """The SDK's order of leaves: main-chain first, then the latest message
    (``message_line``: the line of its uuid that wins), then the earliest
    terminal line."""
    return (message.is_main_message, message_line, -terminal.line_no)


def put_back(children_of, message: Rec | None) -> set[str]:
    """The system and attachment records that hang from the leaf message
    through non-message records (progress passed through, as the CLI
    bridges it): the CLI loads them after its walk. ``children_of(uuid)``
    gives the non-message chain records whose parent_uuid is that uuid."""
    if message is None:
        return set()
    out, seen, todo = set(), {message.uuid}, [message.uuid]
    while todo:
        for c in children_of(todo.pop()):
            if c.uuid not in seen:
                seen.add(c.uuid)
                todo.append(c.uuid)
                if c.type != "progress":
                    out.add(c.uuid)
    return out


def cause_of(o: Rec, parent: Rec | None, branch_point: str | None, origin: str | None,
             boundary_line: int | None, in_chain_messages, is_splice_point) -> str:
    """The first matching cause of an off-chain record (orphans.cause):
    ``origin`` is how the top-down walk reached it (ancestry, unlinked,
    dangling_parent; None: never, inside a cycle), ``in_chain_messages(id)``
    whether an assistant record of that message id is on the resume chain,
    ``is_splice_point(uuid)`` whether that chain record's child on the chain
    is an api_error record."""
    if boundary_line is not None and o.line_no < boundary_line:
        return "compacted"
    if o.type == "progress":
        return "progress"
    if (o.type == "assistant" and o.message_id is not None
            and in_chain_messages(o.message_id)) or (
            o.type == "user" and o.is_tool_result and parent is not None
            and parent.type == "assistant" and parent.message_id is not None
            and in_chain_messages(parent.message_id)):
        return "parallel_tool_branch"
    if branch_point is not None and is_splice_point(branch_point):
        return "api_error_splice"
    if records.is_api_error_record(o.type, o.subtype):
        return "api_error_record"
    if origin == "dangling_parent":
        return "dangling_parent"
    if origin == "unlinked":
        return "unlinked"
    if origin == "ancestry":
        return "abandoned_branch"
    return "other"


# The columns each cache table is written with (definitions.CACHE_COLUMNS where
# they hold more than their view shows), and the tables.
CACHE_COLUMNS = {
    **{name: definitions.CACHE_COLUMNS.get(name) or getattr(definitions, f"{name.upper()}_COLUMNS")
       for name in definitions.CACHED_VIEWS},
    "sdk_terminals": ("file_id, uuid, message_uuid, message_record_id, is_main, message_line, "
                      "terminal_line"),
}
CACHE_TABLES = {name: name if name == "sdk_terminals" else f"{name}_cache"
                for name in CACHE_COLUMNS}


def insert_rows(conn, name: str, rows: list) -> None:
    """Write rows into one cache table (CACHE_COLUMNS order)."""
    columns = CACHE_COLUMNS[name]
    marks = ", ".join("?" * len(columns.split(",")))
    conn.executemany(f"INSERT INTO {CACHE_TABLES[name]} ({columns}) VALUES ({marks})", rows)


def orphan_row(o: Rec, session_id, cause: str, branch_point: str | None,
               put_back_set: set[str]) -> tuple:
    """An orphans_cache row (definitions.ORPHANS_COLUMNS order)."""
    restored = int(cause == "parallel_tool_branch" or o.uuid in put_back_set)
    return (o.file_id, session_id, o.uuid, o.type, o.subtype, o.timestamp, cause, branch_point,
            o.id, o.line_no, o.message_id, restored)


def chain_break_row(r: Rec, session_id) -> tuple:
    """A chain_breaks_cache row (definitions.CHAIN_BREAKS_COLUMNS order)."""
    return (r.file_id, session_id, r.id, r.line_no, r.uuid, r.type, r.subtype, r.timestamp,
            r.parent_uuid)


def read_rows(rows, file_ids=()) -> dict:
    """file_id -> (records with a uuid, last-prompt records) from rows of
    derive.UUID_RECORDS_SELECT, in file order."""
    out = {i: ([], []) for i in file_ids}
    for row in rows:
        recs, prompts = out.setdefault(row[1], ([], []))
        if row[6] == "last-prompt":
            prompts.append(Prompt(row[2], row[REC_FIELDS], bool(row[REC_FIELDS + 1]),
                                  bool(row[REC_FIELDS + 2])))
        if row[3] is not None:
            recs.append(Rec(*row[:REC_FIELDS]))
    return out
