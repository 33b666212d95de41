"""How a resume reads a transcript, in SQL: the chain's definitions.

The three recursive definitions, ``leaves_definition``,
``leaf_ancestry_definition`` and ``orphans_definition``, compute from
``records`` on every query: they are the specification. Answering from them
at a million records is too slow for a dashboard (seconds per query), so
ingest materializes the same answers per changed file into
``leaves_cache``, ``leaf_ancestry_cache`` and ``orphans_cache`` (derive.py,
a direct walk in Python), and the contract views ``leaves``,
``leaf_ancestry`` and ``orphans`` read those caches. Tests assert, on every
fixture, the corpus and randomly generated trees, that each cache equals its
``*_definition`` view row for row. The index's view registry
(indexer/index/views.py) names them; which main transcript a resume opens
(the main-file rules) is here too.

Cycle safety: every recursive walk carries a step count bounded by the number
of lines in its file (files.line_count). A walk that has not ended after
visiting every record has repeated one, so the bound always stops it, and the
repeated tail is cut off afterwards (``marked``/``cut``). ``UNION`` alone is
not enough: the step column makes every row distinct.

Inside a recursive step only real tables are joined (``records``, ``files``):
a CTE there is re-materialized and re-indexed at every step.
"""

from __future__ import annotations

from indexer.transcripts.records import (
    AHEAD_ROW,
    API_ERROR_RECORD,
    CALL_BLOCKS,
    CHAIN_TYPES_SQL,
    COMPACT_BOUNDARY_RECORD,
    COMPANION_RECORD,
    EFFECTIVE_PARENT,
    FORK_BRIEFING_RECORD,
    HAS_TOOL_USE,
    PRESERVED,
    SYNTHETIC_RECORD,
    TOOL_IDS,
    VIRTUAL_CALL,
)

# The CLI's parent fallback (resume.py): a record whose parent is not in the
# file hangs under the latest message at or before it within this many ms.
FALLBACK_MS = 5000
# The loader's l_r() (Cus): a rowsAheadOfPutBack names at most this many rows,
# and their walk up to where they hang takes at most this many steps
# (walk.rows_ahead_put_back).
AHEAD_MAX = 100

# The records the CLI's loader keeps as messages of the conversation (its
# nodes; resume.py): the others are progress or not chain records.
CLI_NODE_TYPES = ("user", "assistant", "system", "attachment")
CLI_NODE_TYPES_SQL = "(" + ",".join(f"'{t}'" for t in CLI_NODE_TYPES) + ")"

# Files that are transcripts (the rest are `claude -p` execution logs).
TRANSCRIPT_KIND_NAMES = ("main", "subagent")
TRANSCRIPT_KINDS = "(" + ",".join(f"'{k}'" for k in TRANSCRIPT_KIND_NAMES) + ")"

# Is record {n} a node (a chain record, the last line of its uuid), as the
# Agent SDK reads it (the CLI's nodes are by name and loader rank:
# _IS_CLI_LINE)? Used
# inside recursive steps, which must reach only real tables and their indexes:
# a CTE there is re-materialized (and re-indexed) at every step.
_IS_NODE = f"""{{n}}.uuid IS NOT NULL AND {{n}}.type IN {CHAIN_TYPES_SQL}
    AND NOT EXISTS (SELECT 1 FROM records later
      WHERE later.file_id = {{n}}.file_id AND later.uuid = {{n}}.uuid
        AND later.line_no > {{n}}.line_no AND later.type IN {CHAIN_TYPES_SQL})"""

# sent_keys (resume.loader_keys): the key trn() gives each user line with a
# sentAsUuid. It loads the line under its sentAsUuid when its Map h holds no
# such key yet, and h is keyed by the keys of the readable user, assistant,
# system and attachment lines before it (admit() keeps an unreadable line
# out of h; a progress line is never in it): a line's key depends on the
# keys before it. The recursion starts from a row per file holding its
# such lines (todo: {their rank in line order: [id, line_no, uuid,
# sentAsUuid, is_unreadable]}) and steps to the next of them (i + 1, until
# todo has no such rank, so it ends), carrying state: {record id: its sentAsUuid when keyed by it
# and readable, 0 when keyed by it and unreadable, null when keyed by its
# uuid}. A line is keyed by its sentAsUuid when no earlier readable node
# line keyed by its uuid has that uuid and no earlier readable line keyed
# by its sentAsUuid has that sentAsUuid. Such lines are rare, so todo and
# state stay small (a step reads them whole). Two references to records:
# SQLite counts them in every copy of a CTE the CLI's definitions make.
# sent_keyed: the lines keyed by their sentAsUuid (as_uuid), each with its
# file's final state (final). {seed}: which lines (a condition on r).
_STATE_OF = "json_extract({state}, '$.\"' || {id} || '\"')"
_TODO = "json_array(r.id, r.line_no, r.uuid, r.sent_as_uuid, r.is_unreadable)"
# Field {n} of the next line of row k (k.i + 1: the next in line order).
_NEXT = "json_extract(k.todo, '$.\"' || (k.i + 1) || '\"[{n}]')"
SENT_KEYS_CTES_TEMPLATE = f"""
sent_keys(i, id, file_id, line_no, uuid, as_uuid, state, todo) AS (
  SELECT 0, NULL, r.file_id, 0, NULL, NULL, '{{{{}}}}', json_group_object(r.rn, {_TODO})
  FROM (SELECT r.*, row_number() OVER (PARTITION BY r.file_id ORDER BY r.line_no) AS rn
        FROM records r
        WHERE r.sent_as_uuid IS NOT NULL AND r.type = 'user' AND r.uuid IS NOT NULL AND {{seed}}) r
  GROUP BY r.file_id
  UNION ALL
  SELECT k.i + 1, {_NEXT.format(n=0)}, k.file_id, {_NEXT.format(n=1)}, {_NEXT.format(n=2)},
         {_NEXT.format(n=3)},
         json_set(k.state, '$."' || {_NEXT.format(n=0)} || '"',
           CASE WHEN EXISTS (SELECT 1 FROM records e WHERE e.file_id = k.file_id
                               AND e.uuid = {_NEXT.format(n=3)} AND e.line_no < {_NEXT.format(n=1)}
                               AND e.type IN {CLI_NODE_TYPES_SQL} AND NOT e.is_unreadable
                               AND {_STATE_OF.format(state="k.state", id="e.id")} IS NULL)
                  OR EXISTS (SELECT 1 FROM json_each(k.state) j WHERE j.value = {_NEXT.format(n=3)})
                THEN NULL WHEN {_NEXT.format(n=4)} THEN 0 ELSE {_NEXT.format(n=3)} END),
         k.todo
  FROM sent_keys k
  WHERE {_NEXT.format(n=0)} IS NOT NULL
),
sent_keyed AS MATERIALIZED (
  SELECT CAST(id AS INTEGER) AS id, CAST(file_id AS INTEGER) AS file_id,
         CAST(line_no AS INTEGER) AS line_no, CAST(uuid AS TEXT) AS uuid,
         CAST(as_uuid AS TEXT) AS as_uuid, final FROM (
    SELECT id, file_id, line_no, uuid, as_uuid, state, last_value(state) OVER (
             PARTITION BY file_id ORDER BY line_no
             ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS final
    FROM sent_keys)
  WHERE id IS NOT NULL AND {_STATE_OF.format(state="state", id="id")} IS NOT NULL
)""".strip()
# Is line {l} keyed by its sentAsUuid, by the final state of its file ({final})?
KEYED_BY_SENT_AS = _STATE_OF.format(state="{final}", id="{l}.id") + " IS NOT NULL"
# The key of node line {l} (its sentAsUuid when KEYED_BY_SENT_AS, else its uuid).
KEY_OF = ("CASE WHEN " + KEYED_BY_SENT_AS + " THEN {l}.sent_as_uuid ELSE {l}.uuid END")

# sent_names_cache (resume.loader_names; kept in SQL by derive.keep_sql_caches,
# held equal to sent_names_definition): the prompts stored anew that the
# loader names by their sentAsUuid: keyed by it (sent_keys), and the
# loader keys each line by its key (that sentAsUuid, else its uuid), a
# later line of the key replacing an earlier one. When another chain line
# has the prompt's own uuid, or another readable line is keyed by it (its
# sentAsUuid), that line is a record of its own beside it: the CLI's view
# then names the prompt by its sentAsUuid (name); so it does when an
# unreadable line has its sentAsUuid as uuid (the prompt, loaded, outranks
# it as the record of that name: LOADER_RANK). Only such prompts are
# listed (the others keep their own uuid and are read through sent_as).
# {files}: which files (a condition on f, the files row).
SENT_NAMES_TEMPLATE = f"""
WITH RECURSIVE {SENT_KEYS_CTES_TEMPLATE.replace("{seed}", "EXISTS (SELECT 1 FROM files f WHERE f.id = r.file_id AND f.kind = 'main' AND {files})")}
SELECT k.id AS record_id, k.file_id, k.line_no, k.as_uuid AS name
FROM sent_keyed k
WHERE EXISTS (SELECT 1 FROM records z WHERE z.file_id = k.file_id
                AND z.uuid = k.uuid AND z.id <> k.id AND z.type IN {CHAIN_TYPES_SQL})
   OR EXISTS (SELECT 1 FROM json_each(k.final) j WHERE j.value = k.uuid)
   OR EXISTS (SELECT 1 FROM records z WHERE z.file_id = k.file_id
                AND z.uuid = k.as_uuid AND z.is_unreadable
                AND z.type IN ('user','assistant'))
""".strip()
SENT_NAMES_DEFINITION_SQL = SENT_NAMES_TEMPLATE.format(files="1")
SENT_NAMES_COLUMNS = "record_id, file_id, line_no, name"
# Is line {r} listed in sent_names_cache (named by its sentAsUuid)?
NAMED_LINE = "EXISTS (SELECT 1 FROM sent_names_cache nm WHERE nm.record_id = {r}.id)"
# The name of line {r} in the CLI's view: its sentAsUuid when NAMED_LINE,
# else its uuid.
NAME_OF = ("CAST(coalesce((SELECT nm.name FROM sent_names_cache nm WHERE nm.record_id = {r}.id), "
           "{r}.uuid) AS TEXT)")
# How the loader holds line {r} (resume.loader_rank): 2, a record it loads
# (its Map h); 1, an unreadable user/assistant record (admit() keeps it out
# of h and notes its parent); 0, a progress line (its own Map, Os). The
# record of a name is its last line of the highest rank.
LOADER_RANK = "(CASE WHEN {r}.type = 'progress' THEN 0 WHEN {r}.is_unreadable THEN 1 ELSE 2 END)"
# Does line {y} outrank line {n} as the record of their name (a higher
# rank, or the same rank and a later line)?
_OUTRANKS = ("(" + LOADER_RANK.replace("{r}", "{y}") + " > " + LOADER_RANK.replace("{r}", "{n}")
             + " OR (" + LOADER_RANK.replace("{r}", "{y}") + " = " + LOADER_RANK.replace("{r}", "{n}")
             + " AND {y}.line_no > {n}.line_no))")
# Is line {n} a node of the CLI's view (a chain line, the record of its
# name, resume.loader_nodes: no other line named so outranks it; a progress
# or unreadable line never replaces a line loaded before it)? Reads real
# tables only (recursive steps); the lines named so are those of that uuid
# not named by their sentAsUuid and those named so by it (file_id in each
# disjunct, so SQLite takes an index for each: MULTI-INDEX OR; one
# reference to records, as SQLite counts them in every copy of a CTE).
_IS_CLI_LINE = (
    "{n}.uuid IS NOT NULL AND {n}.type IN " + CHAIN_TYPES_SQL + """
    AND NOT EXISTS (SELECT 1 FROM records later
      WHERE ((later.file_id = {n}.file_id AND later.uuid = """ + NAME_OF.replace("{r}", "{n}") + """
              AND NOT """ + NAMED_LINE.replace("{r}", "later") + """)
             OR (later.file_id = {n}.file_id AND later.sent_as_uuid = """
    + NAME_OF.replace("{r}", "{n}") + """
                 AND """ + NAMED_LINE.replace("{r}", "later") + """))
        AND later.id <> {n}.id AND later.type IN """ + CHAIN_TYPES_SQL + """
        AND """ + _OUTRANKS.replace("{y}", "later") + ")")

# Common table expressions shared by the three definitions.
# scope_files: the files computed (all of them). occ: every chain record line (a duplicated
# uuid appears once per line), with its name in the CLI's view (its uuid, or
# its sentAsUuid when sent_names_cache lists it). nodes: one row per name, its
# record as in the CLI (_IS_CLI_LINE: the last line of the highest
# LOADER_RANK; the loader's keys; uuid: the name); eff_parent follows a compact_boundary's
# logicalParentUuid (the cause walk's rule; the leaf walks use parent_uuid).
NODES_CTES = f"""
scope_files AS (
  SELECT id AS file_id, kind, session_id FROM files WHERE kind IN {TRANSCRIPT_KINDS}
),
occ AS MATERIALIZED (
  SELECT r.id, r.file_id, r.line_no, r.uuid, r.parent_uuid, r.type,
         CAST(coalesce(m.name, r.uuid) AS TEXT) AS name
  FROM records r JOIN scope_files f ON f.file_id = r.file_id
  LEFT JOIN sent_names_cache m ON m.record_id = r.id
  WHERE r.uuid IS NOT NULL AND r.type IN {CHAIN_TYPES_SQL}
),
nodes AS MATERIALIZED (
  SELECT r.id, r.file_id, r.line_no, r.name AS uuid, r.parent_uuid, r.type, r.subtype,
         r.timestamp, r.is_sidechain, r.message_id, r.is_tool_result, r.is_unreadable,
         {EFFECTIVE_PARENT.format(r="r")} AS eff_parent, r.is_meta
  FROM (SELECT r.*, CAST(coalesce(m.name, r.uuid) AS TEXT) AS name FROM records r
        JOIN scope_files f ON f.file_id = r.file_id
        LEFT JOIN sent_names_cache m ON m.record_id = r.id
        WHERE r.uuid IS NOT NULL AND r.type IN {CHAIN_TYPES_SQL}) r
  WHERE NOT EXISTS (SELECT 1 FROM records later
      WHERE ((later.file_id = r.file_id AND later.uuid = r.name
              AND NOT EXISTS (SELECT 1 FROM sent_names_cache x WHERE x.record_id = later.id))
             OR (later.file_id = r.file_id AND later.sent_as_uuid = r.name
                 AND EXISTS (SELECT 1 FROM sent_names_cache x WHERE x.record_id = later.id)))
        AND later.id <> r.id AND later.type IN {CHAIN_TYPES_SQL}
        AND {_OUTRANKS.format(y="later", n="r")})
)
""".strip()

# Epoch milliseconds of a record's timestamp, NULL when it is not one.
TIMESTAMP_MS = ("CAST(round((julianday({r}.timestamp) - 2440587.5) * 86400000.0) AS INTEGER)")
# A last-prompt record's leafUuid is present and null / its explicit flag.
LAST_PROMPT_NULL_LEAF = "(json_valid({r}.raw) AND json_type({r}.raw, '$.leafUuid') = 'null')"
LAST_PROMPT_EXPLICIT = "(json_valid({r}.raw) AND json_type({r}.raw, '$.explicit') = 'true')"
# A rewind's last-prompt record: rewound: true, and the record it cut
# (cutUuid; '' when the field is there but no string: it names nothing).
LAST_PROMPT_REWOUND = "(json_valid({r}.raw) AND json_type({r}.raw, '$.rewound') = 'true')"
LAST_PROMPT_CUT = ("CASE WHEN NOT json_valid({r}.raw) THEN NULL "
                   "WHEN json_type({r}.raw, '$.cutUuid') = 'text' THEN {r}.raw ->> '$.cutUuid' "
                   "WHEN json_type({r}.raw, '$.cutUuid') IS NOT NULL THEN '' END")
# How far up the loader's rewind cut reads (resume.rewind_cut).
CUT_STEPS = 64

# Is uuid {uuid} a node of the CLI's view of file {file_id} (a user, assistant,
# system or attachment record that is readable, with no such line of its
# name after it: a progress or unreadable line never replaces it)? Two references to records: for the relink, whose parts are copied
# wherever cli is named (CLI_CTES).
_LATER_OF_NAME = f"""NOT EXISTS (SELECT 1 FROM records y WHERE y.file_id = x.file_id
                      AND y.uuid = {{uuid}} AND y.line_no > x.line_no AND y.type IN {CLI_NODE_TYPES_SQL}
                      AND NOT y.is_unreadable
                      AND NOT EXISTS (SELECT 1 FROM sent_names_cache ny WHERE ny.record_id = y.id))"""
def _is_cli_node(extra: str = "") -> str:
    """IS_CLI_NODE, the line it finds (x, named {uuid}) also meeting ``extra``."""
    return (f"""EXISTS (SELECT 1 FROM records x WHERE
      ((x.file_id = {{file_id}} AND x.uuid = {{uuid}} AND NOT {NAMED_LINE.format(r="x")})
           OR (x.file_id = {{file_id}} AND x.sent_as_uuid = {{uuid}} AND {NAMED_LINE.format(r="x")}))
      AND x.type IN {CLI_NODE_TYPES_SQL} AND NOT x.is_unreadable
      AND {_LATER_OF_NAME}{extra})""")


IS_CLI_NODE = _is_cli_node()
# The first line of {n}'s uuid the loader loads (a user, assistant, system
# or attachment line): where the CLI's Map holds the uuid, whose order the
# relink reads (resume.relink's ``first``), though the last line's record
# is its value.
_FIRST_OF_NAME = (f"(SELECT min(z.line_no) FROM records z WHERE "
                  f"z.type IN {CLI_NODE_TYPES_SQL} AND ((z.file_id = {{file}} AND z.uuid = {{uuid}} "
                  f"AND NOT EXISTS (SELECT 1 FROM sent_names_cache nz WHERE nz.record_id = z.id)) "
                  f"OR (z.file_id = {{file}} AND z.sent_as_uuid = {{uuid}} AND EXISTS (SELECT 1 FROM sent_names_cache nz "
                  f"WHERE nz.record_id = z.id))))")
FIRST_LOADED = _FIRST_OF_NAME.replace("{file}", "{n}.file_id").replace("{uuid}", "{n}.uuid")
# The place of node {uuid} of file {file} in the loader's Map, by which RRr()
# orders what it puts back (resume.loader_places): the first line of its
# key. A prompt stored anew that the loader keys by its sentAsUuid (sent_as)
# is placed at its own line (not by an earlier line of its own uuid), and a
# later line of the sentAsUuid that replaces it takes that place too.
LOADER_PLACE = (f"coalesce((SELECT min(s.line_no) FROM sent_as s WHERE s.file_id = {{file}} "
                f"AND CASE WHEN s.replaced THEN s.as_uuid ELSE s.uuid END = {{uuid}}), "
                f"{_FIRST_OF_NAME})")
# Is uuid {uuid} a node (IS_CLI_NODE) first loaded before line {before} (a
# node the relink drops)?
IS_CLI_NODE_LOADED_BEFORE = _is_cli_node(
    "\n      AND " + _FIRST_OF_NAME.replace("{file}", "x.file_id") + " < {before}")

# ahead_marks: the at (depth of its first record on the chain) of the
# response that puts record x back, directly (x.par_at) or on a line (m:
# its line mark), none for a record a rewind cut.
_AHEAD_GROUP = "CASE WHEN NOT x.is_cut THEN coalesce(x.par_at, m.value ->> '$[2]') END"

# ahead_seq's open-call test (walk._open_call, the loader's a_r()) reads the
# records of the chain Krn() holds by then, as {x} (pos, blocks): the chain's
# records (s.chain) and the rows taken so far, at their spot (s.spot; their
# blocks from s.map, a row's [9]).
_AHEAD_SPAN = ("(SELECT c.value ->> '$[0]' AS pos, c.value -> '$[2]' AS blocks "
               "FROM json_each(s.chain) c UNION ALL "
               "SELECT c.value, json_extract(s.map, '$.\"' || c.key || '\"[9]') "
               "FROM json_each(s.spot) c) {x}")

NOT_DROPPED = ("({c}.last_line IS NULL OR {x}.first_line >= {c}.last_line OR EXISTS ("
               "SELECT 1 FROM json_each({c}.kept) k WHERE k.value = {x}.uuid))")

# The line_no of the line the loader reads a parent uuid {uuid} (of file
# {file}) as, for a line read at {line}: the last progress line of that uuid
# written before it (the loader keeps progress lines in a Map of their own,
# Hfn's ``Os``, resume.progress_lines, so a later line of the uuid, progress
# or not, does not change what was read), else the record of the uuid (the
# last line of the highest LOADER_RANK, as resume.loader_nodes). One reference to records: SQLite counts every reference
# to a table in the copies of a CTE (at most 65535 per statement); and a
# max, not an ORDER BY naming the outer line (SQLite 3.40: "no such
# column" there).
# Is line {o} of file {file} named {uuid} in the CLI's view (the loader's key:
# its uuid, or its sentAsUuid when sent_names_cache lists it)? file_id in
# each disjunct: SQLite takes an index for each (MULTI-INDEX OR); one
# reference to sent_names_cache (SQLite counts them in every copy of a CTE).
_OF_NAME = ("(({o}.file_id = {file} AND {o}.uuid = {uuid}) OR ({o}.file_id = {file} AND "
            "{o}.sent_as_uuid = {uuid})) AND " + NAME_OF.replace("{r}", "{o}") + " = {uuid}")
_READ_AS = f"""(SELECT max(CASE WHEN o.type = 'progress' AND o.line_no < {{line}} THEN 3
                          ELSE {LOADER_RANK.format(r="o")} END * 4294967296 + o.line_no) % 4294967296
      FROM records o
      WHERE {_OF_NAME.replace("{o}", "o")} AND o.type IN {CHAIN_TYPES_SQL})"""
# Does the loader read through that line {p}: a progress line written before
# the line read, or an unreadable record (it loads neither)?
_READ_THROUGH = ("(({p}.type = 'progress' AND {p}.line_no < {line})"
                 " OR ({p}.is_unreadable AND {p}.type IN ('user','assistant')))")

# bridge / bridged: the parent the loader reads a node under, climbing
# through progress records written before it and unreadable records, which
# it does not load (resume.bridged); each step is to an earlier line or an
# unreadable record, and the step bound ends a cycle. In CLI_CTES and in the
# put-back lines of ORPHANS_DEFINITION_SQL. Each parent is read as _READ_AS
# reads it (by name: _OF_NAME), as resume.bridged reads it (cli_view's
# ``nodes_all`` and ``progress``).
# One step of a climb over progress records and unreadable ones to the
# parent a line is bridged to ({cte}: the recursive CTE, its alias {b}, and
# the column it carries, {key}; up, up_line, steps): BRIDGE_CTES and the
# rewind cut's cut_climb.
BRIDGE_STEP = f"""  SELECT {{b}}.file_id, {{key}}, p.parent_uuid, p.line_no, {{b}}.steps + 1
  FROM {{cte}} {{b}}
  JOIN records p ON {_OF_NAME.format(o="p", file="{b}.file_id", uuid="{b}.up")}
    AND p.line_no = {_READ_AS.format(file="{b}.file_id", uuid="{b}.up", line="{b}.up_line")}
  JOIN files f ON f.id = {{b}}.file_id
  WHERE {{b}}.steps <= f.line_count AND {_READ_THROUGH.format(p="p", line="{b}.up_line")}
"""
BRIDGE_CTES = f"""
bridge(file_id, uuid, up, up_line, steps) AS (
  SELECT n.file_id, n.uuid, n.parent_uuid, n.line_no, 0 FROM nodes n
  WHERE n.type <> 'progress' AND NOT n.is_unreadable AND n.parent_uuid IS NOT NULL AND EXISTS (
    SELECT 1 FROM records p
    WHERE {_OF_NAME.format(o="p", file="n.file_id", uuid="n.parent_uuid")}
      AND p.line_no = {_READ_AS.format(file="n.file_id", uuid="n.parent_uuid", line="n.line_no")}
      AND {_READ_THROUGH.format(p="p", line="n.line_no")})
  UNION ALL
{BRIDGE_STEP.format(cte="bridge", b="b", key="b.uuid")}),
-- bridged: the end of each climb; NULL when it went round a cycle of
-- unreadable records (the step bound).
bridged AS MATERIALIZED (
  SELECT b.file_id, b.uuid, CASE WHEN b.steps > f.line_count THEN NULL ELSE b.up END AS up
  FROM (SELECT file_id, uuid, up, steps, row_number() OVER (
               PARTITION BY file_id, uuid ORDER BY steps DESC) AS rn
        FROM bridge) b JOIN files f ON f.id = b.file_id
  WHERE b.rn = 1
)
""".strip()

_CLI_SENT_KEYS = SENT_KEYS_CTES_TEMPLATE.replace("{seed}", "1").replace("{{}}", "{}")

# The CLI's view of each file (resume.py states the rules): cli holds its
# nodes (no progress records) with the bridged parent (read through progress
# records written before the record; `bridge` climbs them, each step to an
# earlier line, so it ends) and walk_parent (the bridged parent, else the
# timestamp fallback when that parent is not a node).
CLI_CTES = f"""
-- sent_as (resume.sent_as_renames): the prompts stored anew that the loader
-- loads under their sentAsUuid (as_uuid): the user records keyed by it
-- (sent_keys: trn() asks the loader's Map, keyed by the keys of the lines
-- before, whether that uuid is loaded; an unreadable line is not in it). A
-- parent (or checkpoint) naming as_uuid is read as the record's own uuid;
-- replaced: a later readable node line has that key and takes its place,
-- so the record is no node and nothing is renamed (file_id in each
-- disjunct: MULTI-INDEX OR).
{_CLI_SENT_KEYS},
sent_as AS MATERIALIZED (
  SELECT k.id, k.file_id, CAST(coalesce(m.name, k.uuid) AS TEXT) AS uuid, k.line_no, k.as_uuid,
         EXISTS (SELECT 1 FROM records l WHERE ((l.file_id = k.file_id AND l.uuid = k.as_uuid)
                     OR (l.file_id = k.file_id AND l.sent_as_uuid = k.as_uuid))
                   AND l.line_no > k.line_no
                   AND l.type IN {CLI_NODE_TYPES_SQL} AND NOT l.is_unreadable
                   AND {KEY_OF.format(l="l", final="k.final")} = k.as_uuid) AS replaced
  FROM sent_keyed k LEFT JOIN sent_names_cache m ON m.record_id = k.id
),
{BRIDGE_CTES},
cli_base AS MATERIALIZED (
  SELECT c.id, c.file_id, c.line_no, c.uuid, c.type, c.subtype, c.is_sidechain,
         c.parent_uuid, c.logical_parent_uuid, c.ts_ms, {FIRST_LOADED.format(n="c")} AS first_line,
         CAST(coalesce((SELECT s.uuid FROM sent_as s WHERE s.file_id = c.file_id
                          AND s.as_uuid = c.up AND NOT s.replaced), c.up) AS TEXT) AS parent,
         c.timestamp
  FROM (SELECT n.id, n.file_id, n.line_no, n.uuid, n.type, n.subtype, n.is_sidechain,
               r.parent_uuid, r.logical_parent_uuid, {TIMESTAMP_MS.format(r="r")} AS ts_ms,
               CASE WHEN b.uuid IS NOT NULL THEN b.up ELSE n.parent_uuid END AS up,
               r.timestamp
        FROM nodes n JOIN records r ON r.id = n.id
        LEFT JOIN bridged b ON b.file_id = n.file_id AND b.uuid = n.uuid
        WHERE n.type <> 'progress' AND NOT n.is_unreadable
          AND NOT EXISTS (SELECT 1 FROM sent_as s WHERE s.id = n.id AND s.replaced)) c
),
-- The compaction relink (resume.relink). SQLite copies a CTE's tree at each
-- place it is named and counts every table reference of the copies (at most
-- 65535 per statement); cli is named many times, so what it rests on names
-- records as few times as it can: the kept uuids travel as one JSON array
-- per file. keep_meta: per file with a boundary that says what it kept
-- (records.PRESERVED), the last such one, whether it is the last boundary,
-- and its anchor.
bounds AS MATERIALIZED (
  SELECT n.file_id, {FIRST_LOADED.format(n="n")} AS line_no, {PRESERVED.format(r="r")} AS preserved
  FROM nodes n JOIN records r ON r.id = n.id
  WHERE {COMPACT_BOUNDARY_RECORD.format(r="n")}
),
keep_meta AS MATERIALIZED (
  SELECT file_id, last_line, line_no = last_line AS is_last, preserved,
         json_type(preserved, '$.m') = 'object' AS listed,
         CASE WHEN json_type(preserved, '$.m') = 'object'
              THEN json_extract(preserved, '$.m.anchorUuid')
              ELSE json_extract(preserved, '$.s.anchorUuid') END AS anchor
  FROM (SELECT b.*, max(b.line_no) OVER (PARTITION BY b.file_id) AS last_line,
               row_number() OVER (PARTITION BY b.file_id
                                  ORDER BY b.preserved IS NULL, b.line_no DESC) AS rn
        FROM bounds b)
  WHERE rn = 1 AND preserved IS NOT NULL
),
-- seg_walk: a preservedSegment walked from its tail up the bridged
-- parents to its head (uuid: each node reached; next: its parent).
seg_walk(file_id, uuid, next, head, steps) AS (
  SELECT file_id, NULL, json_extract(preserved, '$.s.tailUuid'),
         json_extract(preserved, '$.s.headUuid'), 0
  FROM keep_meta WHERE is_last AND NOT listed
  UNION ALL
  SELECT w.file_id, c.uuid, c.parent, w.head, w.steps + 1 FROM seg_walk w
  JOIN cli_base c ON c.file_id = w.file_id AND c.uuid = w.next
  JOIN files f ON f.id = w.file_id
  WHERE w.uuid IS NOT w.head AND w.steps <= f.line_count
),
-- relinking: the files the relink applies to, with kept (the kept uuids
-- head first, a JSON array; '[]' when the last boundary keeps nothing and
-- only drops); none when a listed uuid is not a node or the segment does
-- not reach its head.
relinking AS MATERIALIZED (
  SELECT file_id, last_line, anchor, kept, kept ->> '$[0]' AS head,
         kept ->> '$[#-1]' AS tail
  FROM (
    SELECT k.file_id, k.last_line, k.anchor, CASE
      WHEN NOT k.is_last THEN '[]'
      WHEN k.listed AND json_type(k.preserved, '$.m.uuids') IS NOT 'array' THEN '[]'
      WHEN k.listed AND NOT EXISTS (
             SELECT 1 FROM json_each(k.preserved, '$.m.uuids') j, files f
             WHERE f.id = k.file_id AND j.type = 'text' AND NOT {IS_CLI_NODE.format(file_id="k.file_id", uuid="j.value")})
        THEN (SELECT json_group_array(j.value) FROM (
                SELECT value FROM json_each(k.preserved, '$.m.uuids')
                WHERE type = 'text' ORDER BY CAST(key AS INTEGER)) j)
      WHEN NOT k.listed THEN (
        SELECT json_group_array(uuid) FROM (
          SELECT w.uuid FROM (SELECT w.*, min(CASE WHEN w.uuid = w.head THEN w.steps END)
                                OVER () AS top
                              FROM seg_walk w WHERE w.file_id = k.file_id) w
          WHERE w.top IS NOT NULL AND w.steps BETWEEN 1 AND w.top ORDER BY w.steps DESC)
        HAVING count(*) > 0)
      END AS kept
    FROM keep_meta k)
  WHERE kept IS NOT NULL
),
-- relinked: each node with the parent the relink gives it (moved: kept
-- records one after another from the anchor, the anchor's other children
-- under the tail), the nodes it drops left out.
relinked AS MATERIALIZED (
  SELECT c.*, CAST(CASE
    WHEN c.tail IS NOT NULL AND c.kept_parent = c.anchor AND c.uuid <> c.head THEN c.tail
    ELSE c.kept_parent END AS TEXT) AS moved
  FROM (SELECT c.*, CASE
          WHEN c.pos = 0 THEN c.anchor
          WHEN c.pos > 0 THEN c.kept ->> ('$[' || (c.pos - 1) || ']')
          ELSE c.parent END AS kept_parent
        FROM (SELECT c.*, k.last_line, k.kept, k.anchor, k.head, k.tail,
                     (SELECT max(CAST(j.key AS INTEGER)) FROM json_each(k.kept) j
                      WHERE j.value = c.uuid) AS pos
              FROM cli_base c LEFT JOIN relinking k ON k.file_id = c.file_id) c) c
  WHERE c.last_line IS NULL OR c.first_line >= c.last_line OR c.pos IS NOT NULL
),
-- cli_nodes: a user/assistant record whose parent was dropped hangs from the tail.
cli_nodes AS MATERIALIZED (
  SELECT c.id, c.file_id, c.line_no, c.uuid, c.type, c.subtype, c.is_sidechain,
         c.parent_uuid, c.logical_parent_uuid, c.ts_ms, CAST(CASE
           WHEN c.tail IS NOT NULL AND c.type IN ('user','assistant')
             AND {IS_CLI_NODE_LOADED_BEFORE.format(file_id="c.file_id", uuid="c.moved", before="c.last_line")}
             AND NOT EXISTS (SELECT 1 FROM json_each(c.kept) j WHERE j.value = c.moved)
           THEN c.tail ELSE c.moved END AS TEXT) AS parent,
         c.timestamp, c.last_line, c.kept
  FROM relinked c
),
cli AS MATERIALIZED (
  SELECT c.*, CAST(CASE
    WHEN c.parent IS NULL THEN NULL
    WHEN {IS_CLI_NODE.format(file_id="c.file_id", uuid="c.parent")}
      AND NOT (c.last_line IS NOT NULL
               AND {IS_CLI_NODE_LOADED_BEFORE.format(file_id="c.file_id", uuid="c.parent", before="c.last_line")}
               AND NOT EXISTS (SELECT 1 FROM json_each(c.kept) j WHERE j.value = c.parent))
      THEN c.parent
    ELSE (SELECT x.uuid FROM cli_base x
          WHERE x.file_id = c.file_id AND x.uuid <> c.uuid AND x.is_sidechain = c.is_sidechain
            AND NOT (x.type = 'system' AND x.subtype IS 'file_snapshot')
            AND x.ts_ms <= c.ts_ms AND c.ts_ms - x.ts_ms <= {FALLBACK_MS}
            AND {NOT_DROPPED.format(x="x", c="c")}
          ORDER BY x.ts_ms DESC, x.line_no LIMIT 1)
  END AS TEXT) AS walk_parent
  FROM cli_nodes c JOIN files f ON f.id = c.file_id
)
""".strip()

# cli_definition: the CLI's nodes of every transcript file (CLI_CTES), with
# the parent each is read under: to see why a resume walks where it does.
CLI_DEFINITION_SQL = f"""
WITH RECURSIVE {NODES_CTES},
{CLI_CTES}
SELECT id, file_id, line_no, uuid, type, subtype, is_sidechain, parent, walk_parent, ts_ms
FROM cli
""".strip()

# leaves: one row per file.
#   resume_leaf: main files: the record `claude --resume` starts from, by the
#     rules of resume.py (resume_rule names the rule: checkpoint, last_row,
#     newest_descendant, leaf_scan, newest_record, rewound_to_empty, no_leaf); subagent files:
#     the last user/assistant line (subagent_last_message).
#   sdk_leaf: main files: the Agent SDK's _build_conversation_chain rule.
#     terminals = lines no record names as parent; from each, walk up to the
#     nearest user/assistant (to_message); prefer leaves
#     that are not sidechain/team/meta; latest uuid in file order wins, and on
#     a tie (one uuid on two terminal lines) the earlier terminal line, as the
#     SDK's strict ">" keeps the first. Subagent files: as resume_leaf.
#   branch_count: distinct non-sidechain user/assistant leaves the terminals
#     reach (1 for a linear transcript).
#   leaves_agree: both readers end the conversation at the same message: the
#     first user/assistant record on the resume walk is the sdk leaf.
# Every upward walk is bounded by the file's line count.
# The CLI's "newest" record of a set (file_id, uuid, line_no, ts_ms) per file:
# the first line with the greatest time; the last line when none has a time.
NEWEST_OF = """
  SELECT file_id, uuid FROM (
    SELECT s.file_id, s.uuid, row_number() OVER (
             PARTITION BY s.file_id
             ORDER BY s.ts_ms IS NOT m.top,
                      CASE WHEN m.top IS NULL THEN -s.line_no ELSE s.line_no END) AS rn
    FROM {0} s JOIN (SELECT file_id, max(ts_ms) AS top FROM {0} GROUP BY file_id) m
      ON m.file_id = s.file_id) WHERE rn = 1
""".strip()
NEWEST_OF_SCAN_SET = NEWEST_OF.format("scan_set")

# Can kin_nodes row {n} stand inside the batch of API message {mid} (resume._of_batch)?
OF_BATCH = """coalesce(CASE {n}.type WHEN 'assistant' THEN {mid} IS NOT NULL AND {n}.message_id = {mid}
    WHEN 'user' THEN {n}.is_meta OR {n}.is_tool_result WHEN 'attachment' THEN 1
    WHEN 'system' THEN {n}.subtype IS NOT 'compact_boundary' ELSE 0 END, 0)"""
# kin_nodes row {n}'s uuid is not on an earlier step of walk {walk} (a
# walk goes round a cycle at its first repeat, and repeats from there on).
FIRST_VISIT = ("NOT EXISTS (SELECT 1 FROM {walk} e WHERE e.file_id = {n}.file_id "
               "AND e.uuid = {n}.uuid AND e.steps < {n}.steps)")
NEWEST_OF_ANY_SET = NEWEST_OF.format("any_set")

LEAVES_CTES = f"""
main_files AS (SELECT file_id FROM scope_files WHERE kind = 'main'),
row_lines AS MATERIALIZED (
  SELECT o.file_id, o.line_no, o.name AS uuid, r.timestamp FROM occ o JOIN records r ON r.id = o.id
  JOIN main_files m ON m.file_id = o.file_id
  WHERE o.type <> 'progress' AND NOT r.is_sidechain AND NOT r.is_unreadable
    AND NOT (o.type = 'system' AND r.subtype IS 'file_snapshot')
    AND NOT {FORK_BRIEFING_RECORD.format(r="r")}
),
last_rows AS MATERIALIZED (
  SELECT file_id, uuid, line_no FROM (
    SELECT file_id, uuid, line_no,
           row_number() OVER (PARTITION BY file_id ORDER BY line_no DESC) AS rn
    FROM row_lines) WHERE rn = 1
),
prompts AS MATERIALIZED (
  SELECT r.file_id, r.line_no, nullif(r.leaf_uuid, '') AS leaf,
         r.leaf_uuid IS NOT NULL OR {LAST_PROMPT_NULL_LEAF.format(r="r")} AS names_leaf,
         {LAST_PROMPT_NULL_LEAF.format(r="r")} AS null_leaf,
         {LAST_PROMPT_EXPLICIT.format(r="r")} AS explicit
  FROM records r JOIN main_files m ON m.file_id = r.file_id
  WHERE r.type = 'last-prompt'
),
boundaries AS (
  SELECT o.file_id, o.line_no FROM occ o JOIN records r ON r.id = o.id
  WHERE {COMPACT_BOUNDARY_RECORD.format(r="r")}
),
latest_prompt AS (
  SELECT file_id, line_no, leaf, explicit FROM (
    SELECT p.*, row_number() OVER (PARTITION BY file_id ORDER BY line_no DESC) AS rn
    FROM prompts p WHERE leaf IS NOT NULL) WHERE rn = 1
),
-- state: per main file, the CLI's file-order facts (resume.scan_events).
-- explicit_line: the latest last-prompt record for the checkpoint that said
-- explicit, in the run of records naming it (no record naming another
-- leaf, no boundary, no rewind to empty between): the checkpoint is
-- explicit when no row follows that record, ever_explicit when there is one.
state AS MATERIALIZED (
  SELECT s.file_id, s.last_row, s.trailing, s.checkpoint, s.empty,
    coalesce(s.explicit_line IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM row_lines w WHERE w.file_id = s.file_id
        AND w.line_no > s.explicit_line), 0) AS explicit,
    s.explicit_line IS NOT NULL AS ever_explicit
  FROM (
  SELECT m.file_id, lr.uuid AS last_row,
    EXISTS (SELECT 1 FROM occ o JOIN records r ON r.id = o.id
            WHERE o.file_id = m.file_id AND o.type = 'system' AND r.subtype = 'file_snapshot'
              AND o.line_no > coalesce(lr.line_no, 0)) AS trailing,
    CASE WHEN NOT EXISTS (SELECT 1 FROM boundaries b WHERE b.file_id = m.file_id
                          AND b.line_no > lp.line_no)
          AND NOT EXISTS (SELECT 1 FROM prompts q WHERE q.file_id = m.file_id
                          AND q.line_no > lp.line_no AND q.null_leaf AND q.explicit)
         THEN coalesce((SELECT sa.uuid FROM sent_as sa WHERE sa.file_id = m.file_id
                          AND sa.as_uuid = lp.leaf AND NOT sa.replaced), lp.leaf)
         END AS checkpoint,
    EXISTS (SELECT 1 FROM prompts q WHERE q.file_id = m.file_id AND q.null_leaf AND q.explicit
              AND NOT EXISTS (SELECT 1 FROM row_lines w WHERE w.file_id = m.file_id
                              AND w.line_no > q.line_no)
              AND NOT EXISTS (SELECT 1 FROM prompts z WHERE z.file_id = m.file_id
                              AND z.line_no > q.line_no AND z.leaf IS NOT NULL)) AS empty,
    (SELECT max(q.line_no) FROM prompts q WHERE q.file_id = m.file_id AND q.explicit
       AND q.leaf = lp.leaf AND q.line_no <= lp.line_no
       AND NOT EXISTS (SELECT 1 FROM prompts z WHERE z.file_id = m.file_id
                       AND z.line_no > q.line_no AND z.line_no < lp.line_no
                       AND ((z.leaf IS NOT NULL AND z.leaf <> lp.leaf)
                            OR (z.null_leaf AND z.explicit)))
       AND NOT EXISTS (SELECT 1 FROM boundaries b WHERE b.file_id = m.file_id
                       AND b.line_no > q.line_no AND b.line_no < lp.line_no)) AS explicit_line
  FROM main_files m
  LEFT JOIN last_rows lr ON lr.file_id = m.file_id
  LEFT JOIN latest_prompt lp ON lp.file_id = m.file_id) s
),
-- above_last: the last row and its bridged ancestors.
above_last(file_id, uuid, parent, steps) AS (
  SELECT c.file_id, c.uuid, c.parent, 0 FROM state s
  JOIN cli c ON c.file_id = s.file_id AND c.uuid = s.last_row
  UNION ALL
  SELECT a.file_id, c.uuid, c.parent, a.steps + 1 FROM above_last a
  JOIN cli c ON c.file_id = a.file_id AND c.uuid = a.parent
  JOIN files f ON f.id = a.file_id
  WHERE a.steps <= f.line_count
),
-- Kin (resume.kin): does the last row continue past a checkpoint that no
-- last-prompt record said explicit through the batch of the call the
-- checkpoint answers? Asked in resume_pick only: what is named under
-- first_pick is copied at each of its many uses (see bounds). kin_nodes:
-- the CLI's nodes of the files where it is asked, with what kin reads of
-- them (side: resume._is_side_record; on: an attachment, system or meta
-- record or a virtual call, which the walk from the checkpoint goes up).
kin_nodes AS MATERIALIZED (
  SELECT c.file_id, c.uuid, c.parent, c.type, c.subtype, r.message_id, r.is_meta,
    r.is_tool_result, {TOOL_IDS.format(r="r")} AS ids, {HAS_TOOL_USE.format(r="r")} AS has_tool_use,
    (c.type = 'attachment' OR (c.type = 'system' AND c.subtype IS NOT 'compact_boundary')
     OR (c.type = 'user' AND r.is_meta AND NOT r.is_tool_result)
     OR {VIRTUAL_CALL.format(r="r")}) AS on_,
    s.checkpoint, s.last_row
  FROM state s JOIN cli c ON c.file_id = s.file_id JOIN records r ON r.id = c.id
  WHERE s.checkpoint IS NOT NULL AND NOT s.explicit AND NOT s.ever_explicit
    AND s.last_row IS NOT NULL
),
-- cp_up: the nodes from the checkpoint up while they are side records or
-- virtual calls; the first that is not, or is a repeat, is the loader's Ge
-- (resume._call_of's x), the one before it He (top).
cp_up(file_id, steps, uuid, parent, type, ids, message_id, result, on_) AS (
  SELECT file_id, 0, uuid, parent, type, ids, message_id, type = 'user' AND is_tool_result, on_
  FROM kin_nodes WHERE uuid = checkpoint
  UNION ALL
  SELECT u.file_id, u.steps + 1, n.uuid, n.parent, n.type, n.ids, n.message_id,
         n.type = 'user' AND n.is_tool_result, n.on_
  FROM cp_up u JOIN kin_nodes n ON n.file_id = u.file_id AND n.uuid = u.parent
  JOIN files f ON f.id = u.file_id
  WHERE u.on_ AND u.steps <= f.line_count
),
-- cp_stop: Ge with He's type and ids (NULL at the checkpoint itself).
cp_stop AS MATERIALIZED (
  SELECT * FROM (
    SELECT c.*, row_number() OVER (PARTITION BY c.file_id ORDER BY c.steps) AS nth
    FROM (SELECT u.*, lag(u.type) OVER w AS top_type, lag(u.ids) OVER w AS top_ids,
                 row_number() OVER (PARTITION BY u.file_id, u.uuid ORDER BY u.steps) AS visit
          FROM cp_up u WINDOW w AS (PARTITION BY u.file_id ORDER BY u.steps)) c
    WHERE NOT c.on_ OR c.visit > 1)
  WHERE nth = 1
),
-- batch_up: from each assistant node with a message id, the nodes above it
-- while they stand inside the batch of its message (resume._batch_above);
-- batch_rows: their first visits (a walk repeats from its first repeat on).
batch_up(file_id, start, mid, steps, uuid, parent, type, ids) AS (
  SELECT file_id, uuid, message_id, 0, uuid, parent, type, ids FROM kin_nodes
  WHERE type = 'assistant' AND message_id <> ''
  UNION ALL
  SELECT b.file_id, b.start, b.mid, b.steps + 1, n.uuid, n.parent, n.type, n.ids
  FROM batch_up b JOIN kin_nodes n ON n.file_id = b.file_id AND n.uuid = b.parent
  JOIN files f ON f.id = b.file_id
  WHERE b.steps <= f.line_count AND {OF_BATCH.format(n="n", mid="b.mid")}
),
batch_rows AS MATERIALIZED (
  SELECT * FROM (SELECT b.*, row_number() OVER (
                   PARTITION BY b.file_id, b.start, b.uuid ORDER BY b.steps) AS visit
                 FROM batch_up b) WHERE visit = 1
),
-- kin_call: the call record the checkpoint answers (resume._call_of): at a
-- tool_result Ge its parent, with Ge's result ids; at a side record He
-- naming a toolUseID, the first record of Ge's batch holding that tool_use
-- (by_id); else the checkpoint itself. calls: its tool_use ids; mid: its
-- message id when it is an assistant record with a tool_use.
kin_call AS MATERIALIZED (
  SELECT k.file_id, k.call, k.results, k.by_id,
    CASE WHEN y.type = 'assistant' THEN y.ids ELSE '[]' END AS calls,
    CASE WHEN y.type = 'assistant' AND y.ids <> '[]' AND y.message_id <> ''
         THEN y.message_id END AS mid
  FROM (
    SELECT e.file_id,
      CASE WHEN e.result THEN e.parent WHEN e.steps = 0 THEN e.uuid ELSE f.uuid END AS call,
      CASE WHEN e.result THEN e.ids WHEN f.uuid IS NOT NULL
           THEN json_array(e.top_ids ->> '$[0]') ELSE '[]' END AS results,
      (NOT e.result AND f.uuid IS NOT NULL) AS by_id
    FROM cp_stop e
    LEFT JOIN (SELECT b.file_id, b.start, b.uuid, b.ids, row_number() OVER (
                 PARTITION BY b.file_id, b.start ORDER BY b.steps) AS nth, b.steps, b.type
               FROM batch_rows b JOIN cp_stop g ON g.file_id = b.file_id AND g.uuid = b.start
               WHERE NOT g.result AND g.steps > 0 AND g.top_type = 'attachment'
                 AND g.top_ids <> '[]' AND b.type = 'assistant'
                 AND EXISTS (SELECT 1 FROM json_each(b.ids) j
                             WHERE j.value = g.top_ids ->> '$[0]')) f
      ON f.file_id = e.file_id AND f.start = e.uuid AND f.nth = 1) k
  JOIN kin_nodes y ON y.file_id = k.file_id AND y.uuid = k.call
),
-- kin_steps: the walk up from the last row to its first repeat, each
-- record with: sibling (another assistant record of the call's batch with
-- a tool_use), above (one of them above the call), and, before it on the
-- walk, the latest sibling and the latest record outside the batch, and the
-- record just below it.
kin_steps AS MATERIALIZED (
  SELECT w.*,
    max(CASE WHEN w.sibling THEN w.steps END) OVER before AS last_sibling,
    max(CASE WHEN NOT w.of_batch THEN w.steps END) OVER before AS last_break,
    lag(w.type) OVER ordered AS below_type, lag(w.ids) OVER ordered AS below_ids
  FROM (
    SELECT a.file_id, a.steps, a.uuid, n.type, n.ids, k.call, k.calls, k.results, k.by_id,
      coalesce(n.type = 'assistant' AND n.uuid <> k.call AND n.message_id = k.mid
               AND n.has_tool_use, 0) AS sibling,
      {OF_BATCH.format(n="n", mid="k.mid")} AS of_batch,
      EXISTS (SELECT 1 FROM batch_rows b WHERE b.file_id = a.file_id AND b.start = k.call
              AND b.mid = k.mid AND b.steps > 0 AND b.uuid = a.uuid) AS above,
      row_number() OVER (PARTITION BY a.file_id, a.uuid ORDER BY a.steps) AS visit
    FROM above_last a JOIN kin_call k ON k.file_id = a.file_id
    JOIN kin_nodes n ON n.file_id = a.file_id AND n.uuid = a.uuid) w
  WHERE w.visit = 1
  WINDOW ordered AS (PARTITION BY w.file_id ORDER BY w.steps),
         before AS (PARTITION BY w.file_id ORDER BY w.steps
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
-- kin: 1 where that walk passes a sibling above the call, or comes to the
-- call after a sibling with only batch records between, or from a result
-- of another of its calls (resume.kin).
kin AS MATERIALIZED (
  SELECT file_id, max(
    (sibling AND above)
    OR (uuid = call AND last_sibling IS NOT NULL
        AND (last_break IS NULL OR last_break < last_sibling))
    OR (uuid = call AND below_type = 'user'
        AND EXISTS (SELECT 1 FROM json_each(results) x
                    WHERE x.value IN (SELECT value FROM json_each(calls)))
        AND EXISTS (SELECT 1 FROM json_each(below_ids) x
                    WHERE x.value IN (SELECT value FROM json_each(calls))
                      AND CASE WHEN by_id THEN json_array_length(calls) > 1
                          ELSE x.value NOT IN (SELECT value FROM json_each(results)) END))
  ) AS batch
  FROM kin_steps GROUP BY file_id
),
-- newest_descendant (resume._newest_descendant): when no last-prompt record
-- names a leaf and the first row with the greatest timestamp text is not
-- the last row, the newest non-sidechain node below the last row.
newest_rows AS MATERIALIZED (
  SELECT file_id, uuid FROM (
    SELECT file_id, uuid, row_number() OVER (
             PARTITION BY file_id ORDER BY timestamp DESC, line_no) AS rn
    FROM row_lines WHERE typeof(timestamp) = 'text' AND timestamp > '') WHERE rn = 1
),
below_last(file_id, uuid, steps) AS (
  SELECT s.file_id, s.last_row, 0 FROM state s
  JOIN newest_rows n ON n.file_id = s.file_id AND n.uuid <> s.last_row
  WHERE NOT EXISTS (SELECT 1 FROM prompts q WHERE q.file_id = s.file_id AND q.names_leaf)
  UNION ALL
  SELECT b.file_id, c.uuid, b.steps + 1 FROM below_last b
  JOIN cli c ON c.file_id = b.file_id AND c.parent = b.uuid
  JOIN files f ON f.id = b.file_id
  WHERE b.steps <= f.line_count
),
newest_below AS MATERIALIZED (
  SELECT file_id, uuid FROM (
    SELECT c.file_id, c.uuid, row_number() OVER (
             PARTITION BY c.file_id ORDER BY c.timestamp DESC, c.line_no DESC) AS rn
    FROM (SELECT DISTINCT b.file_id, b.uuid FROM below_last b
          JOIN state s ON s.file_id = b.file_id AND b.uuid <> s.last_row) b
    JOIN cli c ON c.file_id = b.file_id AND c.uuid = b.uuid
    WHERE NOT c.is_sidechain AND typeof(c.timestamp) = 'text') WHERE rn = 1
),
judged AS MATERIALIZED (
  SELECT s.*, (cp.uuid IS NOT NULL) AS checkpoint_is_node,
    coalesce(cp.is_sidechain, 0) AS checkpoint_on_side,
    EXISTS (SELECT 1 FROM relinking k WHERE k.file_id = s.file_id
            AND k.tail IS NOT NULL) AS relinked,
    nb.uuid AS newer,
    EXISTS (SELECT 1 FROM above_last a WHERE a.file_id = s.file_id
            AND a.uuid = s.checkpoint) AS last_descends
  FROM state s LEFT JOIN cli cp ON cp.file_id = s.file_id AND cp.uuid = s.checkpoint
  LEFT JOIN newest_below nb ON nb.file_id = s.file_id
),
-- After a relink (a compaction's kept tail put back) only an explicit
-- checkpoint is picked before the leaf scan. kin_asks: the checkpoint was
-- picked, not explicit, and the last row (another node) does not descend
-- from it: kin may still pick the last row (resume_pick).
first_pick AS MATERIALIZED (
  SELECT file_id, last_row, trailing, checkpoint, explicit,
    NOT empty AND NOT relinked AND checkpoint_is_node AND NOT explicit
      AND last_row IS NOT NULL AND last_row <> checkpoint AND NOT last_descends AS kin_asks,
    CASE WHEN empty THEN NULL
         WHEN relinked THEN CASE WHEN explicit AND checkpoint_is_node
                                      AND NOT checkpoint_on_side THEN checkpoint END
         WHEN checkpoint_is_node AND NOT explicit AND last_row IS NOT NULL
              AND last_row <> checkpoint AND last_descends THEN last_row
         WHEN checkpoint_is_node THEN checkpoint
         WHEN NOT trailing THEN coalesce(newer, last_row) END AS picked,
    CASE WHEN empty THEN 'rewound_to_empty'
         WHEN relinked THEN CASE WHEN explicit AND checkpoint_is_node
                                      AND NOT checkpoint_on_side THEN 'checkpoint' END
         WHEN checkpoint_is_node AND NOT explicit AND last_row IS NOT NULL
              AND last_row <> checkpoint AND last_descends THEN 'last_row'
         WHEN checkpoint_is_node THEN 'checkpoint'
         WHEN NOT trailing AND newer IS NOT NULL THEN 'newest_descendant'
         WHEN NOT trailing AND last_row IS NOT NULL THEN 'last_row' END AS rule,
    empty
  FROM judged
),
-- named: the uuids some node names as its (bridged) parent; by_message when
-- a user/assistant node does.
named AS MATERIALIZED (
  SELECT file_id, parent AS uuid, max(type IN ('user','assistant')) AS by_message FROM cli
  WHERE parent IS NOT NULL GROUP BY file_id, parent
),
-- to_msg: from a start record up bridged parents to the first user/assistant.
starts AS MATERIALIZED (
  SELECT file_id, 'picked' AS what, picked AS uuid FROM first_pick WHERE picked IS NOT NULL
  UNION ALL
  SELECT file_id, 'last', last_row FROM first_pick WHERE last_row IS NOT NULL
  UNION ALL
  SELECT c.file_id, 'terminal:' || c.uuid, c.uuid FROM cli c JOIN main_files m ON m.file_id = c.file_id
  LEFT JOIN named k ON k.file_id = c.file_id AND k.uuid = c.uuid
  WHERE k.uuid IS NULL
),
to_msg(file_id, what, uuid, type, parent, steps) AS (
  SELECT s.file_id, s.what, c.uuid, c.type, c.parent, 0 FROM starts s
  JOIN cli c ON c.file_id = s.file_id AND c.uuid = s.uuid
  UNION ALL
  SELECT t.file_id, t.what, c.uuid, c.type, c.parent, t.steps + 1 FROM to_msg t
  JOIN cli c ON c.file_id = t.file_id AND c.uuid = t.parent
  JOIN files f ON f.id = t.file_id
  WHERE t.type NOT IN ('user','assistant') AND t.steps <= f.line_count
),
msg_of AS MATERIALIZED (
  SELECT file_id, what, uuid FROM (
    SELECT file_id, what, uuid, row_number() OVER (PARTITION BY file_id, what ORDER BY steps) AS rn
    FROM to_msg WHERE type IN ('user','assistant')) WHERE rn = 1
),
scan_leaves AS MATERIALIZED (
  SELECT DISTINCT m.file_id, m.uuid FROM msg_of m
  LEFT JOIN named k ON k.file_id = m.file_id AND k.uuid = m.uuid AND k.by_message
  WHERE m.what LIKE 'terminal:%' AND k.uuid IS NULL
),
scan AS MATERIALIZED (
  SELECT p.file_id, (SELECT count(*) FROM scan_leaves l WHERE l.file_id = p.file_id) AS n,
    EXISTS (SELECT 1 FROM scan_leaves l WHERE l.file_id = p.file_id AND l.uuid = p.checkpoint)
      AS checkpoint_is_leaf
  FROM first_pick p
),
-- The sets the CLI takes its "newest" of (NEWEST_OF).
scan_set AS MATERIALIZED (
  SELECT c.file_id, c.uuid, c.line_no, c.ts_ms FROM cli c
  JOIN scan_leaves l ON l.file_id = c.file_id AND l.uuid = c.uuid
  WHERE NOT c.is_sidechain
),
scan_newest AS (
{NEWEST_OF_SCAN_SET}
),
any_set AS MATERIALIZED (
  SELECT c.file_id, c.uuid, c.line_no, c.ts_ms FROM cli c
  JOIN main_files m ON m.file_id = c.file_id
  WHERE NOT c.is_sidechain
    AND (NOT (c.type = 'system' AND c.subtype IS 'file_snapshot')
         OR NOT EXISTS (SELECT 1 FROM cli o WHERE o.file_id = c.file_id AND NOT o.is_sidechain
                        AND NOT (o.type = 'system' AND o.subtype IS 'file_snapshot')))
),
any_newest AS (
{NEWEST_OF_ANY_SET}
),
resume_pick AS MATERIALIZED (
  SELECT p.file_id,
    CASE WHEN p.empty THEN NULL
         WHEN pm.uuid IS NOT NULL THEN p.picked
         WHEN s.n > 1 AND s.checkpoint_is_leaf
              AND (p.explicit OR p.last_row IS NULL OR NOT p.kin_batch) THEN p.checkpoint
         WHEN s.n > 1 AND NOT p.trailing AND lm.uuid IS NOT NULL THEN p.last_row
         WHEN s.n > 0 THEN sn.uuid
         ELSE an.uuid END AS uuid,
    CASE WHEN p.empty THEN 'rewound_to_empty'
         WHEN pm.uuid IS NOT NULL THEN p.rule
         WHEN s.n > 1 AND s.checkpoint_is_leaf
              AND (p.explicit OR p.last_row IS NULL OR NOT p.kin_batch) THEN 'checkpoint'
         WHEN s.n > 1 AND NOT p.trailing AND lm.uuid IS NOT NULL THEN 'last_row'
         WHEN s.n > 0 AND sn.uuid IS NOT NULL THEN 'leaf_scan'
         WHEN s.n > 0 THEN 'no_leaf'
         WHEN an.uuid IS NOT NULL THEN 'newest_record'
         ELSE 'no_leaf' END AS rule
  FROM (SELECT f.file_id, f.last_row, f.trailing, f.checkpoint, f.explicit, f.empty,
               coalesce(k.batch, 0) AS kin_batch,
               CASE WHEN f.kin_asks AND k.batch THEN f.last_row ELSE f.picked END AS picked,
               CASE WHEN f.kin_asks AND k.batch THEN 'last_row' ELSE f.rule END AS rule,
               CASE WHEN f.kin_asks AND k.batch THEN 'last' ELSE 'picked' END AS picked_as
        FROM first_pick f LEFT JOIN kin k ON k.file_id = f.file_id) p
  JOIN scan s ON s.file_id = p.file_id
  LEFT JOIN msg_of pm ON pm.file_id = p.file_id AND pm.what = p.picked_as
  LEFT JOIN msg_of lm ON lm.file_id = p.file_id AND lm.what = 'last'
  LEFT JOIN scan_newest sn ON sn.file_id = p.file_id
  LEFT JOIN any_newest an ON an.file_id = p.file_id
),
last_message AS (
  SELECT file_id, id FROM (
    SELECT o.file_id, o.id, row_number() OVER (
             PARTITION BY o.file_id ORDER BY o.line_no DESC) AS rn
    FROM occ o JOIN scope_files f ON f.file_id = o.file_id
    WHERE f.kind <> 'main' AND o.type IN ('user','assistant')
  ) WHERE rn = 1
),
terminals AS (
  SELECT o.file_id, o.id, o.line_no, o.type, o.parent_uuid FROM occ o
  WHERE NOT EXISTS (SELECT 1 FROM records c
                    WHERE c.file_id = o.file_id AND c.parent_uuid = o.uuid
                      AND c.uuid IS NOT NULL AND c.type IN {CHAIN_TYPES_SQL})
),
to_message(file_id, terminal_line, id, type, parent_uuid, steps) AS (
  SELECT file_id, line_no, id, type, parent_uuid, 0 FROM terminals
  UNION ALL
  SELECT t.file_id, t.terminal_line, n.id, n.type, n.parent_uuid, t.steps + 1
  FROM to_message t
  JOIN records n ON n.file_id = t.file_id AND n.uuid = t.parent_uuid
  JOIN files b ON b.id = t.file_id
  WHERE t.type NOT IN ('user','assistant') AND t.steps <= b.line_count
    AND {_IS_NODE.format(n="n")}
),
sdk_candidates AS (
  SELECT t.file_id, t.terminal_line, r.id, r.uuid,
         (NOT r.is_sidechain AND r.team_name IS NULL AND NOT r.is_meta) AS is_main,
         (SELECT max(n.line_no) FROM records n WHERE n.file_id = r.file_id
          AND n.uuid = r.uuid AND n.type IN {CHAIN_TYPES_SQL}) AS uuid_line
  FROM to_message t JOIN records r ON r.id = t.id
  WHERE t.type IN ('user','assistant')
),
sdk_pick AS (
  SELECT file_id, id FROM (
    SELECT c.file_id, c.id, row_number() OVER (
             PARTITION BY c.file_id
             ORDER BY c.is_main DESC, c.uuid_line DESC, c.terminal_line ASC) AS rn
    FROM sdk_candidates c JOIN scope_files f ON f.file_id = c.file_id
    WHERE f.kind = 'main'
  ) WHERE rn = 1
),
branches AS (
  SELECT file_id, count(DISTINCT uuid) AS n FROM sdk_candidates
  WHERE is_main GROUP BY file_id
),
picked AS MATERIALIZED (
  SELECT f.file_id, f.session_id, f.kind,
         coalesce(rc.id, lmr.id) AS resume_leaf_id,
         sr.id AS sdk_leaf_id, sr.uuid AS sdk_leaf_uuid, coalesce(br.n, 0) AS branch_count,
         CASE WHEN f.kind = 'main' THEN rp.rule
              WHEN lm.id IS NOT NULL THEN 'subagent_last_message' ELSE 'no_leaf' END
           AS resume_rule
  FROM scope_files f
  LEFT JOIN resume_pick rp ON rp.file_id = f.file_id
  LEFT JOIN cli rc ON rc.file_id = f.file_id AND rc.uuid = rp.uuid
  LEFT JOIN sdk_pick sp ON sp.file_id = f.file_id
  LEFT JOIN last_message lm ON lm.file_id = f.file_id
  LEFT JOIN records lmr ON lmr.id = lm.id
  LEFT JOIN records sr ON sr.id = coalesce(sp.id, lm.id)
  LEFT JOIN branches br ON br.file_id = f.file_id
),
resume_message(file_id, uuid, type, parent, steps) AS (
  SELECT p.file_id, c.uuid, c.type, c.walk_parent, 0 FROM picked p
  JOIN cli c ON c.id = p.resume_leaf_id WHERE p.kind = 'main'
  UNION ALL
  SELECT m.file_id, c.uuid, c.type, c.walk_parent, m.steps + 1 FROM resume_message m
  JOIN cli c ON c.file_id = m.file_id AND c.uuid = m.parent
  JOIN files b ON b.id = m.file_id
  WHERE m.type NOT IN ('user','assistant') AND m.steps <= b.line_count
)
""".strip()
LEAVES_SELECT = """
SELECT p.file_id, p.session_id, p.kind, p.resume_leaf_id, r.uuid AS resume_leaf_uuid,
       p.sdk_leaf_id, p.sdk_leaf_uuid,
       coalesce(CASE WHEN p.kind = 'main'
                     THEN (SELECT m.uuid FROM resume_message m WHERE m.file_id = p.file_id
                           AND m.type IN ('user','assistant') ORDER BY m.steps LIMIT 1)
                     ELSE r.uuid END IS p.sdk_leaf_uuid, 0) AS leaves_agree,
       p.branch_count, p.resume_rule
FROM picked p LEFT JOIN records r ON r.id = p.resume_leaf_id
""".strip()
LEAVES_DEFINITION_SQL = f"WITH RECURSIVE {NODES_CTES},\n{CLI_CTES},\n{LEAVES_CTES}\n{LEAVES_SELECT}"

# leaf_ancestry: one row per record on the walk from each rule's leaf to the
# root; depth 0 is the leaf. The 'resume' walk of a main file follows the
# CLI's walk parents (cli: progress bridged, the timestamp fallback); every
# other walk follows parent_uuid to the last line of that uuid. Each stops at
# a missing parent. A walk that reaches the step bound went round a cycle:
# `cut` drops it from the first revisited uuid on.
# The CLI's fallback from cli record c past the uuids of {path} (a JSON
# array): resume.revisited_fallback.
REVISITED_FALLBACK = f"""(
    SELECT CASE WHEN c.ts_ms - x.ts_ms <= {FALLBACK_MS} THEN x.uuid END FROM cli_base x
    WHERE x.file_id = c.file_id AND x.is_sidechain = c.is_sidechain
      AND NOT (x.type = 'system' AND x.subtype IS 'file_snapshot') AND x.ts_ms <= c.ts_ms
      AND {NOT_DROPPED.format(x="x", c="c")}
      AND NOT EXISTS (SELECT 1 FROM json_each({{path}}) v WHERE v.value = x.uuid)
    ORDER BY x.ts_ms DESC, x.line_no LIMIT 1)"""

ANCESTRY_CTES = f"""
leaves_def AS MATERIALIZED (SELECT * FROM leaves_definition),
walk_starts AS MATERIALIZED (  -- one reference to leaves_def: each one is planned anew
  SELECT l.file_id, k.rule,
         CASE k.rule WHEN 'resume' THEN l.resume_leaf_id ELSE l.sdk_leaf_id END AS id,
         k.rule = 'resume' AND f.kind = 'main' AS by_cli
  FROM leaves_def l JOIN scope_files f ON f.file_id = l.file_id
  JOIN (SELECT 'resume' AS rule UNION ALL SELECT 'sdk') k
  WHERE CASE k.rule WHEN 'resume' THEN l.resume_leaf_id ELSE l.sdk_leaf_id END IS NOT NULL
),
walk(file_id, rule, by_cli, id, uuid, next, raw_depth) AS (
  SELECT s.file_id, s.rule, s.by_cli, r.id, CASE WHEN s.by_cli THEN coalesce(c.uuid, r.uuid) ELSE r.uuid END,
         CASE WHEN s.by_cli THEN c.walk_parent ELSE r.parent_uuid END, 0
  FROM walk_starts s JOIN records r ON r.id = s.id LEFT JOIN cli c ON c.id = r.id
  UNION ALL
  SELECT w.file_id, w.rule, 0, n.id, n.uuid, n.parent_uuid, w.raw_depth + 1
  FROM walk w
  JOIN records n ON n.file_id = w.file_id AND n.uuid = w.next
  JOIN files b ON b.id = w.file_id
  WHERE NOT w.by_cli AND w.raw_depth <= b.line_count AND {_IS_NODE.format(n="n")}
  UNION ALL
  SELECT w.file_id, w.rule, 1, c.id, c.uuid, c.walk_parent, w.raw_depth + 1
  FROM walk w
  JOIN cli c ON c.file_id = w.file_id AND c.uuid = w.next
  JOIN files b ON b.id = w.file_id
  WHERE w.by_cli AND w.raw_depth <= b.line_count
),
walked AS MATERIALIZED (SELECT * FROM walk),
-- went_round: the walk reached the step bound (it went round a cycle); visit:
-- the how-manyth time it meets this uuid. Every later part names marked once
-- (SQLite copies a CTE wherever it is named: leaves_definition is under it).
marked AS MATERIALIZED (
  SELECT w.*, max(w.raw_depth) OVER (PARTITION BY w.file_id, w.rule) > b.line_count
           AS went_round,
         row_number() OVER (PARTITION BY w.file_id, w.rule, w.uuid ORDER BY w.raw_depth)
           AS visit
  FROM walked w JOIN files b ON b.id = w.file_id
),
cut AS MATERIALIZED (
  SELECT file_id, rule, min(raw_depth) AS at FROM marked
  WHERE went_round AND visit > 1 GROUP BY file_id, rule
),
-- The CLI's walk at a parent it has already visited takes the timestamp
-- fallback past every record on the walk (resume.revisited_fallback). The
-- walk above revisits exactly there, so only a resume walk that went round
-- is walked again, carrying the uuids it has visited (path, a JSON array):
-- next is the walk parent, or when that is visited the latest record of
-- the side at or before this one's time not on the path, within
-- FALLBACK_MS (the earliest line on ties).
rewalk(file_id, id, uuid, next, depth, path) AS (
  SELECT file_id, NULL, NULL, uuid, -1, json_array() FROM marked
  WHERE by_cli AND went_round AND raw_depth = 0
  UNION ALL
  SELECT w.file_id, c.id, c.uuid, CASE
    WHEN c.walk_parent IS NULL THEN NULL
    WHEN c.walk_parent <> c.uuid AND NOT EXISTS (
           SELECT 1 FROM json_each(w.path) v WHERE v.value = c.walk_parent) THEN c.walk_parent
    ELSE {REVISITED_FALLBACK.format(path="json_insert(w.path, '$[#]', c.uuid)")} END,
    w.depth + 1, json_insert(w.path, '$[#]', c.uuid)
  FROM rewalk w
  JOIN cli c ON c.file_id = w.file_id AND c.uuid = w.next
  JOIN files b ON b.id = w.file_id
  WHERE w.depth <= b.line_count
)
""".strip()
ANCESTRY_SELECT = """
SELECT w.file_id, f.session_id, w.rule, w.uuid, w.raw_depth AS depth, w.id AS record_id
FROM marked w
JOIN scope_files f ON f.file_id = w.file_id
LEFT JOIN cut c ON c.file_id = w.file_id AND c.rule = w.rule
WHERE (c.at IS NULL OR w.raw_depth < c.at) AND NOT (w.by_cli AND w.went_round)
UNION ALL
SELECT r.file_id, f.session_id, 'resume', r.uuid, r.depth, r.id
FROM rewalk r JOIN scope_files f ON f.file_id = r.file_id
WHERE r.depth >= 0
""".strip()
LEAF_ANCESTRY_DEFINITION_SQL = (
    f"WITH RECURSIVE {NODES_CTES},\n{CLI_CTES},\n{ANCESTRY_CTES}\n{ANCESTRY_SELECT}")

# A link of a put-back line (walk.line_link, the loader's s_r()): a companion
# record, or a virtual call (records.VIRTUAL_CALL, read from {raw}'s line).
LINE_LINK = ("(" + COMPANION_RECORD.replace("{r}", "{n}") + " OR "
             + VIRTUAL_CALL.replace("{r}", "{raw}") + ")")

# orphans: every non-sidechain chain record of a main file that is not on the
# 'resume' ancestry, with the first matching cause. `down` walks top-down
# from the ancestry, from other roots (unlinked) and from records whose
# parent is missing (dangling_parent), following parent_uuid, or a
# compact_boundary's logicalParentUuid when its parent is null; it carries
# the branch point (the ancestry record its branch leaves from). A record
# has one such parent, so it is reached at most once and a cycle is never
# entered (its records are never reached: 'other'); the step bound is a
# second guard. put_back_with_result: a line of companion records
# (records.COMPANION_RECORD) or virtual calls (LINE_LINK), read under the
# parents the loader reads (cli_nodes), the CLI puts back with a parallel tool call's
# results (walk.put_back_with_results states the rule): `batches` are the
# API responses on the chain with a tool_use block and their region on the
# chain (depths between first_depth and end_depth, exclusive), `anchors`
# their records, those records' tool results and the companion records in
# the region, `line` walks down from each anchor's children through
# unvisited companion records of the anchor's side (visited: on the chain,
# or parallel with a response the loader has reached: of this response or
# one before it on the chain), and `lines_kept` are the lines that neither
# fork nor meet another unvisited record. restored: the CLI puts the record back after
# its walk: a parallel_tool_branch, a put_back_with_result, or a
# non-message record that hangs from the leaf message through non-message
# records (put_back; progress records are passed through, as the CLI
# bridges them). It reads the resume ancestry from
# leaf_ancestry, which the tests hold equal to leaf_ancestry_definition:
# SQLite 3.40 loses the CTEs of leaf_ancestry_definition when a recursive
# step here reads it ("no such table: main.scope_files").
# A prompt typed into a turn (walk.is_prompt), of node {n}.
_PROMPT = ("({n}.type = 'user' AND NOT {n}.is_meta AND NOT {n}.is_tool_result "
           "AND NOT EXISTS (SELECT 1 FROM nodes pp WHERE pp.file_id = {n}.file_id "
           "AND pp.uuid = {n}.parent_uuid AND pp.type = 'user'))")
# _REGION_END: where the region of a response {b} ends (b: a row with
# file_id, message_id and last_depth, the depth of its last record on the
# chain): the depth of the nearest record past its last that is not its own
# nor one that rides with it (a meta or tool-result user record, an
# attachment, a system record other than a compact boundary); -1: none.
_REGION_END = """coalesce((
  SELECT max(a.depth) FROM on_chain a JOIN nodes n ON n.file_id = a.file_id
    AND n.uuid = a.uuid
  WHERE a.file_id = {b}.file_id AND a.depth < {b}.last_depth
    AND NOT (n.type = 'assistant' AND n.message_id = {b}.message_id)
    AND NOT (n.type = 'user' AND (n.is_meta OR n.is_tool_result))
    AND NOT (n.type = 'attachment')
    AND NOT (n.type = 'system' AND n.subtype IS NOT 'compact_boundary')), -1)"""

ORPHANS_DEFINITION_SQL = f"""
WITH RECURSIVE {NODES_CTES},
{CLI_CTES},
-- The rewind cut (resume.rewind_cut): cut_marks, the last-prompt records
-- of the main files; cut_targets, the record each explicit rewind's cutUuid
-- names (its line written by then, of a node; `at`: the rewind's line:
-- every lookup reads a uuid's line the loader has loaded by the line it
-- reads, cut_keys);
-- cut_starts, where each walk up that uncuts starts (the parent of a row
-- after the first rewind, at its line, and of each cut record); cut_up,
-- those walks up the bridged parents through non-message records (at most
-- CUT_STEPS); cut_clears, the explicit last-prompt records that are no
-- rewind and the compact boundaries. cut: the non-message records a rewind
-- cut with no clear and no walk up through them after it.
cut_marks AS MATERIALIZED (
  SELECT r.file_id, r.line_no, {LAST_PROMPT_EXPLICIT.format(r="r")} AS explicit,
         {LAST_PROMPT_REWOUND.format(r="r")} AS rewound, {LAST_PROMPT_CUT.format(r="r")} AS cut
  FROM records r JOIN scope_files f ON f.file_id = r.file_id
  WHERE r.type = 'last-prompt' AND f.kind = 'main'
),
cut_files AS MATERIALIZED (
  SELECT file_id, min(line_no) AS from_line FROM cut_marks
  WHERE explicit AND rewound AND cut IS NOT NULL AND cut <> '' GROUP BY file_id
),
-- cut_lines: the lines of those files the loader loads (a readable user,
-- assistant, system or attachment line of a uuid that is a node), each
-- until the line of its uuid the loader loads next (NULL: the last, the
-- node), with its parent: the node's (cli_base) for the last line; an
-- earlier line's read up through the progress records written before it
-- and unreadable records (cut_climb, from every loaded line that is not
-- the last of its uuid, as bridge reads them; NULL round a cycle: the step
-- bound). (Each part names as few others as it can: `cut` is named at
-- every put-back step, and SQLite copies what it rests on each time.)
cut_lines AS MATERIALIZED (
  SELECT o.file_id, o.line_no, o.name AS uuid, o.type, o.parent_uuid, c.parent AS node_parent,
         lead(o.line_no) OVER (PARTITION BY o.file_id, o.name ORDER BY o.line_no) AS until
  FROM occ o JOIN cut_files k ON k.file_id = o.file_id
  JOIN records r ON r.id = o.id
  JOIN cli_base c ON c.file_id = o.file_id AND c.uuid = o.name
  WHERE o.type IN {CLI_NODE_TYPES_SQL} AND NOT r.is_unreadable
),
cut_climb(file_id, line_no, up, up_line, steps) AS (
  SELECT r.file_id, r.line_no, r.parent_uuid, r.line_no, 0 FROM occ o
  JOIN records r ON r.id = o.id JOIN cut_files k ON k.file_id = r.file_id
  WHERE r.type IN {CLI_NODE_TYPES_SQL} AND NOT r.is_unreadable
    AND EXISTS (SELECT 1 FROM occ z JOIN records zr ON zr.id = z.id
                WHERE z.file_id = o.file_id AND z.name = o.name
                  AND z.line_no > o.line_no AND z.type IN {CLI_NODE_TYPES_SQL}
                  AND NOT zr.is_unreadable)
  UNION ALL
{BRIDGE_STEP.format(cte="cut_climb", b="w", key="w.line_no")}),
cut_climbed AS MATERIALIZED (
  SELECT w.file_id, w.line_no, CASE WHEN w.steps > f.line_count THEN NULL ELSE w.up END AS up
  FROM (SELECT file_id, line_no, up, steps, row_number() OVER (
               PARTITION BY file_id, line_no ORDER BY steps DESC) AS rn
        FROM cut_climb) w JOIN files f ON f.id = w.file_id
  WHERE w.rn = 1
),
-- cut_keys: those lines by the uuid a lookup names (their own, and the
-- sentAsUuid of a record stored anew), with the parent (a sentAsUuid read
-- as the record stored anew); a lookup at line L reads the line with
-- line_no <= L < until.
cut_keys AS MATERIALIZED (
  SELECT l.file_id, CASE w.which WHEN 0 THEN l.uuid ELSE s.as_uuid END AS key, l.uuid,
         l.line_no, l.until, l.type,
         CASE WHEN l.until IS NULL THEN l.node_parent
              ELSE coalesce((SELECT a.uuid FROM sent_as a WHERE a.file_id = l.file_id
                               AND a.as_uuid = b.up AND NOT a.replaced), b.up) END AS parent
  FROM cut_lines l
  LEFT JOIN cut_climbed b ON b.file_id = l.file_id AND b.line_no = l.line_no
  JOIN (SELECT 0 AS which UNION ALL SELECT 1) w
  LEFT JOIN sent_as s ON s.file_id = l.file_id AND s.uuid = l.uuid AND NOT s.replaced
  WHERE CASE w.which WHEN 0 THEN NOT EXISTS (
          SELECT 1 FROM sent_as x WHERE x.file_id = l.file_id AND x.as_uuid = l.uuid
            AND NOT x.replaced)
        ELSE s.as_uuid IS NOT NULL END
),
cut_targets AS MATERIALIZED (
  SELECT m.file_id, m.line_no AS at, c.uuid, c.type, c.parent FROM cut_marks m
  JOIN cut_keys c ON c.file_id = m.file_id AND c.key = m.cut AND c.line_no <= m.line_no
    AND (c.until IS NULL OR c.until > m.line_no)
  WHERE m.explicit AND m.rewound AND m.cut IS NOT NULL AND m.cut <> ''
),
cut_starts AS MATERIALIZED (
  SELECT o.file_id, o.line_no AS at, c.parent AS up FROM occ o
  JOIN cut_files k ON k.file_id = o.file_id AND o.line_no > k.from_line
  JOIN cut_keys c ON c.file_id = o.file_id AND c.uuid = o.name AND c.key = o.name
    AND c.line_no = o.line_no
  JOIN records r ON r.id = o.id
  WHERE o.type IN {CLI_NODE_TYPES_SQL} AND NOT r.is_sidechain
    AND NOT (r.type = 'system' AND r.subtype IS 'file_snapshot')
    AND NOT {FORK_BRIEFING_RECORD.format(r="r")}
  UNION ALL
  SELECT file_id, at, parent FROM cut_targets
),
cut_up(file_id, at, uuid, parent, type, steps) AS (
  SELECT s.file_id, s.at, c.uuid, c.parent, c.type, 1 FROM cut_starts s
  JOIN cut_keys c ON c.file_id = s.file_id AND c.key = s.up AND c.line_no <= s.at
    AND (c.until IS NULL OR c.until > s.at)
  UNION ALL
  SELECT u.file_id, u.at, c.uuid, c.parent, c.type, u.steps + 1 FROM cut_up u
  JOIN cut_keys c ON c.file_id = u.file_id AND c.key = u.parent AND c.line_no <= u.at
    AND (c.until IS NULL OR c.until > u.at)
  WHERE u.type NOT IN ('user','assistant') AND u.steps < {CUT_STEPS}
),
cut_clears AS MATERIALIZED (
  SELECT file_id, line_no FROM cut_marks WHERE explicit AND (NOT rewound OR cut IS NULL)
  UNION ALL
  SELECT o.file_id, o.line_no FROM occ o JOIN cut_files k ON k.file_id = o.file_id
  JOIN cli_base c ON c.file_id = o.file_id AND c.uuid = o.uuid
  JOIN records r ON r.id = o.id
  WHERE {COMPACT_BOUNDARY_RECORD.format(r="r")}
),
cut AS MATERIALIZED (
  SELECT DISTINCT t.file_id, t.uuid FROM cut_targets t
  WHERE t.type NOT IN ('user','assistant')
    AND NOT EXISTS (SELECT 1 FROM cut_clears c WHERE c.file_id = t.file_id AND c.line_no > t.at)
    AND NOT EXISTS (SELECT 1 FROM cut_up u WHERE u.file_id = t.file_id AND u.uuid = t.uuid
                      AND u.type NOT IN ('user','assistant') AND u.at > t.at)
),
-- loaded: the nodes the loader loads (no progress, no unreadable records,
-- none a compaction's relink drops), each with the parent it reads it
-- under (cli_nodes: bridged, a sentAsUuid read as the record stored anew,
-- moved by the relink): what the put-back lines follow (derive._orphans,
-- walk.put_back_with_results).
loaded AS MATERIALIZED (
  SELECT c.id, c.file_id, c.uuid, c.type, c.subtype, n.is_meta, n.is_tool_result,
         c.is_sidechain, c.parent
  FROM cli_nodes c JOIN nodes n ON n.id = c.id
),
on_chain AS MATERIALIZED (
  SELECT a.file_id, a.uuid, a.depth FROM leaf_ancestry a
  JOIN scope_files f ON f.file_id = a.file_id
  WHERE a.rule = 'resume' AND f.kind = 'main'
),
boundary AS (
  SELECT file_id, line_no FROM (
    SELECT a.file_id, n.line_no,
           row_number() OVER (PARTITION BY a.file_id ORDER BY a.depth) AS rn
    FROM on_chain a JOIN nodes n ON n.file_id = a.file_id AND n.uuid = a.uuid
    WHERE {COMPACT_BOUNDARY_RECORD.format(r="n")}
  ) WHERE rn = 1
),
-- chain_messages: the API responses on the chain; at: the depth of the
-- first record of each (the loader takes them root first, the greatest at
-- first).
chain_messages AS MATERIALIZED (
  SELECT a.file_id, n.message_id, max(a.depth) AS at FROM on_chain a
  JOIN nodes n ON n.file_id = a.file_id AND n.uuid = a.uuid
  WHERE n.type = 'assistant' AND n.message_id IS NOT NULL
  GROUP BY a.file_id, n.message_id
),
splice_points AS MATERIALIZED (
  SELECT b.file_id, b.uuid FROM on_chain b
  JOIN leaf_ancestry c ON c.file_id = b.file_id AND c.rule = 'resume' AND c.depth = b.depth - 1
  JOIN nodes n ON n.file_id = c.file_id AND n.uuid = c.uuid
  WHERE {API_ERROR_RECORD.format(r="n")}
),
leaf_message AS MATERIALIZED (
  SELECT file_id, uuid FROM (
    SELECT a.file_id, a.uuid, row_number() OVER (PARTITION BY a.file_id ORDER BY a.depth) AS rn
    FROM on_chain a JOIN nodes n ON n.file_id = a.file_id AND n.uuid = a.uuid
    WHERE n.type IN ('user','assistant')) WHERE rn = 1
),
put_back(file_id, uuid, type, steps) AS (
  SELECT file_id, uuid, 'message', 0 FROM leaf_message
  UNION ALL
  SELECT c.file_id, c.uuid, c.type, p.steps + 1 FROM put_back p
  JOIN records c ON c.file_id = p.file_id AND c.parent_uuid = p.uuid
  JOIN files b ON b.id = p.file_id
  WHERE c.type IN ('system','attachment','progress') AND p.steps <= b.line_count
    AND {_IS_CLI_LINE.format(n="c")}
    AND NOT EXISTS (SELECT 1 FROM cut k WHERE k.file_id = c.file_id AND k.uuid = c.uuid)
),
-- parallel_direct: the records put back with a response on the chain (its
-- other records and their tool results), with the response's at.
parallel_direct AS MATERIALIZED (
  SELECT n.file_id, n.uuid, m.at FROM nodes n JOIN chain_messages m
    ON m.file_id = n.file_id AND m.message_id = n.message_id
  WHERE n.type = 'assistant'
  UNION
  SELECT n.file_id, n.uuid, m.at FROM nodes n
  JOIN nodes p ON p.file_id = n.file_id AND p.uuid = n.parent_uuid AND p.type = 'assistant'
  JOIN chain_messages m ON m.file_id = p.file_id AND m.message_id = p.message_id
  WHERE n.type = 'user' AND n.is_tool_result
),
-- Recovery by tool-call id (walk.recovered_by_tool_use_id). tool_ids: the
-- tool_use ids of the loaded assistant records (uses) and the tool_result
-- ids of the loaded user records (result_ids; k: their order in the record).
tool_ids AS MATERIALIZED (
  SELECT c.file_id, c.uuid, c.type, c.parent, c.is_sidechain, r.agent_id, n.message_id,
         n.line_no, CAST(j.key AS INTEGER) AS k, j.value AS tool_id,
         r.source_tool_assistant_uuid AS source,
         c.type = 'user' AND EXISTS (
           SELECT 1 FROM nodes pn JOIN records pr ON pr.id = pn.id,
                json_each({TOOL_IDS.format(r="pr")}) pj
           WHERE pn.file_id = c.file_id AND pn.uuid = c.parent AND pn.type = 'assistant'
             AND NOT pn.is_unreadable AND pj.value = j.value) AS held
  FROM loaded c JOIN nodes n ON n.id = c.id JOIN records r ON r.id = c.id,
       json_each({TOOL_IDS.format(r="r")}) j
  WHERE c.type = 'assistant' OR (c.type = 'user' AND c.is_tool_result)
),
uses AS MATERIALIZED (
  SELECT file_id, uuid, is_sidechain, agent_id, message_id, line_no, tool_id FROM tool_ids
  WHERE type = 'assistant'
),
result_ids AS MATERIALIZED (
  SELECT file_id, uuid, parent, is_sidechain, agent_id, line_no, k, tool_id, held, source
  FROM tool_ids WHERE type = 'user'
),
-- holder_of: per tool id held by the records of one API message, the last
-- of them.
holder_of AS MATERIALIZED (
  SELECT file_id, tool_id, message_id, uuid, is_sidechain, agent_id FROM (
    SELECT u.*, max(u.line_no) OVER w AS last, min(u.message_id) OVER w AS lo,
           max(u.message_id) OVER w AS hi
    FROM uses u WHERE u.message_id IS NOT NULL
    WINDOW w AS (PARTITION BY u.file_id, u.tool_id))
  WHERE line_no = last AND lo = hi
),
-- strays: the results off the chain that answer a call their (loaded)
-- parent does not hold; par_at: the at of the response a result under a
-- record of a response on the chain is put back with (parallel_direct);
-- src_message: the response of the loaded assistant record its
-- sourceToolAssistantUUID names (a readable node the relink does not drop),
-- when the loader reads the result under it too (not its parent, on its
-- side, of its agentId).
strays AS MATERIALIZED (
  SELECT DISTINCT x.file_id, x.uuid, q.at AS par_at, (
           SELECT sn.message_id FROM nodes sn JOIN records sr ON sr.id = sn.id
           WHERE sn.file_id = x.file_id AND sn.uuid = x.source AND sn.type = 'assistant'
             AND NOT sn.is_unreadable AND sn.uuid IS NOT x.parent
             AND sn.is_sidechain = x.is_sidechain AND sr.agent_id IS x.agent_id
             AND NOT EXISTS (SELECT 1 FROM relinking k WHERE k.file_id = sn.file_id
                               AND {FIRST_LOADED.format(n="sn")} < k.last_line
                               AND NOT EXISTS (SELECT 1 FROM json_each(k.kept) j
                                               WHERE j.value = sn.uuid))) AS src_message
  FROM result_ids x
  LEFT JOIN parallel_direct q ON q.file_id = x.file_id AND q.uuid = x.uuid
  WHERE NOT EXISTS (SELECT 1 FROM on_chain a WHERE a.file_id = x.file_id AND a.uuid = x.uuid)
    AND NOT x.held
),
-- stray_calls: a stray's calls with one holder, on the chain's response,
-- not its parent, on its side, of its agentId (or a record of the
-- holder's response is the stray's src_message), and (for a result under a
-- record of a response on the chain) a response the loader reaches before
-- that one (root first: a greater at; one it reaches after has put the
-- result back already); first_line: the first stray's line for that call.
stray_calls AS MATERIALIZED (
  SELECT c.*, min(c.line_no) OVER (PARTITION BY c.file_id, c.tool_id) AS first_line FROM (
    SELECT x.file_id, x.uuid, x.line_no, x.k, x.tool_id, h.message_id
    FROM result_ids x JOIN strays s ON s.file_id = x.file_id AND s.uuid = x.uuid
    JOIN holder_of h ON h.file_id = x.file_id AND h.tool_id = x.tool_id
    JOIN chain_messages m ON m.file_id = h.file_id AND m.message_id = h.message_id
    WHERE ((h.uuid IS NOT x.parent AND h.is_sidechain = x.is_sidechain
            AND h.agent_id IS x.agent_id) OR s.src_message = h.message_id)
      AND (s.par_at IS NULL OR m.at > s.par_at)) c
),
-- answered: the calls a result on the chain answers (message_id NULL) or a
-- result under a record of a response (its message_id).
answered AS MATERIALIZED (
  SELECT y.file_id, y.tool_id, CASE WHEN a.uuid IS NULL THEN p.message_id END AS message_id
  FROM result_ids y
  LEFT JOIN on_chain a ON a.file_id = y.file_id AND a.uuid = y.uuid
  LEFT JOIN nodes p ON p.file_id = y.file_id AND p.uuid = y.parent AND p.type = 'assistant'
  WHERE a.uuid IS NOT NULL OR p.message_id IS NOT NULL
),
-- recovered: a stray with such a call that is the first stray's for it and
-- that nothing answers; the response (message_id) of its first such call.
recovered AS MATERIALIZED (
  SELECT file_id, uuid, message_id FROM (
    SELECT c.*, row_number() OVER (PARTITION BY c.file_id, c.uuid ORDER BY c.k) AS rn
    FROM stray_calls c
    WHERE c.line_no = c.first_line
      AND NOT EXISTS (SELECT 1 FROM answered a WHERE a.file_id = c.file_id
                        AND a.tool_id = c.tool_id
                        AND (a.message_id IS NULL OR a.message_id = c.message_id)))
  WHERE rn = 1
),
-- parallel: put back with a response, directly or recovered by tool-call id
-- (a result under a later response's record recovered by an earlier one is
-- put back with the earlier: the greater at).
parallel AS MATERIALIZED (
  SELECT file_id, uuid, max(at) AS at, coalesce(max(rec_at) = max(at), 0) AS recovered FROM (
    SELECT file_id, uuid, at, NULL AS rec_at FROM parallel_direct
    UNION ALL
    SELECT r.file_id, r.uuid, m.at, m.at FROM recovered r
    JOIN chain_messages m ON m.file_id = r.file_id AND m.message_id = r.message_id)
  GROUP BY file_id, uuid
),
batches AS MATERIALIZED (
  SELECT b.*, {_REGION_END.format(b="b")} AS end_depth
  FROM (
    SELECT a.file_id, n.message_id, max(a.depth) AS first_depth, min(a.depth) AS last_depth
    FROM on_chain a JOIN nodes n ON n.file_id = a.file_id AND n.uuid = a.uuid
    WHERE n.type = 'assistant' AND n.message_id IS NOT NULL
    GROUP BY a.file_id, n.message_id) b
  WHERE EXISTS (SELECT 1 FROM nodes n JOIN records r ON r.id = n.id
                WHERE n.file_id = b.file_id AND n.message_id = b.message_id
                  AND n.type = 'assistant' AND {HAS_TOOL_USE.format(r="r")})
),
anchors AS MATERIALIZED (
  SELECT n.file_id, n.uuid, n.is_sidechain, b.first_depth AS at, NULL AS depth, 0 AS lifted
  FROM batches b
  JOIN nodes n ON n.file_id = b.file_id AND n.message_id = b.message_id AND n.type = 'assistant'
  UNION
  SELECT t.file_id, t.uuid, t.is_sidechain, b.first_depth, NULL, 0 FROM batches b
  JOIN nodes n ON n.file_id = b.file_id AND n.message_id = b.message_id AND n.type = 'assistant'
  JOIN loaded t ON t.file_id = n.file_id AND t.parent = n.uuid
  WHERE t.type = 'user' AND t.is_tool_result
  UNION
  SELECT t.file_id, t.uuid, t.is_sidechain, b.first_depth, NULL, NOT EXISTS (
           SELECT 1 FROM nodes q WHERE q.file_id = t.file_id AND q.uuid = t.parent
             AND q.type = 'assistant' AND q.message_id = b.message_id) FROM batches b
  JOIN recovered r ON r.file_id = b.file_id AND r.message_id = b.message_id
  JOIN loaded t ON t.file_id = r.file_id AND t.uuid = r.uuid
  UNION
  SELECT n.file_id, n.uuid, n.is_sidechain, b.first_depth, a.depth, 0 FROM batches b
  JOIN on_chain a ON a.file_id = b.file_id AND a.depth < b.first_depth AND a.depth > b.end_depth
  JOIN nodes n ON n.file_id = a.file_id AND n.uuid = a.uuid
  WHERE {COMPANION_RECORD.format(r="n")}
),
-- links: the loaded records off the chain and not parallel a line may run
-- through (LINE_LINK: companion records, virtual calls). line: from each
-- anchor (of the response at `at`) down its loaded children while they are
-- links of its side.
links AS MATERIALIZED (
  SELECT c.file_id, c.uuid, c.parent, c.is_sidechain FROM loaded c
  JOIN records cr ON cr.id = c.id
  WHERE {LINE_LINK.format(n="c", raw="cr")}
    AND NOT EXISTS (SELECT 1 FROM on_chain a WHERE a.file_id = c.file_id AND a.uuid = c.uuid)
    AND NOT EXISTS (SELECT 1 FROM parallel q WHERE q.file_id = c.file_id AND q.uuid = c.uuid)
    AND NOT EXISTS (SELECT 1 FROM cut k WHERE k.file_id = c.file_id AND k.uuid = c.uuid)
),
line(file_id, start, side, at, uuid, steps, anchor_depth, lifted) AS (
  SELECT c.file_id, c.uuid, p.is_sidechain, p.at, c.uuid, 0, p.depth,
         CASE WHEN p.lifted THEN p.uuid END
  FROM anchors p JOIN links c ON c.file_id = p.file_id AND c.parent = p.uuid
  WHERE c.is_sidechain = p.is_sidechain
  UNION ALL
  SELECT c.file_id, w.start, w.side, w.at, c.uuid, w.steps + 1, w.anchor_depth, w.lifted
  FROM line w
  JOIN links c ON c.file_id = w.file_id AND c.parent = w.uuid
  JOIN files b ON b.id = w.file_id
  WHERE w.steps <= b.line_count AND c.is_sidechain = w.side
),
lines AS MATERIALIZED (SELECT * FROM line),
-- loose: the records off the chain (what a line meets below a link), with
-- whether each could go on a line (LINE_LINK) and, for a parallel record,
-- the at of its response: it is visited for the lines of that response and
-- of those before it (at or greater), not for earlier ones (walk.put_back_with_results).
loose AS MATERIALIZED (
  SELECT c.file_id, c.parent AS parent_uuid, c.is_sidechain,
         {LINE_LINK.format(n="c", raw="cr")} AND q.uuid IS NULL AS companion, q.at AS par_at
  FROM loaded c JOIN records cr ON cr.id = c.id
  LEFT JOIN parallel q ON q.file_id = c.file_id AND q.uuid = c.uuid
  WHERE NOT EXISTS (SELECT 1 FROM on_chain a WHERE a.file_id = c.file_id AND a.uuid = c.uuid)
    AND NOT EXISTS (SELECT 1 FROM cut k WHERE k.file_id = c.file_id AND k.uuid = c.uuid)
),
-- a line (of one start and one response) is left whole when a link has
-- two unvisited children, or one that is not on the line (another type,
-- the other side).
lines_kept AS MATERIALIZED (
  SELECT w.file_id, w.uuid, w.start, w.at, w.steps, w.anchor_depth, w.lifted FROM lines w
  WHERE NOT EXISTS (
    SELECT 1 FROM lines x JOIN files b ON b.id = x.file_id
    WHERE x.file_id = w.file_id AND x.start = w.start AND x.at = w.at AND (
      x.steps > b.line_count
      OR (SELECT count(*) FROM loose c
          WHERE c.file_id = x.file_id AND c.parent_uuid = x.uuid
            AND (c.par_at IS NULL OR c.par_at < x.at)) > 1
      OR EXISTS (SELECT 1 FROM loose c
                 WHERE c.file_id = x.file_id AND c.parent_uuid = x.uuid
                   AND (c.par_at IS NULL OR c.par_at < x.at)
                   AND NOT (c.companion AND c.is_sidechain = x.side))))
),
-- Rows ahead of a put-back result (walk.rows_ahead_put_back), in the files
-- that have a record naming them (ahead_files). Each part below is named
-- once, by the next (SQLite copies a CTE and all it rests on wherever it
-- is named, and ahead_marks rests on the put-back lines): what a later
-- part reads of the records travels as JSON, keyed by record id.
-- ahead_marks: the loaded records, each with the record id of its parent
-- (parent_id), whether it is on the loader's chain (placed: on the resume
-- chain, put back with a response on it, directly or recovered by
-- tool-call id, or on a put-back line) or cut by a rewind, whether it may
-- be a row (a companion record or a prompt queued while the tool ran,
-- records.AHEAD_ROW), its tool blocks as a_r() reads them (records.CALL_BLOCKS), and, for an
-- assistant record, the line and parent of its response's first record on
-- the resume chain. ahead_map: per file, `map` (id -> [parent_id, seen,
-- line, type, sidechain, row kind, on the chain, first line, first
-- parent]), `chain` (the records on it: [place, type, tool blocks]) and the
-- results on it that name rows ([id, sidechain, names]). ahead_up: each
-- name's loaded record: seen (skipped), not such a row or not loaded (the
-- result puts back none), or walked up the parents (at most AHEAD_MAX
-- steps) to the seen record it hangs under. ahead_list and ahead_seq take
-- the results one by one, as Krn() does, the rows each puts back on the
-- chain for the next.
ahead_files AS MATERIALIZED (
  SELECT DISTINCT r.file_id FROM records r
  JOIN scope_files f ON f.file_id = r.file_id AND f.kind = 'main'
  WHERE r.rows_ahead IS NOT NULL
),
-- kept_by_file: the put-back lines of each file (lines_kept, named here
-- only: it rests on most of the put-back rules), which travel through the
-- parts below to put_lines, with the rows put back ahead of results;
-- line_marks: per record of a line, [uuid, the line's start, the at of
-- the response that puts it back, its step down the line, the depth of
-- the anchor when it is a companion record on the chain, the anchor when
-- it is a result recovered by tool-call id read under no record of its
-- response].
kept_by_file AS MATERIALIZED (
  SELECT file_id, json_group_array(uuid) AS lines,
         json_group_array(json_array(uuid, start, at, steps, anchor_depth, lifted))
           AS line_marks
  FROM lines_kept GROUP BY file_id
),
-- ahead_spans: per file of those, `spans`: per response on the chain, by
-- the depth of its first record (at), [the depth of the first record
-- past its region (-1: none), its message id].
ahead_spans AS MATERIALIZED (
  SELECT af.file_id, (
    SELECT json_group_object(b.at, json_array({_REGION_END.format(b="b")},
           b.message_id))
    FROM (SELECT a.file_id, n.message_id, max(a.depth) AS at, min(a.depth) AS last_depth
          FROM on_chain a JOIN nodes n ON n.file_id = a.file_id AND n.uuid = a.uuid
          WHERE a.file_id = af.file_id AND n.type = 'assistant' AND n.message_id IS NOT NULL
          GROUP BY a.file_id, n.message_id) b) AS spans
  FROM ahead_files af
),
-- ahead_marks: the loaded records, each with the record id of its parent
-- (parent_id), whether it is on the loader's chain (placed: on the resume
-- chain, put back with a response on it, directly or recovered by
-- tool-call id, or on a put-back line) or cut by a rewind, whether it may
-- be a row (a companion record or a prompt queued while the tool ran,
-- records.AHEAD_ROW), its tool blocks as a_r() reads them (records.CALL_BLOCKS), and where RRr()
-- puts it (walk.loader_chain): loaded_at, its place in the loader's Map
-- (LOADER_PLACE); for one
-- put back, grp_at and grp_end, the span of the response that puts it
-- back (a line's: the first response, root first, that keeps it), and
-- either anchor_depth, start_at and steps (a line under a companion record
-- on the chain: right after it, by its start's first line and its step)
-- or ht0, the loader's sort key but for the lift (its loaded_at, for a
-- line under a result recovered by tool-call id no earlier than that
-- result's) and lift (a result recovered by tool-call id read under no
-- record of its response, or a line under one), with `walked` (the
-- chain's records, [depth, place]) to place it by. Below, msg_at
-- (ahead_grp): an assistant record's response's at; ht (ahead_run): ht0
-- lifted to no earlier than just after the last loaded record of the
-- response.
ahead_marks AS MATERIALIZED (
  SELECT x.id, coalesce(x.file_id, kb.file_id) AS file_id, x.uuid, x.type,
         x.is_sidechain, x.is_tool_result, x.line_no, x.parent_id, x.message_id,
         x.depth, x.placed OR m.value IS NOT NULL AS placed, x.is_cut, x.row_kind, x.ids,
         x.rows_ahead, x.loaded_at, kb.lines, {_AHEAD_GROUP} AS grp_at,
         json_extract(x.spans, '$."' || {_AHEAD_GROUP} || '"[0]') AS grp_end,
         m.value ->> '$[4]' AS anchor_depth,
         CASE WHEN m.value ->> '$[4]' IS NOT NULL THEN m.value ->> '$[3]' END AS steps,
         CASE WHEN m.value ->> '$[4]' IS NOT NULL THEN (
           SELECT {LOADER_PLACE.format(file="x.file_id", uuid="m.value ->> '$[1]'")}) END
           AS start_at,
         CASE WHEN x.par_at IS NOT NULL THEN x.loaded_at
              WHEN m.value IS NOT NULL AND m.value ->> '$[4]' IS NULL
              THEN CASE WHEN m.value ->> '$[5]' IS NOT NULL THEN max(x.loaded_at, (
                SELECT {LOADER_PLACE.format(file="x.file_id", uuid="m.value ->> '$[5]'")}))
                ELSE x.loaded_at END END AS ht0,
         CASE WHEN x.par_at IS NOT NULL THEN x.lifted
              WHEN m.value IS NOT NULL AND m.value ->> '$[4]' IS NULL
              THEN m.value ->> '$[5]' IS NOT NULL END AS lift,
         CASE WHEN {_AHEAD_GROUP} IS NOT NULL THEN (
           SELECT json_group_array(json_array(w.depth, (
             SELECT {LOADER_PLACE.format(file="w.file_id", uuid="w.uuid")})))
           FROM on_chain w WHERE w.file_id = x.file_id) END AS walked
  FROM kept_by_file kb FULL JOIN (
    SELECT l.id, l.file_id, l.uuid, l.type, l.is_sidechain, l.is_tool_result, n.line_no,
           p.id AS parent_id, n.message_id, a.depth,
           a.uuid IS NOT NULL OR q.uuid IS NOT NULL AS placed,
           CASE WHEN a.uuid IS NULL THEN q.at END AS par_at,
           q.recovered AND (p.type IS NOT 'assistant' OR p.message_id IS NOT json_extract(
             sp.spans, '$."' || q.at || '"[1]')) AS lifted,
           EXISTS (SELECT 1 FROM cut k WHERE k.file_id = l.file_id AND k.uuid = l.uuid)
             AS is_cut,
           CASE WHEN {COMPANION_RECORD.format(r="l")} AND {AHEAD_ROW.format(r="r")} > 0 THEN 1
                WHEN l.type = 'user' AND NOT l.is_tool_result AND {AHEAD_ROW.format(r="r")} = 2
                THEN 1 ELSE 0 END AS row_kind,
           CASE WHEN l.type IN ('user', 'assistant') THEN {CALL_BLOCKS.format(r="r")} END AS ids,
           r.rows_ahead, {LOADER_PLACE.format(file="l.file_id", uuid="l.uuid")} AS loaded_at,
           sp.spans
    FROM ahead_spans sp JOIN loaded l ON l.file_id = sp.file_id
    JOIN nodes n ON n.id = l.id JOIN records r ON r.id = l.id
    LEFT JOIN nodes p ON p.file_id = l.file_id AND p.uuid = l.parent
    LEFT JOIN on_chain a ON a.file_id = l.file_id AND a.uuid = l.uuid
    LEFT JOIN parallel q ON q.file_id = l.file_id AND q.uuid = l.uuid) x
  ON x.file_id = kb.file_id
  LEFT JOIN json_each(kb.line_marks) m ON m.value ->> '$[0]' = x.uuid
    AND x.placed = 0
    AND NOT EXISTS (SELECT 1 FROM json_each(kb.line_marks) o
                    WHERE o.value ->> '$[0]' = x.uuid
                      AND (o.value ->> '$[2]' > m.value ->> '$[2]'
                           OR (o.value ->> '$[2]' = m.value ->> '$[2]' AND o.key < m.key)))
),
-- The order of the chain RRr() hands Krn() (walk.loader_chain), in steps:
-- ahead_grp: each put-back record with whether its response's span joins
-- the run of spans before it (spans that overlap are merged: it starts
-- above the end of a span before it); ahead_run: the depth where its run
-- starts (and ht); ahead_end: where the run ends; ahead_key: the record's place
-- (slot, sub): a record of the walked chain at its depth, a line under a
-- companion record on it right after that record, a record put back with
-- a response before the first record of the run loaded after its ht,
-- else at the run's end; ahead_pos: pos, the place as a number (placed
-- records only, a cut one aside).
ahead_grp AS MATERIALIZED (
  SELECT m.*, CASE WHEN m.type = 'assistant' AND m.message_id IS NOT NULL THEN max(m.depth) OVER (
           PARTITION BY m.file_id, m.type, m.message_id) END AS msg_at,
         coalesce(m.grp_at > min(CASE WHEN m.grp_at IS NOT NULL THEN m.grp_end END) OVER (
           PARTITION BY m.file_id ORDER BY m.grp_at DESC
           RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS joins
  FROM ahead_marks m
),
ahead_run AS MATERIALIZED (
  SELECT g.*, CASE WHEN g.lift THEN max(g.ht0, max(CASE WHEN g.msg_at IS NOT NULL
           THEN g.loaded_at END) OVER (PARTITION BY g.file_id, coalesce(g.msg_at, g.grp_at))
           + 0.5) ELSE g.ht0 END AS ht,
         CASE WHEN g.grp_at IS NOT NULL THEN min(
           CASE WHEN g.grp_at IS NOT NULL AND NOT g.joins THEN g.grp_at END) OVER (
           PARTITION BY g.file_id ORDER BY g.grp_at DESC
           RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) END AS run_at
  FROM ahead_grp g
),
ahead_end AS MATERIALIZED (
  SELECT r.*, min(r.grp_end) OVER (PARTITION BY r.file_id, r.run_at) AS run_end
  FROM ahead_run r
),
ahead_key AS MATERIALIZED (
  SELECT e.*,
    CASE WHEN e.depth IS NOT NULL THEN e.depth
         WHEN e.anchor_depth IS NOT NULL THEN e.anchor_depth
         WHEN e.ht IS NOT NULL THEN coalesce((
           SELECT max(w.value ->> '$[0]') FROM json_each(e.walked) w
           WHERE w.value ->> '$[0]' < e.run_at AND w.value ->> '$[0]' > e.run_end
             AND w.value ->> '$[1]' > e.ht), e.run_end) END AS slot,
    CASE WHEN e.depth IS NOT NULL THEN 1 WHEN e.anchor_depth IS NOT NULL THEN 2 ELSE 0 END
      AS sub
  FROM ahead_end e
),
ahead_pos AS MATERIALIZED (
  SELECT k.*, CASE WHEN k.placed AND NOT k.is_cut THEN row_number() OVER (
           PARTITION BY k.file_id, k.placed AND NOT k.is_cut
           ORDER BY k.slot DESC, k.sub, coalesce(k.ht, k.start_at), k.steps, k.loaded_at)
         END AS pos
  FROM ahead_key k
),
ahead_map AS MATERIALIZED (
  SELECT file_id, min(lines) AS lines,
    json_group_object(id, json_array(parent_id, placed OR is_cut, pos, type, is_sidechain,
                                     row_kind, placed AND NOT is_cut, first_pos, first_parent,
                                     json(CASE WHEN row_kind AND type = 'user' THEN ids END)))
      FILTER (WHERE id IS NOT NULL) AS map,
    json_group_array(json_array(pos, type, json(coalesce(ids, '[]'))))
      FILTER (WHERE placed AND NOT is_cut) AS chain,
    json_group_array(json_array(id, is_sidechain, json(rows_ahead)))
      FILTER (WHERE placed AND NOT is_cut AND type = 'user' AND is_tool_result
              AND rows_ahead IS NOT NULL AND json_array_length(rows_ahead) <= {AHEAD_MAX})
      AS results
  FROM (SELECT m.*,
          CASE WHEN m.message_id IS NOT NULL AND m.type = 'assistant' THEN first_value(m.pos) OVER w
          END AS first_pos,
          CASE WHEN m.message_id IS NOT NULL AND m.type = 'assistant'
               THEN first_value(CASE WHEN m.pos IS NOT NULL THEN m.parent_id END) OVER w
          END AS first_parent
        FROM ahead_pos m
        WINDOW w AS (PARTITION BY m.file_id, m.type, m.message_id
                     ORDER BY m.pos IS NULL, m.pos))
  GROUP BY file_id
),
ahead_up(file_id, lines, map, chain, result, k, name, name_id, state, at, path, steps) AS (
  SELECT n.file_id, n.lines, n.map, n.chain, n.result, n.k, n.name, n.name_id, CASE
      WHEN n.carrier THEN 'carrier'
      WHEN n.row IS NULL THEN 'missing'
      WHEN n.row ->> '$[1]' THEN 'seen'
      WHEN n.row ->> '$[4]' IS NOT n.side OR NOT n.row ->> '$[5]' THEN 'missing'
      ELSE 'walk' END, n.row ->> '$[0]', json_array(n.row ->> '$[0]'), 0
  FROM (SELECT n.*, json_extract(n.map, '$."' || n.name_id || '"') AS row
        -- (a null result after the others carries the file's lines)
        FROM (SELECT m.file_id, m.lines, m.map, m.chain, y.value ->> '$[0]' AS result,
                     y.value IS NULL AS carrier,
                     y.value ->> '$[1]' AS side, j.key AS k, j.value AS name,
                     (SELECT p.id FROM nodes p WHERE p.file_id = m.file_id
                        AND p.uuid = j.value AND j.type = 'text') AS name_id
              FROM ahead_map m, json_each(json_insert(m.results, '$[#]', NULL)) y
              LEFT JOIN json_each(y.value, '$[2]') j) n) n
  UNION ALL
  SELECT u.file_id, u.lines, u.map, u.chain, u.result, u.k, u.name, u.name_id, u.state,
         json_extract(u.map, '$."' || u.at || '"[0]'),
         json_insert(u.path, '$[#]', json_extract(u.map, '$."' || u.at || '"[0]')), u.steps + 1
  FROM ahead_up u
  WHERE u.state = 'walk' AND u.steps <= {AHEAD_MAX}
    AND NOT json_extract(u.map, '$."' || u.at || '"[1]')
),
-- ahead_list: per file, the results in line order (the order Krn() takes
-- them in, by line), each [id, its line, its parent's record, names]; a
-- name [uuid, id, state, hang, path]: hang, the seen record its walk
-- reached; path, the records the walk went through (a row an earlier
-- result put back there is where it hangs).
ahead_list AS MATERIALIZED (
  SELECT file_id, min(lines) AS lines, min(map) AS map, min(chain) AS chain,
         json_group_array(json_array(result, json_extract(map, '$."' || result || '"[2]'),
           json(json_extract(map, '$."' || json_extract(map, '$."' || result || '"[0]') || '"')),
           json(names))) FILTER (WHERE result IS NOT NULL) AS results
  FROM (SELECT file_id, min(lines) AS lines, min(map) AS map, min(chain) AS chain, result,
               json_group_array(json_array(name, name_id, state, hang, json(path))) AS names
        FROM (SELECT u.*,
                CASE WHEN u.state = 'walk' AND json_extract(u.map, '$."' || u.at || '"[1]')
                     THEN u.at END AS hang,
                row_number() OVER (PARTITION BY u.file_id, u.result, u.k
                                   ORDER BY u.steps DESC) AS rn
              FROM ahead_up u)
        WHERE rn = 1
        GROUP BY file_id, result
        ORDER BY file_id, json_extract(min(map), '$."' || result || '"[2]'))
  GROUP BY file_id
),
-- ahead_seq: the results taken one by one (i), with the ids of the rows
-- put back so far (taken: on the chain, seen, for the next) and their
-- uuids (rows). A result puts its rows back when each name is loaded and
-- seen or such a row of its side, the unseen ones hang under one record
-- (the first taken row on a name's walk, else where the walk ended), and
-- the places on the chain allow it (by line: the first record on the
-- resume chain of the parent's response, where the rows hang, the result;
-- an open call before an assistant record in between).
ahead_seq(file_id, lines, map, chain, results, i, taken, spot, rows) AS (
  SELECT file_id, lines, map, chain, results, 0, '[]', '{{}}', '[]' FROM ahead_list
  UNION ALL
  SELECT s.file_id, s.lines, s.map, s.chain, s.results, s.i + 1,
    CASE WHEN v.value IS NULL THEN s.taken ELSE (SELECT json_group_array(x.value) FROM (
      SELECT value FROM json_each(s.taken) UNION ALL
      SELECT value FROM json_each(v.value, '$.ids')) x) END,
    CASE WHEN v.value IS NULL THEN s.spot ELSE (SELECT json_group_object(x.key, x.value) FROM (
      SELECT key, value FROM json_each(s.spot) UNION ALL
      SELECT value, v.value ->> '$.at' FROM json_each(v.value, '$.ids')) x) END,
    CASE WHEN v.value IS NULL THEN s.rows ELSE (SELECT json_group_array(x.value) FROM (
      SELECT value FROM json_each(s.rows) UNION ALL
      SELECT value FROM json_each(v.value, '$.rows')) x) END
  FROM ahead_seq s, json_each(json_array((
    SELECT CASE WHEN a.ok AND a.p ->> '$[3]' = 'assistant' AND a.p ->> '$[7]' IS NOT NULL
      AND a.on_chain AND a.h_pos < a.y_pos
      AND (a.hang = a.p ->> '$[8]' OR a.p ->> '$[7]' <= a.h_pos)
      AND NOT (a.h ->> '$[3]' = 'assistant'
        AND EXISTS (
          SELECT 1 FROM {_AHEAD_SPAN.format(x="sn")}, json_each(sn.blocks) sj
          WHERE sj.value ->> '$[0]'
            AND sn.pos BETWEEN a.p ->> '$[7]' AND a.h_pos
            AND NOT EXISTS (
              SELECT 1 FROM {_AHEAD_SPAN.format(x="tn")}, json_each(tn.blocks) tj
              WHERE NOT tj.value ->> '$[0]' AND tj.value ->> '$[1]' IS sj.value ->> '$[1]'
                AND (tn.pos > sn.pos OR (tn.pos = sn.pos AND tj.key > sj.key))
                AND tn.pos <= a.h_pos))
        AND EXISTS (
          SELECT 1 FROM json_each(s.chain) bn
          WHERE bn.value ->> '$[1]' = 'assistant'
            AND bn.value ->> '$[0]' > a.h_pos AND bn.value ->> '$[0]' < a.y_pos))
      THEN json_object('ids', json(a.ids), 'rows', json(a.names),
                       'at', CAST(a.h_pos AS INTEGER) + 0.5) END
    FROM (SELECT a.*, json_extract(s.map, '$."' || a.hang || '"') AS h,
                 coalesce(json_extract(s.spot, '$."' || a.hang || '"'),
                          json_extract(s.map, '$."' || a.hang || '"[2]')) AS h_pos,
                 a.hang IN (SELECT value FROM json_each(s.taken))
                   OR json_extract(s.map, '$."' || a.hang || '"[6]') AS on_chain
          FROM (SELECT json_extract(s.results, '$[' || s.i || '][2]') AS p,
                       json_extract(s.results, '$[' || s.i || '][1]') AS y_pos,
                       sum(e.value ->> '$[2]' = 'missing') = 0
                         AND sum(e.value ->> '$[2]' = 'walk') > 0
                         AND sum(e.value ->> '$[2]' = 'walk' AND e.value ->> '$[3]' IS NULL) = 0
                         AND count(DISTINCT CASE WHEN e.value ->> '$[2]' = 'walk'
                                                 THEN e.value ->> '$[3]' END) = 1 AS ok,
                       min(CASE WHEN e.value ->> '$[2]' = 'walk'
                                THEN e.value ->> '$[3]' END) AS hang,
                       json_group_array(e.value ->> '$[1]')
                         FILTER (WHERE e.value ->> '$[2]' = 'walk') AS ids,
                       json_group_array(e.value ->> '$[0]')
                         FILTER (WHERE e.value ->> '$[2]' = 'walk') AS names
                -- each name as the loader reads it now: [uuid, id, state, hang]
                FROM json_each((
                  SELECT json_group_array(json_array(n.value ->> '$[0]', n.value ->> '$[1]',
                    CASE WHEN n.value ->> '$[1]' IN (SELECT value FROM json_each(s.taken))
                         THEN 'seen' ELSE n.value ->> '$[2]' END,
                    CASE WHEN n.value ->> '$[2]' = 'walk' THEN coalesce((
                      SELECT w.value FROM json_each(n.value, '$[4]') w
                      WHERE w.value IN (SELECT value FROM json_each(s.taken))
                      ORDER BY CAST(w.key AS INTEGER) LIMIT 1), n.value ->> '$[3]') END))
                  FROM json_each(s.results, '$[' || s.i || '][3]') n)) e) a) a))) v
  WHERE s.i < json_array_length(s.results)
),
-- put_lines: what is put back with a parallel result: the put-back lines
-- and the rows put back ahead of results.
put_lines AS MATERIALIZED (
  SELECT DISTINCT s.file_id, j.value AS uuid FROM ahead_seq s
  JOIN (SELECT 0 AS w UNION ALL SELECT 1) w
  JOIN json_each(CASE w.w WHEN 0 THEN s.rows ELSE s.lines END) j
  WHERE s.i = json_array_length(s.results)
),
off AS MATERIALIZED (
  SELECT n.* FROM nodes n JOIN scope_files f ON f.file_id = n.file_id
  WHERE f.kind = 'main'
    AND NOT EXISTS (SELECT 1 FROM on_chain a WHERE a.file_id = n.file_id AND a.uuid = n.uuid)
),
down(file_id, uuid, branch_point, origin, steps, root) AS (
  SELECT o.file_id, o.uuid, o.eff_parent, 'ancestry', 0, o.uuid
  FROM off o
  WHERE EXISTS (SELECT 1 FROM on_chain a WHERE a.file_id = o.file_id AND a.uuid = o.eff_parent)
  UNION ALL
  SELECT o.file_id, o.uuid, NULL, 'unlinked', 0, o.uuid
  FROM off o WHERE o.eff_parent IS NULL
  UNION ALL
  SELECT o.file_id, o.uuid, NULL, 'dangling_parent', 0, o.uuid
  FROM off o
  WHERE o.eff_parent IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM nodes p WHERE p.file_id = o.file_id AND p.uuid = o.eff_parent)
  UNION ALL
  SELECT c.file_id, {NAME_OF.format(r="c")}, d.branch_point, d.origin, d.steps + 1, d.root
  FROM down d
  JOIN records c ON c.file_id = d.file_id AND c.parent_uuid = d.uuid
  JOIN files b ON b.id = d.file_id
  WHERE d.steps <= b.line_count AND {_IS_CLI_LINE.format(n="c")}
    AND NOT EXISTS (SELECT 1 FROM leaf_ancestry_cache a WHERE a.file_id = c.file_id
                    AND a.rule = 'resume' AND a.uuid = {NAME_OF.format(r="c")})
  UNION ALL
  SELECT c.file_id, c.uuid, d.branch_point, d.origin, d.steps + 1, d.root
  FROM down d
  JOIN records c ON c.file_id = d.file_id AND c.logical_parent_uuid = d.uuid
  JOIN files b ON b.id = d.file_id
  WHERE d.steps <= b.line_count AND c.parent_uuid IS NULL
    AND {COMPACT_BOUNDARY_RECORD.format(r="c")}
    AND {_IS_CLI_LINE.format(n="c")}
    AND NOT EXISTS (SELECT 1 FROM leaf_ancestry_cache a WHERE a.file_id = c.file_id
                    AND a.rule = 'resume' AND a.uuid = c.uuid)
),
reached AS MATERIALIZED (
  SELECT file_id, uuid, branch_point, origin, root FROM down
),
-- grafted: the branches (by their first record, root) a late graft cuts
-- off (walk.is_late_graft): the chain's record below the branch point is a
-- tool result written after root, an earlier result of the same call.
grafted AS MATERIALIZED (
  SELECT DISTINCT d.file_id, d.root FROM (SELECT DISTINCT file_id, root, branch_point
                                          FROM reached WHERE origin = 'ancestry') d
  JOIN on_chain b ON b.file_id = d.file_id AND b.uuid = d.branch_point
  JOIN on_chain x ON x.file_id = b.file_id AND x.depth = b.depth - 1
  JOIN nodes xn ON xn.file_id = x.file_id AND xn.uuid = x.uuid
  JOIN nodes rn ON rn.file_id = d.file_id AND rn.uuid = d.root
  JOIN records xr ON xr.id = xn.id
  JOIN records rr ON rr.id = rn.id
  WHERE xn.uuid <> rn.uuid AND xn.type = 'user' AND xn.is_tool_result
    AND rn.type = 'user' AND rn.is_tool_result AND rn.line_no < xn.line_no
    AND EXISTS (SELECT 1 FROM json_each({TOOL_IDS.format(r="xr")}) a
                JOIN json_each({TOOL_IDS.format(r="rr")}) z ON z.value = a.value)
),
-- concurrent: the branches (by root) another process wrote while the
-- resume chain below their branch point was written (walk.is_concurrent):
-- the branch's messages and those of the chain below interleave in the
-- file, one side's first prompt came before the other side's last message,
-- and the branch starts with a message that is not meta and holds an answer.
concurrent AS MATERIALIZED (
  SELECT br.file_id, br.root FROM (
    SELECT d.file_id, d.root, d.branch_point, min(n.line_no) AS lo, max(n.line_no) AS hi,
           min(CASE WHEN {_PROMPT.format(n="n")} THEN n.line_no END) AS prompt,
           max(n.type = 'assistant') AS answered
    FROM reached d JOIN nodes n ON n.file_id = d.file_id AND n.uuid = d.uuid
    WHERE d.origin = 'ancestry' AND n.type IN ('user', 'assistant') AND NOT n.is_sidechain
    GROUP BY d.file_id, d.root, d.branch_point) br
  JOIN nodes rn ON rn.file_id = br.file_id AND rn.uuid = br.root
  JOIN on_chain b ON b.file_id = br.file_id AND b.uuid = br.branch_point
  JOIN on_chain c ON c.file_id = br.file_id AND c.depth < b.depth
  JOIN nodes cn ON cn.file_id = c.file_id AND cn.uuid = c.uuid
  WHERE cn.type IN ('user', 'assistant') AND rn.type IN ('user', 'assistant')
    AND NOT rn.is_meta AND br.answered
  GROUP BY br.file_id, br.root, br.lo, br.hi, br.prompt, br.answered
  HAVING br.lo < max(cn.line_no) AND min(cn.line_no) < br.hi
    AND (min(CASE WHEN {_PROMPT.format(n="cn")} THEN cn.line_no END) < br.hi
         OR br.prompt < max(cn.line_no))
),
classed AS (
SELECT o.file_id, f.session_id, o.uuid, o.type, o.subtype, o.timestamp,
  CASE
    WHEN o.line_no < lb.line_no THEN 'compacted'
    WHEN o.type = 'progress' THEN 'progress'
    WHEN EXISTS (SELECT 1 FROM recovered v WHERE v.file_id = o.file_id AND v.uuid = o.uuid)
      THEN 'parallel_tool_branch'
    WHEN o.type = 'assistant' AND EXISTS (
           SELECT 1 FROM chain_messages m
           WHERE m.file_id = o.file_id AND m.message_id = o.message_id)
      THEN 'parallel_tool_branch'
    WHEN o.type = 'user' AND o.is_tool_result AND EXISTS (
           SELECT 1 FROM nodes p JOIN chain_messages m
             ON m.file_id = p.file_id AND m.message_id = p.message_id
           WHERE p.file_id = o.file_id AND p.uuid = o.parent_uuid
             AND p.type = 'assistant')
      THEN 'parallel_tool_branch'
    WHEN EXISTS (SELECT 1 FROM put_lines k WHERE k.file_id = o.file_id AND k.uuid = o.uuid)
      THEN 'put_back_with_result'
    WHEN EXISTS (SELECT 1 FROM splice_points s
                 WHERE s.file_id = o.file_id AND s.uuid = d.branch_point)
      THEN 'api_error_splice'
    WHEN {API_ERROR_RECORD.format(r="o")} THEN 'api_error_record'
    WHEN d.origin = 'ancestry' AND EXISTS (SELECT 1 FROM grafted g
                                           WHERE g.file_id = o.file_id AND g.root = d.root)
      THEN 'late_graft'
    WHEN d.origin = 'ancestry' AND EXISTS (SELECT 1 FROM concurrent g
                                           WHERE g.file_id = o.file_id AND g.root = d.root)
      THEN 'concurrent_resume'
    WHEN d.origin = 'dangling_parent' THEN 'dangling_parent'
    WHEN d.origin = 'unlinked' THEN 'unlinked'
    WHEN d.origin = 'ancestry' THEN 'abandoned_branch'
    ELSE 'other'
  END AS cause,
  d.branch_point AS branch_point_uuid,
  o.id AS record_id, o.line_no, o.message_id
FROM off o
JOIN scope_files f ON f.file_id = o.file_id
LEFT JOIN reached d ON d.file_id = o.file_id AND d.uuid = o.uuid
LEFT JOIN boundary lb ON lb.file_id = o.file_id
WHERE NOT o.is_sidechain
)
SELECT c.*,
  (c.cause IN ('parallel_tool_branch', 'put_back_with_result')
   OR (c.type IN ('system','attachment') AND EXISTS (
     SELECT 1 FROM put_back p WHERE p.file_id = c.file_id AND p.uuid = c.uuid AND p.steps > 0)))
    AS restored
FROM classed c
""".strip()

LEAVES_COLUMNS = (
    "file_id, session_id, kind, resume_leaf_id, resume_leaf_uuid, "
    "sdk_leaf_id, sdk_leaf_uuid, leaves_agree, branch_count, resume_rule"
)
LEAF_ANCESTRY_COLUMNS = "file_id, session_id, rule, uuid, depth, record_id"
# The caches' columns where they hold more than their view shows: a leaves
# row also keeps the chain lengths and what derive_append.py carries on from
# (derived_lines: the lines it covers; derive_state: JSON), an ancestry row
# its height instead of its depth.
CACHE_COLUMNS = {
    "leaves": LEAVES_COLUMNS + ", resume_length, sdk_length, derived_lines, derive_state",
    "leaf_ancestry": "file_id, session_id, rule, uuid, height, record_id",
}
ORPHANS_COLUMNS = (
    "file_id, session_id, uuid, type, subtype, timestamp, cause, "
    "branch_point_uuid, record_id, line_no, message_id, restored"
)

# host: every view with a file (or a session) per row has the host that
# file is on: '' for this machine's files and session-store copies, else
# the name a fleet host ships under (`session-index ship --host`), as
# host_copies has it. A scalar subquery on files' primary key, not a join:
# SQLite computes it only for a query that reads host (count(*) or a GROUP
# BY of the view reads no files row; bench/query_speed.py).
HOST_OF = "coalesce((SELECT hf.host FROM files hf WHERE hf.id = {file_id}), '')"


def prefixed(columns: str, alias: str) -> str:
    return ", ".join(f"{alias}.{c}" for c in columns.split(", "))


def with_host(definition: str) -> str:
    """A *_definition view (the specification: slow, rarely read) with host
    added as its view is: DEFINITIONS_HASH is of the definitions without it,
    which is what the caches are computed from."""
    return f"SELECT d.*, {HOST_OF.format(file_id='d.file_id')} AS host FROM (\n{definition}\n) d"


# The contract views, read from the caches (same columns as *_definition).
LEAVES_SQL = (f"SELECT {prefixed(LEAVES_COLUMNS, 'c')}, "
              f"{HOST_OF.format(file_id='c.file_id')} AS host FROM leaves_cache c")
# leaf_ancestry_cache stores a record's height (its distance from the end
# of the walk: 0 at the root), which stays put as the chain grows at its
# leaf (derive_append.py); depth, the distance from the leaf, is the chain's
# length less one less that.
LEAF_ANCESTRY_SQL = f"""
SELECT a.file_id, a.session_id, a.rule, a.uuid,
  CASE a.rule WHEN 'resume' THEN l.resume_length ELSE l.sdk_length END - 1 - a.height AS depth,
  a.record_id, {HOST_OF.format(file_id="a.file_id")} AS host
FROM leaf_ancestry_cache a JOIN leaves_cache l ON l.file_id = a.file_id
""".strip()
ORPHANS_SQL = (f"SELECT {prefixed(ORPHANS_COLUMNS, 'c')}, "
               f"{HOST_OF.format(file_id='c.file_id')} AS host FROM orphans_cache c")

# chain_breaks: chain record lines whose parentUuid names no chain record in
# the same file (the walk from them stops there).
CHAIN_BREAKS_DEFINITION_SQL = f"""
SELECT r.file_id, f.session_id, r.id AS record_id, r.line_no, r.uuid, r.type,
       r.subtype, r.timestamp, r.parent_uuid AS missing_parent_uuid
FROM records r JOIN files f ON f.id = r.file_id AND f.kind IN {TRANSCRIPT_KINDS}
WHERE r.parent_uuid IS NOT NULL AND r.uuid IS NOT NULL
  AND r.type IN {CHAIN_TYPES_SQL}
  AND NOT EXISTS (
    SELECT 1 FROM records p
    WHERE p.file_id = r.file_id AND p.uuid = r.parent_uuid
      AND p.type IN {CHAIN_TYPES_SQL})
""".strip()

# duplicate_uuids: a uuid (on a record of any type) on more than one line of
# a file; line_nos in file order; the last line (kept_line_no) is the one
# both readers use.
DUPLICATE_UUIDS_DEFINITION_SQL = f"""
SELECT d.file_id, f.session_id, d.uuid, count(*) AS copies,
       group_concat(d.line_no, ',') AS line_nos, max(d.line_no) AS kept_line_no
FROM (SELECT file_id, uuid, line_no FROM records WHERE uuid IS NOT NULL
      ORDER BY file_id, uuid, line_no) d
JOIN files f ON f.id = d.file_id AND f.kind IN {TRANSCRIPT_KINDS}
GROUP BY d.file_id, d.uuid
HAVING count(*) > 1
""".strip()

CHAIN_BREAKS_COLUMNS = (
    "file_id, session_id, record_id, line_no, uuid, type, subtype, timestamp, "
    "missing_parent_uuid"
)
DUPLICATE_UUIDS_COLUMNS = "file_id, session_id, uuid, copies, line_nos, kept_line_no"
CHAIN_BREAKS_SQL = (f"SELECT {prefixed(CHAIN_BREAKS_COLUMNS, 'c')}, "
                    f"{HOST_OF.format(file_id='c.file_id')} AS host FROM chain_breaks_cache c")
SENT_NAMES_SQL = (f"SELECT {prefixed(SENT_NAMES_COLUMNS, 'c')}, "
                  f"{HOST_OF.format(file_id='c.file_id')} AS host FROM sent_names_cache c")
DUPLICATE_UUIDS_SQL = (f"SELECT {prefixed(DUPLICATE_UUIDS_COLUMNS, 'c')}, "
                       f"{HOST_OF.format(file_id='c.file_id')} AS host "
                       "FROM duplicate_uuids_cache c")

# Each cache-backed view, with its definition (tests hold them equal).
CACHED_VIEWS = ("leaves", "leaf_ancestry", "orphans", "chain_breaks", "duplicate_uuids")
# The views that read what ingest keeps in SQL as it derives (not the walk's
# caches above), each with its X_definition too (tests hold them equal):
# thinking_faults reads thinking_cache (signals/classes.py), session_forks
# fork_heads_cache (signals/forks.py), usage usage_calls (index/views.py),
# sent_names sent_names_cache (SENT_NAMES_TEMPLATE), verdict_facts
# verdict_facts_cache (signals/verdict.py); usage_day_sums is itself the
# table ingest keeps (its definition sums the usage view's definition per
# day, project and model: index/views.py).
SQL_CACHED_VIEWS = ("thinking_faults", "session_forks", "usage", "sent_names", "usage_day_sums",
                    "verdict_facts")

# --- Which main transcript `claude --resume` opens ------------------------

# Claude Code 2.1.332, `claude --resume <id>` (the experiment and the code it
# rests on are in docs/how-it-works/problem-classes.md): (1) <config>/projects/<folder of the cwd>/<id>.jsonl,
# when that file holds a user or assistant message; (2) the same name in the
# project folders of the cwd's other git worktrees; (3) every
# projects/*/<id>.jsonl with a line holding '"type":"user"' or
# '"type":"assistant"': exactly one is loaded, several are "No conversation
# found". A file not named <id>.jsonl is never opened for that id, whatever
# sessionId its records carry.

# The project folder Claude Code names for the working directory {cwd} (an
# SQL expression): every character outside [A-Za-z0-9] becomes '-' (JavaScript
# replaces UTF-16 code units, so a character beyond U+FFFF becomes '--'). A
# name over 200 characters gets a hash suffix the index cannot compute:
# IN_CWD_PROJECT compares the first 200 characters and the '-', as the CLI's
# own fallback for such names does (it then checks the cwd the folder's
# transcripts carry, which is {cwd} here). The recursion stops at the end of
# the string.
PROJECT_FOLDER_TEMPLATE = """(WITH RECURSIVE chars(i, folder) AS (
    SELECT 1, ''
    UNION ALL
    SELECT i + 1, folder || CASE
      WHEN substr({cwd}, i, 1) GLOB '[A-Za-z0-9]' THEN substr({cwd}, i, 1)
      WHEN unicode(substr({cwd}, i, 1)) > 65535 THEN '--' ELSE '-' END
    FROM chars WHERE i <= length({cwd}))
  SELECT folder FROM chars ORDER BY i DESC LIMIT 1)"""
IN_CWD_PROJECT_TEMPLATE = """(SELECT CASE WHEN length(folder) <= 200 THEN {project_dir} = folder
    ELSE substr({project_dir}, 1, 201) = substr(folder, 1, 200) || '-' END
  FROM (SELECT """ + PROJECT_FOLDER_TEMPLATE + """ AS folder))"""

# One row per main transcript (of the sessions {where} selects) with what
# decides whether `claude --resume <session_id>` opens it: named (a local file
# named <session_id>.jsonl), on_disk (not deleted), has_messages (a user or
# assistant record: the CLI loads nothing from a file without one),
# scan_visible (a line holding the compact '"type":"user"' or
# '"type":"assistant"' text the CLI's all-folders scan looks for),
# in_cwd_project (its folder is the project folder of the cwd its records
# carry: the file a resume from the session's own working directory opens).
# scan_visible reads every line of a file that has none (a file written with
# spaces after its colons, by another tool or by hand): the rule below does
# not use it, so MAIN_FILE_RULE_FACTS_TEMPLATE, which the session refresh of
# every append runs, leaves it out (an append stays O(1) for any spacing).
SCAN_VISIBLE_COLUMN = """
  EXISTS (SELECT 1 FROM records r WHERE r.file_id = f.id
          AND (instr(r.raw, '"type":"user"') OR instr(r.raw, '"type":"assistant"'))) AS scan_visible,"""
_MAIN_FILE_FACTS = """
SELECT f.id AS file_id, f.session_id, coalesce(f.host, '') AS host, f.path, f.project_dir,
  f.cwd, f.origin, f.mtime, f.deleted_at, f.records,
  coalesce(f.origin IN ('file', 'fleet') AND substr(f.path, -length(f.session_id) - 7)
    = '/' || f.session_id || '.jsonl', 0) AS named,
  f.deleted_at IS NULL AS on_disk,
  EXISTS (SELECT 1 FROM records r WHERE r.file_id = f.id AND r.type IN ('user', 'assistant')
          AND r.uuid IS NOT NULL) AS has_messages,@SCAN_VISIBLE@
  coalesce(f.cwd <> '' AND """ + IN_CWD_PROJECT_TEMPLATE.format(
    project_dir="f.project_dir", cwd="f.cwd") + """, 0) AS in_cwd_project
FROM files f
WHERE f.kind = 'main' AND {where}
""".strip()
MAIN_FILE_FACTS_TEMPLATE = _MAIN_FILE_FACTS.replace("@SCAN_VISIBLE@", SCAN_VISIBLE_COLUMN)
MAIN_FILE_RULE_FACTS_TEMPLATE = _MAIN_FILE_FACTS.replace("@SCAN_VISIBLE@", "")

# The session's chosen main transcript (sessions.main_file_id) and why
# (sessions.main_file_rule), from the facts above, the first that applies:
#   only_named            the one file named <id>.jsonl on disk with messages:
#                         the CLI opens it from any cwd (from another folder's
#                         cwd through its scan of every project folder)
#   named_in_cwd_project  several such files: the one in the project folder of
#                         the cwd its records carry (the session's working
#                         directory); from a cwd whose folder holds another,
#                         the CLI opens that one, and from a cwd whose folder
#                         holds none it finds several and fails
#   named_newest          several, none in its own cwd's folder: the newest by
#                         mtime (which one a resume opens depends on its cwd)
#   store_copy            no local named file with messages: the session-store
#                         copy (a resume must load it through the Agent SDK)
#   named_no_messages     a named file without a user or assistant record: the
#                         CLI finds no conversation in it
#   not_named             only files not named <id>.jsonl (a fork or copy that
#                         kept the id in its records): the CLI never opens them
#   deleted               every main file is gone: the one to restore (named
#                         first, then in its cwd's folder, then the newest)
# Ties: named, in_cwd_project, the newest mtime, the highest files.id.
MAIN_FILE_RULE_TEMPLATE = """CASE
  WHEN {f}.named AND {f}.on_disk AND {f}.has_messages THEN CASE
    WHEN {loadable} = 1 THEN 'only_named'
    WHEN {f}.in_cwd_project THEN 'named_in_cwd_project'
    ELSE 'named_newest' END
  WHEN {f}.origin = 'store' THEN 'store_copy'
  WHEN {f}.named AND {f}.on_disk THEN 'named_no_messages'
  WHEN {f}.on_disk THEN 'not_named'
  ELSE 'deleted' END"""
MAIN_FILE_RULES = ("only_named", "named_in_cwd_project", "named_newest", "store_copy",
                   "named_no_messages", "not_named", "deleted")
MAIN_FILE_RANK_TEMPLATE = ("CASE {rule} " + " ".join(
    f"WHEN '{r}' THEN {i}" for i, r in enumerate(MAIN_FILE_RULES)) + " END")
# The rules under which a bare `claude --resume <id>` opens the chosen file
# (from the right cwd).
OPENED_BY_RESUME = ("only_named", "named_in_cwd_project", "named_newest")

# 1 when file {file}'s resume chain holds no real assistant message (one that
# is not a synthetic placeholder, records.SYNTHETIC_RECORD):
# a poisoned tail then has nothing to be cut back to (repair cannot help; a
# new session is the way on).
NOTHING_TO_CUT_TEMPLATE = f"""NOT EXISTS (
  SELECT 1 FROM leaf_ancestry_cache k JOIN records t ON t.id = k.record_id
  WHERE k.file_id = {{file}} AND k.rule = 'resume' AND t.type = 'assistant'
    AND NOT ({SYNTHETIC_RECORD.format(r="t")}))"""


# api_error_splices: one row per spliced episode (seed 000): a branch point on
# the resume ancestry whose child on the ancestry is an api_error record and
# whose other branches hold the orphaned output. api_error_uuid is that
# child; the counts and times are over the episode's api_error_splice orphans
# (records before the last compaction are 'compacted', so an episode that lies
# wholly before it is history and has no row). {files} narrows it to some
# files' orphans (" AND o.file_id = ..."; the view: all of them): a filter
# SQLite cannot push into the grouped view from a correlated subquery.
API_ERROR_SPLICES_TEMPLATE = """
SELECT o.file_id, o.session_id, child.uuid AS api_error_uuid,
       o.branch_point_uuid,
       count(*) AS orphaned_records,
       count(DISTINCT CASE WHEN o.type = 'assistant'
                           THEN coalesce(o.message_id, o.uuid) END)
         AS orphaned_assistant_messages,
       min(o.timestamp) AS first_orphan_at,
       max(o.timestamp) AS last_orphan_at,
       round((julianday(max(o.timestamp)) - julianday(min(o.timestamp))) * 1440, 1)
         AS minutes_spanned,
       o.host
FROM orphans o
JOIN leaf_ancestry_cache bp ON bp.file_id = o.file_id AND bp.rule = 'resume'
  AND bp.uuid = o.branch_point_uuid
JOIN leaf_ancestry_cache child ON child.file_id = o.file_id AND child.rule = 'resume'
  AND child.height = bp.height + 1
WHERE o.cause = 'api_error_splice'{files}
GROUP BY o.file_id, o.branch_point_uuid
""".strip()
API_ERROR_SPLICES_SQL = API_ERROR_SPLICES_TEMPLATE.format(files="")
