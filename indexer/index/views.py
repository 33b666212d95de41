"""Every view of the SQL contract, defined once.

The three recursive definitions, ``leaves_definition``,
``leaf_ancestry_definition`` and ``orphans_definition``, compute from
``records`` on every query: they are the specification. Answering from them
at a million records is too slow for a dashboard (seconds per query), so
ingest materializes the same answers per changed file into
``leaves_cache``, ``leaf_ancestry_cache`` and ``orphans_cache`` (derive.py,
a direct walk in Python), and the contract views ``leaves``,
``leaf_ancestry`` and ``orphans`` read those caches. Tests assert, on every
fixture, the corpus and randomly generated trees, that each cache equals its
``*_definition`` view row for row.

Cycle safety: every recursive walk carries a step count bounded by the number
of lines in its file (files.line_count). A walk that has not ended after
visiting every record has repeated one, so the bound always stops it, and the
repeated tail is cut off afterwards (``cycled``/``cut``). ``UNION`` alone is
not enough: the step column makes every row distinct.

Inside a recursive step only real tables are joined (``records``, ``files``):
a CTE there is re-materialized and re-indexed at every step.
"""

from __future__ import annotations

from indexer.signals import classes
from indexer.transcripts.digests import sha256
from indexer.transcripts.records import (
    API_ERROR_RECORD,
    CHAIN_TYPES_SQL,
    COMPACT_BOUNDARY_RECORD,
    EFFECTIVE_PARENT,
    MODELED_KINDS,
    SYNTHETIC_MODEL,
    SYNTHETIC_RECORD,
)

# The CLI's parent fallback (resume.py): a record whose parent is not in the
# file hangs under the latest message at or before it within this many ms.
FALLBACK_MS = 5000

# Files that are transcripts (the rest are `claude -p` execution logs).
TRANSCRIPT_KIND_NAMES = ("main", "subagent")
TRANSCRIPT_KINDS = "(" + ",".join(f"'{k}'" for k in TRANSCRIPT_KIND_NAMES) + ")"

# Is record {n} a node (a chain record, the last line of its uuid)? Used
# inside recursive steps, which must reach only real tables and their indexes:
# a CTE there is re-materialized (and re-indexed) at every step.
_IS_NODE = f"""{{n}}.uuid IS NOT NULL AND {{n}}.type IN {CHAIN_TYPES_SQL}
    AND NOT EXISTS (SELECT 1 FROM records later
      WHERE later.file_id = {{n}}.file_id AND later.uuid = {{n}}.uuid
        AND later.line_no > {{n}}.line_no AND later.type IN {CHAIN_TYPES_SQL})"""

# Common table expressions shared by the three definitions.
# scope_files: the files computed (all of them). occ: every chain record line (a duplicated
# uuid appears once per line). nodes: one row per uuid, the last line winning
# as in the CLI and the SDK; eff_parent follows a compact_boundary's
# logicalParentUuid (the cause walk's rule; the leaf walks use parent_uuid).
NODES_CTES = f"""
scope_files AS (
  SELECT id AS file_id, kind, session_id FROM files WHERE kind IN {TRANSCRIPT_KINDS}
),
occ AS MATERIALIZED (
  SELECT r.id, r.file_id, r.line_no, r.uuid, r.parent_uuid, r.type
  FROM records r JOIN scope_files f ON f.file_id = r.file_id
  WHERE r.uuid IS NOT NULL AND r.type IN {CHAIN_TYPES_SQL}
),
nodes AS MATERIALIZED (
  SELECT r.id, r.file_id, r.line_no, r.uuid, r.parent_uuid, r.type, r.subtype,
         r.timestamp, r.is_sidechain, r.message_id, r.is_tool_result, r.is_unreadable,
         {EFFECTIVE_PARENT.format(r="r")} AS eff_parent
  FROM records r JOIN scope_files f ON f.file_id = r.file_id
  WHERE {_IS_NODE.format(n="r")}
)
""".strip()

# Epoch milliseconds of a record's timestamp, NULL when it is not one.
TIMESTAMP_MS = ("CAST(round((julianday({r}.timestamp) - 2440587.5) * 86400000.0) AS INTEGER)")
# A last-prompt record's leafUuid is present and null / its explicit flag.
LAST_PROMPT_NULL_LEAF = "(json_valid({r}.raw) AND json_type({r}.raw, '$.leafUuid') = 'null')"
LAST_PROMPT_EXPLICIT = "(json_valid({r}.raw) AND json_type({r}.raw, '$.explicit') = 'true')"

# The CLI's view of each file (resume.py states the rules): cli holds its
# nodes (no progress records) with the bridged parent (read through progress
# records written before the record; `bridge` climbs them, each step to an
# earlier line, so it ends) and walk_parent (the bridged parent, else the
# timestamp fallback when that parent is not a node).
CLI_CTES = f"""
bridge(file_id, uuid, up, up_line, steps) AS (
  SELECT n.file_id, n.uuid, n.parent_uuid, n.line_no, 0 FROM nodes n
  WHERE n.type <> 'progress' AND NOT n.is_unreadable AND EXISTS (
    SELECT 1 FROM nodes p WHERE p.file_id = n.file_id AND p.uuid = n.parent_uuid
      AND ((p.type = 'progress' AND p.line_no < n.line_no) OR p.is_unreadable))
  UNION ALL
  SELECT b.file_id, b.uuid, p.parent_uuid, p.line_no, b.steps + 1
  FROM bridge b
  JOIN records p ON p.file_id = b.file_id AND p.uuid = b.up
  JOIN files f ON f.id = b.file_id
  WHERE ((p.type = 'progress' AND p.line_no < b.up_line)
         OR (p.is_unreadable AND p.type IN ('user','assistant')))
    AND b.steps <= f.line_count AND {_IS_NODE.format(n="p")}
),
-- bridged: the end of each climb; NULL when it went round a cycle of
-- unreadable records (the step bound).
bridged AS MATERIALIZED (
  SELECT b.file_id, b.uuid, CASE WHEN b.steps > f.line_count THEN NULL ELSE b.up END AS up
  FROM (SELECT file_id, uuid, up, steps, row_number() OVER (
               PARTITION BY file_id, uuid ORDER BY steps DESC) AS rn
        FROM bridge) b JOIN files f ON f.id = b.file_id
  WHERE b.rn = 1
),
cli_nodes AS MATERIALIZED (
  SELECT n.id, n.file_id, n.line_no, n.uuid, n.type, n.subtype, n.is_sidechain,
         r.parent_uuid, r.logical_parent_uuid, {TIMESTAMP_MS.format(r="r")} AS ts_ms,
         CAST(CASE WHEN b.uuid IS NOT NULL THEN b.up ELSE n.parent_uuid END AS TEXT) AS parent
  FROM nodes n JOIN records r ON r.id = n.id
  LEFT JOIN bridged b ON b.file_id = n.file_id AND b.uuid = n.uuid
  WHERE n.type <> 'progress' AND NOT n.is_unreadable
),
cli AS MATERIALIZED (
  SELECT c.*, CAST(CASE
    WHEN c.parent IS NULL THEN NULL
    WHEN p.uuid IS NOT NULL THEN c.parent
    ELSE (SELECT x.uuid FROM cli_nodes x
          WHERE x.file_id = c.file_id AND x.uuid <> c.uuid AND x.is_sidechain = c.is_sidechain
            AND NOT (x.type = 'system' AND x.subtype IS 'file_snapshot')
            AND x.ts_ms <= c.ts_ms AND c.ts_ms - x.ts_ms <= {FALLBACK_MS}
          ORDER BY x.ts_ms DESC, x.line_no LIMIT 1)
  END AS TEXT) AS walk_parent
  FROM cli_nodes c
  LEFT JOIN cli_nodes p ON p.file_id = c.file_id AND p.uuid = c.parent
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
#     leaf_scan, newest_record, rewound_to_empty, no_leaf); subagent files:
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
NEWEST_OF_ANY_SET = NEWEST_OF.format("any_set")

LEAVES_CTES = f"""
main_files AS (SELECT file_id FROM scope_files WHERE kind = 'main'),
row_lines AS MATERIALIZED (
  SELECT o.file_id, o.line_no, o.uuid FROM occ o JOIN records r ON r.id = o.id
  JOIN main_files m ON m.file_id = o.file_id
  WHERE o.type <> 'progress' AND NOT r.is_sidechain AND NOT r.is_unreadable
    AND NOT (o.type = 'system' AND r.subtype IS 'file_snapshot')
),
last_rows AS MATERIALIZED (
  SELECT file_id, uuid, line_no FROM (
    SELECT file_id, uuid, line_no,
           row_number() OVER (PARTITION BY file_id ORDER BY line_no DESC) AS rn
    FROM row_lines) WHERE rn = 1
),
prompts AS MATERIALIZED (
  SELECT r.file_id, r.line_no, nullif(r.leaf_uuid, '') AS leaf,
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
state AS MATERIALIZED (
  SELECT m.file_id, lr.uuid AS last_row,
    EXISTS (SELECT 1 FROM occ o JOIN records r ON r.id = o.id
            WHERE o.file_id = m.file_id AND o.type = 'system' AND r.subtype = 'file_snapshot'
              AND o.line_no > coalesce(lr.line_no, 0)) AS trailing,
    CASE WHEN NOT EXISTS (SELECT 1 FROM boundaries b WHERE b.file_id = m.file_id
                          AND b.line_no > lp.line_no)
          AND NOT EXISTS (SELECT 1 FROM prompts q WHERE q.file_id = m.file_id
                          AND q.line_no > lp.line_no AND q.null_leaf AND q.explicit)
         THEN lp.leaf END AS checkpoint,
    coalesce(lp.explicit AND NOT EXISTS (SELECT 1 FROM row_lines w WHERE w.file_id = m.file_id
                                         AND w.line_no > lp.line_no), 0) AS explicit,
    EXISTS (SELECT 1 FROM prompts q WHERE q.file_id = m.file_id AND q.null_leaf AND q.explicit
              AND NOT EXISTS (SELECT 1 FROM row_lines w WHERE w.file_id = m.file_id
                              AND w.line_no > q.line_no)
              AND NOT EXISTS (SELECT 1 FROM prompts z WHERE z.file_id = m.file_id
                              AND z.line_no > q.line_no AND z.leaf IS NOT NULL)) AS empty
  FROM main_files m
  LEFT JOIN last_rows lr ON lr.file_id = m.file_id
  LEFT JOIN latest_prompt lp ON lp.file_id = m.file_id
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
judged AS MATERIALIZED (
  SELECT s.*, (cp.uuid IS NOT NULL) AS checkpoint_is_node,
    EXISTS (SELECT 1 FROM above_last a WHERE a.file_id = s.file_id
            AND a.uuid = s.checkpoint) AS last_descends
  FROM state s LEFT JOIN cli cp ON cp.file_id = s.file_id AND cp.uuid = s.checkpoint
),
first_pick AS MATERIALIZED (
  SELECT file_id, last_row, trailing, checkpoint, explicit, last_descends,
    CASE WHEN empty THEN NULL
         WHEN checkpoint_is_node AND NOT explicit AND last_row IS NOT NULL
              AND last_row <> checkpoint AND last_descends THEN last_row
         WHEN checkpoint_is_node THEN checkpoint
         WHEN NOT trailing THEN last_row END AS picked,
    CASE WHEN empty THEN 'rewound_to_empty'
         WHEN checkpoint_is_node AND NOT explicit AND last_row IS NOT NULL
              AND last_row <> checkpoint AND last_descends THEN 'last_row'
         WHEN checkpoint_is_node THEN 'checkpoint'
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
              AND (p.explicit OR p.last_row IS NULL OR NOT p.last_descends) THEN p.checkpoint
         WHEN s.n > 1 AND NOT p.trailing AND lm.uuid IS NOT NULL THEN lm.uuid
         WHEN s.n > 0 THEN sn.uuid
         ELSE an.uuid END AS uuid,
    CASE WHEN p.empty THEN 'rewound_to_empty'
         WHEN pm.uuid IS NOT NULL THEN p.rule
         WHEN s.n > 1 AND s.checkpoint_is_leaf
              AND (p.explicit OR p.last_row IS NULL OR NOT p.last_descends) THEN 'checkpoint'
         WHEN s.n > 1 AND NOT p.trailing AND lm.uuid IS NOT NULL THEN 'last_row'
         WHEN s.n > 0 AND sn.uuid IS NOT NULL THEN 'leaf_scan'
         WHEN s.n > 0 THEN 'no_leaf'
         WHEN an.uuid IS NOT NULL THEN 'newest_record'
         ELSE 'no_leaf' END AS rule
  FROM first_pick p
  JOIN scan s ON s.file_id = p.file_id
  LEFT JOIN msg_of pm ON pm.file_id = p.file_id AND pm.what = 'picked'
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
         (SELECT n.line_no FROM nodes n
          WHERE n.file_id = r.file_id AND n.uuid = r.uuid) AS uuid_line
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
  SELECT s.file_id, s.rule, s.by_cli, r.id, r.uuid,
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
cycled AS (
  SELECT DISTINCT w.file_id, w.rule FROM walked w JOIN files b ON b.id = w.file_id
  WHERE w.raw_depth > b.line_count
),
cut AS (
  SELECT file_id, rule, min(raw_depth) AS at FROM (
    SELECT w.file_id, w.rule, w.raw_depth, row_number() OVER (
             PARTITION BY w.file_id, w.rule, w.uuid ORDER BY w.raw_depth) AS visit
    FROM walked w JOIN cycled c ON c.file_id = w.file_id AND c.rule = w.rule
  ) WHERE visit > 1 GROUP BY file_id, rule
)
""".strip()
ANCESTRY_SELECT = """
SELECT w.file_id, f.session_id, w.rule, w.uuid, w.raw_depth AS depth, w.id AS record_id
FROM walked w
JOIN scope_files f ON f.file_id = w.file_id
LEFT JOIN cut c ON c.file_id = w.file_id AND c.rule = w.rule
WHERE c.at IS NULL OR w.raw_depth < c.at
""".strip()
LEAF_ANCESTRY_DEFINITION_SQL = (
    f"WITH RECURSIVE {NODES_CTES},\n{CLI_CTES},\n{ANCESTRY_CTES}\n{ANCESTRY_SELECT}")

# orphans: every non-sidechain chain record of a main file that is not on the
# 'resume' ancestry, with the first matching cause. `down` walks top-down
# from the ancestry, from other roots (unlinked) and from records whose
# parent is missing (dangling_parent), following parent_uuid, or a
# compact_boundary's logicalParentUuid when its parent is null; it carries
# the branch point (the ancestry record its branch leaves from). A record
# has one such parent, so it is reached at most once and a cycle is never
# entered (its records are never reached: 'other'); the step bound is a
# second guard. restored: the CLI puts the record back after its walk: a
# parallel_tool_branch, or a non-message record that hangs from the leaf
# message through non-message records (put_back; progress records are
# passed through, as the CLI bridges them). It reads the resume ancestry from
# leaf_ancestry, which the tests hold equal to leaf_ancestry_definition:
# SQLite 3.40 loses the CTEs of leaf_ancestry_definition when a recursive
# step here reads it ("no such table: main.scope_files").
ORPHANS_DEFINITION_SQL = f"""
WITH RECURSIVE {NODES_CTES},
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
chain_messages AS MATERIALIZED (
  SELECT DISTINCT a.file_id, n.message_id FROM on_chain a
  JOIN nodes n ON n.file_id = a.file_id AND n.uuid = a.uuid
  WHERE n.type = 'assistant' AND n.message_id IS NOT NULL
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
    AND {_IS_NODE.format(n="c")}
),
off AS MATERIALIZED (
  SELECT n.* FROM nodes n JOIN scope_files f ON f.file_id = n.file_id
  WHERE f.kind = 'main'
    AND NOT EXISTS (SELECT 1 FROM on_chain a WHERE a.file_id = n.file_id AND a.uuid = n.uuid)
),
down(file_id, uuid, branch_point, origin, steps) AS (
  SELECT o.file_id, o.uuid, o.eff_parent, 'ancestry', 0
  FROM off o
  WHERE EXISTS (SELECT 1 FROM on_chain a WHERE a.file_id = o.file_id AND a.uuid = o.eff_parent)
  UNION ALL
  SELECT o.file_id, o.uuid, NULL, 'unlinked', 0
  FROM off o WHERE o.eff_parent IS NULL
  UNION ALL
  SELECT o.file_id, o.uuid, NULL, 'dangling_parent', 0
  FROM off o
  WHERE o.eff_parent IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM nodes p WHERE p.file_id = o.file_id AND p.uuid = o.eff_parent)
  UNION ALL
  SELECT c.file_id, c.uuid, d.branch_point, d.origin, d.steps + 1
  FROM down d
  JOIN records c ON c.file_id = d.file_id AND c.parent_uuid = d.uuid
  JOIN files b ON b.id = d.file_id
  WHERE d.steps <= b.line_count AND {_IS_NODE.format(n="c")}
    AND NOT EXISTS (SELECT 1 FROM leaf_ancestry_cache a WHERE a.file_id = c.file_id
                    AND a.rule = 'resume' AND a.uuid = c.uuid)
  UNION ALL
  SELECT c.file_id, c.uuid, d.branch_point, d.origin, d.steps + 1
  FROM down d
  JOIN records c ON c.file_id = d.file_id AND c.logical_parent_uuid = d.uuid
  JOIN files b ON b.id = d.file_id
  WHERE d.steps <= b.line_count AND c.parent_uuid IS NULL
    AND {COMPACT_BOUNDARY_RECORD.format(r="c")}
    AND {_IS_NODE.format(n="c")}
    AND NOT EXISTS (SELECT 1 FROM leaf_ancestry_cache a WHERE a.file_id = c.file_id
                    AND a.rule = 'resume' AND a.uuid = c.uuid)
),
reached AS MATERIALIZED (
  SELECT file_id, uuid, branch_point, origin FROM down
),
classed AS (
SELECT o.file_id, f.session_id, o.uuid, o.type, o.subtype, o.timestamp,
  CASE
    WHEN o.line_no < lb.line_no THEN 'compacted'
    WHEN o.type = 'progress' THEN 'progress'
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
    WHEN EXISTS (SELECT 1 FROM splice_points s
                 WHERE s.file_id = o.file_id AND s.uuid = d.branch_point)
      THEN 'api_error_splice'
    WHEN {API_ERROR_RECORD.format(r="o")} THEN 'api_error_record'
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
  (c.cause = 'parallel_tool_branch' OR (c.type IN ('system','attachment') AND EXISTS (
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


def _prefixed(columns: str, alias: str) -> str:
    return ", ".join(f"{alias}.{c}" for c in columns.split(", "))


def _with_host(definition: str) -> str:
    """A *_definition view (the specification: slow, rarely read) with host
    added as its view is: DEFINITIONS_HASH is of the definitions without it,
    which is what the caches are computed from."""
    return f"SELECT d.*, {HOST_OF.format(file_id='d.file_id')} AS host FROM (\n{definition}\n) d"


# The contract views, read from the caches (same columns as *_definition).
LEAVES_SQL = (f"SELECT {_prefixed(LEAVES_COLUMNS, 'c')}, "
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
ORPHANS_SQL = (f"SELECT {_prefixed(ORPHANS_COLUMNS, 'c')}, "
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
CHAIN_BREAKS_SQL = (f"SELECT {_prefixed(CHAIN_BREAKS_COLUMNS, 'c')}, "
                    f"{HOST_OF.format(file_id='c.file_id')} AS host FROM chain_breaks_cache c")
DUPLICATE_UUIDS_SQL = (f"SELECT {_prefixed(DUPLICATE_UUIDS_COLUMNS, 'c')}, "
                       f"{HOST_OF.format(file_id='c.file_id')} AS host "
                       "FROM duplicate_uuids_cache c")

# --- Operator signals ---------------------------------------------------

# 1 when file {file}'s resume chain holds no real assistant message (one that
# is not a synthetic placeholder, records.SYNTHETIC_RECORD):
# a poisoned tail then has nothing to be cut back to (repair cannot help; a
# new session is the way on).
NOTHING_TO_CUT_TEMPLATE = f"""NOT EXISTS (
  SELECT 1 FROM leaf_ancestry_cache k JOIN records t ON t.id = k.record_id
  WHERE k.file_id = {{file}} AND k.rule = 'resume' AND t.type = 'assistant'
    AND NOT ({SYNTHETIC_RECORD.format(r="t")}))"""

# The record model's rules a signal view's SQL names by slot
# (signals.classes.RECORD_RULES), filled in here where they are defined.
RECORD_RULES = {"synthetic_record": SYNTHETIC_RECORD.format(r="r"),
                "transcript_kinds": TRANSCRIPT_KINDS}
assert set(RECORD_RULES) == set(classes.RECORD_RULES)
# poisoned_sessions (signals.classes) for one session (:session_id), reading
# only its records: check's question (the view reads every placeholder in the
# index first).
POISONED_SESSION_SQL = classes.POISONED_SESSIONS_TEMPLATE.format(
    **RECORD_RULES,
    files="r.file_id IN (SELECT main_file_id FROM session_hosts WHERE session_id = :session_id)",
    session_id="session_id = :session_id", init_session_id="init_session_id = :session_id")

# Each cache-backed view, with its definition (tests hold them equal).
CACHED_VIEWS = ("leaves", "leaf_ancestry", "orphans", "chain_breaks", "duplicate_uuids")

# --- Repair --------------------------------------------------------------

# repair_plan: what `session-index repair` changes in each session's main
# transcript, one row per line:
# - api_error_splice (reparent): per episode of api_error_splices, the record
#   on the resume chain right after the late-flushed error chain (the nearest
#   non-api_error record below its first error: stop_hook_summary or the next
#   prompt) gets, as parent, the last record of the orphaned segment in file
#   order, so the errors become a dead-end side branch (the seed's fix).
# - poisoned_tail (drop): when the chain ends at a synthetic placeholder,
#   every chain record after the last real assistant message, every other
#   record that could become the newest resume leaf (non-sidechain user,
#   assistant, system, attachment written after it), and their descendants,
#   so the resume chain ends at that real message.
REPAIR_PLAN_SQL = f"""
WITH RECURSIVE episodes AS (
  SELECT s.file_id, s.session_id, s.api_error_uuid, s.branch_point_uuid,
    (SELECT a.record_id FROM leaf_ancestry_cache a JOIN records r ON r.id = a.record_id
     WHERE a.file_id = s.file_id AND a.rule = 'resume' AND a.height > e.height
       AND NOT ({API_ERROR_RECORD.format(r="r")})
     ORDER BY a.height LIMIT 1) AS record_id,
    (SELECT o.uuid FROM orphans o
     WHERE o.file_id = s.file_id AND o.cause = 'api_error_splice'
       AND o.branch_point_uuid = s.branch_point_uuid
     ORDER BY o.line_no DESC LIMIT 1) AS new_parent_uuid
  FROM api_error_splices s
  JOIN leaf_ancestry_cache e ON e.file_id = s.file_id AND e.rule = 'resume'
    AND e.uuid = s.api_error_uuid
  JOIN session_hosts m ON m.main_file_id = s.file_id
),
poisoned AS (  -- with the last real assistant message on the chain
  SELECT p.session_id, p.file_id, a.height, r.line_no, r.timestamp
  FROM poisoned_sessions p
  JOIN leaf_ancestry_cache a ON a.file_id = p.file_id AND a.rule = 'resume' AND a.record_id = (
    SELECT k.record_id FROM leaf_ancestry_cache k JOIN records t ON t.id = k.record_id
    WHERE k.file_id = p.file_id AND k.rule = 'resume' AND t.type = 'assistant'
      AND NOT ({SYNTHETIC_RECORD.format(r="t")})
    ORDER BY k.height DESC LIMIT 1)
  JOIN records r ON r.id = a.record_id
  WHERE p.at_resume_tail
),
dropped(file_id, uuid) AS (
  SELECT a.file_id, a.uuid FROM poisoned p
  JOIN leaf_ancestry_cache a ON a.file_id = p.file_id AND a.rule = 'resume'
    AND a.height > p.height
  UNION
  SELECT r.file_id, r.uuid FROM poisoned p
  JOIN records r ON r.file_id = p.file_id
  WHERE r.uuid IS NOT NULL AND NOT r.is_sidechain
    AND r.type IN ('user', 'assistant', 'system', 'attachment')
    AND (r.timestamp > p.timestamp OR (r.timestamp = p.timestamp AND r.line_no > p.line_no))
    AND NOT EXISTS (SELECT 1 FROM leaf_ancestry_cache a WHERE a.file_id = r.file_id
                    AND a.rule = 'resume' AND a.uuid = r.uuid AND a.height <= p.height)
  UNION
  SELECT c.file_id, c.uuid FROM dropped d
  JOIN records c ON c.file_id = d.file_id AND c.parent_uuid = d.uuid
  WHERE c.uuid IS NOT NULL
)
SELECT e.session_id, e.file_id, 'reparent' AS action, 'api_error_splice' AS reason,
       r.id AS record_id, r.line_no, r.uuid, r.parent_uuid AS old_parent_uuid,
       e.new_parent_uuid, e.api_error_uuid AS episode,
       {HOST_OF.format(file_id="e.file_id")} AS host
FROM episodes e JOIN records r ON r.id = e.record_id
WHERE e.new_parent_uuid IS NOT NULL
UNION ALL
SELECT f.session_id, d.file_id, 'drop', 'poisoned_tail', r.id, r.line_no, r.uuid,
       r.parent_uuid, NULL, NULL, coalesce(f.host, '')
FROM dropped d JOIN files f ON f.id = d.file_id
JOIN records r ON r.file_id = d.file_id AND r.uuid = d.uuid
""".strip()

# --- Store copies -------------------------------------------------------

# session_copies: one row per transcript held both as an ingested local file
# (origin 'file') and as a copy mirrored through the Agent SDK's
# SessionStore (origin 'store', indexer/ingest/store.py): a main transcript with
# the session's main store key, a subagent file with the store key of the
# same agent id. local_only / store_only: how many distinct uuids one copy
# holds and the other does not; local_only_uuids / store_only_uuids: the
# first 20 of them in file order (a JSON array). diverged: 1 when the uuid
# sets, the record counts (the store keeps one line per uuid, a file may
# repeat one) or the resume leaves differ, that is when a store-backed
# resume would not read what the local file says. Correlated subqueries, so
# `WHERE session_id = ?` looks at that session's records only.
SESSION_COPIES_SQL = """
SELECT c.*,
       (c.local_only > 0 OR c.store_only > 0 OR c.local_records <> c.store_records
        OR c.local_resume_leaf_uuid IS NOT c.store_resume_leaf_uuid) AS diverged
FROM (
  SELECT l.session_id, l.kind, l.agent_id, s.project_key, s.subpath,
         l.id AS local_file_id, l.path AS local_path, l.deleted_at AS local_deleted_at,
         s.id AS store_file_id, s.path AS store_path,
         l.records AS local_records, s.records AS store_records,
         (SELECT count(DISTINCT r.uuid) FROM records r
          WHERE r.file_id = l.id AND r.uuid IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM records x WHERE x.file_id = s.id AND x.uuid = r.uuid))
           AS local_only,
         (SELECT count(DISTINCT r.uuid) FROM records r
          WHERE r.file_id = s.id AND r.uuid IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM records x WHERE x.file_id = l.id AND x.uuid = r.uuid))
           AS store_only,
         (SELECT json_group_array(uuid) FROM (
            SELECT r.uuid FROM records r
            WHERE r.file_id = l.id AND r.uuid IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM records x WHERE x.file_id = s.id AND x.uuid = r.uuid)
            GROUP BY r.uuid ORDER BY min(r.line_no) LIMIT 20)) AS local_only_uuids,
         (SELECT json_group_array(uuid) FROM (
            SELECT r.uuid FROM records r
            WHERE r.file_id = s.id AND r.uuid IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM records x WHERE x.file_id = l.id AND x.uuid = r.uuid)
            GROUP BY r.uuid ORDER BY min(r.line_no) LIMIT 20)) AS store_only_uuids,
         (SELECT resume_leaf_uuid FROM leaves WHERE file_id = l.id) AS local_resume_leaf_uuid,
         (SELECT resume_leaf_uuid FROM leaves WHERE file_id = s.id) AS store_resume_leaf_uuid,
         coalesce(l.host, '') AS host
  FROM files l
  JOIN files s ON s.session_id = l.session_id AND s.origin = 'store' AND s.kind = l.kind
    AND (l.kind = 'main' OR s.agent_id = l.agent_id)
  WHERE l.origin = 'file' AND l.kind IN ('main', 'subagent')
) c
""".strip()

# --- Copies on several hosts ---------------------------------------------

# A fleet host whose shipper's last heartbeat is older than this may be down:
# what the index holds of it may be behind (check warns, the health page marks it).
STALE_HEARTBEAT_S = 60

# host_copies: one row per pair of copies of one transcript on two hosts: a
# file shipped from a host (origin 'fleet', `session-index ship`) and this
# machine's ingested file (host '' here), or two hosts' files; the same
# session id and kind, and agent id for a subagent file. a_* is the copy
# with the lower file id. a_only / b_only: how many distinct uuids one copy
# holds and the other does not; diverged: 1 when those differ, or the record
# counts, or the resume leaves. The copies are never merged: each stays a
# file of its own in every view. Correlated subqueries, so `WHERE
# session_id = ?` reads that session's records only.
HOST_COPIES_SQL = """
SELECT c.*,
       (c.a_only > 0 OR c.b_only > 0 OR c.a_records <> c.b_records
        OR c.a_resume_leaf_uuid IS NOT c.b_resume_leaf_uuid) AS diverged
FROM (
  SELECT a.session_id, a.kind, a.agent_id,
         coalesce(a.host, '') AS a_host, a.id AS a_file_id, a.path AS a_path,
         a.records AS a_records, a.deleted_at AS a_deleted_at,
         coalesce(b.host, '') AS b_host, b.id AS b_file_id, b.path AS b_path,
         b.records AS b_records, b.deleted_at AS b_deleted_at,
         (SELECT count(DISTINCT r.uuid) FROM records r
          WHERE r.file_id = a.id AND r.uuid IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM records x WHERE x.file_id = b.id AND x.uuid = r.uuid))
           AS a_only,
         (SELECT count(DISTINCT r.uuid) FROM records r
          WHERE r.file_id = b.id AND r.uuid IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM records x WHERE x.file_id = a.id AND x.uuid = r.uuid))
           AS b_only,
         (SELECT resume_leaf_uuid FROM leaves WHERE file_id = a.id) AS a_resume_leaf_uuid,
         (SELECT resume_leaf_uuid FROM leaves WHERE file_id = b.id) AS b_resume_leaf_uuid
  FROM files a
  JOIN files b ON b.session_id = a.session_id AND b.kind = a.kind AND b.id > a.id
    AND (a.kind = 'main' OR b.agent_id IS a.agent_id)
    AND coalesce(b.host, '') <> coalesce(a.host, '')
    AND b.origin IN ('file', 'fleet')
  WHERE a.origin IN ('file', 'fleet') AND a.kind IN ('main', 'subagent')
) c
""".strip()

# --- Generations -----------------------------------------------------------

# file_generations: every generation of every file (generations.py), the
# current one (current = 1, its lines in records/bad_lines) and each kept
# superseded one: file_id, path, session_id, kind, generation (1 is the
# first), started_at (NULL when it began before the index kept generations),
# superseded_at, reason (why it was superseded: shrunk | changed), lines,
# bytes (as last seen, a pending tail included), sha256 of those bytes (NULL
# for the current generation, which may still grow), mtime (the file's, last
# seen in that generation).
FILE_GENERATIONS_SQL = """
SELECT g.file_id, f.path, f.session_id, f.kind, g.generation, 0 AS current, g.started_at,
  g.superseded_at, g.reason, g.lines, g.bytes, g.sha256, g.mtime, coalesce(f.host, '') AS host
FROM superseded_generations g JOIN files f ON f.id = g.file_id
UNION ALL
SELECT f.id, f.path, f.session_id, f.kind, f.generation, 1,
  coalesce(f.generation_started_at, CASE WHEN f.generation = 1 THEN f.first_ingested_at END),
  NULL, NULL, f.line_count, f.ingested_offset + coalesce(length(f.pending_tail), 0), NULL,
  f.mtime, coalesce(f.host, '')
FROM files f
""".strip()

# --- Which main transcript `claude --resume` opens ------------------------

# Claude Code 2.1.332, `claude --resume <id>` (the experiment and the code it
# rests on are in the README): (1) <config>/projects/<folder of the cwd>/<id>.jsonl,
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
MAIN_FILE_FACTS_TEMPLATE = """
SELECT f.id AS file_id, f.session_id, coalesce(f.host, '') AS host, f.path, f.project_dir,
  f.cwd, f.origin, f.mtime, f.deleted_at, f.records,
  coalesce(f.origin IN ('file', 'fleet') AND substr(f.path, -length(f.session_id) - 7)
    = '/' || f.session_id || '.jsonl', 0) AS named,
  f.deleted_at IS NULL AS on_disk,
  EXISTS (SELECT 1 FROM records r WHERE r.file_id = f.id AND r.type IN ('user', 'assistant')
          AND r.uuid IS NOT NULL) AS has_messages,
  EXISTS (SELECT 1 FROM records r WHERE r.file_id = f.id
          AND (instr(r.raw, '"type":"user"') OR instr(r.raw, '"type":"assistant"'))) AS scan_visible,
  coalesce(f.cwd <> '' AND """ + IN_CWD_PROJECT_TEMPLATE.format(
    project_dir="f.project_dir", cwd="f.cwd") + """, 0) AS in_cwd_project
FROM files f
WHERE f.kind = 'main' AND {where}
""".strip()

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

# session_main_copies: every main transcript of a session that has more than
# one (copies in other project folders, forks that kept the id in a file
# named otherwise, deleted ones, session-store copies, copies on other
# hosts), none merged: chosen (it is its host's main file, session_hosts:
# each file is compared with the one chosen on its own host; across hosts,
# host_copies), why (for the chosen one its main_file_rule;
# for the others: named_other_project, a named copy in another project folder
# that a resume opens only from a cwd of that folder; not_named, never opened
# for this id; no_messages; deleted; store_copy), the facts the choice rests
# on, and how it differs from the chosen one: only_here / only_in_chosen
# (distinct uuids one holds and the other does not), the first 20 of them in
# file order (JSON arrays), the record counts and resume leaves, diverged (1
# when any of these differ). Correlated subqueries: `WHERE session_id = ?`
# reads that session's records only.
SESSION_MAIN_COPIES_SQL = """
WITH facts AS (
""" + MAIN_FILE_FACTS_TEMPLATE.format(where="""f.session_id IN (
    SELECT session_id FROM files WHERE kind = 'main' AND session_id IS NOT NULL
    GROUP BY session_id HAVING count(*) > 1)""") + """
),
compared AS MATERIALIZED (
  SELECT c.*, s.main_file_id, s.main_file_rule, m.records AS chosen_records,
    (SELECT count(DISTINCT r.uuid) FROM records r
     WHERE r.file_id = c.file_id AND r.uuid IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM records x WHERE x.file_id = s.main_file_id AND x.uuid = r.uuid))
      AS only_here,
    (SELECT count(DISTINCT r.uuid) FROM records r
     WHERE r.file_id = s.main_file_id AND r.uuid IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM records x WHERE x.file_id = c.file_id AND x.uuid = r.uuid))
      AS only_in_chosen,
    (SELECT json_group_array(uuid) FROM (
       SELECT r.uuid FROM records r
       WHERE r.file_id = c.file_id AND r.uuid IS NOT NULL AND NOT EXISTS (
         SELECT 1 FROM records x WHERE x.file_id = s.main_file_id AND x.uuid = r.uuid)
       GROUP BY r.uuid ORDER BY min(r.line_no) LIMIT 20)) AS only_here_uuids,
    (SELECT json_group_array(uuid) FROM (
       SELECT r.uuid FROM records r
       WHERE r.file_id = s.main_file_id AND r.uuid IS NOT NULL AND NOT EXISTS (
         SELECT 1 FROM records x WHERE x.file_id = c.file_id AND x.uuid = r.uuid)
       GROUP BY r.uuid ORDER BY min(r.line_no) LIMIT 20)) AS only_in_chosen_uuids,
    (SELECT resume_leaf_uuid FROM leaves WHERE file_id = c.file_id) AS resume_leaf_uuid,
    (SELECT resume_leaf_uuid FROM leaves WHERE file_id = s.main_file_id)
      AS chosen_resume_leaf_uuid
  FROM facts c
  JOIN session_hosts s ON s.session_id = c.session_id AND s.host = c.host
  LEFT JOIN files m ON m.id = s.main_file_id
)
SELECT session_id, file_id, path, project_dir, cwd, origin,
  file_id IS main_file_id AS chosen,
  CASE WHEN file_id IS main_file_id THEN main_file_rule
       WHEN NOT on_disk THEN 'deleted'
       WHEN origin = 'store' THEN 'store_copy'
       WHEN NOT named THEN 'not_named'
       WHEN NOT has_messages THEN 'no_messages'
       ELSE 'named_other_project' END AS why,
  named, on_disk, has_messages, scan_visible, in_cwd_project, mtime, deleted_at,
  records, chosen_records, only_here, only_in_chosen, only_here_uuids, only_in_chosen_uuids,
  resume_leaf_uuid, chosen_resume_leaf_uuid,
  (only_here > 0 OR only_in_chosen > 0 OR records IS NOT chosen_records
   OR resume_leaf_uuid IS NOT chosen_resume_leaf_uuid) AS diverged,
  host
FROM compared
""".strip()

# record_types: every record type, system subtype and attachment type of
# the transcripts (not the execution logs) the index holds records of, from
# record_kinds (record_kinds.py keeps there the sums of record_kind_files, at
# the end of every ingest run and in every store append). kind: type, or
# type/subtype ('(no type)' for a record without one).
# first_version/last_version: the lowest and highest Claude Code version
# among its records, compared number by number (the *_key columns hold a
# sortable key, a space, then the version); a record without its own version
# or timestamp counts those of the nearest earlier record of its file that
# has one. new: first stored by the most recent ingest run
# (index_meta.ingest_runs), or by a store append since. modeled: in
# MODELED_KINDS; chain: its type is a chain type.
def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


_MODELED_VALUES = ",\n  ".join(f"({_sql_text(t)}, {_sql_text(s)}, {_sql_text(m)})"
                                for t, s, m in MODELED_KINDS)

RECORD_TYPES_SQL = f"""
WITH modeled(type, subtype, meaning) AS (VALUES
  {_MODELED_VALUES}
)
SELECT CASE WHEN k.type = '' THEN '(no type)' WHEN k.subtype = '' THEN k.type
            ELSE k.type || '/' || k.subtype END AS kind,
  nullif(k.type, '') AS type, nullif(k.subtype, '') AS subtype, k.records, k.files,
  substr(k.first_version_key, instr(k.first_version_key, ' ') + 1) AS first_version,
  substr(k.last_version_key, instr(k.last_version_key, ' ') + 1) AS last_version,
  k.first_timestamp AS first_seen, k.last_timestamp AS last_seen,
  k.first_ingested_at, k.last_ingested_at,
  coalesce(k.first_run = coalesce((SELECT CAST(value AS INTEGER) FROM index_meta
                                   WHERE key = 'ingest_runs'), 0), 0) AS new,
  m.meaning IS NOT NULL AS modeled, k.type IN {CHAIN_TYPES_SQL} AS chain, m.meaning
FROM record_kinds k
LEFT JOIN modeled m ON m.type = k.type AND m.subtype = k.subtype
WHERE k.records > 0
""".strip()
# usage: one row per API call, from the usage columns of records (read
# from each assistant line as it is parsed: migrations.m022_prices), through
# the covering partial index records_usage alone (named: without statistics
# the planner may take another index of records, and read every line's
# row, raw and all), never parsing records.raw. A
# call is identified across ALL transcripts by message.id + requestId (a
# fork, a copy, a resumed session or a subagent file repeats its lines
# under other session ids: counted once), else by session + message.id (a
# line without requestId), else it is the line itself (no message.id).
# Claude Code writes one line per content block of
# a response, each repeating the usage as it stood when written
# (output_tokens grows as the response streams; the last line has the final
# count): the call's usage is that of its line with the most output tokens
# (ties: the first ingested, the lowest records.id), whole, not a maximum
# per field (a mid-stream model fallback changes the other fields too);
# lines: how many lines the call has. Synthetic placeholders ("<synthetic>")
# and `claude -p` execution logs (the same calls again) never count.
# Token kinds: input (uncached), output, cache read, cache writes of 5
# minutes and of 1 hour (usage.cache_creation's split; without it the whole
# cache_creation_input_tokens is a 5-minute write). prompt_tokens is every
# input token of the call: input + cache read + both writes.
# cost_usd: by the prices row of the model (its id, else its id without a
# -YYYYMMDD date), at the long-context rates on every token when
# prompt_tokens is above the model's long_context_above, times
# fast_multiplier when usage.speed is "fast". NULL (unpriced, never 0) for a
# model with no price, or a fast call of a model with no fast multiplier.
# USAGE_CALLS_TEMPLATE is its first step, {where} narrowing the lines read
# (the health page's panel reads the last days' files only).
USAGE_CALLS_TEMPLATE = f"""
  SELECT max(coalesce(output_tokens, 0) * 4294967296 - id) AS pick, count(*) AS lines,
    id AS record_id, file_id, session_id, message_id, request_id, model, timestamp, input_tokens,
    output_tokens, cache_read_tokens, speed, coalesce(cache_1h_tokens, 0) AS w1h,
    CASE WHEN cache_5m_tokens IS NULL AND cache_1h_tokens IS NULL
         THEN coalesce(cache_creation_tokens, 0) ELSE coalesce(cache_5m_tokens, 0) END AS w5m
  FROM records INDEXED BY records_usage
  WHERE has_usage AND model IS NOT '{SYNTHETIC_MODEL}'
    AND file_id IN (SELECT id FROM files WHERE kind IN {TRANSCRIPT_KINDS}{{files}}){{where}}
  GROUP BY message_id, request_id, CASE WHEN request_id IS NULL THEN session_id END,
    CASE WHEN message_id IS NULL THEN id END
""".strip()
# The rest of the usage view, from calls.
USAGE_PRICED_TEMPLATE = """
priced AS (
  SELECT c.*, f.project_dir, coalesce(f.host, '') AS host, p.model AS price_model, p.*,
    coalesce(c.input_tokens, 0) + coalesce(c.cache_read_tokens, 0) + c.w5m + c.w1h
      AS prompt_tokens,
    CASE WHEN c.speed = 'fast' THEN p.fast_multiplier ELSE 1 END AS multiplier
  FROM calls c JOIN files f ON f.id = c.file_id
    LEFT JOIN prices p ON p.model = coalesce(
      (SELECT q.model FROM prices q WHERE q.model = c.model),
      CASE WHEN c.model GLOB '*-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]'
           THEN substr(c.model, 1, length(c.model) - 9) END)
),
tiered AS (
  SELECT *, (long_context_above IS NOT NULL AND prompt_tokens > long_context_above) AS long
  FROM priced
)
SELECT record_id, session_id, project_dir AS project, file_id, model, timestamp,
  message_id, request_id, lines, input_tokens, output_tokens, cache_read_tokens,
  w5m AS cache_write_5m_tokens, w1h AS cache_write_1h_tokens, prompt_tokens, speed,
  price_model, CASE WHEN price_model IS NOT NULL THEN long END AS long_context,
  multiplier * (
      coalesce(input_tokens, 0) * CASE WHEN long THEN long_input ELSE input END
    + coalesce(output_tokens, 0) * CASE WHEN long THEN long_output ELSE output END
    + coalesce(cache_read_tokens, 0) * CASE WHEN long THEN long_cache_read ELSE cache_read END
    + w5m * CASE WHEN long THEN long_cache_write_5m ELSE cache_write_5m END
    + w1h * CASE WHEN long THEN long_cache_write_1h ELSE cache_write_1h END
  ) / 1e6 AS cost_usd,
  host
FROM tiered
""".strip()
USAGE_SQL = ("WITH calls AS (" + USAGE_CALLS_TEMPLATE.format(files="", where="") + "\n),\n"
             + USAGE_PRICED_TEMPLATE)

# usage_reported: one row per session for which Claude Code says what it
# cost, beside what the usage view computes: cost_state_usd, the largest
# totalCostUSD of the session's cost-state records (each is the session's
# running total, written again and again; cost_state_unknown_models: one
# said hasUnknownModelCost), and executions_usd, the sum of total_cost_usd
# over the `claude -p` results naming the session (executions). The
# differences are Claude Code's figure less the index's (positive: Claude
# Code counts more). calls/cost_usd/unpriced_calls are the usage view's for
# the session; first_call is its earliest. USAGE_REPORTED_TEMPLATE: {usage}
# the calls (the usage view, or a part of it), {cost_state_sessions} and
# {run_sessions} narrowing the sessions of the cost-state records (r) and of
# the executions (the health page's panel: those begun in its window).
# It has no host column: copies of a session on two hosts hold the same API
# calls, which usage counts once whichever copy holds them, and Claude Code's
# running totals are the session's; per host, read usage (its host column).
USAGE_REPORTED_TEMPLATE = f"""
WITH ours AS (
  SELECT session_id, count(*) AS calls, sum(cost_usd) AS cost_usd,
    sum(cost_usd IS NULL) AS unpriced_calls, min(timestamp) AS first_call
  FROM {{usage}} GROUP BY session_id
),
cost_state AS (
  SELECT r.session_id,
    max(CASE WHEN json_type(r.raw, '$.totalCostUSD') IN ('integer', 'real')
             THEN json_extract(r.raw, '$.totalCostUSD') END) AS usd,
    max(json_type(r.raw, '$.hasUnknownModelCost') = 'true') AS unknown_models
  FROM records r JOIN files f ON f.id = r.file_id
  WHERE r.type = 'cost-state' AND r.session_id IS NOT NULL AND f.kind IN {TRANSCRIPT_KINDS}
    AND json_valid(r.raw){{cost_state_sessions}}
  GROUP BY r.session_id
),
runs AS (
  SELECT session_id, count(*) AS runs, sum(total_cost_usd) AS usd
  FROM executions WHERE session_id IS NOT NULL AND total_cost_usd IS NOT NULL{{run_sessions}}
  GROUP BY session_id
),
reported AS (
  SELECT session_id FROM cost_state WHERE usd IS NOT NULL
  UNION SELECT session_id FROM runs
)
SELECT s.session_id, o.calls, o.cost_usd, o.unpriced_calls, o.first_call,
  c.usd AS cost_state_usd, c.unknown_models AS cost_state_unknown_models,
  c.usd - coalesce(o.cost_usd, 0) AS cost_state_difference_usd,
  e.runs AS executions, e.usd AS executions_usd,
  e.usd - coalesce(o.cost_usd, 0) AS executions_difference_usd
FROM reported s LEFT JOIN ours o ON o.session_id = s.session_id
  LEFT JOIN cost_state c ON c.session_id = s.session_id
  LEFT JOIN runs e ON e.session_id = s.session_id
""".strip()
USAGE_REPORTED_SQL = USAGE_REPORTED_TEMPLATE.format(usage="usage", cost_state_sessions="",
                                                    run_sessions="")

VIEWS = {
    "cli_definition": _with_host(CLI_DEFINITION_SQL),
    "leaves_definition": _with_host(LEAVES_DEFINITION_SQL),
    "leaf_ancestry_definition": _with_host(LEAF_ANCESTRY_DEFINITION_SQL),
    "orphans_definition": _with_host(ORPHANS_DEFINITION_SQL),
    "chain_breaks_definition": _with_host(CHAIN_BREAKS_DEFINITION_SQL),
    "duplicate_uuids_definition": _with_host(DUPLICATE_UUIDS_DEFINITION_SQL),
    "leaves": LEAVES_SQL,
    "leaf_ancestry": LEAF_ANCESTRY_SQL,
    "orphans": ORPHANS_SQL,
    "chain_breaks": CHAIN_BREAKS_SQL,
    "duplicate_uuids": DUPLICATE_UUIDS_SQL,
    # the signal views, as the problem classes declare them
    **{view.name: view.definition(RECORD_RULES) for view in classes.SIGNAL_VIEWS},
    "repair_plan": REPAIR_PLAN_SQL,
    "session_copies": SESSION_COPIES_SQL,
    "host_copies": HOST_COPIES_SQL,
    "file_generations": FILE_GENERATIONS_SQL,
    "session_main_copies": SESSION_MAIN_COPIES_SQL,
    "record_types": RECORD_TYPES_SQL,
    "usage": USAGE_SQL,
    "usage_reported": USAGE_REPORTED_SQL,
}

# A change to any definition changes this, and every cache is recomputed.
# (the definitions as the caches are computed from them: without host)
DEFINITIONS_HASH = sha256("\n".join([
    CLI_DEFINITION_SQL, LEAVES_DEFINITION_SQL, LEAF_ANCESTRY_DEFINITION_SQL,
    ORPHANS_DEFINITION_SQL, CHAIN_BREAKS_DEFINITION_SQL, DUPLICATE_UUIDS_DEFINITION_SQL,
]).encode()).hexdigest()[:16]


# session_hosts: a session's main transcript per host (host '' is this
# machine: its files and store copies; a fleet host's files are its own):
# copies of one session on two hosts are never merged, so each host has one
# main file, chosen among that host's files only. main_file_id is the main
# transcript `claude --resume <id>` on that host opens, and main_file_rule
# says why (MAIN_FILE_RULE_TEMPLATE: a file named <id>.jsonl on disk with
# messages, the one in its own cwd's project folder when there are several,
# else a session-store copy, else what is left).
REFRESH_SESSION_HOSTS_SQL = f"""
WITH facts AS MATERIALIZED (
{MAIN_FILE_FACTS_TEMPLATE.format(where="f.session_id = :session_id")}
),
ruled AS (
  SELECT *, {MAIN_FILE_RULE_TEMPLATE.format(
      f="facts", loadable="(SELECT count(*) FROM facts x WHERE x.host = facts.host "
                          "AND x.named AND x.on_disk AND x.has_messages)")}
    AS rule
  FROM facts
),
ranked AS (
  SELECT file_id, host, rule, row_number() OVER (
    PARTITION BY host ORDER BY {MAIN_FILE_RANK_TEMPLATE.format(rule="rule")}, named DESC,
      in_cwd_project DESC, mtime DESC, file_id DESC) AS n
  FROM ruled
)
INSERT INTO session_hosts (session_id, host, main_file_id, main_file_rule)
SELECT :session_id, host, file_id, rule FROM ranked WHERE n = 1
""".strip()

# sessions: one row per session id, for its default host (sessions.host):
# this machine ('') when it holds a transcript of the session, else the
# host whose main transcript was written to last (ties: the host's name).
# main_file_id and main_file_rule are that host's (session_hosts); the rest
# is summed from that host's files' running facts: project_dir and cwd are
# the chosen file's. A session mirrored through the store and ingested from
# its file counts its local files and records once (the store copies when
# there are no local ones). Another host's copies: session_hosts,
# host_copies.
REFRESH_SESSION_SQL = f"""
WITH home AS MATERIALIZED (
  SELECT coalesce(
    (SELECT '' FROM files WHERE session_id = :session_id AND kind IN {TRANSCRIPT_KINDS}
       AND host IS NULL LIMIT 1),
    (SELECT h.host FROM session_hosts h LEFT JOIN files m ON m.id = h.main_file_id
     WHERE h.session_id = :session_id ORDER BY m.last_timestamp IS NULL, m.last_timestamp DESC,
       h.host LIMIT 1),
    (SELECT min(host) FROM files WHERE session_id = :session_id AND kind IN {TRANSCRIPT_KINDS}),
    '') AS host
),
chosen AS MATERIALIZED (
  SELECT h.main_file_id AS file_id, h.main_file_rule AS rule FROM session_hosts h, home
  WHERE h.session_id = :session_id AND h.host = home.host
),
own AS MATERIALIZED (   -- the default host's transcripts of the session
  SELECT f.* FROM files f, home
  WHERE f.session_id = :session_id AND f.kind IN {TRANSCRIPT_KINDS}
    AND coalesce(f.host, '') = home.host
)
INSERT OR REPLACE INTO sessions (
  session_id, main_file_id, main_file_rule, project_dir, cwd, main_files, subagent_files,
  records, first_timestamp, last_timestamp, version, git_branch, deleted_at, host)
SELECT :session_id,
  (SELECT file_id FROM chosen),
  (SELECT rule FROM chosen),
  (SELECT project_dir FROM own
   ORDER BY id IS (SELECT file_id FROM chosen) DESC, kind = 'main' DESC, id LIMIT 1),
  (SELECT cwd FROM own WHERE cwd IS NOT NULL
   ORDER BY id IS (SELECT file_id FROM chosen) DESC, kind = 'main' DESC, id LIMIT 1),
  sum(kind = 'main' AND f.origin = counted.origin),
  sum(kind <> 'main' AND f.origin = counted.origin),
  sum(CASE WHEN f.origin = counted.origin THEN records END),
  min(first_timestamp), max(last_timestamp),
  (SELECT version FROM own WHERE version IS NOT NULL ORDER BY last_timestamp DESC LIMIT 1),
  (SELECT git_branch FROM own WHERE git_branch IS NOT NULL ORDER BY last_timestamp DESC LIMIT 1),
  CASE WHEN sum(kind = 'main') = sum(kind = 'main' AND deleted_at IS NOT NULL)
       AND sum(kind = 'main') > 0
       THEN max(deleted_at) END,
  (SELECT host FROM home)
FROM own f,
  -- count the local transcripts, or the store copies when there are none
  (SELECT min(origin) AS origin FROM own) counted
""".strip()
# Refreshing one session: its main file per host, then its row.
REFRESH_SESSION_SQLS = (
    "DELETE FROM session_hosts WHERE session_id = :session_id",
    REFRESH_SESSION_HOSTS_SQL,
    REFRESH_SESSION_SQL,
)


def refresh_session(conn, session_id: str) -> None:
    """A session's session_hosts rows and sessions row again (inside the
    caller's transaction)."""
    for sql in REFRESH_SESSION_SQLS:
        conn.execute(sql, {"session_id": session_id})


# A change to the sessions rule refreshes every sessions row (no cache is
# recomputed for it): derive.refresh_sessions_if_stale compares this with index_meta.
SESSIONS_HASH = sha256("\n".join(REFRESH_SESSION_SQLS).encode()).hexdigest()[:16]
SESSIONS_HASH_SQL = "SELECT value FROM index_meta WHERE key = 'sessions_hash'"
# A change to how derive.py (or derive_append.py) computes the caches: bump
# it and every cache is recomputed, as for a change to a definition.
DERIVE_VERSION = 2
# What built the caches: derive.mark_all_if_definitions_changed compares it
# with index_meta.definitions_hash.
CACHES_HASH = sha256(f"{DEFINITIONS_HASH}:{DERIVE_VERSION}".encode()).hexdigest()[:16]
CACHES_HASH_SQL = "SELECT value FROM index_meta WHERE key = 'definitions_hash'"
# Files whose caches wait to be computed.
PENDING_DERIVE_SQL = "SELECT 1 FROM files WHERE needs_derive LIMIT 1"


def sessions_current(conn) -> bool:
    """Were the sessions rows computed by REFRESH_SESSION_SQL as it is now?"""
    stored = conn.execute(SESSIONS_HASH_SQL).fetchone()
    return stored is not None and stored[0] == SESSIONS_HASH


def caches_current(conn) -> bool:
    """Were the caches built by these definitions and this DERIVE_VERSION?"""
    stored = conn.execute(CACHES_HASH_SQL).fetchone()
    return stored is not None and stored[0] == CACHES_HASH


def stamp_current(conn) -> None:
    """Record that the caches and sessions rows are those of today's
    definitions (true of an index with nothing in it yet)."""
    conn.executemany("INSERT OR REPLACE INTO index_meta VALUES (?, ?)",
                     [("definitions_hash", CACHES_HASH), ("sessions_hash", SESSIONS_HASH)])


def nothing_to_derive(conn) -> bool:
    """Would derive.derive_pending do nothing? (A run with nothing new then
    need not import derive.py.)"""
    return (caches_current(conn) and sessions_current(conn)
            and conn.execute(PENDING_DERIVE_SQL).fetchone() is None)


def create_views(db) -> None:
    for name, sql in VIEWS.items():
        db.create_view(name, sql, replace=True)


# session_verdicts: the verdict of every session (indexer/signals/verdict.py,
# which reads the views above). Registered here until the signal views'
# declarations are the registry's source.
from indexer.signals import verdict as _verdict  # noqa: E402

VIEWS["session_verdicts"] = _verdict.SESSION_VERDICTS_SQL
