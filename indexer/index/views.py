"""Every view of the SQL contract, registered once (``VIEWS``), and the
hashes that say when the caches are to be computed again.

The chain's definitions (the leaves, the ancestry, the orphans, chain
breaks, duplicate uuids, the main-file rules) are indexer/chain/definitions.py's;
this module adds the views built on them and on the other tables.
"""

from __future__ import annotations

from indexer.chain.definitions import (
    CHAIN_BREAKS_DEFINITION_SQL,
    CHAIN_BREAKS_SQL,
    CLI_DEFINITION_SQL,
    DUPLICATE_UUIDS_DEFINITION_SQL,
    DUPLICATE_UUIDS_SQL,
    HOST_OF,
    LEAF_ANCESTRY_DEFINITION_SQL,
    LEAF_ANCESTRY_SQL,
    LEAVES_DEFINITION_SQL,
    LEAVES_SQL,
    MAIN_FILE_FACTS_TEMPLATE,
    MAIN_FILE_RULE_FACTS_TEMPLATE,
    MAIN_FILE_RANK_TEMPLATE,
    MAIN_FILE_RULE_TEMPLATE,
    ORPHANS_DEFINITION_SQL,
    ORPHANS_SQL,
    SENT_NAMES_DEFINITION_SQL,
    SENT_NAMES_SQL,
    SENT_NAMES_TEMPLATE,
    TRANSCRIPT_KINDS,
    with_host,
)
from indexer.signals import classes, compaction, forks, usage_sums, verdict
from indexer.transcripts import thinking
from indexer.transcripts.digests import sha256
from indexer.transcripts.records import (
    API_ERROR_RECORD,
    CHAIN_TYPES_SQL,
    MODELED_KINDS,
    SYNTHETIC_MODEL,
    SYNTHETIC_RECORD,
)



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
# - wedged_tail (drop): when the latest assistant message on the chain holds
#   thinking the API refuses (thinking_faults.latest), the same cut back to
#   the last real assistant message before it (none: no cut).
# - refused_thinking: thinking the API refuses in an earlier message on the
#   chain (thinking_faults, not latest, and the new latest after a cut):
#   strip removes those blocks from the line (blocks: their indexes in
#   message.content); a line holding nothing else is dropped instead, and
#   its children re-parented onto its nearest ancestor that stays.
# - unreached_after_compaction (reparent): when a resume loses the
#   conversation after the last compaction (the verdict truncated, the walk
#   stopped above it), the record the resume chain starts at gets, as
#   parent, the last lost record written before it
#   (compaction.RELINK_UNREACHED_TEMPLATE), so the walk reads on through
#   them to the compaction's summary.
# - segment_not_relinked (rehead): when the last compaction's
#   preservedSegment walk from its tail never reaches its head, the
#   boundary's headUuid is set to where that walk ends
#   (compaction.REHEAD_TEMPLATE), so the CLI relinks what it kept;
#   old_parent_uuid and new_parent_uuid hold the old and the new headUuid.
# {thinking_faults}: the thinking_faults rows it reads (the view, or
# repair_plan_of's narrowed to one session).
REPAIR_PLAN_TEMPLATE = f"""
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
wedged AS (  -- with the last real assistant message before the latest one
  SELECT t.session_id, t.file_id, a.height, r.line_no, r.timestamp
  FROM (SELECT DISTINCT session_id, file_id, message_id FROM {{thinking_faults}}
        WHERE latest AND host = '') t
  JOIN leaf_ancestry_cache a ON a.file_id = t.file_id AND a.rule = 'resume' AND a.record_id = (
    SELECT k.record_id FROM leaf_ancestry_cache k JOIN records x ON x.id = k.record_id
    WHERE k.file_id = t.file_id AND k.rule = 'resume' AND x.type = 'assistant'
      AND NOT ({SYNTHETIC_RECORD.format(r="x")}) AND x.message_id IS NOT t.message_id
      AND k.height < (SELECT min(k2.height) FROM leaf_ancestry_cache k2
                      JOIN records y ON y.id = k2.record_id
                      WHERE k2.file_id = t.file_id AND k2.rule = 'resume'
                        AND y.message_id IS t.message_id)
    ORDER BY k.height DESC LIMIT 1)
  JOIN records r ON r.id = a.record_id
),
cuts AS (SELECT * FROM poisoned UNION ALL SELECT * FROM wedged),
-- truncations: the relink of a resume that loses what followed the last compaction
truncations AS (
  SELECT t.* FROM (
    SELECT m.session_id, m.main_file_id AS file_id, m.host,
      (SELECT record_id FROM ({compaction.RELINK_UNREACHED_TEMPLATE.format(
          file="m.main_file_id")})) AS record_id,
      (SELECT new_parent_uuid FROM ({compaction.RELINK_UNREACHED_TEMPLATE.format(
          file="m.main_file_id")})) AS new_parent_uuid
    FROM session_hosts m
    WHERE EXISTS (SELECT 1 FROM records b WHERE b.file_id = m.main_file_id
                  AND b.type = 'system' AND b.subtype = 'compact_boundary')) t
  WHERE t.new_parent_uuid IS NOT NULL
),
reheads AS (
  SELECT t.* FROM (
    SELECT m.session_id, m.main_file_id AS file_id, m.host,
      (SELECT record_id FROM ({compaction.REHEAD_TEMPLATE.format(file="m.main_file_id")}))
        AS record_id,
      (SELECT old_head FROM ({compaction.REHEAD_TEMPLATE.format(file="m.main_file_id")}))
        AS old_head,
      (SELECT new_head FROM ({compaction.REHEAD_TEMPLATE.format(file="m.main_file_id")}))
        AS new_head
    FROM session_hosts m
    WHERE EXISTS (SELECT 1 FROM records b WHERE b.file_id = m.main_file_id
                  AND b.type = 'system' AND b.subtype = 'compact_boundary')) t
  WHERE t.new_head IS NOT NULL
),
-- late grafts: the chain below the record a graft hangs from (verdict.GRAFT_CUT_TEMPLATE)
grafts AS (
  SELECT g.file_id, g.height FROM (
    SELECT m.main_file_id AS file_id,
           {verdict.GRAFT_CUT_TEMPLATE.format(file="m.main_file_id")} AS height
    FROM session_hosts m
    WHERE EXISTS (SELECT 1 FROM orphans_cache o WHERE o.file_id = m.main_file_id
                  AND o.cause = 'late_graft')) g
  WHERE g.height IS NOT NULL
),
dropped(file_id, uuid) AS (
  SELECT a.file_id, a.uuid FROM cuts p
  JOIN leaf_ancestry_cache a ON a.file_id = p.file_id AND a.rule = 'resume'
    AND a.height > p.height
  UNION
  SELECT a.file_id, a.uuid FROM grafts g
  JOIN leaf_ancestry_cache a ON a.file_id = g.file_id AND a.rule = 'resume'
    AND a.height > g.height
  UNION
  SELECT r.file_id, r.uuid FROM cuts p
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
),
refused AS MATERIALIZED (  -- earlier thinking the API refuses, on lines that stay
  SELECT t.session_id, t.file_id, t.uuid, r.id AS record_id, r.line_no, r.parent_uuid,
    json_group_array(t.block) AS blocks, count(*) AS faults,
    json_array_length(r.raw, '$.message.content') AS content_blocks
  FROM {{thinking_faults}} t JOIN records r ON r.file_id = t.file_id AND r.line_no = t.line_no
  WHERE t.host = '' AND NOT EXISTS (SELECT 1 FROM dropped d WHERE d.file_id = t.file_id
                                    AND d.uuid = t.uuid)
    AND (NOT t.latest OR EXISTS (SELECT 1 FROM wedged w WHERE w.file_id = t.file_id))
  GROUP BY t.file_id, t.line_no
),
emptied AS (SELECT * FROM refused WHERE faults >= content_blocks),
-- the nearest ancestor of an emptied line that stays (climbing emptied lines)
stays(file_id, uuid, parent_uuid) AS (
  SELECT file_id, uuid, parent_uuid FROM emptied
  UNION
  SELECT s.file_id, s.uuid, e.parent_uuid FROM stays s
  JOIN emptied e ON e.file_id = s.file_id AND e.uuid = s.parent_uuid
)
SELECT e.session_id, e.file_id, 'reparent' AS action, 'api_error_splice' AS reason,
       r.id AS record_id, r.line_no, r.uuid, r.parent_uuid AS old_parent_uuid,
       e.new_parent_uuid, e.api_error_uuid AS episode,
       {HOST_OF.format(file_id="e.file_id")} AS host, NULL AS blocks
FROM episodes e JOIN records r ON r.id = e.record_id
WHERE e.new_parent_uuid IS NOT NULL
UNION ALL
SELECT t.session_id, t.file_id, 'reparent', 'unreached_after_compaction', r.id, r.line_no,
       r.uuid, r.parent_uuid, t.new_parent_uuid, NULL, t.host, NULL
FROM truncations t JOIN records r ON r.id = t.record_id
UNION ALL
SELECT t.session_id, t.file_id, 'rehead', 'segment_not_relinked', r.id, r.line_no, r.uuid,
       t.old_head, t.new_head, NULL, t.host, NULL
FROM reheads t JOIN records r ON r.id = t.record_id
UNION ALL
SELECT f.session_id, d.file_id, 'drop',
       CASE WHEN EXISTS (SELECT 1 FROM poisoned p WHERE p.file_id = d.file_id)
            THEN 'poisoned_tail'
            WHEN EXISTS (SELECT 1 FROM grafts g WHERE g.file_id = d.file_id)
            THEN 'late_graft' ELSE 'wedged_tail' END, r.id, r.line_no, r.uuid,
       r.parent_uuid, NULL, NULL, coalesce(f.host, ''), NULL
FROM dropped d JOIN files f ON f.id = d.file_id
JOIN records r ON r.file_id = d.file_id AND r.uuid = d.uuid
UNION ALL
SELECT t.session_id, t.file_id, CASE WHEN t.faults >= t.content_blocks THEN 'drop'
                                     ELSE 'strip' END, 'refused_thinking', t.record_id,
       t.line_no, t.uuid, t.parent_uuid, NULL, NULL, '', t.blocks
FROM refused t
UNION ALL
SELECT e.session_id, c.file_id, 'reparent', 'refused_thinking', c.id, c.line_no, c.uuid,
       c.parent_uuid,
       (SELECT s.parent_uuid FROM stays s WHERE s.file_id = c.file_id AND s.uuid = e.uuid
          AND NOT EXISTS (SELECT 1 FROM emptied x WHERE x.file_id = s.file_id
                          AND x.uuid = s.parent_uuid)), NULL, '', NULL
FROM emptied e JOIN records c ON c.file_id = e.file_id AND c.parent_uuid = e.uuid
WHERE NOT EXISTS (SELECT 1 FROM emptied x WHERE x.file_id = c.file_id AND x.uuid = c.uuid)
  AND NOT EXISTS (SELECT 1 FROM dropped d WHERE d.file_id = c.file_id AND d.uuid = c.uuid)
""".strip()
REPAIR_PLAN_SQL = REPAIR_PLAN_TEMPLATE.format(thinking_faults="thinking_faults")


def repair_plan_of(session: str) -> str:
    """repair_plan's rows for the sessions ``session`` picks (a condition on
    session_hosts h), with the thinking faults computed for them only; the
    caller filters the rows by session too."""
    return REPAIR_PLAN_TEMPLATE.format(thinking_faults="({})".format(
        classes.thinking_faults_where(session)))


# --- Copies of a transcript ----------------------------------------------

# Distinct uuids file {a} holds and file {b} does not (one copy of a
# transcript against another): how many, and the first 20 of them in file
# order (a JSON array).
ONLY_IN_COUNT = """(SELECT count(DISTINCT r.uuid) FROM records r
          WHERE r.file_id = {a} AND r.uuid IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM records x WHERE x.file_id = {b} AND x.uuid = r.uuid))"""
ONLY_IN_FIRST = """(SELECT json_group_array(uuid) FROM (
            SELECT r.uuid FROM records r
            WHERE r.file_id = {a} AND r.uuid IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM records x WHERE x.file_id = {b} AND x.uuid = r.uuid)
            GROUP BY r.uuid ORDER BY min(r.line_no) LIMIT 20))"""

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
SESSION_COPIES_SQL = f"""
SELECT c.*,
       (c.local_only > 0 OR c.store_only > 0 OR c.local_records <> c.store_records
        OR c.local_resume_leaf_uuid IS NOT c.store_resume_leaf_uuid) AS diverged
FROM (
  SELECT l.session_id, l.kind, l.agent_id, s.project_key, s.subpath,
         l.id AS local_file_id, l.path AS local_path, l.deleted_at AS local_deleted_at,
         s.id AS store_file_id, s.path AS store_path,
         l.records AS local_records, s.records AS store_records,
         {ONLY_IN_COUNT.format(a='l.id', b='s.id')} AS local_only,
         {ONLY_IN_COUNT.format(a='s.id', b='l.id')} AS store_only,
         {ONLY_IN_FIRST.format(a='l.id', b='s.id')} AS local_only_uuids,
         {ONLY_IN_FIRST.format(a='s.id', b='l.id')} AS store_only_uuids,
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
HOST_COPIES_SQL = f"""
SELECT c.*,
       (c.a_only > 0 OR c.b_only > 0 OR c.a_records <> c.b_records
        OR c.a_resume_leaf_uuid IS NOT c.b_resume_leaf_uuid) AS diverged
FROM (
  SELECT a.session_id, a.kind, a.agent_id,
         coalesce(a.host, '') AS a_host, a.id AS a_file_id, a.path AS a_path,
         a.records AS a_records, a.deleted_at AS a_deleted_at,
         coalesce(b.host, '') AS b_host, b.id AS b_file_id, b.path AS b_path,
         b.records AS b_records, b.deleted_at AS b_deleted_at,
         {ONLY_IN_COUNT.format(a='a.id', b='b.id')} AS a_only,
         {ONLY_IN_COUNT.format(a='b.id', b='a.id')} AS b_only,
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
    """ + ONLY_IN_COUNT.format(a="c.file_id", b="s.main_file_id") + """ AS only_here,
    """ + ONLY_IN_COUNT.format(a="s.main_file_id", b="c.file_id") + """ AS only_in_chosen,
    """ + ONLY_IN_FIRST.format(a="c.file_id", b="s.main_file_id") + """ AS only_here_uuids,
    """ + ONLY_IN_FIRST.format(a="s.main_file_id", b="c.file_id") + """ AS only_in_chosen_uuids,
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
# USAGE_CALLS_TEMPLATE is its first step (one row per call, before
# pricing), {files} narrowing the files read, {where} the lines; {indexed}
# how it reads records ("INDEXED BY records_usage", by file; by message id,
# records_usage_message, or by id, when derive picks some calls again).
USAGE_CALLS_TEMPLATE = f"""
  SELECT max(coalesce(output_tokens, 0) * 4294967296 - id) AS pick, count(*) AS lines,
    id AS record_id, file_id, session_id, message_id, request_id, model, timestamp, input_tokens,
    output_tokens, cache_read_tokens, speed, coalesce(cache_1h_tokens, 0) AS w1h,
    CASE WHEN cache_5m_tokens IS NULL AND cache_1h_tokens IS NULL
         THEN coalesce(cache_creation_tokens, 0) ELSE coalesce(cache_5m_tokens, 0) END AS w5m
  FROM records {{indexed}}
  WHERE has_usage AND model IS NOT '{SYNTHETIC_MODEL}'
    AND file_id IN (SELECT id FROM files WHERE kind IN {TRANSCRIPT_KINDS}{{files}}){{where}}
  GROUP BY message_id, request_id, CASE WHEN request_id IS NULL THEN session_id END,
    CASE WHEN message_id IS NULL THEN id END
""".strip()
# usage_calls (migrations.m090_usage_calls) holds USAGE_CALLS_TEMPLATE's
# rows over every file, kept at ingest (derive.keep_usage_calls: a call is
# picked again whenever a line of it is added or deleted, in any file);
# USAGE_CALLS_COLUMNS are its columns, in the template's order.
USAGE_CALLS_COLUMNS = ("pick, lines, record_id, file_id, session_id, message_id, request_id, "
                       "model, timestamp, input_tokens, output_tokens, cache_read_tokens, "
                       "speed, w1h, w5m")
# Storing {calls} (rows of USAGE_CALLS_TEMPLATE), with the project folder
# and host of the kept line's file.
KEEP_USAGE_CALLS_TEMPLATE = (
    f"INSERT INTO usage_calls ({USAGE_CALLS_COLUMNS}, project, host)\n"
    f"SELECT {', '.join('c.' + c.strip() for c in USAGE_CALLS_COLUMNS.split(','))}, "
    "f.project_dir, coalesce(f.host, '')\nFROM ({calls}) c JOIN files f ON f.id = c.file_id")
USAGE_CALLS_DEFINITION = USAGE_CALLS_TEMPLATE.format(indexed="INDEXED BY records_usage", files="",
                                                     where="")
# The rest of the usage view, from calls.
# call_models (and USAGE_PRICED_TEMPLATE's call_files) are read once, not
# once per call (a files row is wide; the price of a model is looked up
# twice): about a third of the view's time on a 1M-record index.
# USAGE_PRICING_TEMPLATE: {models} the calls whose distinct models are
# looked up, {place} the project_dir and host columns when calls lacks
# them, {placed} where priced reads them (USAGE_PRICED_TEMPLATE: calls from
# the records, placed by call_files; USAGE_PRICED_CALLS_TEMPLATE: from
# usage_calls, which holds them).
USAGE_PRICING_TEMPLATE = """
call_models AS MATERIALIZED (
  SELECT model, coalesce(
      (SELECT q.model FROM prices q WHERE q.model = m.model),
      CASE WHEN m.model GLOB '*-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]'
           THEN substr(m.model, 1, length(m.model) - 9) END) AS price_model
  FROM (SELECT DISTINCT model FROM {models} WHERE model IS NOT NULL) m
),
priced AS (
  SELECT c.*{place}, p.model AS price_model, p.*,
    coalesce(c.input_tokens, 0) + coalesce(c.cache_read_tokens, 0) + c.w5m + c.w1h
      AS prompt_tokens,
    CASE WHEN c.speed = 'fast' THEN p.fast_multiplier ELSE 1 END AS multiplier
  FROM {placed}
    LEFT JOIN call_models m ON m.model = c.model
    LEFT JOIN prices p ON p.model = m.price_model
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
USAGE_PRICED_TEMPLATE = """
call_files AS MATERIALIZED (
  SELECT id, project_dir, coalesce(host, '') AS host FROM files
),
""".lstrip() + USAGE_PRICING_TEMPLATE.format(
    models="calls", place=", f.project_dir, f.host",
    placed="calls c JOIN call_files f ON f.id = c.file_id")
# The calls of usage_calls (with their file's project folder and host, kept
# there: a file's never change) {where}, priced as they are read.
USAGE_PRICED_CALLS_TEMPLATE = (
    f"WITH calls AS (SELECT {USAGE_CALLS_COLUMNS}, project AS project_dir, host "
    "FROM usage_calls{where}),\n"
    + USAGE_PRICING_TEMPLATE.format(models="calls", place="", placed="calls c"))
# usage_calls also keeps each call's price (price_model, long_context,
# cost_usd: migrations.m091_usage_call_prices), priced when the call is
# picked (derive.keep_usage_calls) and all again when the prices table
# changes through prices.store (`prices load`, the packaged prices). A
# change made to prices by hand is noted by a trigger in index_meta
# ('usage_prices_stale'), and the next ingest prices every call again
# (as the caches follow the records at the next ingest, never between).
# usage reads the kept prices: one table, no join (a whole-index sum by
# project reads 175k rows, not 175k rows priced through two joins).
# usage_definition is the view computed from the records (tests hold them
# equal).
USAGE_PRICES_STALE_SQL = "SELECT 1 FROM index_meta WHERE key = 'usage_prices_stale'"
USAGE_SQL = """
SELECT record_id, session_id, project, file_id, model, timestamp, message_id, request_id, lines,
  input_tokens, output_tokens, cache_read_tokens, w5m AS cache_write_5m_tokens,
  w1h AS cache_write_1h_tokens,
  coalesce(input_tokens, 0) + coalesce(cache_read_tokens, 0) + w5m + w1h AS prompt_tokens,
  speed, price_model, long_context, cost_usd, host
FROM usage_calls
""".strip()
# usage_day_sums (migrations.m094_usage_day_sums; read by
# signals/usage_sums.py): the sums of the calls {calls} {where} per day
# (their time's first 10 characters), project folder and model, in its
# columns' order; cost in whole picodollars (usage_sums.PICO_COST), so that
# adding and taking away calls keeps each row exactly their sum.
USAGE_DAY_SUMS_TEMPLATE = f"""
SELECT {usage_sums.CALL_DAY.format(c="c")} AS day, c.project, c.model, count(*) AS calls,
  sum(coalesce(c.input_tokens, 0)) AS input_tokens,
  sum(coalesce(c.output_tokens, 0)) AS output_tokens,
  sum(coalesce(c.cache_read_tokens, 0)) AS cache_read_tokens,
  sum(c.w5m) AS cache_write_5m_tokens, sum(c.w1h) AS cache_write_1h_tokens,
  sum(coalesce({usage_sums.PICO_COST.format(c="c")}, 0)) AS cost_pico,
  sum(c.cost_usd IS NULL) AS unpriced_calls
FROM {{calls}} c{{where}}
GROUP BY 1, 2, 3
""".strip()
# The same row of usage_day_sums as g's (NULL keys equal).
_SAME_SUMS_ROW = "t.day IS g.day AND t.project IS g.project AND t.model IS g.model"
_SUMS_COLUMNS = ("calls", "input_tokens", "output_tokens", "cache_read_tokens",
                 "cache_write_5m_tokens", "cache_write_1h_tokens", "cost_pico", "unpriced_calls")
# Taking the calls of usage_calls {where} out of their rows (before they
# are deleted), and adding them (once picked and priced): a row for each
# new (day, project, model) first, then the sums; a row left with no call
# goes.
SUBTRACT_USAGE_DAY_SUMS_TEMPLATE = (
    "UPDATE usage_day_sums AS t SET "
    + ", ".join(f"{c} = t.{c} - g.{c}" for c in _SUMS_COLUMNS)
    + "\nFROM (" + USAGE_DAY_SUMS_TEMPLATE.format(calls="usage_calls", where="{where}")
    + f") g WHERE {_SAME_SUMS_ROW}")
ADD_USAGE_DAY_SUMS_TEMPLATES = (
    "INSERT INTO usage_day_sums SELECT g.day, g.project, g.model, "
    + ", ".join("0" for _ in _SUMS_COLUMNS)
    + "\nFROM (" + USAGE_DAY_SUMS_TEMPLATE.format(calls="usage_calls", where="{where}") + ") g"
    + f"\nWHERE NOT EXISTS (SELECT 1 FROM usage_day_sums t WHERE {_SAME_SUMS_ROW})",
    "UPDATE usage_day_sums AS t SET "
    + ", ".join(f"{c} = t.{c} + g.{c}" for c in _SUMS_COLUMNS)
    + "\nFROM (" + USAGE_DAY_SUMS_TEMPLATE.format(calls="usage_calls", where="{where}")
    + f") g WHERE {_SAME_SUMS_ROW}",
    "DELETE FROM usage_day_sums WHERE calls = 0",
)
# usage_day_sums again from every call.
REFILL_USAGE_DAY_SUMS_SQLS = (
    "DELETE FROM usage_day_sums",
    "INSERT INTO usage_day_sums "
    + USAGE_DAY_SUMS_TEMPLATE.format(calls="usage_calls", where=""),
)
# The definition tests hold usage_day_sums equal to: the same sums of the
# usage view's definition (the records).
USAGE_DAY_SUMS_DEFINITION_SQL = USAGE_DAY_SUMS_TEMPLATE.format(
    calls="(SELECT *, cache_write_5m_tokens AS w5m, cache_write_1h_tokens AS w1h "
          "FROM usage_definition)", where="")
# Pricing the calls of usage_calls {where} (all of them: where "").
REPRICE_USAGE_CALLS_TEMPLATE = """
UPDATE usage_calls SET price_model = p.price_model, long_context = p.long_context,
  cost_usd = p.cost_usd
FROM (
{priced}
) p WHERE usage_calls.record_id = p.record_id
""".strip()
REPRICE_ALL_USAGE_CALLS_SQLS = (
    REPRICE_USAGE_CALLS_TEMPLATE.format(priced=USAGE_PRICED_CALLS_TEMPLATE.format(where="")),
    *REFILL_USAGE_DAY_SUMS_SQLS,   # every cost may have changed
    "DELETE FROM index_meta WHERE key = 'usage_prices_stale'",
)


def reprice_usage_calls(conn) -> None:
    """Price every call of usage_calls again (inside the caller's
    transaction), sum them again per day, project and model
    (usage_day_sums), and lift the note that the prices changed."""
    for sql in REPRICE_ALL_USAGE_CALLS_SQLS:
        conn.execute(sql)


def usage_prices_current(conn) -> bool:
    """Are usage_calls' prices those of the prices table as it is?"""
    return conn.execute(USAGE_PRICES_STALE_SQL).fetchone() is None
USAGE_DEFINITION_SQL = ("WITH calls AS (" + USAGE_CALLS_DEFINITION + "\n),\n"
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
    "cli_definition": with_host(CLI_DEFINITION_SQL),
    "leaves_definition": with_host(LEAVES_DEFINITION_SQL),
    "leaf_ancestry_definition": with_host(LEAF_ANCESTRY_DEFINITION_SQL),
    "orphans_definition": with_host(ORPHANS_DEFINITION_SQL),
    "chain_breaks_definition": with_host(CHAIN_BREAKS_DEFINITION_SQL),
    "duplicate_uuids_definition": with_host(DUPLICATE_UUIDS_DEFINITION_SQL),
    "leaves": LEAVES_SQL,
    "leaf_ancestry": LEAF_ANCESTRY_SQL,
    "orphans": ORPHANS_SQL,
    "chain_breaks": CHAIN_BREAKS_SQL,
    "duplicate_uuids": DUPLICATE_UUIDS_SQL,
    # the signal views, as the problem classes declare them
    **{view.name: view.definition() for view in classes.SIGNAL_VIEWS},
    # what thinking_faults reads from thinking_cache, from the records
    "thinking_faults_definition": classes.THINKING_FAULTS_TEMPLATE.format(
        **classes.THINKING_FAULTS_ARGS),
    # what session_forks reads from fork_heads_cache, from the records
    "session_forks_definition": forks.SESSION_FORKS_DEFINITION_SQL,
    # the prompts the loader names by their sentAsUuid: sent_names_cache,
    # and from the records
    "sent_names": SENT_NAMES_SQL,
    "sent_names_definition": with_host(SENT_NAMES_DEFINITION_SQL),
    # what session_verdicts reads from verdict_facts_cache, and from the records
    "verdict_facts": verdict.VERDICT_FACTS_VIEW_SQL,
    "verdict_facts_definition": verdict.VERDICT_FACTS_DEFINITION_VIEW_SQL,
    "repair_plan": REPAIR_PLAN_SQL,
    "session_copies": SESSION_COPIES_SQL,
    "host_copies": HOST_COPIES_SQL,
    "file_generations": FILE_GENERATIONS_SQL,
    "session_main_copies": SESSION_MAIN_COPIES_SQL,
    "record_types": RECORD_TYPES_SQL,
    "usage": USAGE_SQL,
    "usage_definition": USAGE_DEFINITION_SQL,
    "usage_day_sums_definition": USAGE_DAY_SUMS_DEFINITION_SQL,
    "usage_reported": USAGE_REPORTED_SQL,
}

# A change to any definition changes this, and every cache is recomputed.
# (the definitions as the caches are computed from them: without host)
DEFINITIONS_HASH = sha256("\n".join([
    CLI_DEFINITION_SQL, LEAVES_DEFINITION_SQL, LEAF_ANCESTRY_DEFINITION_SQL,
    ORPHANS_DEFINITION_SQL, CHAIN_BREAKS_DEFINITION_SQL, DUPLICATE_UUIDS_DEFINITION_SQL,
    thinking.THINKING_CACHE_ROWS_TEMPLATE, forks.FORK_HEADS_TEMPLATE,
    SENT_NAMES_TEMPLATE,
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
{MAIN_FILE_RULE_FACTS_TEMPLATE.format(where="f.session_id = :session_id")}
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
  records, first_timestamp, last_timestamp, version, git_branch, deleted_at, host, agent)
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
  (SELECT host FROM home),
  -- whose session (agents.py): its chosen file's agent
  coalesce((SELECT agent FROM own
   ORDER BY id IS (SELECT file_id FROM chosen) DESC, kind = 'main' DESC, id LIMIT 1),
   'claude-code')
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


# usage_calls is refilled from its definition when the definition changed
# (derive.refresh_usage_calls_if_stale compares this with index_meta): not
# a full derive, the calls alone.
USAGE_CALLS_HASH = sha256(f"{USAGE_CALLS_DEFINITION}\n{USAGE_PRICING_TEMPLATE}".encode()).hexdigest()[:16]
USAGE_CALLS_HASH_SQL = "SELECT value FROM index_meta WHERE key = 'usage_calls_hash'"


def usage_calls_current(conn) -> bool:
    """Was usage_calls filled (and priced) by USAGE_CALLS_TEMPLATE and
    USAGE_PRICING_TEMPLATE as they are now?"""
    stored = conn.execute(USAGE_CALLS_HASH_SQL).fetchone()
    return stored is not None and stored[0] == USAGE_CALLS_HASH


# verdict_facts_cache is refilled from its definition when the definition
# changed (derive.refresh_verdict_facts_if_stale compares this with
# index_meta): not a full derive, the facts alone (a second or two at a
# million records).
VERDICT_FACTS_HASH = sha256(verdict.VERDICT_FACTS_DEFINITION_SQL.encode()).hexdigest()[:16]
VERDICT_FACTS_HASH_SQL = "SELECT value FROM index_meta WHERE key = 'verdict_facts_hash'"


def verdict_facts_current(conn) -> bool:
    """Was verdict_facts_cache filled by VERDICT_FACTS_TEMPLATE as it is now?"""
    stored = conn.execute(VERDICT_FACTS_HASH_SQL).fetchone()
    return stored is not None and stored[0] == VERDICT_FACTS_HASH


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
                     [("definitions_hash", CACHES_HASH), ("sessions_hash", SESSIONS_HASH),
                      ("usage_calls_hash", USAGE_CALLS_HASH),
                      ("verdict_facts_hash", VERDICT_FACTS_HASH)])


def nothing_to_derive(conn) -> bool:
    """Would derive.derive_pending do nothing? (A run with nothing new then
    need not import derive.py.)"""
    return (caches_current(conn) and sessions_current(conn) and usage_calls_current(conn)
            and usage_prices_current(conn) and verdict_facts_current(conn)
            and conn.execute(PENDING_DERIVE_SQL).fetchone() is None)


def create_views(db) -> None:
    for name, sql in VIEWS.items():
        db.create_view(name, sql, replace=True)
