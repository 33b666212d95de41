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
# fork_briefing: a background fork's briefing (records.FORK_BRIEFING_RECORD);
# has_tool_use: an assistant record holds a tool_use block (records.HAS_TOOL_USE);
# sent_as_uuid: the uuid a prompt stored anew was sent under (resume.sent_as_renames);
# rows_ahead: a tool_result record's rowsAheadOfPutBack (rows_ahead_put_back);
# agent_id: agentId (recovered_by_tool_use_id compares a result's and its holder's);
# source_tool: a tool_result record's sourceToolAssistantUUID when it is not
# its parent (records.source_tool_assistant_uuid: recovered_by_tool_use_id).
_REC_HEAD = f"""r.id, r.file_id, r.line_no, r.uuid, r.parent_uuid, r.logical_parent_uuid,
       r.type, r.subtype, r.timestamp, r.is_sidechain, r.is_meta, r.team_name,
       r.message_id, r.is_tool_result, {definitions.TIMESTAMP_MS.format(r="r")} AS ts_ms,
       r.is_unreadable, {records.PRESERVED.format(r="r")} AS preserved,
       {records.FORK_BRIEFING_RECORD.format(r="r")} AS fork_briefing"""
# (read only for an assistant record that names "tool_use", as preload.py reads
# it: the others' JSON is not parsed)
_HAS_TOOL_USE = (f"CASE WHEN r.type = 'assistant' AND instr(r.raw, '{records.TOOL_USE_MARK}') > 0 "
                 f'THEN {records.HAS_TOOL_USE.format(r="r")} ELSE 0 END AS has_tool_use')
REC_COLUMNS = (f"{_REC_HEAD}, {_HAS_TOOL_USE}, r.sent_as_uuid, r.rows_ahead, r.agent_id, "
               "r.source_tool_assistant_uuid")
REC_FIELDS = 18   # the columns before the last-prompt fields (UUID_RECORDS_SELECT)
# Records with a uuid and last-prompt records, as read_rows() reads them:
# the Rec columns but the last, then the last-prompt fields read from the
# line itself, then has_tool_use (at HAS_TOOL_USE_AT) and sent_as_uuid, a
# last-prompt record's rewind fields, rows_ahead (at ROWS_AHEAD_AT), agent_id
# and source_tool_assistant_uuid.
UUID_RECORDS_SELECT = f"""
SELECT {_REC_HEAD}, r.leaf_uuid,
       CASE WHEN r.type = 'last-prompt' THEN {definitions.LAST_PROMPT_NULL_LEAF.format(r="r")} END,
       CASE WHEN r.type = 'last-prompt' THEN {definitions.LAST_PROMPT_EXPLICIT.format(r="r")} END,
       {_HAS_TOOL_USE}, r.sent_as_uuid,
       CASE WHEN r.type = 'last-prompt' THEN {definitions.LAST_PROMPT_REWOUND.format(r="r")} END,
       CASE WHEN r.type = 'last-prompt' THEN {definitions.LAST_PROMPT_CUT.format(r="r")} END,
       r.rows_ahead, r.agent_id, r.source_tool_assistant_uuid
FROM records r
""".strip()
HAS_TOOL_USE_AT = REC_FIELDS + 3
SENT_AS_AT = REC_FIELDS + 4
REWOUND_AT, CUT_AT = REC_FIELDS + 5, REC_FIELDS + 6   # a last-prompt record's rewind
ROWS_AHEAD_AT, AGENT_AT, SOURCE_AT = REC_FIELDS + 7, REC_FIELDS + 8, REC_FIELDS + 9

# What resume.kin reads of one record's tool calls (records.TOOL_IDS,
# HAS_TOOL_USE, VIRTUAL_CALL), by record id (CALLS_SQL), or from a line's
# text and type (CALLS_OF_LINE_SQL: a preload batch keeps no raw).
_CALLS = ", ".join(x.format(r="r") for x in (
    records.TOOL_IDS, records.HAS_TOOL_USE, records.VIRTUAL_CALL, records.AHEAD_ROW,
    records.CALL_BLOCKS))
CALLS_SQL = f"SELECT {_CALLS} FROM records r WHERE r.id = ?"
CALLS_OF_LINE_SQL = f"SELECT {_CALLS} FROM (SELECT CAST(? AS TEXT) AS raw, ? AS type) r"
# records.TOOL_IDS alone (the first column of the two above): all that most
# readers ask of a record (stray_results, is_late_graft, kin's tool ids). The
# whole row costs about 3.5x as much: each of its five expressions reads the
# line's JSON again (bench corpus: 18,003 tool lines, 1.39 s whole, 0.40 s ids).
TOOL_IDS_SQL = f"SELECT {records.TOOL_IDS.format(r='r')} FROM records r WHERE r.id = ?"
TOOL_IDS_OF_LINE_SQL = (f"SELECT {records.TOOL_IDS.format(r='r')} "
                        "FROM (SELECT CAST(? AS TEXT) AS raw, ? AS type) r")


def _call_key(i):
    """A CALL_BLOCKS id as a set member, equal where SQLite's ``IS`` finds
    the ids equal (an object or array id by its JSON text)."""
    return i if i is None or isinstance(i, (str, int, float)) else json.dumps(
        i, separators=(",", ":"))


def _calls_of(row) -> Calls:
    """resume.Calls of a CALLS_SQL row (None: not in the index)."""
    return Calls(tuple(json.loads(row[0])), bool(row[1]), bool(row[2]), row[3],
                 tuple((bool(k), _call_key(i)) for k, i in json.loads(row[4]))
                 ) if row else Calls()


class _ReadCalls:
    """A record's resume.Calls read in two steps: ``ids`` alone from its
    TOOL_IDS_SQL row, the other fields (and ids, the same) from its whole
    CALLS_SQL row, read when one of them is first asked for."""

    __slots__ = ("_rec", "_ids_of", "_row_of", "_ids", "_whole")

    def __init__(self, rec, ids_of, row_of):
        self._rec, self._ids_of, self._row_of = rec, ids_of, row_of
        self._ids = self._whole = None

    @property
    def ids(self) -> tuple:
        if self._whole is not None:
            return self._whole.ids
        if self._ids is None:
            row = self._ids_of(self._rec)
            self._ids = tuple(json.loads(row[0])) if row else ()
        return self._ids

    def whole(self) -> Calls:
        if self._whole is None:
            self._whole = _calls_of(self._row_of(self._rec))
        return self._whole

    has_tool_use = property(lambda self: self.whole().has_tool_use)
    virtual = property(lambda self: self.whole().virtual)
    ahead = property(lambda self: self.whole().ahead)
    blocks = property(lambda self: self.whole().blocks)


def calls_reader(row_of, ids_of=None):
    """Rec -> resume.Calls, each record read once; ``row_of(rec)`` gives
    its CALLS_SQL row (None: not in the index), ``ids_of(rec)`` (if given)
    its TOOL_IDS_SQL row: then a record's ids are read alone until another
    field is asked for."""
    memo: dict = {}

    def calls(r) -> Calls:
        if r.id not in memo:
            memo[r.id] = (_ReadCalls(r, ids_of, row_of) if ids_of is not None
                          else _calls_of(row_of(r)))
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
    has_tool_use: int = 0          # an assistant record with a tool_use block
    sent_as_uuid: str | None = None  # a prompt stored anew: the uuid it was sent under
    rows_ahead: str | None = None    # rowsAheadOfPutBack (a JSON array): rows_ahead_put_back
    agent_id: str | None = None      # agentId
    source_tool: str | None = None   # sourceToolAssistantUUID, when not the parent

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


def put_back(children_of, message: Rec | None, cut=frozenset()) -> set[str]:
    """The system and attachment records that hang from the leaf message
    through non-message records (progress passed through, as the CLI
    bridges it): the CLI loads them after its walk. ``children_of(uuid)``
    gives the non-message chain records whose parent_uuid is that uuid;
    ``cut``: the records a rewind cut (resume.rewind_cut), passed over with
    what hangs from them."""
    if message is None:
        return set()
    out, seen, todo = set(), {message.uuid}, [message.uuid]
    while todo:
        for c in children_of(todo.pop()):
            if c.uuid not in seen and c.uuid not in cut:
                seen.add(c.uuid)
                todo.append(c.uuid)
                if c.type != "progress":
                    out.add(c.uuid)
    return out


def is_parallel(o: Rec, parent: Rec | None, in_chain_messages) -> bool:
    """Does the CLI put ``o`` back as part of a parallel tool call (its
    recovery of the other records of an API response on the chain)? An
    assistant record of a message on the chain (``in_chain_messages(id)``),
    or a tool_result user record whose parent (``parent``) is one."""
    return (o.type == "assistant" and o.message_id is not None
            and in_chain_messages(o.message_id)) or (
        o.type == "user" and bool(o.is_tool_result) and parent is not None
        and parent.type == "assistant" and parent.message_id is not None
        and in_chain_messages(parent.message_id))


def is_companion(r: Rec) -> bool:
    """records.is_companion over a Rec (the loader's XN())."""
    return records.is_companion(r.type, r.subtype, r.is_meta, r.is_tool_result)


def in_batch_region(r: Rec, message_id: str) -> bool:
    """Does the region of an API response's records on the chain run on over
    ``r`` (the loader's WMe()): another record of the response, a tool
    result, an isMeta user record, an attachment, a system record other
    than a compact boundary."""
    if r.type == "assistant":
        return r.message_id == message_id
    if r.type == "user":
        return bool(r.is_meta or r.is_tool_result)
    return r.type == "attachment" or (r.type == "system"
                                      and not records.is_compact_boundary(r.type, r.subtype))


def line_link(calls):
    """Can r be a link of a put-back line (the loader's s_r(): XN() or z8())?
    A companion record (is_companion), or a virtual call: an isVirtual user
    tool_result or assistant tool_use record (``calls``: Rec ->
    resume.Calls, read only for the user and assistant records a line meets)."""
    def link(r: Rec) -> bool:
        return is_companion(r) or (r.type in MESSAGE_TYPES and calls is not None
                                   and calls(r).virtual)
    return link


def put_back_with_results(resume_chain, nodes: dict, children_of, is_visited,
                          link=is_companion, response_of=None,
                          recovered: dict | None = None, trace: dict | None = None) -> set[str]:
    """What Claude Code 2.1.332 puts back after a parallel tool call's results
    (its RRr() and nMe()): it takes the API responses on the resume chain
    (``resume_chain``: (depth, record), leaf first) root first, and for each
    one of which some record holds a tool_use block, the anchors are its
    records (``nodes``: uuid -> record, every one of that message id), their
    tool_result children (and the results it recovers by tool-call id:
    ``recovered``, recovered_by_tool_use_id), and the companion records (records.is_companion)
    on the chain in the response's region (from its first record on the
    chain past its last, and on while in_batch_region). From each anchor,
    each child starts a line followed down while it is one line of records
    a line may hold (``link``: line_link) on the anchor's side (sidechain or
    not) that are not visited; a line that forks (a link with two unvisited
    children) or meets any other unvisited record is left whole. Visited:
    on the chain, put back already, or put back as parallel_tool_branch
    (``is_visited``) with a response the loader has reached
    (``response_of(uuid)``: the message id a parallel record is put back
    with, None for the others): a record of a later response is not
    visited yet. ``children_of(uuid)``: the records the loader reads under
    uuid. Returns the uuids of the lines put back. ``trace`` (a dict),
    when given, gets what loader_chain() orders them by: ``spans``, message
    id -> (index of its first record on the chain root first, end of its
    region); ``lines``, message id -> the lines put back under its records
    and results ([(anchor uuid, uuids)]); ``anchored``, a companion record
    on the chain -> the lines put back under it."""
    order = [r for _, r in reversed(resume_chain)]
    position = {r.uuid: i for i, r in enumerate(order)}
    members: dict[str, list[Rec]] = {}
    for n in nodes.values():
        if n.type == "assistant" and n.message_id is not None:
            members.setdefault(n.message_id, []).append(n)
    done: set = set()
    out: set[str] = set()

    def visited(u) -> bool:
        if u in out:
            return True
        if not is_visited(u):
            return False
        m = response_of(u) if response_of is not None else None
        return m is None or m in done

    for i, r in enumerate(order):
        m = r.message_id
        if r.type != "assistant" or m is None or m in done:
            continue
        done.add(m)
        batch = members.get(m, [r])
        end = max([i + 1] + [position[a.uuid] + 1 for a in batch if a.uuid in position])
        while end < len(order) and in_batch_region(order[end], m):
            end += 1
        if trace is not None:
            trace.setdefault("spans", {})[m] = (i, end)
        if not any(a.has_tool_use for a in batch):
            continue
        anchors: dict[str, Rec] = {}
        for a in batch:
            anchors[a.uuid] = a
            for t in children_of(a.uuid):
                if t.type == "user" and t.is_tool_result:
                    anchors[t.uuid] = t
        for u, by in (recovered or {}).items():
            if by == m:
                anchors[u] = nodes[u]
        region = [x for x in order[i + 1:end] if is_companion(x)]
        for x in region:
            anchors[x.uuid] = x
        region = {x.uuid for x in region}
        for po in anchors.values():
            for start in children_of(po.uuid):
                line = companion_line(start, po, children_of, visited, link)
                out.update(line)
                if trace is not None and line:
                    if po.uuid in region:
                        trace.setdefault("anchored", {}).setdefault(po.uuid, []).append(line)
                        trace.setdefault("anchoring", set()).add(m)
                    else:
                        trace.setdefault("lines", {}).setdefault(m, []).append((po.uuid, line))
    return out


def loader_chain(resume_chain, trace: dict, put_back: dict, recovered: dict, first: dict,
                 nodes: dict) -> list[str]:
    """The chain Claude Code 2.1.332's RRr() hands Krn(), as uuids: the
    walked chain root first (``resume_chain``: (depth, record), leaf
    first), and in the span of each response on it that puts records back
    (``trace``: put_back_with_results's; spans that overlap are merged) what
    it puts back: its records and results off the chain and the lines under
    them (``put_back``: uuid -> the message id of the response that puts it
    back; ``recovered``: those recovered by tool-call id that the loader
    reads under no record of that response), in the order the
    loader first loaded each uuid (``first``: uuid -> that line,
    resume.first_loaded), a recovered result no earlier than just after
    the response's last record and a line under it no earlier than it,
    each before the first record of the span loaded after it; and a line
    under a companion record on the chain in the span right after that
    record."""
    order = [r.uuid for _, r in reversed(resume_chain)]
    spans = trace.get("spans", {})
    lines = trace.get("lines", {})
    anchored = trace.get("anchored", {})
    last_of: dict = {}   # message id -> the greatest first line of its records
    for n in nodes.values():
        if n.type == "assistant" and n.message_id in spans and n.uuid in first:
            last_of[n.message_id] = max(first[n.uuid], last_of.get(n.message_id, -1))
    key: dict = {}       # uuid -> the loader's sort key (its ht, then its first line)
    groups: dict = {}    # message id -> what it puts back
    for u, m in put_back.items():
        if m in spans and u in first:
            groups.setdefault(m, []).append(u)
            key[u] = ((max(first[u], last_of[m] + 0.5) if u in recovered else first[u]),
                      first[u])
    for m, found in lines.items():
        for anchor, line in found:
            above = key.get(anchor, (None,))[0] if anchor in recovered else None
            for u in line:
                groups.setdefault(m, []).append(u)
                key[u] = (first[u] if above is None else max(first[u], above), first[u])
    spans_taken = [[*spans[m], sorted(set(us), key=key.__getitem__)] for m, us in groups.items()]
    spans_taken += [[*spans[m], []] for m in trace.get("anchoring", ()) if m not in groups]
    spans_taken.sort(key=lambda s: s[0])
    merged: list = []
    for s in spans_taken:
        if merged and s[0] < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], s[1])
            merged[-1][2] = sorted(merged[-1][2] + s[2], key=key.__getitem__)
        else:
            merged.append(list(s))
    out: list[str] = []
    done = 0
    for start, end, recs in merged:
        out.extend(order[done:start + 1])
        k = 0
        for j in range(start + 1, end):
            here = first[order[j]]
            while k < len(recs) and key[recs[k]][0] < here:
                out.append(recs[k])
                k += 1
            out.append(order[j])
            for line in sorted(anchored.get(order[j], ()), key=lambda line: first[line[0]]):
                out.extend(line)
        out.extend(recs[k:])
        done = end
    out.extend(order[done:])
    return out


def _rows_ahead_of(y: Rec, nodes: dict, loaded: dict, seen, calls):
    """l_r(): (the rows ``y``'s rowsAheadOfPutBack names that are not seen
    yet, the seen record they hang under), or None when the loader puts
    none back: not an array of at most
    definitions.AHEAD_MAX, ``y`` holds no
    tool_result, a name that is not a loaded record, a row of another side
    or kind (a companion record, or a prompt queued while the tool ran:
    records.AHEAD_ROW), one that reaches no seen record within definitions.AHEAD_MAX
    steps up the loaded parents, or rows that hang under different ones."""
    names = json.loads(y.rows_ahead)
    if names.__class__ is not list or len(names) > definitions.AHEAD_MAX or not y.is_tool_result or \
            any(n.__class__ is not str or n not in loaded for n in names):
        return None
    rows, hang = [], None
    for name in dict.fromkeys(names):
        if name in seen:
            continue
        row = nodes[name]
        kind = 1 if row.type not in ("attachment", "user") else calls(row).ahead
        if row.is_sidechain != y.is_sidechain or not kind or not (
                is_companion(row) or (kind == 2 and row.type == "user"
                                      and not row.is_tool_result)):
            return None
        up, steps = loaded[name], 0
        while up is None or up not in seen:
            if up is None or up not in loaded or steps > definitions.AHEAD_MAX:
                return None
            up, steps = loaded[up], steps + 1
        if rows and up != hang:
            return None
        rows.append(name)
        hang = up
    return (rows, hang) if rows else None


def _open_call(span: list, calls) -> bool:
    """The loader's a_r(): is a call made in ``span`` (records in the
    chain's order) left unanswered there, a result before its call not
    answering it? It reads the tool_use and tool_result blocks of user and
    assistant records alike, in order (records.CALL_BLOCKS)."""
    open_ids: set = set()
    for r in span:
        if r.type in MESSAGE_TYPES:
            for is_use, i in calls(r).blocks:
                if is_use:
                    open_ids.add(i)
                else:
                    open_ids.discard(i)
    return bool(open_ids)


def rows_ahead_put_back(chain: list, seen: set, nodes: dict, loaded: dict, calls) -> set[str]:
    """The rows Claude Code 2.1.332 puts back ahead of a tool result (its
    Krn(), the tengu_foamy_spring family, on by default), over the chain
    RRr hands it (``chain``: uuids in its order, loader_chain): each user
    record on it, in that order, whose ``rowsAheadOfPutBack`` names rows
    (_rows_ahead_of) that hang under a record on the chain by then puts
    them back right after that record, when its parent is a record of a
    response, that response's first record on the chain comes before where
    they hang (or they hang under that record's parent), and where they
    hang comes before the result; and when they hang under an assistant
    record while a call made from that first record up to there is not
    answered after it there (_open_call), no other assistant record comes
    between them and the result. ``seen``: the chain and what a rewind
    cut; ``loaded``: uuid -> the parent the loader reads; ``calls``: Rec ->
    resume.Calls. The rows one puts back are on the chain for the next
    (seen: skipped when named, and rows may hang under them)."""
    out: set[str] = set()
    seen = set(seen)
    g, on = list(chain), set(chain)
    for y in [nodes[u] for u in chain]:
        if y.type != "user" or y.rows_ahead is None:
            continue
        found = _rows_ahead_of(y, nodes, loaded, seen, calls)
        if found is None:
            continue
        rows, hang = found
        parent = nodes[loaded[y.uuid]] if loaded.get(y.uuid) in loaded else None
        mid = parent.message_id if parent is not None and parent.type == "assistant" else None
        z = next((k for k, u in enumerate(g) if mid is not None and nodes[u].type == "assistant"
                  and nodes[u].message_id == mid), -1)
        at = g.index(hang) if hang in out or hang in on else -1
        q = g.index(y.uuid)
        if z == -1 or at == -1 or at >= q or (at < z and hang != loaded.get(g[z])):
            continue
        if nodes[hang].type == "assistant" and _open_call([nodes[u] for u in g[z:at + 1]], calls) \
                and any(nodes[u].type == "assistant" for u in g[at + 1:q]):
            continue
        out.update(rows)
        seen.update(rows)
        g[at + 1:at + 1] = rows
    return out


def stray_results(loaded: dict, nodes: dict, calls, keep) -> list[Rec]:
    """The tool_result user records the loader reads under a parent that does
    not hold every call they answer (RRr's Q: a parent that is no assistant
    record holds none), in line order: what it may recover by tool-call id.
    ``loaded``: uuid -> parent of the records the loader loads
    (resume.CliView.parent); ``calls``: Rec -> resume.Calls, asked only of
    the results ``keep(r)`` takes (and their parents)."""
    out = []
    for u, p in loaded.items():
        r = nodes[u]
        if r.type != "user" or not r.is_tool_result or not keep(r):
            continue
        ids = calls(r).ids
        q = nodes.get(p) if p is not None else None
        held = calls(q).ids if q is not None and q.type == "assistant" else ()
        if ids and not all(i in held for i in ids):
            out.append(r)
    return sorted(out, key=lambda r: r.line_no)


def stray_state(strays: list[Rec], loaded: dict, nodes: dict, calls):
    """What an append needs to know of the stray results (derive_append):
    True when one answers a call some loaded assistant record holds (it may
    be recovered as the chain grows), else the calls they answer, which no
    record holds (an appended record that holds one gives up)."""
    ids = {t for r in strays for t in calls(r).ids}
    if not ids:
        return []
    for u in loaded:
        a = nodes[u]
        if a.type == "assistant" and a.has_tool_use and ids.intersection(calls(a).ids):
            return True
    return sorted(ids)


def recovered_by_tool_use_id(strays: list[Rec], loaded: dict, nodes: dict, on_chain,
                             chain_messages: dict, is_parallel, calls) -> dict[str, str]:
    """What Claude Code 2.1.332 recovers by tool-call id (RRr with
    tengu_foamy_spring, on by default): uuid -> the message id of the
    response that puts it back, for each stray result (``strays``:
    stray_results) off the chain of which some answered call t
    has one holder: the tool_use block of t is held by assistant records
    of one API message, on the chain (``chain_messages``: message id -> the
    depth of its first record on the chain), the last of them
    (in line order) is not the result's parent, is on its side and has its
    agentId (none, or the same), or the record the result's
    sourceToolAssistantUUID names is a record of that message with those
    three marks (the loader reads the result under both), and t is
    not answered already: by a tool_result record on the chain, by a result
    the loader reads under a record of that message, or by an earlier stray
    result with the same holder. A result put back with its parent's
    response (``is_parallel(r)``: under a record of a response on the chain)
    is one when the holder's response comes before that one on the chain
    (the loader takes the responses root first: it recovers the result
    with the earlier one, where the call counts as answered; the later one
    finds it put back already)."""
    strays = [r for r in strays if r.uuid not in on_chain]
    if not strays:
        return {}
    holders: dict[str, tuple] = {}   # tool id -> (message ids, the last holder)
    members: dict[str, set] = {}
    for u in loaded:
        a = nodes[u]
        if a.type != "assistant" or a.message_id is None:
            continue
        members.setdefault(a.message_id, set()).add(u)
        if a.has_tool_use:
            for t in calls(a).ids:
                msgs, last = holders.get(t, (set(), None))
                msgs.add(a.message_id)
                holders[t] = (msgs, a if last is None or a.line_no >= last.line_no else last)
    answered = {t for u in on_chain if u in nodes and nodes[u].type == "user"
                and nodes[u].is_tool_result for t in calls(nodes[u]).ids}
    direct: dict[str, set] = {}
    for u, p in loaded.items():
        r = nodes[u]
        if r.type == "user" and r.is_tool_result and p in nodes and nodes[p].type == "assistant" \
                and nodes[p].message_id is not None:
            direct.setdefault(nodes[p].message_id, set()).update(calls(r).ids)

    def attaches(a: Rec, r: Rec) -> bool:
        """Y(): the loader reads a stray result under an assistant record
        that is not its parent, of its side and its agentId."""
        return (a.uuid != loaded.get(r.uuid) and bool(a.is_sidechain) == bool(r.is_sidechain)
                and a.agent_id == r.agent_id)

    # source: the loaded assistant record a stray's sourceToolAssistantUUID
    # names, when the result attaches under it.
    source = {r.uuid: nodes[r.source_tool] for r in strays
              if r.source_tool in loaded and nodes[r.source_tool].type == "assistant"
              and nodes[r.source_tool].message_id is not None
              and attaches(nodes[r.source_tool], r)}
    claimed: set = set()
    out: dict[str, str] = {}
    for r in strays:
        by = None
        after = chain_messages[nodes[r.parent_uuid].message_id] if is_parallel(r) else None
        for t in calls(r).ids:
            msgs, holder = holders.get(t, (set(), None))
            if (len(msgs) != 1 or holder.message_id not in chain_messages
                    or not (attaches(holder, r) or (
                        source.get(r.uuid) is not None
                        and source[r.uuid].message_id == holder.message_id))
                    or (after is not None and chain_messages[holder.message_id] <= after)):
                continue
            if t not in answered and t not in direct.get(holder.message_id, ()) \
                    and t not in claimed and by is None:
                by = holder.message_id
            claimed.add(t)
        if by is not None:
            out[r.uuid] = by
    return out


def companion_line(start: Rec, anchor: Rec, children_of, is_visited,
                   link=is_companion) -> list[str]:
    """The loader's nMe(): the one line of unvisited companion records (or
    virtual calls: ``link``, line_link) on the anchor's side from ``start``
    down, or [] when it forks or meets any other unvisited record."""
    line, cur, seen = [], start, set()
    while cur is not None:
        if (cur.uuid in seen or is_visited(cur.uuid) or not link(cur)
                or bool(cur.is_sidechain) != bool(anchor.is_sidechain)):
            return []
        seen.add(cur.uuid)
        line.append(cur.uuid)
        below = [c for c in children_of(cur.uuid) if not is_visited(c.uuid)]
        if len(below) > 1:
            return []
        cur = below[0] if below else None
    return line


def is_late_graft(root: Rec, below: Rec | None, calls) -> bool:
    """Is the off-chain branch that starts at ``root`` (a child of a record
    on the resume chain) cut off by a late graft: a tool result written
    after it onto the same call (``below``: the chain's record below the
    branch point), answering a tool_use that ``root``, an earlier result,
    answered already? A permission response drained days later at start-up
    (anthropics/claude-code#62301), or a second process resuming the
    session, grafts it; being the last row, it takes the resume, and the
    conversation that went on from the first answer is dropped.
    ``calls``: Rec -> resume.Calls (their tool ids)."""
    return (below is not None and calls is not None and root.uuid != below.uuid
            and root.type == "user" and bool(root.is_tool_result)
            and below.type == "user" and bool(below.is_tool_result)
            and root.line_no < below.line_no
            and bool(set(calls(root).ids) & set(calls(below).ids)))


def is_prompt(r: Rec, parent: Rec | None) -> bool:
    """A prompt that starts a turn: a user record, neither meta (a Skill's
    body, a reminder) nor a tool result, whose parent (``parent``: None when
    it is not in the file) is no user record (a new turn follows an answer,
    an attachment or a system record; an interruption's text follows a tool
    result)."""
    return (r.type == "user" and not r.is_meta and not r.is_tool_result
            and (parent is None or parent.type != "user"))


def is_concurrent(root: Rec, branch: tuple | None, chain_below: tuple | None) -> bool:
    """Was the off-chain branch written while the resume chain below its
    branch point was, by another process resuming the same session
    (anthropics/claude-code#48270)? ``branch`` and ``chain_below``: (the
    first and last line numbers of the messages, the line of the first
    prompt or None) of the branch (sidechains aside) and of the resume chain
    below the branch point; None without any message. Two resumes at once
    each append their own conversation from the leaf they loaded: the two
    branches' messages interleave in the file, and one side's prompt was
    typed before the other side's last message. A rewind or an edited
    prompt starts the new branch after the old one ends; parallel tool
    calls interleave without a prompt. The branch starts (``root``) with a
    message that is not meta: a process's answer, tool call, result or
    prompt, not a line of Skill bodies, hooks or progress records), and
    holds an assistant record (the other process answered). Being on
    the last row's branch, one process's conversation is resumed and the
    other's dropped, though nobody abandoned it."""
    if branch is None or chain_below is None or root.type not in MESSAGE_TYPES or root.is_meta \
            or not branch[3]:
        return False
    if not (branch[0] < chain_below[1] and chain_below[0] < branch[1]):
        return False
    return ((chain_below[2] is not None and chain_below[2] < branch[1])
            or (branch[2] is not None and branch[2] < chain_below[1]))


def widen_span(span: tuple | None, r: Rec, prompt: bool) -> tuple | None:
    """is_concurrent's span of some records with ``r`` added (``prompt``:
    is_prompt(r)): (first and last line of their messages, line of their
    first prompt or None, whether one is an assistant record); None while
    none is a message."""
    if r.type not in MESSAGE_TYPES:
        return span
    if span is None:
        return (r.line_no, r.line_no, r.line_no if prompt else None, r.type == "assistant")
    lo, hi, first, answered = span
    if prompt and (first is None or r.line_no < first):
        first = r.line_no
    return (min(lo, r.line_no), max(hi, r.line_no), first, answered or r.type == "assistant")


def message_span(recs, parent_of) -> tuple | None:
    """is_concurrent's span of some records (widen_span; ``parent_of``: a
    record's parent record or None)."""
    span = None
    for r in recs:
        span = widen_span(span, r, r.type == "user" and is_prompt(r, parent_of(r)))
    return span


def cause_of(o: Rec, parent: Rec | None, branch_point: str | None, origin: str | None,
             boundary_line: int | None, in_chain_messages, is_splice_point,
             with_result: bool = False, late_graft: bool = False,
             recovered: bool = False, concurrent: bool = False) -> str:
    """The first matching cause of an off-chain record (orphans.cause):
    ``origin`` is how the top-down walk reached it (ancestry, unlinked,
    dangling_parent; None: never, inside a cycle), ``in_chain_messages(id)``
    whether an assistant record of that message id is on the resume chain,
    ``is_splice_point(uuid)`` whether that chain record's child on the chain
    is an api_error record, ``with_result`` whether the CLI puts it back
    with a parallel tool result (put_back_with_results), ``late_graft``
    whether its branch is cut off by a late graft (is_late_graft),
    ``recovered`` whether the CLI recovers it by its tool-call id
    (recovered_by_tool_use_id: put back as a parallel result),
    ``concurrent`` whether another process wrote its branch while the
    chain's was written (is_concurrent)."""
    if boundary_line is not None and o.line_no < boundary_line:
        return "compacted"
    if o.type == "progress":
        return "progress"
    if recovered or is_parallel(o, parent, in_chain_messages):
        return "parallel_tool_branch"
    if with_result:
        return "put_back_with_result"
    if branch_point is not None and is_splice_point(branch_point):
        return "api_error_splice"
    if records.is_api_error_record(o.type, o.subtype):
        return "api_error_record"
    if late_graft:
        return "late_graft"
    if concurrent:
        return "concurrent_resume"
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


# The causes of records the CLI puts back after its walk (orphans.restored).
RESTORED_CAUSES = ("parallel_tool_branch", "put_back_with_result")


def orphan_row(o: Rec, session_id, cause: str, branch_point: str | None,
               put_back_set: set[str]) -> tuple:
    """An orphans_cache row (definitions.ORPHANS_COLUMNS order)."""
    restored = int(cause in RESTORED_CAUSES or o.uuid in put_back_set)
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
                                  bool(row[REC_FIELDS + 2]), bool(row[REWOUND_AT]),
                                  row[CUT_AT]))
        if row[3] is not None:
            recs.append(Rec(*row[:REC_FIELDS], row[HAS_TOOL_USE_AT], row[SENT_AS_AT],
                            row[ROWS_AHEAD_AT], row[AGENT_AT], row[SOURCE_AT]))
    return out
