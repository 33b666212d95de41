"""Forks: a transcript that begins with records copied from another session,
and a fork that copied nothing.

Every record belongs to the session of the file it is in (``files.session_id``,
from the file's name): the session page, export and search show a fork's
whole file, the copied records included, whatever ``sessionId`` each
carries. What the records say of the parent, as Claude Code writes it:

- ``/branch`` (2.1.332, interactive): every copied record carries
  ``forkedFrom: {sessionId: PARENT, messageUuid}`` and the fork's own
  ``sessionId``; copied assistant records ``requestSessionId: PARENT``; then
  ``custom-title`` / ``agent-name`` "TITLE (Branch)" rows (``link``
  ``forked_from``).
- ``claude --resume PARENT --fork-session`` (2.1.332): the records copied with
  their uuids, the fork's ``sessionId``, and ``requestSessionId`` on the
  copied assistant records: the session that made each request, so in a
  fork of a fork the parent's own replies name the parent and the older ones
  the first session; the parent is the last one named (``request_session_id``).
  A desktop fork's copies likewise: the last foreign ``sessionId``.
- A desktop fork (anthropics/claude-code#95234): the copied records keep the
  parent's ``sessionId``, the new ones carry the fork's, so a viewer or an
  export that filters by ``sessionId`` hides everything after the fork
  (``copied_session_id``; ``foreign_records`` counts the records such a
  filter puts on the wrong side).
- An empty fork (#85875, 2.1.227: every fork after the first): a transcript
  holding only ``ai-title`` / ``custom-title`` / ``agent-name`` rows, no
  conversation (``kind`` ``empty``; a resume of it starts cold: the verdict's
  ``no_messages``). 2.1.169 wrote the same stub for sessions it never wrote
  (#66486): the rows cannot tell the two apart and name no parent; the
  background job's ``state.json`` does (``forkParentSessionId``: the
  session_links table, ingest/sidecars.py; ``link`` ``job_state``), for any
  fork whose records do not.

The parent is read from the file's first user and first assistant record
(copies come first), so the view reads a few records a transcript.
"""

from __future__ import annotations

# The title rows an empty fork holds (#85875), and nothing of a conversation.
TITLE_TYPES = ("ai-title", "custom-title", "agent-name")
_TITLES = "(" + ", ".join(f"'{t}'" for t in TITLE_TYPES) + ")"


def _text(raw: str, path: str) -> str:
    """``raw``'s field at ``path`` when it is text, else NULL."""
    return (f"CASE WHEN json_valid({raw}) AND json_type({raw}, '{path}') = 'text' "
            f"THEN json_extract({raw}, '{path}') END")


# session_forks: one row per main transcript that is a fork or an empty fork:
#   file_id, session_id, path: the fork's transcript and its session
#   kind: fork (records copied from another session) or empty (title rows only)
#   parent_session_id, link: the session it was copied from and what says so
#     (forked_from, copied_session_id, request_session_id: its records;
#     job_state: the background job's state.json, session_links; else NULL)
#   parent_file_id: the parent's main transcript (sessions.main_file_id), when indexed
#   copied_records: its records whose uuid is in a main transcript of the parent
#   foreign_records: its records whose sessionId is not the file's (a filter
#     by sessionId shows them under the parent: #95234)
#   forked_at: its first user or assistant record not copied from the parent
#   records, host
# The parent is read from the first user and assistant records by offset
# (records_file_offset): a few records a transcript, kept by ingest in
# fork_heads_cache (FORK_HEADS_TEMPLATE: reading their JSON for every main
# transcript at query time took seconds at a million records); for a fork,
# the last record naming another session (the session it was made from).
# SESSION_FORKS_TEMPLATE: {heads}, the fork_heads rows it reads (the cache,
# or FORK_HEADS_TEMPLATE for every main transcript: session_forks_definition,
# which the tests hold equal to it).
# fork_heads: per main transcript {files} picks (a condition on files f),
# its first user and first assistant record (by offset) and what they say
# of another session: forkedFrom.sessionId of each, their sessionId, and the
# assistant's requestSessionId. Only the file's own first records: derive
# recomputes a file's row whenever its records change (derive.keep_sql_caches).
FORK_HEADS_TEMPLATE = f"""
SELECT h.file_id, h.first_user, h.first_assistant,
  {_text("u.raw", "$.forkedFrom.sessionId")} AS forked_from,
  {_text("a.raw", "$.forkedFrom.sessionId")} AS assistant_forked_from,
  u.session_id AS user_session_id, a.session_id AS assistant_session_id,
  {_text("a.raw", "$.requestSessionId")} AS request_session_id
FROM (
  SELECT f.id AS file_id,
    (SELECT r.id FROM records r WHERE r.file_id = f.id AND r.type = 'user'
     ORDER BY r.byte_offset LIMIT 1) AS first_user,
    (SELECT r.id FROM records r WHERE r.file_id = f.id AND r.type = 'assistant'
     ORDER BY r.byte_offset LIMIT 1) AS first_assistant
  FROM files f WHERE f.kind = 'main' AND {{files}}
) h
LEFT JOIN records u ON u.id = h.first_user
LEFT JOIN records a ON a.id = h.first_assistant
""".strip()
FORK_HEADS_COLUMNS = ("file_id, first_user, first_assistant, forked_from, assistant_forked_from, "
                      "user_session_id, assistant_session_id, request_session_id")

SESSION_FORKS_TEMPLATE = f"""
WITH linked AS MATERIALIZED (
  SELECT f.id AS file_id, f.session_id, f.path, f.records, coalesce(f.host, '') AS host,
    c.first_user, c.first_assistant, c.forked_from, c.assistant_forked_from,
    c.user_session_id, c.assistant_session_id, c.request_session_id
  FROM files f JOIN {{heads}} c ON c.file_id = f.id
  WHERE f.kind = 'main'
    -- (only the transcripts judged below can keep: a head under another session's
    -- id, a job-state link, or no head at all; not every main transcript copied
    -- twice: 26 -> 4 ms at a million records)
    AND (coalesce(c.forked_from, c.assistant_forked_from) <> f.session_id
         OR c.user_session_id <> f.session_id OR c.assistant_session_id <> f.session_id
         OR c.request_session_id <> f.session_id
         OR (c.first_user IS NULL AND c.first_assistant IS NULL)
         OR EXISTS (SELECT 1 FROM session_links l WHERE l.session_id = f.session_id
                    AND l.deleted_at IS NULL)){{narrow}}
),
judged AS MATERIALIZED (
  SELECT *,
    CASE
      WHEN coalesce(forked_from, assistant_forked_from) <> session_id
        THEN coalesce(forked_from, assistant_forked_from)
      WHEN user_session_id <> session_id THEN user_session_id
      WHEN assistant_session_id <> session_id THEN assistant_session_id
      WHEN request_session_id <> session_id THEN request_session_id
      ELSE (SELECT l.parent_session_id FROM session_links l
            WHERE l.session_id = linked.session_id AND l.deleted_at IS NULL
            ORDER BY l.mtime DESC, l.id DESC LIMIT 1)
    END AS parent_session_id,
    CASE
      WHEN coalesce(forked_from, assistant_forked_from) <> session_id THEN 'forked_from'
      WHEN user_session_id <> session_id OR assistant_session_id <> session_id
        THEN 'copied_session_id'
      WHEN request_session_id <> session_id THEN 'request_session_id'
      WHEN EXISTS (SELECT 1 FROM session_links l WHERE l.session_id = linked.session_id
                   AND l.deleted_at IS NULL) THEN 'job_state'
    END AS link,
    -- (a CASE: SQLite ran the EXISTS for every transcript under an AND,
    -- reading all of each one's records: 2 s at a million records)
    CASE WHEN first_user IS NULL AND first_assistant IS NULL THEN EXISTS (
      SELECT 1 FROM records t WHERE t.file_id = linked.file_id AND t.type IN {_TITLES})
    ELSE 0 END AS empty
  FROM linked
),
named AS (  -- the parent: the session the fork was made from, not the first one copied
  SELECT j.file_id, j.session_id, j.path, j.records, j.host, j.empty, j.link, CASE j.link
    WHEN 'request_session_id' THEN coalesce((
      SELECT json_extract(r.raw, '$.requestSessionId') FROM records r
      WHERE r.file_id = j.file_id AND r.type = 'assistant' AND json_valid(r.raw)
        AND json_type(r.raw, '$.requestSessionId') = 'text'
        AND json_extract(r.raw, '$.requestSessionId') <> j.session_id
      ORDER BY r.byte_offset DESC LIMIT 1), j.parent_session_id)
    WHEN 'copied_session_id' THEN coalesce((
      SELECT r.session_id FROM records r WHERE r.file_id = j.file_id
        AND r.session_id <> j.session_id
      ORDER BY r.byte_offset DESC LIMIT 1), j.parent_session_id)
    ELSE j.parent_session_id END AS parent_session_id
  FROM judged j
  WHERE j.parent_session_id IS NOT NULL OR j.empty
)
SELECT j.file_id, j.session_id, j.path, CASE WHEN j.empty THEN 'empty' ELSE 'fork' END AS kind,
  j.parent_session_id, j.link,
  (SELECT s.main_file_id FROM sessions s WHERE s.session_id = j.parent_session_id)
    AS parent_file_id,
  (SELECT count(*) FROM records r WHERE r.file_id = j.file_id AND r.uuid IS NOT NULL
     AND EXISTS (SELECT 1 FROM files pf JOIN records p ON p.file_id = pf.id AND p.uuid = r.uuid
                 WHERE pf.session_id = j.parent_session_id AND pf.kind = 'main'))
    AS copied_records,
  (SELECT count(*) FROM records r WHERE r.file_id = j.file_id
     AND r.session_id <> j.session_id) AS foreign_records,
  (SELECT min(r.timestamp) FROM records r WHERE r.file_id = j.file_id
     AND r.type IN ('user', 'assistant') AND r.uuid IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM files pf JOIN records p ON p.file_id = pf.id
                     AND p.uuid = r.uuid
                     WHERE pf.session_id = j.parent_session_id AND pf.kind = 'main'))
    AS forked_at,
  j.records, j.host
FROM named j
""".strip()
SESSION_FORKS_SQL = SESSION_FORKS_TEMPLATE.format(heads="fork_heads_cache", narrow="")
SESSION_FORKS_DEFINITION_SQL = SESSION_FORKS_TEMPLATE.format(
    heads="(" + FORK_HEADS_TEMPLATE.format(files="1") + ")", narrow="")

# session_forks' rows that can name :session_id as the fork or its parent:
# the view computed only for the main transcripts that can (SQLite cannot
# push a filter on the parent it computes into the view, which judges every
# main transcript: 25-36 ms on a 1M-record index against 5-7 ms). They are
# the session's own, those whose first records name it as forkedFrom, and
# every transcript whose first records name another session at all (the
# parent of a fork of a fork is the last session its records name, not the
# first: the view works it out), or whose session's job state names it
# (session_links); a transcript whose first records name only its own
# session and no job state names :session_id is no fork of it. A query of
# the session page: filter by session_id or parent_session_id (tests hold
# it to the view's rows for every session).
SESSION_FORKS_OF_SESSION_SQL = SESSION_FORKS_TEMPLATE.format(heads="fork_heads_cache", narrow="""
    AND (f.session_id = :session_id
      OR c.forked_from = :session_id OR c.assistant_forked_from = :session_id
      OR c.user_session_id <> f.session_id OR c.assistant_session_id <> f.session_id
      OR c.request_session_id <> f.session_id
      OR EXISTS (SELECT 1 FROM session_links l WHERE l.session_id = f.session_id
                 AND l.parent_session_id = :session_id))""")
