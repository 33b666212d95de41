"""The compaction audit (issue 27, item 2): per compaction of a session's
main transcript, what a resume reaches of the conversation after it, the
copies a second ``/compact`` re-appended (anthropics/claude-code#92089,
shown once), whether the links its boundary names what it kept with hold,
and the conversation a resume loses although the user did not abandon it
(the ``truncated`` verdict, verdict.py).

What Claude Code 2.1.332 does with each shape of the threads, found with the
real binary (tests/test_compaction_audit.py):
- one /compact with no Stop hook (#46603, 2.1.260-2.1.267): the rows after
  the summary hang from it, the kept tail is the last answer; 2.1.332's
  relink puts the tail back after the summary: nothing is lost.
- a second /compact in one process (#92089): the copies keep the place of
  the lines they copy (before the earlier boundary) and are dropped; a
  boundary whose tail is the Stop hook row under the last copy keeps that
  row: nothing after the last boundary is lost (what came before it is the
  new summary's). When the row after the new summary hangs from a copy and
  the boundary kept nothing (#92849), its parent is dropped and the walk
  stops there: the summary is lost (``unreached_after_compaction``).
- a post-compaction parentUuid that was never written (#46603's original):
  the walk stops at that record (no record within 5 s to fall back to): the
  summary and the conversation before the break are lost
  (``unreached_after_compaction``).
- a preservedSegment whose walk from tailUuid never reaches headUuid though
  both are in the file: the CLI relinks nothing and the walk from the leaf
  stops at the boundary: the kept records are lost (``segment_not_relinked``).
"""

from __future__ import annotations

# A compact boundary record {r} of the main side that is the first line of
# its uuid (a copy of a boundary written again is not another compaction).
BOUNDARY_TEMPLATE = """{r}.type = 'system' AND {r}.subtype = 'compact_boundary'
  AND NOT {r}.is_sidechain AND NOT EXISTS (
    SELECT 1 FROM records {r}e WHERE {r}e.file_id = {r}.file_id AND {r}e.uuid = {r}.uuid
      AND {r}e.line_no < {r}.line_no)"""

# The fields a process writes afresh on each line and a copy may differ in:
# 2.1.259 re-appends records with a new promptId, and the first write of an
# answer lacks the slug a second write of it carries (the real binary:
# tests/fixtures/compaction).
BOOKKEEPING = ("$.promptId", "$.slug")
_SAME_BYTES = ("({a}.raw = {b}.raw OR (json_valid({a}.raw) AND json_valid({b}.raw) AND "
               "json_remove({a}.raw, " + ", ".join(f"'{k}'" for k in BOOKKEEPING)
               + ") = json_remove({b}.raw, " + ", ".join(f"'{k}'" for k in BOOKKEEPING) + ")))")
# A line {r} that is a copy a compaction re-appended (#92089): an earlier
# line of its file has its uuid and the same bytes (but for BOOKKEEPING),
# and a compact boundary line (a boundary, or a copy of one) is at or after
# that line and before {r}: the history written again across a compaction,
# not an answer written twice in one turn.
COPY_TEMPLATE = ("""({r}.uuid IS NOT NULL AND EXISTS (
    SELECT 1 FROM records {r}c WHERE {r}c.file_id = {r}.file_id AND {r}c.uuid = {r}.uuid
      AND {r}c.line_no < {r}.line_no AND """ + _SAME_BYTES.format(a="{r}c", b="{r}") + """
      AND EXISTS (SELECT 1 FROM records {r}k WHERE {r}k.file_id = {r}.file_id
                  AND {r}k.type = 'system' AND {r}k.subtype = 'compact_boundary'
                  AND {r}k.line_no >= {r}c.line_no AND {r}k.line_no < {r}.line_no)))""")

# The conversation records of a compaction segment: the user and assistant
# uuids of the main side of boundary {b}'s file whose FIRST line is after
# it and before the next boundary ({next}: its byte_offset, NULL for the
# last), as the CLI orders records (resume.first_loaded): a copy counts
# where its first line is, once. The lines are read by byte offset (the
# records_file_offset index: the segment's lines only). Columns: uuid,
# record_id (its last line in the segment), line_no (its first line).
SEGMENT_RECORDS_TEMPLATE = """SELECT s.uuid, max(s.id) AS record_id, min(s.line_no) AS line_no
  FROM records s WHERE s.file_id = {b}.file_id AND s.byte_offset > {b}.byte_offset
    AND ({next} IS NULL OR s.byte_offset < {next})
    AND s.type IN ('user', 'assistant') AND NOT s.is_sidechain AND s.uuid IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM records e WHERE e.file_id = s.file_id AND e.uuid = s.uuid
                    AND e.line_no < {b}.line_no)
  GROUP BY s.uuid"""

# SEGMENT_RECORDS_TEMPLATE's test for one uuid {u}: a line of it in the
# stretch, and none before boundary {b} (the lines of that uuid only, by
# records_file_uuid: a question driven from a few uuids, such as the orphans
# of a file, reads no other line of the segment; the unary + keeps SQLite
# from reading the stretch by records_file_offset instead, once per uuid).
SEGMENT_RECORD_TEMPLATE = """SELECT 1 FROM records s WHERE s.file_id = {b}.file_id AND s.uuid = {u}
    AND +s.byte_offset > {b}.byte_offset AND ({next} IS NULL OR +s.byte_offset < {next})
    AND s.type IN ('user', 'assistant') AND NOT s.is_sidechain
    AND NOT EXISTS (SELECT 1 FROM records e WHERE e.file_id = s.file_id AND e.uuid = s.uuid
                    AND e.line_no < {b}.line_no)"""

# Reached by a resume: on the file's resume chain, or off it and put back
# by the CLI after its walk (orphans restored). {u}: the uuid, {f}: file.
REACHED_TEMPLATE = """(EXISTS (SELECT 1 FROM leaf_ancestry_cache k WHERE k.file_id = {f}
    AND k.rule = 'resume' AND k.uuid = {u})
  OR EXISTS (SELECT 1 FROM orphans_cache o WHERE o.file_id = {f} AND o.uuid = {u}
    AND o.restored))"""

# The preservedSegment of boundary {b}: its head, anchor and tail uuids.
_SEGMENT = "json_extract({b}.raw, '$.compactMetadata.preservedSegment.{k}')"
# preservedMessages as an object: the CLI reads its list, not the segment.
_LISTED = ("json_type({b}.raw, '$.compactMetadata.preservedMessages') = 'object'")

# The walk of boundary {b}'s preservedSegment from its tail up the parents
# (each uuid's last line, as the loader holds it) until its head: uuid,
# steps. What stops it looping: a uuid not in the file ends it, and the
# steps are bounded by the file's lines.
SEGMENT_WALK_TEMPLATE = ("""WITH RECURSIVE walk(uuid, steps) AS (
    SELECT """ + _SEGMENT.format(b="{b}", k="tailUuid") + """, 0
    UNION ALL
    SELECT (SELECT p.parent_uuid FROM records p WHERE p.file_id = {b}.file_id
              AND p.uuid = w.uuid ORDER BY p.line_no DESC LIMIT 1), w.steps + 1
    FROM walk w
    WHERE w.uuid IS NOT NULL AND w.uuid IS NOT """ + _SEGMENT.format(b="{b}", k="headUuid")
                         + """
      AND EXISTS (SELECT 1 FROM records p WHERE p.file_id = {b}.file_id AND p.uuid = w.uuid)
      AND w.steps <= (SELECT line_count FROM files x WHERE x.id = {b}.file_id))""")


# From boundary {b}'s logicalParentUuid up the parents while the records
# are not messages (attachments, system records Claude Code writes after the
# last answer, as 2.1.332 does): the tail must be among them. What stops it
# looping: a message, a uuid not in the file, the file's line count.
AFTER_TAIL_TEMPLATE = """WITH RECURSIVE up(uuid, type, steps) AS (
    SELECT {b}.logical_parent_uuid, (SELECT p.type FROM records p WHERE p.file_id = {b}.file_id
      AND p.uuid = {b}.logical_parent_uuid ORDER BY p.line_no DESC LIMIT 1), 0
    UNION ALL
    SELECT p.parent_uuid, (SELECT q.type FROM records q WHERE q.file_id = {b}.file_id
      AND q.uuid = p.parent_uuid ORDER BY q.line_no DESC LIMIT 1), u.steps + 1
    FROM up u JOIN records p ON p.id = (SELECT max(x.id) FROM records x
      WHERE x.file_id = {b}.file_id AND x.uuid = u.uuid)
    WHERE u.type NOT IN ('user', 'assistant')
      AND u.steps <= (SELECT line_count FROM files f WHERE f.id = {b}.file_id))"""


def _in_file(b: str, uuid: str) -> str:
    return (f"EXISTS (SELECT 1 FROM records q WHERE q.file_id = {b}.file_id "
            f"AND q.uuid = {uuid})")


# What is wrong with the links boundary {b} names what it kept by, or NULL
# (nothing named, or all hold): head_missing, tail_missing, anchor_missing
# (a uuid named that no line of the file has), listed_missing (a
# preservedMessages uuid not in the file), segment_does_not_reach_head (the
# walk from the tail never comes to the head: the CLI relinks nothing),
# tail_not_logical_parent (the tail is neither the boundary's
# logicalParentUuid nor above it through records that are not messages:
# AFTER_TAIL_TEMPLATE; the CLI does not read that link: shown, not a break).
PRESERVED_FINDING_TEMPLATE = ("""CASE
  WHEN """ + _LISTED + """ THEN CASE WHEN EXISTS (
      SELECT 1 FROM json_each({b}.raw, '$.compactMetadata.preservedMessages.uuids') l
      WHERE NOT """ + _in_file("{b}", "l.value") + """) THEN 'listed_missing' END
  WHEN json_type({b}.raw, '$.compactMetadata.preservedSegment') IS NOT 'object' THEN NULL
  WHEN NOT """ + _in_file("{b}", _SEGMENT.format(b="{b}", k="headUuid")) + """
    THEN 'head_missing'
  WHEN NOT """ + _in_file("{b}", _SEGMENT.format(b="{b}", k="tailUuid")) + """
    THEN 'tail_missing'
  WHEN NOT """ + _in_file("{b}", _SEGMENT.format(b="{b}", k="anchorUuid")) + """
    THEN 'anchor_missing'
  WHEN NOT EXISTS (""" + SEGMENT_WALK_TEMPLATE + """
      SELECT 1 FROM walk WHERE uuid = """ + _SEGMENT.format(b="{b}", k="headUuid") + """)
    THEN 'segment_does_not_reach_head'
  WHEN NOT EXISTS (""" + AFTER_TAIL_TEMPLATE + """
      SELECT 1 FROM up WHERE uuid = """ + _SEGMENT.format(b="{b}", k="tailUuid") + """)
    THEN 'tail_not_logical_parent'
  END""")

# The conversation records a resume of boundary {b}'s file loses after it
# although nobody abandoned them (the last boundary only):
# - unreached_after_compaction: the resume chain does not come to the
#   boundary, and records of its segment are off the chain as roots of
#   nothing on it (orphans unlinked or dangling_parent, not put back): the
#   walk stopped at a parent never written, or at one the relink dropped;
# - segment_not_relinked: the walk of its preservedSegment from the tail
#   never reaches the head though both are in the file, so the CLI relinks
#   nothing: the records of that walk off the chain are lost.
# UNREACHED_RECORDS_TEMPLATE: those records of the last boundary {b}
# (uuid, line_no of their last line).
UNREACHED_RECORDS_TEMPLATE = ("""SELECT o.uuid, o.line_no FROM orphans_cache o
  WHERE o.file_id = {b}.file_id AND NOT o.restored AND o.cause IN ('unlinked', 'dangling_parent')
    AND EXISTS (""" + SEGMENT_RECORD_TEMPLATE.format(b="{b}", next="NULL", u="o.uuid") + """)
    AND NOT EXISTS (SELECT 1 FROM leaf_ancestry_cache k WHERE k.file_id = {b}.file_id
                    AND k.rule = 'resume' AND k.uuid = {b}.uuid)""")
UNREACHED_TEMPLATE = ("""(CASE WHEN EXISTS (SELECT 1 FROM leaf_ancestry_cache k
    WHERE k.file_id = {b}.file_id AND k.rule = 'resume' AND k.uuid = {b}.uuid) THEN 0
  ELSE (SELECT count(*) FROM (""" + UNREACHED_RECORDS_TEMPLATE + """)) END)""")
NOT_RELINKED_TEMPLATE = ("""(SELECT count(DISTINCT w.uuid) FROM (""" + SEGMENT_WALK_TEMPLATE
                         + """ SELECT uuid FROM walk) w
  JOIN records r ON r.file_id = {b}.file_id AND r.uuid = w.uuid
  WHERE r.type IN ('user', 'assistant') AND NOT """
                         + REACHED_TEMPLATE.format(f="{b}.file_id", u="w.uuid") + """)""")

# The truncation of file {file}, as JSON, or NULL: its last compaction's
# boundary (uuid, at), the cause and how many conversation records a resume
# loses (lost); the first cause that loses any.
TRUNCATION_TEMPLATE = ("""(SELECT CASE
    WHEN unreached > 0 THEN json_object('cause', 'unreached_after_compaction',
      'lost', unreached, 'boundary', uuid, 'at', timestamp)
    WHEN finding = 'segment_does_not_reach_head' AND not_relinked > 0 THEN json_object(
      'cause', 'segment_not_relinked', 'lost', not_relinked, 'boundary', uuid, 'at', timestamp,
      'head', head, 'tail', tail) END
  FROM (SELECT lb.uuid, lb.timestamp, """ + UNREACHED_TEMPLATE.format(b="lb")
                       + """ AS unreached,
          """ + PRESERVED_FINDING_TEMPLATE.format(b="lb") + """ AS finding,
          """ + NOT_RELINKED_TEMPLATE.format(b="lb") + """ AS not_relinked,
          """ + _SEGMENT.format(b="lb", k="headUuid") + """ AS head,
          """ + _SEGMENT.format(b="lb", k="tailUuid") + """ AS tail
        FROM records lb WHERE lb.file_id = {file} AND """
                       + BOUNDARY_TEMPLATE.format(r="lb") + """
        ORDER BY lb.line_no DESC LIMIT 1))""")

# compaction_segments: one row per compaction (a compact boundary, not a
# copy of one) of each session's main transcript on each host: position
# (1 the first), last (the last boundary: the one a resume starts after),
# records (conversation records whose first line is after it and before
# the next boundary: copies once), copies (lines in that stretch that copy
# an earlier line across a compaction: COPY_TEMPLATE), reached (of records, on the resume
# chain or put back), lost (the others), lost_causes (their orphans causes,
# with counts), preserved (segment, list or NULL), preserved_finding
# (PRESERVED_FINDING_TEMPLATE), truncated (the last compaction only:
# TRUNCATION_TEMPLATE's cause), truncated_records (how many it loses). A copy's
# uuid is on more than one line of the file, so copies reads only the lines
# of the file's duplicate_uuids_cache rows (the records_file_uuid lines of
# those uuids; the unary + keeps SQLite from reading the stretch by
# records_file_offset instead), not every line after the boundary.
# next_offset's min(+n.byte_offset) likewise reads the file's boundaries
# (records_compact_boundaries), not every line after this one in offset
# order until a boundary (for the last boundary: the rest of the file;
# 66 ms of the health page's compaction row at a million records, 3 ms so).
COMPACTION_SEGMENTS_SQL = ("""
SELECT session_id, file_id, boundary_uuid, position, last, compacted_at,
  json_extract(segment, '$[0]') AS records, copies, json_extract(segment, '$[1]') AS reached,
  json_extract(segment, '$[0]') - json_extract(segment, '$[1]') AS lost,
  json_extract(segment, '$[2]') AS lost_causes,
  preserved, preserved_finding,
  CASE WHEN last THEN json_extract(truncation, '$.cause') END AS truncated,
  CASE WHEN last THEN json_extract(truncation, '$.lost') END AS truncated_records,
  host
FROM (  -- DISTINCT (the rows are distinct anyway: one per boundary) keeps SQLite from
        -- flattening these layers, which would copy each subquery into every
        -- expression naming its column (next_offset into every line read)
  SELECT DISTINCT x.*,
    (SELECT json_array(coalesce(sum(n), 0), coalesce(sum(reached), 0),
                       group_concat(CASE WHEN cause IS NOT NULL THEN cause || ' ' || n END,
                                    ', '))
     FROM (SELECT o.cause, count(*) AS n, sum(""" + REACHED_TEMPLATE.format(
    f="x.file_id", u="s.uuid") + """) AS reached
           FROM (""" + SEGMENT_RECORDS_TEMPLATE.format(b="x", next="x.next_offset") + """) s
           LEFT JOIN orphans_cache o ON o.file_id = x.file_id AND o.uuid = s.uuid
             AND NOT o.restored
           GROUP BY o.cause ORDER BY n DESC, o.cause)) AS segment,
    (SELECT count(*) FROM duplicate_uuids_cache d
     CROSS JOIN records c ON c.file_id = d.file_id AND c.uuid = d.uuid
     WHERE d.file_id = x.file_id
       AND +c.byte_offset > x.byte_offset
       AND (x.next_offset IS NULL OR +c.byte_offset < x.next_offset)
       AND """ + COPY_TEMPLATE.format(r="c") + """) AS copies,
    CASE WHEN """ + _LISTED.format(b="x") + """ THEN 'list'
         WHEN json_type(x.raw, '$.compactMetadata.preservedSegment') = 'object'
           THEN 'segment' END AS preserved,
    """ + PRESERVED_FINDING_TEMPLATE.format(b="x") + """ AS preserved_finding,
    CASE WHEN x.last THEN """ + TRUNCATION_TEMPLATE.format(file="x.file_id") + """
      END AS truncation
  FROM (
    SELECT DISTINCT h.session_id, h.main_file_id AS file_id, h.host, b.id,
      b.uuid AS boundary_uuid,
      b.uuid, b.line_no, b.byte_offset, b.timestamp AS compacted_at, b.raw,
      b.logical_parent_uuid,
      (SELECT count(*) FROM records p WHERE p.file_id = b.file_id
         AND """ + BOUNDARY_TEMPLATE.format(r="p") + """ AND p.line_no <= b.line_no)
        AS position,
      (SELECT min(+n.byte_offset) FROM records n WHERE n.file_id = b.file_id
         AND """ + BOUNDARY_TEMPLATE.format(r="n") + """ AND n.line_no > b.line_no)
        AS next_offset,
      NOT EXISTS (SELECT 1 FROM records n WHERE n.file_id = b.file_id
         AND """ + BOUNDARY_TEMPLATE.format(r="n") + """ AND n.line_no > b.line_no) AS last
    FROM session_hosts h   -- (CROSS: else SQLite read every record for the boundaries,
                           -- not records_compact_boundaries of each main transcript)
    CROSS JOIN records b ON b.file_id = h.main_file_id
    WHERE """ + BOUNDARY_TEMPLATE.format(r="b") + """
  ) x
) x
""").strip()


# The last compaction's boundary of file {file}: the record, aliased lb.
LAST_BOUNDARY_TEMPLATE = ("""SELECT lb.* FROM records lb WHERE lb.file_id = {file} AND """
                          + BOUNDARY_TEMPLATE.format(r="lb")
                          + " ORDER BY lb.line_no DESC LIMIT 1")

# The relink a repair writes for a file {file} whose resume loses the
# conversation after its last compaction (unreached_after_compaction): the
# record the resume chain starts at (its root: the walk stopped above it)
# gets, as parent, the last of the lost records written before it (the
# lost records' line, a chain again: the summary, what followed). Columns:
# record_id (the root's line: its last), new_parent_uuid; no row when
# nothing is lost or no lost record comes before it.
RELINK_UNREACHED_TEMPLATE = ("""SELECT top.id AS record_id, (
    SELECT x.uuid FROM (""" + UNREACHED_RECORDS_TEMPLATE.format(b="lb") + """) x
    WHERE x.line_no < top.line_no ORDER BY x.line_no DESC LIMIT 1) AS new_parent_uuid
  FROM (""" + LAST_BOUNDARY_TEMPLATE + """) lb
  JOIN records top ON top.id = (SELECT k.record_id FROM leaf_ancestry_cache k
    WHERE k.file_id = {file} AND k.rule = 'resume' ORDER BY k.height LIMIT 1)
  WHERE json_extract(""" + TRUNCATION_TEMPLATE + """, '$.cause') = 'unreached_after_compaction'""")

# The headUuid a repair writes for file {file} whose last compaction's
# segment is not relinked (segment_not_relinked): where the walk from its
# tail ends (the last uuid of it in the file), so that the walk reaches its
# head and the CLI relinks the records of that walk after the summary.
# Columns: record_id (the boundary), old_head, new_head.
REHEAD_TEMPLATE = ("""SELECT lb.id AS record_id, """ + _SEGMENT.format(b="lb", k="headUuid")
                   + """ AS old_head, (""" + SEGMENT_WALK_TEMPLATE.format(b="lb") + """
    SELECT w.uuid FROM walk w WHERE EXISTS (SELECT 1 FROM records q
      WHERE q.file_id = lb.file_id AND q.uuid = w.uuid)
    ORDER BY w.steps DESC LIMIT 1) AS new_head
  FROM (""" + LAST_BOUNDARY_TEMPLATE + """) lb
  WHERE json_extract(""" + TRUNCATION_TEMPLATE + """, '$.cause') = 'segment_not_relinked'""")
