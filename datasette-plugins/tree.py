"""The session page's picture: one transcript file as the tree it is.

The resume chain (``leaf_ancestry``, rule ``resume``) is the spine, root at
the top. Every other chain record hangs where its parent is: a branch off
the spine at its branch point, indented and coloured by its orphan cause
(``orphans``); records whose walk up never reaches the spine (compacted
history, other roots, missing parents, cycles) are drawn as their own
groups. Which records are on which chain, and why, comes from the views;
this module only lays out the parent links.

Large files stay readable: runs of progress records fold into one line, and
long linear stretches (nothing hanging off them, nothing marked) show their
first and last records with the middle folded. Folds are ``<details>``.

A page draws a window of ``WINDOW`` records of that order (``window``),
reading the text of those alone; links move to the next and previous
windows, and a link to a record opens the window holding it.

Layout is iterative (an explicit stack), so a 100,000-deep chain or a deeply
nested fork does not hit Python's recursion limit, and each record is
placed once, so parent cycles end.
"""

from __future__ import annotations

import json

from markupsafe import Markup, escape

from indexer.transcripts import records
from indexer.transcripts.records import CHAIN_TYPES_SQL, effective_parent
from session_index_web.format import CAUSE_COLOURS, css_class

# Columns of one chain record that place it in the tree. What marks a
# record and its text are read only for the records a page draws
# (NODE_DETAILS_SQL). (An index holding these columns, records(file_id,
# uuid, line_no, type, subtype, parent_uuid, logical_parent_uuid), made the
# layout read no wide row, but SQLite, with no statistics, then chose it as a
# covering index over records_file_parent for lookups by parent, reading the
# whole file: an append cost O(file). Not kept.)
_NODE_COLUMNS = """r.id, r.line_no, r.uuid, r.parent_uuid, r.logical_parent_uuid, r.type,
  r.subtype"""

# The chain records of one file, one per uuid (its last line, as both readers
# resolve a duplicated uuid), in file order: by byte_offset, so that SQLite
# reads the file's rows in the order of records_file_offset, which is the
# order they are stored in, and sorts nothing (ordered by line_no it read
# them by records_file_uuid, in uuid order, and sorted them: 54 against
# 25 ms for the 10,653-record session of the 1M-record bench index; the
# same rows, line_no and byte_offset both grow down a file).
TREE_NODES_SQL = f"""
SELECT {_NODE_COLUMNS}
FROM records r
WHERE r.file_id = :file_id AND r.uuid IS NOT NULL
  AND r.type IN {CHAIN_TYPES_SQL}
  AND NOT EXISTS (SELECT 1 FROM records later
    WHERE later.file_id = r.file_id AND later.uuid = r.uuid AND later.line_no > r.line_no
      AND later.type IN {CHAIN_TYPES_SQL})
ORDER BY r.byte_offset
""".strip()

# What marks each of the records :ids (a JSON array of records.id) a page
# draws, and its text: a one-line excerpt (json_excerpt() is the plugin's
# SQL function) and, for a synthetic placeholder, its line (what kind of
# placeholder it is).
NODE_DETAILS_SQL = f"""
SELECT r.id, r.timestamp, r.model, r.is_api_error, r.is_compact_summary,
  json_excerpt(r.raw, 160) AS excerpt,
  CASE WHEN {records.SYNTHETIC_RECORD.format(r="r")} THEN r.raw END AS synthetic_raw
FROM records r WHERE r.id IN (SELECT value FROM json_each(:ids))
""".strip()

# uuid and rule of every record on either reader's chain of the file.
ANCESTRY_SQL = """
SELECT uuid, rule, depth FROM leaf_ancestry WHERE file_id = :file_id ORDER BY rule, depth DESC
""".strip()

# The cause of every orphan of the file (main transcripts only).
ORPHAN_CAUSES_SQL = "SELECT uuid, cause FROM orphans WHERE file_id = :file_id"

# Records of the file that are not drawn: metadata lines, by type. Read in
# file order, by records_file_offset (byte_offset >= 0 is true of every
# record: it makes that index the one that answers most of the WHERE; SQLite
# else read the file by records_file_parent, in parent order: 50-90 against
# 7-15 ms for the 10,653-record session of the 1M-record bench index).
OTHER_RECORDS_SQL = """
SELECT coalesce(type, '(none)') AS type, count(*) AS n FROM records
WHERE file_id = :file_id AND byte_offset >= 0 AND (uuid IS NULL
  OR type IS NULL OR type NOT IN ('user', 'assistant', 'system', 'attachment', 'progress'))
GROUP BY type ORDER BY n DESC
""".strip()

WINDOW = 500        # records a session page draws (the rest: links to other windows)
EDGE = 3            # records kept visible at each end of a folded stretch
MIN_STRETCH = 10    # a linear stretch longer than this is folded
GROUP_LABELS = {
    "compacted": "Compacted history (before the last compaction; --resume loads the summary)",
    "unlinked": "Other roots (records whose walk up ends at another root)",
    "dangling_parent": "After a missing parent (chain break)",
    "other": "In parent cycles",
    None: "Off every chain (sidechain records)",
}


class Node:
    """One chain record as a page places it: ``row`` (its row of
    TREE_NODES_SQL, made a dict with its details when a window draws it:
    ``attach_details``), its effective parent, where it hangs and what marks
    it. Slotted, with no per-node dict: a large file lays out 10,000 of
    them."""

    __slots__ = ("row", "uuid", "parent", "level", "on_spine", "cause", "marks", "marked")

    def __init__(self, row):
        self.row = row
        self.uuid = row["uuid"]
        self.parent = effective_parent(row["type"], row["subtype"], row["parent_uuid"],
                                       row["logical_parent_uuid"])
        self.level = 0
        self.on_spine = False
        self.cause = None
        self.marks = []
        self.marked = False

    @property
    def is_progress(self):
        return self.row["type"] == "progress"


def build(rows, ancestry, causes, leaves) -> dict:
    """Lay out one file: ``rows`` from TREE_NODES_SQL (sqlite3.Row or dict),
    ``ancestry`` rows from ANCESTRY_SQL, ``causes`` {uuid: cause}, ``leaves``
    the file's row of the leaves view (or None). Returns {"top": [...],
    "spine": [...], "groups": [(label, cause, [...])], "counts": {...}},
    each list of Node in the order drawn (``window`` folds the part a page
    shows)."""
    by_uuid = {}
    for r in rows:
        node = Node(r)
        by_uuid[node.uuid] = node
    spine = [a["uuid"] for a in ancestry if a["rule"] == "resume" and a["uuid"] in by_uuid]
    sdk = {a["uuid"] for a in ancestry if a["rule"] == "sdk"}
    spine_set = set(spine)
    for uuid, cause in causes.items():
        node = by_uuid.get(uuid)
        if node is not None:
            node.cause = cause

    children, roots = {}, []
    for uuid, node in by_uuid.items():  # file order
        if uuid in spine_set:
            node.on_spine = True
            continue
        parent = node.parent
        if parent in by_uuid and parent != uuid:
            kids = children.get(parent)
            if kids is None:
                children[parent] = [node]
            else:
                kids.append(node)
        else:
            roots.append(node)

    placed: set = set()
    spine_rows = []
    for uuid in spine:
        node = by_uuid[uuid]
        placed.add(uuid)
        spine_rows.append(node)
        for kid in children.get(uuid, ()):
            if kid.uuid not in spine_set:
                spine_rows.extend(_subtree(kid, 1, children, placed))
    top, groups = [], {}
    for root in roots:
        rows_ = _subtree(root, 0, children, placed)
        key = root.cause if root.cause in GROUP_LABELS else None
        (top if key == "compacted" else groups.setdefault(key, [])).extend(rows_)
    cyclic = [n for u, n in by_uuid.items() if u not in placed]
    for node in cyclic:
        node.level = 0
    if cyclic:
        groups.setdefault("other", []).extend(cyclic)
    return {
        "top": top,
        "spine": spine_rows,
        "groups": [(GROUP_LABELS[k], k, v) for k, v in groups.items()],
        "counts": {"nodes": len(by_uuid), "spine": len(spine)},
        # what _mark needs for the records a window draws
        "marking": (by_uuid, spine_set, sdk, leaves),
    }


def drawn(tree) -> list:
    """Every node of a laid-out file in the order the page draws them: the
    compacted history, the spine with its branches, then each group."""
    return tree["top"] + tree["spine"] + [n for _, _, nodes in tree["groups"] for n in nodes]


def window_start(tree, start: int, size: int = WINDOW, uuid: str | None = None) -> int:
    """The first record (its place in ``drawn``) of the window a page
    shows: the one holding ``uuid`` when the file has it, else ``start``;
    windows begin at multiples of ``size``, so a record's link is stable."""
    total = tree["counts"]["nodes"]
    if uuid is not None:
        for i, node in enumerate(drawn(tree)):
            if node.uuid == uuid:
                return i - i % size
    start = min(max(0, start), max(0, total - 1))
    return start - start % size


def window_nodes(tree, start: int, size: int = WINDOW) -> list:
    """The records ``start`` to ``start + size`` of ``drawn(tree)``: those
    whose details (NODE_DETAILS_SQL) ``attach_details`` gives them before
    ``window`` marks and folds them."""
    return drawn(tree)[start:start + size]


def attach_details(nodes, details) -> None:
    """Give the drawn ``nodes`` what marks them and their text from
    ``details`` (rows of NODE_DETAILS_SQL; a record missing from them keeps
    none)."""
    by_id = {d["id"]: d for d in details}
    for node in nodes:
        if not isinstance(node.row, dict):
            node.row = dict(zip(node.row.keys(), node.row))
        detail = by_id.get(node.row["id"])
        node.row.update(
            (key, detail[key] if detail else None)
            for key in ("timestamp", "model", "is_api_error", "is_compact_summary", "excerpt",
                        "synthetic_raw"))


def window(tree, start: int, size: int = WINDOW) -> dict:
    """The records ``start`` to ``start + size`` of ``drawn(tree)`` (with
    their details: ``attach_details``), by section, each marked and folded:
    {"top": units, "spine": units, "groups": [(label, cause, units)],
    "nodes": [Node]} (a section the window does not reach is empty)."""
    end, at, out = start + size, 0, {"groups": [], "nodes": []}
    sections = [("top", None, tree["top"]), ("spine", None, tree["spine"])] + [
        ("group", (label, cause), nodes) for label, cause, nodes in tree["groups"]]
    for kind, key, nodes in sections:
        part = nodes[max(0, start - at):max(0, end - at)]
        at += len(nodes)
        _mark(part, *tree["marking"])
        out["nodes"].extend(part)
        if kind == "group":
            if part:
                out["groups"].append((key[0], key[1], fold(part)))
        else:
            out[kind] = fold(part)
    return out


def _subtree(root: Node, level: int, children, placed) -> list:
    """Depth-first rows of a branch: each record, the side branches off it
    (indented one more), then its continuation at the same level (its last
    child in file order)."""
    out, stack = [], [(root, level)]
    while stack:
        node, lvl = stack.pop()
        uuid = node.uuid
        if uuid in placed:
            continue
        placed.add(uuid)
        node.level = lvl
        out.append(node)
        kids = children.get(uuid)
        if kids is None:
            continue
        kids = [k for k in kids if k.uuid not in placed]
        if not kids:
            continue
        stack.append((kids[-1], lvl))
        for kid in reversed(kids[:-1]):
            stack.append((kid, lvl + 1))
    return out


def _synthetic_mark(raw) -> str:
    """A placeholder's kind as Claude Code tells them (records.synthetic_kind)
    and what a resume does with it."""
    try:
        entry = json.loads(raw)
    except (TypeError, ValueError):
        entry = None
    kind = records.synthetic_kind(entry) if isinstance(entry, dict) else "placeholder"
    return "synthetic placeholder, " + records.synthetic_label(kind)


def _mark(nodes, by_uuid, spine_set, sdk, leaves):
    """What each of ``nodes`` (those a window draws) says besides its type:
    leaves, api_error, synthetic placeholder, compaction, missing parent,
    SDK-only chain."""
    resume_leaf = leaves and leaves.get("resume_leaf_uuid")
    sdk_leaf = leaves and leaves.get("sdk_leaf_uuid")
    for node in nodes:
        r, marks, uuid = node.row, node.marks, node.uuid
        if node.marked:
            continue
        node.marked = True
        if uuid == resume_leaf and uuid == sdk_leaf:
            marks.append(("leaf", "leaf (both readers)"))
        else:
            if uuid == resume_leaf:
                marks.append(("leaf", "resume leaf"))
            if uuid == sdk_leaf:
                marks.append(("leaf sdk", "SDK leaf"))
        if records.is_api_error_record(r["type"], r["subtype"]):
            marks.append(("api-error", "api_error"))
        if records.is_synthetic(r["type"], r["model"]):
            marks.append(("synthetic", _synthetic_mark(r.get("synthetic_raw"))))
        elif r["is_api_error"]:
            marks.append(("api-error", "API error message"))
        if records.is_compact_boundary(r["type"], r["subtype"]):
            marks.append(("compact", "compaction"))
        if r["is_compact_summary"]:
            marks.append(("compact", "compact summary"))
        parent = node.parent
        if parent is not None and parent not in by_uuid:
            marks.append(("break", "parent missing"))
        if uuid in sdk and uuid not in spine_set:
            marks.append(("sdk", "on the SDK's chain"))


def fold(rows: list) -> list:
    """Fold runs of progress records into ("progress", rows) and the middle
    of long linear stretches into ("stretch", rows)."""
    units, i = [], 0
    while i < len(rows):
        if rows[i].is_progress and not rows[i].marks:
            j = i
            while j < len(rows) and rows[j].is_progress and not rows[j].marks:
                j += 1
            units.append(("progress", rows[i:j]))
            i = j
        else:
            units.append(rows[i])
            i += 1
    out, i = [], 0
    while i < len(units):
        run_end = _stretch_end(units, i)
        plain = [u for u in units[i:run_end] if isinstance(u, Node)]
        if len(plain) > MIN_STRETCH:
            head, body, tail = _split(units[i:run_end])
            out.extend(head)
            out.append(("stretch", body))
            out.extend(tail)
            i = run_end
        else:
            out.append(units[i])
            i += 1
    return out


def _stretch_end(units, i):
    """End of the linear stretch starting at units[i]: consecutive unmarked
    records at one level, with only progress folds hanging off them."""
    first = units[i]
    if not isinstance(first, Node) or first.marks:
        return i + 1
    j = i
    while j < len(units):
        u = units[j]
        if isinstance(u, Node):
            if u.level != first.level or u.marks:
                break
        elif u[0] != "progress" or min(n.level for n in u[1]) <= first.level:
            break
        j += 1
    # The last record before a branch stays visible: it is the branch point.
    return j


def _split(units):
    nodes = [k for k, u in enumerate(units) if isinstance(u, Node)]
    head_end = nodes[EDGE]
    tail_start = nodes[-EDGE]
    return units[:head_end], units[head_end:tail_start], units[tail_start:]


# --- HTML -----------------------------------------------------------------

_MARK_HTML = Markup('<span class="si-mark si-m-{}">{}</span>')
_TYPES = ("user", "assistant", "system", "attachment", "progress")


def render(units, row_url) -> Markup:
    """HTML for folded rows; ``row_url(record_id)`` gives a record's row page."""
    parts = []
    for unit in units:
        if isinstance(unit, Node):
            parts.append(Markup(_node_html(unit, row_url)))
            continue
        kind, rows = unit
        nodes = list(_flatten(rows))
        level = min(n.level for n in nodes)
        if kind == "progress":
            label = f"{len(nodes)} progress record{'s' if len(nodes) != 1 else ''}"
        else:
            label = (f"{len(nodes)} more records, {nodes[0].row['timestamp'] or '?'} "
                     f"\u2013 {nodes[-1].row['timestamp'] or '?'}")
        inner = Markup("".join(
            _node_html(n, row_url) if isinstance(n, Node) else render([n], row_url)
            for n in rows))
        parts.append(Markup(
            '<details class="si-fold si-fold-{}" style="--lvl:{}"><summary>{}</summary>{}'
            '</details>').format(kind, level, label, inner))
    return Markup("").join(parts)


def _flatten(units):
    for u in units:
        if isinstance(u, Node):
            yield u
        else:
            yield from _flatten(u[1])


def _node_html(node: Node, row_url) -> str:
    # Built with an f-string for speed (a 5,000-record page is 5,000 of
    # these); every value from the index goes through escape().
    r, e = node.row, escape
    cause = "resume chain" if node.on_spine else (node.cause or "off chain")
    colour = "#2e7d32" if node.on_spine else CAUSE_COLOURS.get(node.cause, "#455a64")
    marks = "".join(_MARK_HTML.format(cls, text) for cls, text in node.marks)
    subtype = f"/{e(r['subtype'])}" if r["subtype"] else ""
    spine = " si-spine" if node.on_spine else ""
    return (
        f'<div class="si-node si-t-{css_class(r["type"], _TYPES)}{spine}" id="u-{e(r["uuid"])}" '
        f'data-record="{int(r["id"])}" tabindex="0" '
        f'style="--lvl:{int(node.level)};--cause:{colour}">'
        f'<span class="si-cause">{e(cause)}</span>'
        f'<span class="si-type">{e(r["type"])}{subtype}</span>'
        f'<time>{e(r["timestamp"] or "")}</time>{marks}'
        f'<span class="si-excerpt">{e(r.get("excerpt") or "")}</span>'
        f'<a class="si-line" href="{e(row_url(r["id"]))}" title="the record\'s row">'
        f'line {int(r["line_no"])}</a></div>')
