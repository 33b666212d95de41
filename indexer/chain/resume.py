"""What ``claude --resume`` loads from a main transcript: the rules of the
Claude Code CLI as of version ``CLI_VERSION``, found by asking the real CLI
(indexer/repair/oracle.py) and reading its loader. The SQL definitions in definitions.py
state the same rules; the test suite holds the two equal row for row.

The CLI's view of a file (``CliView``):
- Nodes: user, assistant, system and attachment records, the last line of a
  uuid winning, but a progress line or an unreadable one never replaces a
  line loaded before it (``loader_nodes``). ``progress`` records are not nodes: a record whose parent is
  a progress record written before it hangs from that record's nearest
  non-progress ancestor instead (the *bridged* parent). The loader keeps
  progress lines apart (Hfn's ``Os``): the progress record a line is read
  through is the last progress line of that uuid before it, whatever line
  of the uuid comes later (``progress_lines``). Nor are unreadable
  user/assistant records (``records.is_unreadable``: no message object, no
  string or list content, blank assistant text, a list with no block): the
  loader drops them and their children hang from their parent.
- Rows: the non-sidechain nodes other than ``system``/``file_snapshot``, in
  file order; the *last row* is the last such line.
- The checkpoint: the ``leafUuid`` of the latest ``last-prompt`` record,
  unless a compact boundary or a ``last-prompt`` with ``explicit: true`` and
  ``leafUuid: null`` (a rewind to an empty conversation) follows it. It is
  *explicit* when a record of the run naming that leaf (no record naming
  another leaf, no boundary between) says ``explicit: true`` and no row
  follows that record; *ever explicit* when one says so, rows or not.

The leaf (``resume_rule`` names which rule picked it):
- ``rewound_to_empty``: a rewind to empty with no row or checkpoint after
  it: the resume loads nothing.
- ``checkpoint``: the checkpoint, when it is a node, unless it is not
  explicit and the last row continues past it (``kin``: it descends from
  it, or, unless a last-prompt record for it said explicit, it goes on
  through the parallel batch of the call the checkpoint answers); then
  ``last_row``.
- ``last_row``: otherwise the last row, when no ``system``/``file_snapshot``
  rows trail it.
- From the picked row the conversation starts at the first user or
  assistant record at or above it (bridged parents).
- ``leaf_scan``: when that finds no message, every terminal node (no node
  names it as parent) is walked up to its first user/assistant record; those
  without a user/assistant child are the leaves; with several, the
  checkpoint's wins when it is one of them (unless it is not explicit and
  ``kin``, without its descent rule, says the last row goes on through its
  batch), else the last row's, else the newest by timestamp.
- ``newest_record``: no leaf at all: the newest non-sidechain node.

The walk from the leaf follows bridged parents; at a parent that is not a
node, or that the walk has already visited, it falls back to the node of
the same sidechain-ness with the latest timestamp at or before the record's
own that is not on the walk, within ``FALLBACK_MS`` (ties: the earliest
line). It stops at a null parent and where no fallback is left.

What is put back after the walk (``orphans.restored``, derive.py): parallel
tool calls and their results off the walked chain (``parallel_tool_branch``,
and the results recovered by tool-call id: walk.recovered_by_tool_use_id),
the non-message records (system, attachment) that hang from the leaf
message through non-message records, and (``put_back_with_result``,
walk.put_back_with_results) the single lines of companion records (an
attachment, a system record, an isMeta user record such as a Skill body)
or isVirtual tool calls that hang from a tool call's records, their
results, or the companion records on the chain in the call's region, read
under the parents the loader reads, the responses taken root first. A
rewind cut (``rewind_cut``) keeps what it cut from being put back.

The compaction relink (``relink``) runs first: what a compact boundary says
its compaction kept hangs from its anchor (the summary), and what came
before the last boundary is dropped. ``newest_descendant``: with no
last-prompt record naming a leaf and a newest row that is not the last row,
the newest record below the last row is where the walk starts.

``loader_keys``: a prompt stored anew is loaded under its sentAsUuid when
the loader's Map holds no such key yet (the keys of the readable lines
before it, each keyed so in turn); ``sent_as_renames`` reads what names that
sentAsUuid as naming it. ``loader_names``: the loader keys every line by its
key (that sentAsUuid, else its uuid), so when another line has such a
prompt's own uuid (or is keyed by it) both are records: the view names the
prompt by its sentAsUuid (``cli_lines``), nodes being the last line of each
name.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass

from indexer.chain.definitions import CLI_NODE_TYPES, CUT_STEPS, FALLBACK_MS
from indexer.transcripts import records
from indexer.transcripts.records import MESSAGE_TYPES

CLI_VERSION = "2.1.332"
# Types whose records carry uuid/parentUuid links (records.CHAIN_TYPES), as a set.
CHAIN_TYPES = frozenset(records.CHAIN_TYPES)


def is_snapshot(r) -> bool:
    return r.type == "system" and r.subtype == "file_snapshot"


@dataclass(frozen=True, slots=True)
class Calls:
    """What the loader reads of a record's tool calls (records.TOOL_IDS,
    HAS_TOOL_USE, VIRTUAL_CALL), asked for by ``kin`` record by record, and
    whether it may be a row a rowsAheadOfPutBack puts back (records.AHEAD_ROW)."""
    ids: tuple = ()          # tool_use ids / tool_result ids / the attachment's toolUseID
    has_tool_use: bool = False
    virtual: bool = False
    ahead: int = 0           # records.AHEAD_ROW
    blocks: tuple = ()       # records.CALL_BLOCKS: ((is tool_use, id as JSON), ...)


@dataclass(slots=True)
class Prompt:
    """A ``last-prompt`` record: its line and what it says of the leaf."""
    line_no: int
    leaf_uuid: str | None
    leaf_is_null: bool     # leafUuid present and null
    explicit: bool
    rewound: bool = False          # rewound: true (a rewind)
    cut_uuid: str | None = None    # cutUuid ('' when there but not a string)


@dataclass
class CliView:
    nodes: dict            # uuid -> Rec (the last line of each), in file order
    parent: dict           # uuid -> bridged parent uuid (None at a root)
    walk_parent: dict      # uuid -> the parent the walk takes (bridged, else fallback)
    last_row: object       # Rec | None
    checkpoint: str | None
    explicit: bool
    rewound_to_empty: bool
    trailing_snapshots: bool
    relinked: str | None = None   # the preserved tail a compaction put back (relink)
    keeps: bool = False           # a compact boundary says what it kept (relink applies)
    prompted: bool = False        # a last-prompt record names a leafUuid (even null)
    newest_row: object = None     # the first row with the greatest timestamp (text)
    ever_explicit: bool = False   # a last-prompt record for this checkpoint said explicit
    calls: object = None          # Rec -> Calls (kin's tool facts, read when needed)
    cut: frozenset = frozenset()  # the records a rewind cut (rewind_cut): never put back


def progress_lines(occ: list) -> dict:
    """The progress lines of a file by uuid, each uuid's in file order: the
    loader keeps them in a Map of their own (Hfn's ``Os``), apart from the
    records it loads, so a later line of the uuid does not replace one."""
    out: dict = {}
    for r in occ:
        if r.type == "progress":
            out.setdefault(r.uuid, []).append(r)
    return out


def loader_rank(r) -> int:
    """How the loader holds line r: 2, a record it loads (its Map ``h``);
    1, an unreadable user/assistant record (Ysn's admit() keeps it out of h
    and notes its parent); 0, a progress line (its own Map, ``Os``). The
    record of a uuid is its last line of the highest rank (loader_nodes)."""
    if r.type == "progress":
        return 0
    return 1 if r.is_unreadable else 2


def loader_nodes(occ: list) -> dict:
    """uuid -> the line the loader holds as the record of that uuid, from
    chain record lines in file order: the last line of the highest
    loader_rank. Neither a progress line nor an unreadable one enters h, so
    a line loaded before either stays the record of its uuid (and what
    hangs from it continues from it); with no such line, the last
    unreadable line (whose parent admit() notes), else the last progress
    line. (definitions._IS_CLI_LINE and ``nodes`` say the same.)"""
    nodes: dict = {}
    for r in occ:
        held = nodes.get(r.uuid)
        if held is None or loader_rank(r) >= loader_rank(held):
            nodes[r.uuid] = r
    return nodes


def held_not_last(occ: list) -> bool:
    """Has a progress or unreadable line's uuid another chain line (there
    the loader reads a child under an earlier progress line, or holds an
    earlier line than the last, loader_nodes: derive_append, which reads
    the last line of a uuid, gives up on such a file)?"""
    seen: dict = {}   # uuid -> has it a progress or unreadable line so far
    for r in occ:
        odd = r.type == "progress" or bool(r.is_unreadable)
        if r.uuid in seen and (odd or seen[r.uuid]):
            return True
        seen[r.uuid] = seen.get(r.uuid, False) or odd
    return False


def _progress_before(progress: dict, uuid, line: int):
    """The last progress line of ``uuid`` written before ``line``, or None."""
    best = None
    for q in progress.get(uuid, ()):
        if q.line_no >= line:
            break
        best = q
    return best


def bridged(n, records: dict, progress: dict | None = None) -> str | None:
    """n's parent, read through progress records written before it and
    through unreadable records; None when those go round a cycle.
    ``progress`` (progress_lines): the loader's xr() reads a line whose
    parent is the uuid of a progress line read before it under that
    progress line's parent (``Os.get``), whatever line of that uuid comes
    later; without it, every uuid has one line (the last, ``records``)."""
    p, line, seen = n.parent_uuid, n.line_no, set()
    while p is not None:
        q = _progress_before(progress, p, line) if progress is not None else None
        if q is None:
            q = records.get(p)
            if q is None or not ((q.type == "progress" and q.line_no < line) or q.is_unreadable):
                return p
        if p in seen:
            return None
        seen.add(p)
        p, line = q.parent_uuid, q.line_no
    return None


def _fallbacks(nodes: dict, parent: dict) -> dict:
    """For each node whose bridged parent is not a node: the node of the
    same side with the latest time at or before its own within FALLBACK_MS
    (the earliest line on ties), or None."""
    broken = [n for n in nodes.values() if parent[n.uuid] is not None
              and parent[n.uuid] not in nodes and n.ts_ms is not None]
    if not broken:
        return {}
    # Per side, the timed nodes by (time, -line): the candidate for n is the
    # last entry at or before n's time, skipping n itself.
    sides: dict[bool, list] = {}
    for c in nodes.values():
        if c.ts_ms is not None and not is_snapshot(c):
            sides.setdefault(bool(c.is_sidechain), []).append((c.ts_ms, -c.line_no, c))
    for entries in sides.values():
        entries.sort(key=lambda e: (e[0], e[1]))
    keys = {side: [(e[0], e[1]) for e in entries] for side, entries in sides.items()}
    out = {}
    for n in broken:
        entries = sides.get(bool(n.is_sidechain), [])
        i = bisect.bisect_right(keys.get(bool(n.is_sidechain), []), (n.ts_ms, float("inf"))) - 1
        if i >= 0 and entries[i][2].uuid == n.uuid:
            i -= 1   # n itself: the next earliest line of its time, or an earlier time
        best = entries[i][2] if i >= 0 and n.ts_ms - entries[i][0] <= FALLBACK_MS else None
        out[n.uuid] = best.uuid if best is not None else None
    return out


def _preserved_uuids(boundary, nodes: dict, parent: dict):
    """(anchor, uuids) a boundary says its compaction kept, head first: the
    preservedMessages list, else the preservedSegment walked from its tail
    up the parents to its head; None when that walk does not reach the head
    or a listed uuid is not a node (the CLI then relinks nothing)."""
    anchor, listed, segment = records.preserved_of(boundary.preserved)
    if listed is None:
        walked, seen, u = [], set(), segment.get("tailUuid")
        while isinstance(u, str) and u in nodes and u not in seen:
            seen.add(u)
            walked.append(u)
            if u == segment.get("headUuid"):
                return anchor, walked[::-1]
            u = parent[u]
        return None
    if any(u not in nodes for u in listed):
        return None
    return anchor, listed


def first_loaded(occ: list) -> dict:
    """uuid -> the first line of it the loader loads (a user, assistant,
    system or attachment line): where the CLI's Map holds the uuid though
    the last line's record is its value, the order the relink reads."""
    first: dict = {}
    for r in occ:
        if r.type in CLI_NODE_TYPES:
            first.setdefault(r.uuid, r.line_no)
    return first


def loader_places(occ: list) -> dict:
    """uuid -> the place of the node in the loader's Map, the order RRr()
    sorts what it puts back by: the first line of its key (first_loaded),
    but a prompt stored anew that trn() loads under its sentAsUuid is keyed
    by that: placed at its own line whatever lines of its own uuid came
    before, and a later line of that key, which replaces it in the Map,
    takes that place (loader_keys, sent_as_renames;
    definitions.LOADER_PLACE)."""
    places = first_loaded(occ)
    keys, moved = loader_keys(occ), {}
    renames, _ = sent_as_renames(occ, keys)
    for r in occ:
        y = keys.get(r.id)
        if y:
            key = r.uuid if renames.get(y) == r.uuid else y
            moved[key] = min(r.line_no, moved.get(key, r.line_no))
    places.update(moved)
    return places


def relink(nodes: dict, parent: dict, first: dict):
    """The CLI's compaction relink, before any leaf is picked: (nodes,
    parent, tail). When the last compact boundary that says what it kept
    (records.PRESERVED) is the last boundary, the kept records hang from its
    anchor (the summary), one after another, and what hung from the anchor
    hangs from the tail. When such a boundary exists, every node before the
    last boundary but the kept ones is dropped, and a user/assistant record
    whose parent was dropped hangs from the tail. ``tail``: the last kept
    record, or None when nothing was put back. "Before" is in the order the
    uuids were first loaded (``first``: first_loaded), as the CLI numbers
    them: a copy of an earlier record written after the boundary (#92089)
    is dropped with it."""
    boundaries = sorted((r for r in nodes.values()
                         if records.is_compact_boundary(r.type, r.subtype)),
                        key=lambda r: first[r.uuid])
    keeping = [b for b in boundaries if records.preserved_of(b.preserved) is not None]
    if not keeping:
        return nodes, parent, None
    last, uuids, anchor = boundaries[-1], [], None
    if keeping[-1] is last:
        kept = _preserved_uuids(last, nodes, parent)
        if kept is None:
            return nodes, parent, None
        anchor, uuids = kept
    parent = dict(parent)
    if uuids:
        head, tail = uuids[0], uuids[-1]
        above = anchor
        for u in uuids:
            parent[u] = above
            above = u
        if anchor is not None:
            for u, p in parent.items():
                if p == anchor and u != head:
                    parent[u] = tail
    keep = set(uuids)
    dropped = {u for u in nodes if first[u] < first[last.uuid] and u not in keep}
    nodes = {u: r for u, r in nodes.items() if u not in dropped}
    parent = {u: p for u, p in parent.items() if u not in dropped}
    if uuids and dropped:
        for u, r in nodes.items():
            if r.type in MESSAGE_TYPES and parent[u] in dropped:
                parent[u] = uuids[-1]
    return nodes, parent, uuids[-1] if uuids else None


def relinked_parents(occ: list) -> dict:
    """uuid -> the parent the compaction relink gives it, for the nodes whose
    parentUuid it changes (``occ``: a main file's chain record lines): what
    a reader that does not relink (the Agent SDK's walk, ``show``) needs to
    read the kept tail where the CLI puts it."""
    nodes_all = loader_nodes(occ)
    nodes = dict(sorted(((u, r) for u, r in nodes_all.items()
                         if r.type in CLI_NODE_TYPES and not r.is_unreadable),
                        key=lambda item: item[1].line_no))
    raw = {u: r.parent_uuid for u, r in nodes.items()}
    _, parent, tail = relink(nodes, raw, first_loaded(occ))
    if tail is None:
        return {}
    return {u: p for u, p in parent.items() if p != raw[u]}


def loader_keys(occ: list) -> dict:
    """{record id: its sentAsUuid} for the user lines trn() keys by their
    sentAsUuid (definitions: sent_keys): it loads a user line under its
    sentAsUuid when the loader's Map h holds no such key yet, and h holds
    the keys of the readable user, assistant, system and attachment lines
    before it (admit() keeps an unreadable line out of h; a progress line
    is never in it), each keyed so in turn: a line's key depends on the keys
    before it, not on the uuids."""
    if not any(r.sent_as_uuid for r in occ):
        return {}
    in_h, keys = set(), {}
    for r in occ:
        if r.type not in CLI_NODE_TYPES:
            continue
        key = r.uuid
        y = r.sent_as_uuid if r.type == "user" else None
        if y and r.uuid is not None and y not in in_h:
            key = keys[r.id] = y
        if not r.is_unreadable:
            in_h.add(key)
    return keys


def sent_as_renames(occ: list, keys: dict | None = None) -> tuple[dict, set]:
    """sentAsUuid: Claude Code stores a prompt anew under a new uuid and
    keeps the uuid it was sent under as ``sentAsUuid``; its loader (trn())
    loads such a user record under its sentAsUuid when its Map holds no
    such key yet (loader_keys). Here the record keeps its own uuid and what
    names the sentAsUuid (a parent, the checkpoint) is read as naming it.

    Returns ({sentAsUuid: the record's uuid}, {ids of the records a later
    readable node line of their key replaces: no nodes, nothing renamed})
    (definitions: sent_as). An unreadable line does not replace one: trn()
    asks the loader's Map, which admit() keeps it out of. (``keys``:
    loader_keys(occ), when the caller has them.)"""
    renames, replaced, first = {}, set(), {}
    keys = loader_keys(occ) if keys is None else keys
    for r in occ:
        if r.type not in CLI_NODE_TYPES:
            continue
        key = keys.get(r.id, r.uuid)
        if key in first and not r.is_unreadable:   # (admit() keeps it out of h)
            replaced.add(first.pop(key).id)
        if r.id in keys:
            first[key] = r
    for y, r in first.items():
        renames[y] = r.uuid
    return renames, replaced


def loader_names(occ: list) -> dict:
    """{record id: its sentAsUuid} for the prompts stored anew that trn()
    loads under their sentAsUuid (loader_keys) whose own uuid is another
    chain line's uuid too, or the key of another readable line keyed by its
    sentAsUuid, or whose sentAsUuid an unreadable line has as uuid: the
    loader keys each line by its key
    (the sentAsUuid of such a record, else its uuid), a later line of the
    same key replacing an earlier one, so that other line of the uuid is a
    record of its own. Such a record is named by its sentAsUuid (its key)
    in the CLI's view (cli_lines); the others keep their own uuid and are
    read through the renames (definitions: sent_as.named)."""
    if not any(r.sent_as_uuid for r in occ):
        return {}
    keys = loader_keys(occ)
    lines: dict = {}
    unreadable = set()
    for r in occ:
        lines[r.uuid] = lines.get(r.uuid, 0) + 1
        if r.is_unreadable:
            unreadable.add(r.uuid)
    taken = {keys[r.id] for r in occ if r.id in keys and not r.is_unreadable}
    names = {}
    for r in occ:
        y = keys.get(r.id)
        if y and (lines[r.uuid] > 1 or r.uuid in taken or y in unreadable):
            names[r.id] = y
    return names


def cli_lines(occ: list, nodes: dict) -> tuple[list, dict]:
    """(the lines as the CLI's view names them, the record of each name):
    ``occ`` with each record loader_names() names by its sentAsUuid
    renamed so, and the nodes by name (loader_nodes): the loader's Map, key
    for key (``nodes``, loader_nodes by uuid, when none is)."""
    names = loader_names(occ)
    if not names:
        return occ, nodes
    occ = [dataclasses.replace(r, uuid=names[r.id]) if r.id in names else r for r in occ]
    return occ, loader_nodes(occ)


def cli_view(occ: list, prompts: list[Prompt], nodes_all: dict, calls=None) -> CliView:
    """The CLI's view of a main file from its chain record lines in file
    order (``occ``), its last-prompt records and the record of each name
    (``nodes_all``: cli_lines); ``calls``: Rec -> Calls, for kin. The
    progress and unreadable records bridged() climbs through are read by
    name too: the loader notes an unreadable prompt stored anew under its
    key, its sentAsUuid (Ysn's admit(): ``n.set(tr.uuid, ...)`` after trn())."""
    bridge = nodes_all
    renames, replaced = sent_as_renames(occ)
    nodes = dict(sorted(((u, r) for u, r in nodes_all.items()
                         if r.type in CLI_NODE_TYPES and not r.is_unreadable
                         and r.id not in replaced),
                        key=lambda item: item[1].line_no))
    progress = progress_lines(occ)
    parent = {u: bridged(r, bridge, progress) for u, r in nodes.items()}
    if renames:
        parent = {u: renames.get(p, p) for u, p in parent.items()}
    keeps = any(r.preserved for r in nodes.values())
    cut = rewind_cut(occ, prompts, nodes, parent, renames, bridge) if any(
        p.rewound for p in prompts) else set()
    nodes, parent, tail = relink(nodes, parent, first_loaded(occ))
    walk_parent = dict(parent)
    for u, p in _fallbacks(nodes, parent).items():
        walk_parent[u] = p
    seen = scan_events(occ, prompts, Scanned())
    checkpoint = renames.get(seen.checkpoint, seen.checkpoint)
    return CliView(nodes, parent, walk_parent, seen.last_row, checkpoint, seen.explicit,
                   seen.rewound_to_empty, seen.trailing_snapshots, tail, keeps,
                   seen.prompted, seen.newest_row, seen.ever_explicit, calls,
                   frozenset(cut))


@dataclass(slots=True)
class Scanned:
    """What the CLI's scan of a file's lines in order has seen so far (the
    last row, the checkpoint and the rest of CliView's file-order facts):
    scanning more lines carries it on, so appended lines continue it."""
    last_row: object = None
    checkpoint: str | None = None
    explicit: bool = False
    rewound_to_empty: bool = False
    trailing_snapshots: bool = False
    prompted: bool = False
    newest_row: object = None
    ever_explicit: bool = False


def scan_events(occ: list, prompts: list[Prompt], seen: Scanned) -> Scanned:
    """Carry ``seen`` on over chain record lines ``occ`` and last-prompt
    records ``prompts`` that all come after the lines it has seen."""
    events = [(r.line_no, "row", r) for r in occ if r.type in CLI_NODE_TYPES
              and not r.is_sidechain and not is_snapshot(r) and not r.is_unreadable
              and not r.fork_briefing]
    events += [(r.line_no, "boundary", r) for r in occ
               if records.is_compact_boundary(r.type, r.subtype)]
    events += [(r.line_no, "snapshot", r) for r in occ if is_snapshot(r)]
    events += [(p.line_no, "prompt", p) for p in prompts]
    events.sort(key=lambda e: (e[0], e[1] != "row"))
    last_row, checkpoint, explicit = seen.last_row, seen.checkpoint, seen.explicit
    empty, snapshots = seen.rewound_to_empty, seen.trailing_snapshots
    prompted, newest, ever = seen.prompted, seen.newest_row, seen.ever_explicit
    for _, kind, item in events:
        if kind == "row":
            last_row, explicit, empty, snapshots = item, False, False, False
            if isinstance(item.timestamp, str) and item.timestamp > (
                    newest.timestamp if newest is not None else ""):
                newest = item
        elif kind == "boundary":
            checkpoint, explicit, ever = None, False, False
        elif kind == "snapshot":
            snapshots = True
        else:
            prompted = prompted or item.leaf_uuid is not None or item.leaf_is_null
            if item.leaf_uuid:
                # a record for the same leaf keeps what an earlier one said
                same = item.leaf_uuid == checkpoint
                ever = item.explicit or (ever and same)
                explicit = item.explicit or (explicit and same)
                checkpoint, empty = item.leaf_uuid, False
            elif item.leaf_is_null and item.explicit:
                checkpoint, explicit, empty, ever = None, False, True, False
    return Scanned(last_row, checkpoint, explicit, empty, snapshots, prompted, newest, ever)


def rewind_cut(occ: list, prompts: list[Prompt], nodes: dict, parent: dict,
               renames: dict, nodes_all: dict) -> set[str]:
    """The records a rewind cut (the loader's wsn(), tengu_foamy_spring): in
    file order, an explicit last-prompt record with ``rewound: true`` and a
    ``cutUuid`` naming a record loaded before it cuts that record when it
    is no user/assistant record, and the records above it up to the first
    user/assistant record are no longer cut, nor are those above a later
    row; an explicit last-prompt record that is no such rewind, or a compact
    boundary, ends every cut. The records are read as the loader has them
    when it reads each line: of a uuid written on several lines, the last
    line written by then (``occ``: every chain record line; the loader's
    nodes, ``nodes``, name the uuids it loads), under its bridged parent
    (``parent``: the last line's; an earlier line's read through
    ``nodes_all`` as bridged() reads it; a sentAsUuid names the record
    stored anew, ``renames``), at most 64 steps up. The loader counts the
    cut records (by uuid) as visited: none is put back after the walk."""
    cut: set = set()
    progress = progress_lines(occ)
    then: dict = {}   # uuid -> (its line loaded by the line read, that line's parent)

    def node(u):
        return then.get(renames.get(u, u)) if u is not None else None

    def uncut_above(p):
        g = node(p)
        for _ in range(CUT_STEPS):
            if g is None or g[0].type in MESSAGE_TYPES:
                return
            cut.discard(g[0].uuid)
            g = node(g[1])

    def line_parent(r):
        if r.id == nodes[r.uuid].id:
            return parent.get(r.uuid)
        p = bridged(r, nodes_all, progress)
        return renames.get(p, p)

    events = [(r.line_no, "line", r) for r in occ
              if r.type in CLI_NODE_TYPES and r.uuid in nodes and not r.is_unreadable]
    events += [(p.line_no, "prompt", p) for p in prompts]
    for line, kind, item in sorted(events, key=lambda e: e[0]):
        if kind == "line":
            r = item
            then[r.uuid] = (r, line_parent(r))
            if cut and not r.is_sidechain and not is_snapshot(r) and not r.fork_briefing:
                uncut_above(then[r.uuid][1])
            if records.is_compact_boundary(r.type, r.subtype):
                cut.clear()
        elif item.explicit:
            if not item.rewound or item.cut_uuid is None:
                cut.clear()
                continue
            g = node(item.cut_uuid) if item.cut_uuid else None
            if g is None:
                continue
            uncut_above(g[1])
            if g[0].type not in MESSAGE_TYPES:
                cut.add(g[0].uuid)
    return cut


def _node_above(view: CliView, r):
    p = view.parent.get(r.uuid)
    return view.nodes.get(p) if p is not None else None


def _is_side_record(r) -> bool:
    """An attachment, a system record other than a compact boundary, or a
    meta user record that holds no tool result (the loader's XN)."""
    return (r.type == "attachment" or (r.type == "system" and r.subtype != "compact_boundary")
            or (r.type == "user" and bool(r.is_meta) and not r.is_tool_result))


def _of_batch(r, message_id) -> bool:
    """Can r stand inside the batch of API message ``message_id`` (the
    loader's WMe): an assistant record of that message, a tool result or
    meta user record, an attachment, a system record but a boundary."""
    if r.type == "assistant":
        return message_id is not None and r.message_id == message_id
    if r.type == "user":
        return bool(r.is_meta) or bool(r.is_tool_result)
    return r.type == "attachment" or (r.type == "system" and r.subtype != "compact_boundary")


def _batch_above(view: CliView, r, message_id) -> list:
    """The records above r, nearest first, while they stand inside the
    batch of ``message_id`` (the loader's Yst)."""
    out, seen, x = [], {r.uuid}, _node_above(view, r)
    while x is not None and x.uuid not in seen and _of_batch(x, message_id):
        seen.add(x.uuid)
        out.append(x)
        x = _node_above(view, x)
    return out


def _call_of(view: CliView, checkpoint: str):
    """(call, results, by_tool_use_id): the record that made the call the
    checkpoint answers. From the checkpoint up its attachment, system and
    meta records (and virtual calls): at a tool_result user record, its
    parent, with that record's result ids; else, from an attachment naming
    a toolUseID, the record of the batch above that holds that tool_use
    (by_tool_use_id); else the checkpoint itself."""
    calls = view.calls
    seen, top, x = set(), None, view.nodes.get(checkpoint)
    while (x is not None and (_is_side_record(x) or calls(x).virtual)
           and x.uuid not in seen):
        seen.add(x.uuid)
        top, x = x, _node_above(view, x)
    if x is not None and x.type == "user" and x.is_tool_result:
        return _node_above(view, x), calls(x).ids, False
    if top is None:
        return x, (), False
    tool_use_id = calls(top).ids[0] if top.type == "attachment" and calls(top).ids else None
    if x is None or x.type != "assistant" or not x.message_id or tool_use_id is None:
        return None, (), False
    call = next((c for c in [x, *_batch_above(view, x, x.message_id)]
                 if c.type == "assistant" and tool_use_id in calls(c).ids), None)
    return (call, (tool_use_id,), True) if call is not None else (None, (), False)


def kin(view: CliView, last: str, checkpoint: str, direct: bool) -> bool:
    """Does the last row continue the conversation past the checkpoint, so
    that the resume starts from it (the loader's Kin)? ``direct``: it
    descends from the checkpoint. Unless a last-prompt record for this
    checkpoint said explicit (``ever_explicit``), also when, walking up
    from the last row, it comes to the call record the checkpoint answers
    (``_call_of``) through another record of the same parallel batch (an
    assistant record of its API message with a tool_use), or passes such a
    record above the call, or comes to it from a result of another of its
    calls (a call record with several tool_use blocks)."""
    call, results, by_id = (None, (), False) if view.ever_explicit else _call_of(view, checkpoint)
    calls = view.calls
    ids = calls(call).ids if call is not None and call.type == "assistant" else ()
    batch = call.message_id if call is not None and call.type == "assistant" and ids \
        and call.message_id else None
    above = {r.uuid for r in _batch_above(view, call, batch)} if batch else set()
    seen, below, sibling_passed, u = set(), None, False, last
    while u is not None and u not in seen:
        if direct and u == checkpoint:
            return True
        seen.add(u)
        r = view.nodes.get(u)
        if r is None:
            return False
        if batch:
            if sibling_passed and r.uuid == call.uuid:
                return True
            if (r.type == "assistant" and r.uuid != call.uuid and r.message_id == batch
                    and calls(r).has_tool_use):
                if r.uuid in above:
                    return True
                sibling_passed = True
            elif not _of_batch(r, batch):
                sibling_passed = False
        if (call is not None and r.uuid == call.uuid and below is not None
                and any(i in ids for i in results)
                and any(i in ids and (len(ids) > 1 if by_id else i not in results)
                        for i in (calls(below).ids if below.type == "user" else ()))):
            return True
        below, u = r, view.parent.get(u)
    return False


def _message_at_or_above(view: CliView, uuid: str | None):
    seen = set()
    while uuid is not None and uuid in view.nodes and uuid not in seen:
        r = view.nodes[uuid]
        if r.type in MESSAGE_TYPES:
            return r
        seen.add(uuid)
        uuid = view.parent[uuid]
    return None


def _newest(candidates):
    """The CLI's "newest": the first record with the greatest time; the
    last one when none has a time."""
    best, best_ms = None, None
    for r in candidates:
        if best is None or (r.ts_ms is not None and (best_ms is None or r.ts_ms > best_ms)) \
                or (r.ts_ms is None and best_ms is None):
            best, best_ms = r, r.ts_ms
    return best


def _newest_descendant(view: CliView, last: str) -> str | None:
    """When no last-prompt record names a leaf and the newest row (by its
    timestamp text) is not the last row: the newest non-sidechain node that
    descends from the last row (a record written before its parent, the
    file's last row: a tool_result flushed before the tool_use it answers),
    the later node on a tie; None when none does."""
    newest = view.newest_row
    if view.prompted or newest is None or newest.uuid == last or last not in view.nodes:
        return None
    below = {last: True}

    def descends(u):
        path = []
        while u is not None and u not in below:
            below[u] = False
            path.append(u)
            u = view.parent.get(u) if u in view.nodes else None
        found = below.get(u, False) if u is not None else False
        for x in path:
            below[x] = found
        return found

    best, best_ts = None, ""
    for u, r in view.nodes.items():
        if (not r.is_sidechain and u != last and isinstance(r.timestamp, str)
                and r.timestamp >= best_ts and descends(u)):
            best, best_ts = u, r.timestamp
    return best


def resume_leaf(view: CliView):
    """(picked row, rule): the record the resume walk starts from."""
    if view.rewound_to_empty:
        return None, "rewound_to_empty"
    last = view.last_row.uuid if view.last_row is not None else None
    picked, rule = None, None
    if view.relinked is not None:
        # A compaction's kept tail was put back: only an explicit checkpoint
        # is taken before the leaf scan.
        ko = view.checkpoint
        if view.explicit and ko in view.nodes and not view.nodes[ko].is_sidechain:
            picked, rule = ko, "checkpoint"
    elif view.checkpoint is not None and view.checkpoint in view.nodes:
        picked, rule = view.checkpoint, "checkpoint"
        if (not view.explicit and last is not None and last in view.nodes and last != picked
                and kin(view, last, picked, direct=True)):
            picked, rule = last, "last_row"
    if picked is None and view.relinked is None and not view.trailing_snapshots \
            and last is not None:
        picked, rule = last, "last_row"
        newer = _newest_descendant(view, last)
        if newer is not None:
            picked, rule = newer, "newest_descendant"
    if picked is not None and _message_at_or_above(view, picked) is not None:
        return view.nodes[picked], rule
    # The leaf scan.
    named = {p for p in view.parent.values() if p is not None}
    has_message_child = {view.parent[u] for u, r in view.nodes.items()
                         if r.type in MESSAGE_TYPES and view.parent[u] is not None}
    leaves = {}
    for u in view.nodes:
        if u in named:
            continue
        m = _message_at_or_above(view, u)
        if m is not None and m.uuid not in has_message_child:
            leaves[m.uuid] = m
    if len(leaves) > 1:
        ko = view.checkpoint
        if ko in leaves and (view.explicit or last is None
                             or not kin(view, last, ko, direct=False)):
            return leaves[ko], "checkpoint"
        if not view.trailing_snapshots and last is not None:
            if _message_at_or_above(view, last) is not None:
                return view.nodes[last], "last_row"
    ordered = [r for u, r in view.nodes.items() if u in leaves and not r.is_sidechain]
    if ordered:
        return _newest(ordered), "leaf_scan"
    if leaves:
        return None, "no_leaf"
    rest = [r for r in view.nodes.values() if not r.is_sidechain and not is_snapshot(r)] or [
        r for r in view.nodes.values() if not r.is_sidechain]
    newest = _newest(rest)
    return newest, "newest_record" if newest is not None else "no_leaf"


def walk(view: CliView, start) -> list[tuple[int, object]]:
    """(depth, record) from ``start`` up the walk parents. At a parent the
    walk has already visited (a cycle, a self-parent) the CLI takes its
    timestamp fallback too, skipping every record already on the walk
    (revisited_fallback); it stops at a null parent, or where no fallback
    is left."""
    out, seen, cur = [], {start.uuid}, start
    while True:
        out.append((len(out), cur))
        p = view.walk_parent.get(cur.uuid)
        if p is not None and p in seen:
            p = revisited_fallback(view, cur, seen)
        if p is None or p not in view.nodes:
            return out
        seen.add(p)
        cur = view.nodes[p]


def revisited_fallback(view: CliView, r, seen: set) -> str | None:
    """The CLI's fallback from ``r`` past the records already walked
    (``seen``): the node of r's side with the latest time at or before r's
    (the earliest line on ties) that is not in ``seen``, when it is within
    FALLBACK_MS of r; else None."""
    if r.ts_ms is None:
        return None
    best = None
    for c in view.nodes.values():
        if (c.ts_ms is None or c.uuid in seen or is_snapshot(c)
                or bool(c.is_sidechain) != bool(r.is_sidechain) or c.ts_ms > r.ts_ms):
            continue
        if best is None or c.ts_ms > best.ts_ms or (
                c.ts_ms == best.ts_ms and c.line_no < best.line_no):
            best = c
    return best.uuid if best is not None and r.ts_ms - best.ts_ms <= FALLBACK_MS else None
