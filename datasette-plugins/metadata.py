"""Datasette metadata for a session index: descriptions of every table, view
and column (with units), facets, and the canned queries ops dashboards call.

This module is the source; ``metadata.yml`` at the top of the checkout is
generated from it for a plain ``datasette sessions.db -m metadata.yml``:

    python -m session_index_web.metadata > metadata.yml

``session-index serve`` calls :func:`metadata` with the database name
Datasette gives the index file (its stem), so any file name works.

Canned queries answer as JSON with ``.json``:
``/sessions/session_health.json?session_id=...&_shape=array``. Their blank
parameters mean "any". They use only SQLite's own functions, so they also run
outside Datasette. No query is named like a table or view: Datasette would
answer the table's URL with the query.
"""

from __future__ import annotations

import copy
import sys

import yaml

from indexer.index import search, usage
from indexer.signals import charts, classes, usage_sums

PLUGIN = "session-index"
TITLE = "session-index"
DESCRIPTION_HTML = (
    "Claude Code session transcripts, every line kept: what <code>claude --resume</code> and "
    "the Agent SDK will load, what falls off the chain and why. Start at "
    '<a href="/-/session-health">session health</a>; each session id opens a picture of '
    "its record tree. Times are ISO-8601 UTC."
)

# A short excerpt of a record's text in plain SQL (the json_excerpt() SQL
# function does this better, but canned queries must run without plugins).
# Lines SQLite cannot read as JSON (NaN) give NULL instead of an error.
_EXCERPT = """CASE WHEN json_valid({r}.raw) THEN substr(coalesce(
    {r}.raw ->> '$.message.content[0].text', {r}.raw ->> '$.message.content[0].content',
    {r}.raw ->> '$.message.content[0].name', {r}.raw ->> '$.message.content',
    {r}.raw ->> '$.content', {r}.raw ->> '$.error.message', {r}.subtype), 1, 200) END"""

# session_health: one row per :session_id: its facts, both leaves of its main
# transcript, and how many of each problem it has. orphans_by_cause is a JSON
# object {cause: count}; poisoned_tail 1 when the next resume will get the
# previous_message_id 400; expiry_status expiring|expired|deleted or NULL;
# verdict, cause, fix: the session's verdict (session_verdicts, read once for
# :session_id: a join on a column would compute every session's, and a
# subquery per column computed it three times; DISTINCT, the rows being
# distinct anyway, keeps SQLite from flattening it into this query, where
# it did not push the session's filter into the view: 2 s at a million
# records).
SESSION_HEALTH_SQL = """
SELECT s.session_id, s.project_dir, s.cwd, s.main_files, s.subagent_files, s.records,
  s.first_timestamp, s.last_timestamp, s.version, s.git_branch, s.deleted_at,
  l.resume_leaf_uuid, l.sdk_leaf_uuid, l.leaves_agree, l.branch_count,
  (SELECT count(*) FROM orphans o WHERE o.file_id = s.main_file_id) AS orphans,
  (SELECT json_group_object(cause, n) FROM (
     SELECT cause, count(*) AS n FROM orphans o WHERE o.file_id = s.main_file_id
     GROUP BY cause ORDER BY n DESC)) AS orphans_by_cause,
  (SELECT count(*) FROM api_error_splices a WHERE a.file_id = s.main_file_id)
    AS api_error_splices,
  (SELECT count(*) FROM chain_breaks c WHERE c.session_id = s.session_id) AS chain_breaks,
  (SELECT count(*) FROM duplicate_uuids d WHERE d.session_id = s.session_id)
    AS duplicate_uuids,
  (SELECT p.at_resume_tail FROM poisoned_sessions p WHERE p.session_id = s.session_id)
    AS poisoned_tail,
  (SELECT e.status FROM expired_transcripts e WHERE e.file_id = s.main_file_id)
    AS expiry_status,
  (SELECT count(*) FROM failed_executions x WHERE x.session_id = s.session_id
     OR x.init_session_id = s.session_id OR x.resume_target = s.session_id)
    AS failed_executions,
  v.verdict, v.cause, v.fix
FROM sessions s LEFT JOIN leaves l ON l.file_id = s.main_file_id
  LEFT JOIN (SELECT DISTINCT verdict, cause, fix, host FROM session_verdicts
             WHERE session_id = :session_id) v ON v.host = s.host
WHERE s.session_id = :session_id
""".strip()

# resume_chain: what `claude --resume :session_id` loads, root first: depth
# (0 = the leaf), the record, its type, time and a text excerpt.
RESUME_CHAIN_SQL = f"""
SELECT a.depth, r.line_no, r.type, r.subtype, r.timestamp, r.uuid, r.parent_uuid,
  r.message_id, r.model, {_EXCERPT.format(r="r")} AS text, a.record_id, a.file_id
FROM sessions s
JOIN leaf_ancestry a ON a.file_id = s.main_file_id AND a.rule = 'resume'
JOIN records r ON r.id = a.record_id
WHERE s.session_id = :session_id
ORDER BY a.depth DESC
""".strip()

# session_orphans: the records of :session_id's transcripts that --resume
# drops, in file order, with the cause and where their branch leaves the
# chain; :cause narrows to one cause (blank: all).
SESSION_ORPHANS_SQL = f"""
SELECT o.file_id, o.line_no, o.cause, o.type, o.subtype, o.timestamp, o.uuid,
  o.branch_point_uuid, o.message_id, {_EXCERPT.format(r="r")} AS text, o.record_id
FROM orphans o JOIN records r ON r.id = o.record_id
WHERE o.session_id = :session_id AND o.cause = coalesce(nullif(:cause, ''), o.cause)
ORDER BY o.file_id, o.line_no
""".strip()

# session_files: every transcript of :session_id, main and subagent, with
# both leaves: where to look for a subagent's work.
SESSION_FILES_SQL = """
SELECT f.id AS file_id, f.kind, f.agent_id, f.path, f.records, f.line_count, f.size,
  f.first_timestamp, f.last_timestamp, f.deleted_at, l.resume_leaf_uuid, l.sdk_leaf_uuid,
  l.leaves_agree, l.branch_count
FROM files f LEFT JOIN leaves l ON l.file_id = f.id
WHERE f.session_id = :session_id AND f.kind IN ('main', 'subagent')
ORDER BY f.kind, f.first_timestamp
""".strip()

# format_drift: every record type, system subtype and attachment type, the
# newest kinds first; :new 1 for those the most recent ingest run brought,
# :since for those first stored at or after that ISO time (blank: all).
FORMAT_DRIFT_SQL = """
SELECT * FROM record_types
WHERE new >= CAST(coalesce(nullif(:new, ''), 0) AS INTEGER)
  AND coalesce(first_ingested_at, '') >= coalesce(nullif(:since, ''), '')
ORDER BY first_ingested_at IS NULL, first_ingested_at DESC, records DESC, kind
""".strip()

# cost_by_project: tokens and cost of the API calls (the usage view, each
# call once) per project folder since :since (blank: all), costliest first;
# unpriced_calls are left out of cost_usd. COST_BY_PROJECT_DEFINITION_SQL
# over every call; COST_BY_PROJECT_SQL (the canned query) the same rows from
# the sums per day, project and model (signals/usage_sums.py; tests hold the
# two equal).
COST_BY_PROJECT_DEFINITION_SQL = """
SELECT project, count(*) AS calls,
  sum(coalesce(input_tokens, 0)) AS input_tokens, sum(coalesce(output_tokens, 0)) AS output_tokens,
  sum(coalesce(cache_read_tokens, 0)) AS cache_read_tokens,
  sum(cache_write_5m_tokens) AS cache_write_5m_tokens,
  sum(cache_write_1h_tokens) AS cache_write_1h_tokens,
  round(sum(cost_usd), 6) AS cost_usd, sum(cost_usd IS NULL) AS unpriced_calls
FROM usage
WHERE coalesce(timestamp, '') >= coalesce(nullif(:since, ''), '')
GROUP BY project ORDER BY cost_usd DESC, project
""".strip()
COST_BY_PROJECT_SQL = f"""
SELECT s.project, coalesce(sum(s.calls), 0) AS calls,
  sum(s.input_tokens) AS input_tokens, sum(s.output_tokens) AS output_tokens,
  sum(s.cache_read_tokens) AS cache_read_tokens,
  sum(s.cache_write_5m_tokens) AS cache_write_5m_tokens,
  sum(s.cache_write_1h_tokens) AS cache_write_1h_tokens,
  CASE WHEN sum(s.calls) > sum(s.unpriced_calls) THEN {usage_sums.DOLLARS.format(sums="s")} END
    AS cost_usd,
  sum(s.unpriced_calls) AS unpriced_calls
FROM (
{usage_sums.SINCE_SUMS_TEMPLATE.format(since="coalesce(nullif(:since, ''), '')")}
) s
GROUP BY s.project ORDER BY cost_usd DESC, s.project
""".strip()

# cost_by_day: what `session-index usage --by day --since :since` prints
# (usage.summary_sql: the same SQL), the newest day first.
COST_BY_DAY_SQL = usage.summary_sql("day")

QUERIES = {
    "session_health": ("Session health", SESSION_HEALTH_SQL,
                       "One session's facts, both leaves and a count of each problem."),
    "resume_chain": ("Resume chain of a session", RESUME_CHAIN_SQL,
                     "What claude --resume loads for the session, root first."),
    "session_orphans": ("Orphans of a session", SESSION_ORPHANS_SQL,
                        "Records of the session that --resume drops, and why."),
    "session_files": ("Transcripts of a session", SESSION_FILES_SQL,
                      "Main and subagent transcripts of the session, with both leaves."),
    # the problem classes' (signals/classes.py)
    **{c.query.name: (c.query.title, c.query.sql, c.query.description)
       for c in classes.CLASSES if c.query},
    "format_drift": ("Record types (format drift)", FORMAT_DRIFT_SQL,
                     "Every record type, system subtype and attachment type, newest first; "
                     "new=1: those the last ingest brought."),
    "cost_by_project": ("Cost by project", COST_BY_PROJECT_SQL,
                        "Tokens and cost per project folder since a time, each API call once."),
    # the charts' data (signals/charts.py; the pages draw them from these)
    **{q.name: (q.title, q.sql, q.description) for q in charts.CHARTS},
    "cost_by_day": ("Cost by day", COST_BY_DAY_SQL,
                    "Tokens and cost per day (UTC) since a time, each API call once, the newest "
                    "day first: session-index usage --by day."),
}
# search_transcripts: records whose text holds :q as a phrase, newest first
# (search.py; needs session-index search --enable).
QUERIES["search_transcripts"] = (
    "Search what was said", search.CANNED_SEARCH_SQL,
    "Records whose text holds :q as a phrase (words, or a substring of code or CJK text), "
    "newest first, the match in [[...]]. Needs session-index search --enable.")

_TS = classes.TS
_SID = "Claude Code session id (links to the session page)"
_FILE = "files.id of the transcript"
_REC = "records.id"
_HOST = ("the host the file is on: '' for this machine's files (and store copies), else "
         "the name it was shipped under (session-index ship --host)")
# Column descriptions shared by several tables and views.
_COMMON = {
    "file_id": _FILE,
    "session_id": _SID,
    "record_id": _REC,
    "uuid": "the record's uuid",
    "line_no": "line number in the file, 1-based",
    "type": "record type (user, assistant, system, attachment, progress, ...)",
    "subtype": "system subtype (api_error, stop_hook_summary, compact_boundary, ...)",
    "timestamp": f"the record's timestamp, {_TS}",
    "message_id": "message.id (msg_... from Anthropic's API; other providers' ids differ; a random UUID on a synthetic placeholder)",
    "kind": "main or subagent transcript",
    "host": _HOST,
}


def _cols(*names, **own):
    """Column descriptions: shared ones by name, then the table's own."""
    out = {n: _COMMON[n] for n in names}
    out.update(own)
    return out


_LEAVES_COLS = _cols(
    "file_id", "session_id", "kind",
    resume_leaf_id="records.id where claude --resume starts",
    resume_leaf_uuid="uuid where claude --resume starts (Claude Code 2.1.332's rules)",
    sdk_leaf_id="records.id where the Agent SDK starts",
    sdk_leaf_uuid="uuid where the Agent SDK starts (_build_conversation_chain)",
    leaves_agree="1 when both readers end the conversation at the same message",
    branch_count="distinct conversation leaves (1 for a linear transcript)",
    resume_rule="which rule picked the resume leaf: checkpoint, last_row, newest_descendant, "
                "leaf_scan, newest_record, rewound_to_empty, no_leaf, subagent_last_message",
)
_ANCESTRY_COLS = _cols(
    "file_id", "session_id", "uuid", "record_id",
    rule="resume (claude --resume: progress bridged, the 5 s timestamp fallback) or sdk "
         "(the Agent SDK's walk)",
    depth="steps from the leaf (0 = the leaf)",
)
_ORPHANS_COLS = _cols(
    "file_id", "session_id", "uuid", "type", "subtype", "timestamp", "record_id", "line_no",
    "message_id",
    cause="why it is off the chain: compacted, progress, parallel_tool_branch, "
          "put_back_with_result, api_error_splice, api_error_record, late_graft, "
          "concurrent_resume, dangling_parent, "
          "unlinked, abandoned_branch, other",
    branch_point_uuid="the record on the resume chain where its branch leaves it",
    restored="1 when the CLI puts it back after its walk (loaded, not dropped)",
)
_CHAIN_BREAKS_COLS = _cols(
    "file_id", "session_id", "record_id", "line_no", "uuid", "type", "subtype", "timestamp",
    missing_parent_uuid="the parentUuid that names no record in the file",
)
_DUPLICATES_COLS = _cols(
    "file_id", "session_id", "uuid",
    copies="lines carrying this uuid",
    line_nos="their line numbers, comma-separated, in file order",
    kept_line_no="the line both readers use (the last)",
)
_DEFINITION = ("The recursive definition the {0} view is held equal to (by the tests). "
               "Slow: seconds per query on a large index; query {0} instead.")

TABLES = {
    "files": {
        "description": "One row per transcript (or execution log) file ever seen; deleted_at "
                       "is set when it is gone from disk, its rows stay.",
        "facets": ["kind", "agent"],
        "units": {"size": "B"},
        "columns": _cols(
            "session_id",
            id="files.id",
            path="absolute path of the file",
            kind="main or subagent transcript, or execution_log (claude -p stream-json)",
            agent_id="subagent id (agent-<id>.jsonl)",
            project_dir="the folder under projects/ (an encoded cwd)",
            size="bytes, at the last stat",
            mtime=f"modification time at the last stat, {_TS}",
            mtime_ns="modification time at the last stat, nanoseconds since the epoch",
            dev="device number at the last stat",
            inode="inode at the last stat",
            ingested_offset="bytes ingested; never past a partial last line (a last record "
                            "without its newline is a line)",
            line_count="lines ingested",
            head_len="bytes hashed at the start of the file",
            head_hash="hash of the first head_len bytes (detects a rewrite)",
            tail_len="bytes hashed before ingested_offset",
            tail_hash="hash of the tail_len bytes before ingested_offset",
            rewrites="times the file was found rewritten and re-read",
            generation="its current generation: 1, then one more at every rewrite",
            generation_started_at=f"when the current generation began (NULL for the "
                                  f"first: first_ingested_at), {_TS}",
            unterminated_tail="length of its last line when that is a record without its "
                              "newline yet, bytes; else 0",
            records="records (JSON object lines) in the file",
            first_timestamp=f"earliest record timestamp, {_TS}",
            last_timestamp=f"latest record timestamp, {_TS}",
            cwd="working directory of its first record that has one",
            version="Claude Code version of its last record that has one",
            git_branch="git branch of its last record that has one",
            first_ingested_at=f"first ingest of the file, {_TS}",
            last_ingested_at=f"latest ingest that read it, {_TS}",
            deleted_at=f"when ingest found it gone from disk, {_TS}",
            needs_derive="1 while its leaves/ancestry/orphans caches are being recomputed",
            host="the host a fleet file was shipped from (session-index ship); NULL for this "
                 "machine's files and store copies",
            retention_days="cleanupPeriodDays in force for the file, days",
            retention_source="the settings file that set it, or default",
            pending_tail="bytes after the last newline as last seen (not a line yet)",
            origin="file (ingested from disk) or store (mirrored through the SessionStore)",
            project_key="the SessionStore project key (store copies)",
            subpath="the SessionStore key's subpath (store copies; NULL for a main transcript)",
            agent="whose session file: claude-code, codex (a Codex CLI rollout) or gemini (a "
                  "Gemini CLI chat)",
        ),
    },
    "records": {
        "description": "One row per line that is a JSON object; raw is the exact line. Use "
                       "SQLite's JSON functions on raw for anything else.",
        "columns": _cols(
            "file_id", "line_no", "session_id", "uuid", "type", "subtype", "timestamp",
            "message_id",
            id="records.id",
            byte_offset="where the line starts in the file, bytes",
            parent_uuid="parentUuid",
            logical_parent_uuid="logicalParentUuid (compact_boundary records)",
            is_sidechain="isSidechain, 0/1",
            is_meta="isMeta, 0/1",
            team_name="teamName",
            agent_id="agentId",
            model="message.model; <synthetic> on placeholders (what makes one, whatever the id)",
            request_id="requestId",
            is_api_error="isApiErrorMessage, 0/1",
            is_compact_summary="isCompactSummary, 0/1",
            is_tool_result="1 when message.content holds a tool_result",
            is_unreadable="1 for a user/assistant record Claude Code's loader drops: no "
                          "message object, no string or list content, blank assistant text, "
                          "or a list with no block",
            cwd="cwd", version="Claude Code version", git_branch="gitBranch",
            leaf_uuid="leafUuid of summary records",
            sent_as_uuid="sentAsUuid of a prompt Claude Code stored anew: the uuid it was "
                         "sent under, which its loader loads it under when no earlier line "
                         "is loaded under it (its key)",
            rows_ahead="rowsAheadOfPutBack of a tool_result record (a JSON array): the rows "
                       "(a prompt queued while the tool ran, companion records) Claude "
                       "Code's loader puts back ahead of it",
            source_tool_assistant_uuid="sourceToolAssistantUUID of a tool_result record, "
                                       "kept only when it is not its parentUuid: Claude "
                                       "Code's loader also reads a stray result under the "
                                       "record it names",
            raw="the exact text of the line (pretty-printed here)",
            has_usage="1 for an assistant record whose message.usage is an object (the "
                      "usage view reads these lines; the counts below are NULL on others)",
            input_tokens="usage.input_tokens (an integer only when a JSON number)",
            output_tokens="usage.output_tokens",
            cache_read_tokens="usage.cache_read_input_tokens",
            cache_creation_tokens="usage.cache_creation_input_tokens",
            cache_5m_tokens="usage.cache_creation.ephemeral_5m_input_tokens",
            cache_1h_tokens="usage.cache_creation.ephemeral_1h_input_tokens",
            speed="usage.speed (text only when a string)",
            service_tier="usage.service_tier",
        ),
    },
    "bad_lines": {
        "description": "Lines that are not JSON objects, as raw bytes, with the reason; the "
                       "good lines around them are kept.",
        "facets": ["error"],
        "columns": _cols(
            "file_id", "line_no",
            id="bad_lines.id", byte_offset="where the line starts in the file, bytes",
            error="why it is not a record", raw="the exact bytes of the line",
        ),
    },
    "sessions": {
        "description": "One row per session id, summed from its transcript files on "
                       "its host (a fleet's other copies: session_hosts, host_copies).",
        "columns": _cols(
            "session_id",
            main_file_id="files.id of the main transcript claude --resume opens (from the "
                         "session's own cwd): the file named <session_id>.jsonl in its cwd's "
                         "project folder, or the only one named so",
            main_file_rule="why: only_named, named_in_cwd_project, named_newest, store_copy, "
                           "named_no_messages, not_named or deleted",
            project_dir="the folder under projects/", cwd="working directory",
            main_files="main transcripts with this session id",
            subagent_files="subagent transcripts of this session",
            records="records in all its transcripts",
            first_timestamp=f"earliest record, {_TS}", last_timestamp=f"latest record, {_TS}",
            version="Claude Code version", git_branch="git branch",
            deleted_at=f"set when every main transcript is gone from disk, {_TS}",
            host="the host this row answers for: '' (this machine) when it holds a transcript "
                 "of the session, else the host whose main transcript was written to last; "
                 "every host's own main transcript: session_hosts",
            agent="whose session: claude-code, codex or gemini (the resume verdicts are "
                  "Claude Code's only)",
        ),
    },
    "session_hosts": {
        "description": "A session's main transcript on each host that holds it (a fleet's "
                       "copies are never merged: each host's resume opens its own).",
        "columns": _cols(
            "session_id",
            host="the host ('' for this machine: its files and session-store copies)",
            main_file_id="files.id of the main transcript claude --resume opens on that host "
                         "(from the session's own cwd)",
            main_file_rule="why: only_named, named_in_cwd_project, named_newest, store_copy, "
                           "named_no_messages, not_named or deleted",
        ),
    },
    "index_meta": {
        "description": "Facts about the index itself (last_ingest_at, ingest_runs: the ingest "
                       "runs ended, definitions hash).",
        "columns": {"key": "the fact's name", "value": "its value"},
    },
    "leaves": {
        "description": "Per transcript file, where claude --resume (resume_leaf_uuid) and the "
                       "Agent SDK (sdk_leaf_uuid) start, and whether they agree.",
        "facets": ["kind", "leaves_agree"],
        "columns": _LEAVES_COLS,
    },
    "leaf_ancestry": {
        "description": "The records each reader loads: one row per record on the walk from the "
                       "rule's leaf (depth 0) to the root.",
        "facets": ["rule"],
        "columns": _ANCESTRY_COLS,
    },
    "orphans": {
        "description": "Every non-sidechain chain record of a main transcript that is not on "
                       "the resume chain, with the first matching cause.",
        "facets": ["cause", "type"],
        "columns": _ORPHANS_COLS,
    },
    "chain_breaks": {
        "description": "Chain records whose parentUuid names no chain record in the file: the "
                       "walk up stops there.",
        "facets": ["type"],
        "columns": _CHAIN_BREAKS_COLS,
    },
    "duplicate_uuids": {
        "description": "A uuid on more than one line of a file; the last line wins.",
        "columns": _DUPLICATES_COLS,
    },
    "session_refs": {
        "description": "Session ids applications hold and intend to resume (session-index "
                       "refs import).",
        "facets": ["source"],
        "columns": _cols(
            "session_id",
            id="session_refs.id", source="the application that holds it",
            key="the application's key for it (a task, a chat)",
            cached_at=f"when the application cached it, as given ({_TS})",
            imported_from="the file it was imported from",
            imported_at=f"when it was imported, {_TS}",
        ),
    },
    "repair_plan": {
        "description": "What session-index repair changes in each session's main transcript, "
                       "one row per line: splices re-parented, poisoned and wedged tails "
                       "dropped, thinking the API refuses removed from earlier messages.",
        "facets": ["action", "reason"],
        "columns": _cols(
            "session_id", "file_id", "record_id", "line_no", "uuid",
            action="reparent, drop or strip (remove some content blocks from the line)",
            reason="api_error_splice, poisoned_tail, wedged_tail or refused_thinking",
            old_parent_uuid="the line's parentUuid now",
            new_parent_uuid="its parentUuid after the repair (reparent)",
            episode="the api_error episode it belongs to",
            blocks="strip: the indexes in message.content of the thinking blocks removed "
                   "(JSON array)",
        ),
    },
    "repairs": {
        "description": "Every session-index repair --write: what it changed, where the backup "
                       "went, and the file's bytes before.",
        "facets": ["status"],
        "columns": _cols(
            "session_id", "file_id",
            id="repairs.id", path="the repaired transcript",
            backup_path="where the original was copied",
            created_at=f"when, {_TS}", status="applied or rolled_back",
            reparented="lines re-parented", dropped="lines dropped",
            chain_before="resume chain length before, records",
            chain_after="resume chain length after, records",
            recovered="previously orphaned records the resume now reads",
            message="what happened", original="the file's bytes before the repair",
            repaired_sha256="SHA-256 of the repaired file",
        ),
    },
    "session_copies": {
        "description": "Transcripts held both as a local file and as a copy mirrored through "
                       "the Agent SDK's SessionStore, and whether they diverged.",
        "facets": ["diverged", "kind"],
        "columns": _cols(
            "session_id", "kind",
            agent_id="subagent id (subagent copies)",
            project_key="the SessionStore project key", subpath="the store key's subpath",
            local_file_id="files.id of the local file", local_path="its path",
            local_deleted_at=f"when the local file was found gone, {_TS}",
            store_file_id="files.id of the store copy", store_path="its store:// path",
            local_records="records in the local file", store_records="records in the store copy",
            local_only="distinct uuids only the local file holds",
            store_only="distinct uuids only the store copy holds",
            local_only_uuids="the first 20 of them, a JSON array",
            store_only_uuids="the first 20 of them, a JSON array",
            local_resume_leaf_uuid="resume leaf of the local file",
            store_resume_leaf_uuid="resume leaf of the store copy",
            diverged="1 when a store-backed resume would not read what the local file says",
        ),
    },
    "superseded_generations": {
        "description": "One row per superseded generation of a file: the lines it held when "
                       "a rewrite replaced it are in superseded_lines; session-index export "
                       "--generation N rebuilds it byte for byte.",
        "facets": ["reason"],
        "units": {"bytes": "B"},
        "columns": _cols(
            "file_id",
            generation="its number (1 is the first)",
            started_at=f"when it began (NULL: before the index kept generations), {_TS}",
            superseded_at=f"when ingest found the file rewritten, {_TS}",
            reason="shrunk (shorter than its ingested bytes) or changed (those bytes differ)",
            lines="lines it held", bytes="its bytes as last seen, the pending tail included",
            sha256="SHA-256 of those bytes", mtime=f"the file's mtime last seen then, {_TS}",
            unterminated_tail="length of its last line when that had no newline, bytes",
            pending_tail="the bytes after its last line as last seen",
        ),
    },
    "superseded_lines": {
        "description": "The lines of superseded generations, as they were in records and "
                       "bad_lines: raw is the exact text of a record, the bytes of a bad line.",
        "columns": _cols(
            "file_id", "line_no",
            id="superseded_lines.id", generation="superseded_generations.generation",
            byte_offset="where the line started in that generation, bytes",
            error="why it was a bad line; NULL for a record",
            raw="the exact line (text for a record, bytes for a bad line)",
        ),
    },
    "file_generations": {
        "description": "Every generation of every file: the current one (its lines in "
                       "records and bad_lines) and each superseded one the index keeps.",
        "facets": ["current", "reason"],
        "units": {"bytes": "B"},
        "columns": _cols(
            "file_id", "session_id", "kind",
            path="absolute path of the file", generation="its number (1 is the first)",
            current="1 for the file's current generation",
            started_at=f"when it began (NULL: before the index kept generations), {_TS}",
            superseded_at=f"when a rewrite replaced it (NULL: current), {_TS}",
            reason="why it was superseded: shrunk or changed",
            lines="lines it holds", bytes="its bytes as last seen, the pending tail included",
            sha256="SHA-256 of those bytes (NULL for the current generation)",
            mtime=f"the file's mtime last seen in it, {_TS}",
        ),
    },
    "session_main_copies": {
        "description": "Every main transcript of a session that has several (copies in other "
                       "project folders, forks that kept the id, stubs, deleted files, store "
                       "copies), none merged: the one claude --resume opens and why, and how "
                       "each other one differs from it.",
        "facets": ["why", "diverged", "chosen"],
        "columns": _cols(
            "session_id", "file_id",
            path="the transcript", project_dir="the folder under projects/",
            cwd="the working directory its first record carries",
            origin="file (ingested) or store (SessionStore copy)",
            chosen="1 for sessions.main_file_id: the one a resume from the session's cwd opens",
            why="the chosen one's main_file_rule; for the others named_other_project (opened "
                "only from a cwd of its folder), not_named (never opened for this id), "
                "no_messages, deleted or store_copy",
            named="a local file named <session_id>.jsonl",
            on_disk="not deleted", has_messages="holds a user or assistant record",
            scan_visible="a line holds the compact \"type\":\"user\" or "
                         "\"type\":\"assistant\" text the CLI's scan of every project "
                         "folder looks for",
            in_cwd_project="its folder is the project folder of its records' cwd",
            mtime=f"file mtime at the last ingest, {_TS}",
            deleted_at=f"when it was found gone, {_TS}",
            records="records in it", chosen_records="records in the chosen one",
            only_here="distinct uuids it holds and the chosen one does not",
            only_in_chosen="distinct uuids the chosen one holds and it does not",
            only_here_uuids="the first 20 of them, a JSON array",
            only_in_chosen_uuids="the first 20 of them, a JSON array",
            resume_leaf_uuid="its resume leaf",
            chosen_resume_leaf_uuid="the chosen one's resume leaf",
            diverged="1 when the uuids, the record counts or the resume leaves differ",
        ),
    },
    "host_copies": {
        "description": "Pairs of copies of one transcript on two hosts (shipped with "
                       "session-index ship, or this machine's, host ''): never merged; diverged "
                       "when their uuids, record counts or resume leaves differ.",
        "columns": _cols(
            "session_id", "kind",
            agent_id="subagent id (agent-<id>.jsonl) of a subagent transcript",
            a_host="the first copy's host ('' for this machine)",
            a_file_id="files.id of the first copy (the lower id)",
            a_path="its path in the index", a_records="its records",
            a_deleted_at=f"when it was found gone, {_TS}",
            b_host="the second copy's host ('' for this machine)",
            b_file_id="files.id of the second copy", b_path="its path in the index",
            b_records="its records", b_deleted_at=f"when it was found gone, {_TS}",
            a_only="distinct uuids only the first copy holds",
            b_only="distinct uuids only the second copy holds",
            a_resume_leaf_uuid="the first copy's resume leaf",
            b_resume_leaf_uuid="the second copy's resume leaf",
            diverged="1 when the uuids, the record counts or the resume leaves differ",
        ),
    },
    "fleet_files": {
        "description": "Per file shipped from another host (session-index ship, ingest "
                       "--from): its path there and its generation there.",
        "columns": _cols(
            "file_id",
            host="the host it was shipped from (the shipper's --host)",
            remote_path="the file's path on its host",
            remote_generation="the host's count of the file's rewrites (1, then one more each)",
            gaps="messages that came before an earlier one of the file (held until it came)",
        ),
    },
    "fleet_parts": {
        "description": "Pieces of a shipped line too long for one message, kept until its "
                       "last piece comes.",
        "columns": _cols(
            "file_id",
            line_offset="where the line starts in its file, bytes",
            at="where this piece starts in the file, bytes",
            data="the piece's bytes",
        ),
    },
    "fleet_hosts": {
        "description": "Per host that ships to this index: its shipper's last heartbeat and "
                       "its last message stored.",
        "columns": _cols(
            host="the host's name (the shipper's --host)",
            last_heartbeat_at=f"the shipper's last heartbeat, {_TS}",
            last_message_at=f"when a message of the host was last stored, {_TS}",
            messages="messages of the host stored",
        ),
    },
    "fleet_consumers": {
        "description": "Per durable JetStream consumer that writes into this index: the "
                       "stream position it committed.",
        "columns": _cols(
            name="the consumer's durable name",
            stream_seq="the highest stream sequence committed",
            updated_at=f"its last commit, {_TS}",
        ),
    },
    "fleet_quarantine": {
        "description": "What a fleet's central could not use (session-index quarantined): a "
                       "message that is not a shipper's (damaged, forged, on another host's "
                       "subject) or a heartbeat whose value is not one, acknowledged and kept "
                       "with why, so that the stream went on.",
        "columns": _cols(
            id="its number here",
            received_at=f"when the central took it, {_TS}",
            subject="its NATS subject",
            stream_seq="its stream sequence (a heartbeat: its key's revision)",
            host="the host its subject names (as a subject token)",
            reason="why it was not used",
            headers="its NATS headers, a JSON object",
            data="its payload, byte for byte",
        ),
    },
    "fleet_held": {
        "description": "Messages of a host's file that came before an earlier one, held "
                       "(acknowledged) until it comes or the central records a gap.",
        "columns": _cols(
            "file_id",
            generation="the host's generation of the file",
            offset="where its lines (a piece: its line) start, bytes",
            at="a piece of a long line: where it starts; lines: offset",
            line="the host's number of its first line",
            held_at=f"when the central first held it, {_TS}",
            payload="the message as it came",
        ),
    },
    "fleet_gaps": {
        "description": "Bytes of a host's file that never came (session-index fleet-gaps): "
                       "the stream no longer held them and the host did not send them again "
                       "within --gap-wait; the central went on after them.",
        "columns": _cols(
            "file_id",
            id="the gap's number here",
            host="the file's host",
            remote_path="the file's path on its host",
            generation="the host's generation of the file",
            start="the first byte that never came",
            end="the byte the file went on from",
            waited_since=f"when a later message was first held, {_TS}",
            recorded_at=f"when the central gave up waiting, {_TS}",
            reason="why the bytes are not in the stream",
        ),
    },
    "record_types": {
        "description": "Every record type, system subtype and attachment type in the "
                       "transcripts: how many, the Claude Code versions and times it was "
                       "written by and at, when the index first stored one, whether the most "
                       "recent ingest brought it, and whether the index models it.",
        "facets": ["new", "modeled", "chain", "type"],
        "columns": _cols(
            kind="type, or type/subtype; (no type) for a record without one",
            type="the record's type", subtype="a system record's subtype or an attachment's "
                                              "attachment.type",
            records="records of this kind in the index", files="transcripts holding one",
            first_version="lowest Claude Code version that wrote one (compared number by "
                          "number; a record without a version counts the nearest earlier "
                          "one's in its file)",
            last_version="highest such version",
            first_seen=f"earliest record timestamp (or the nearest earlier one's), {_TS}",
            last_seen=f"latest such timestamp, {_TS}",
            first_ingested_at=f"when the index first stored one (NULL: before migration "
                              f"m023), {_TS}",
            last_ingested_at=f"when the index last stored one, {_TS}",
            new="1 when the most recent ingest run (or a store append since) first stored "
                "this kind",
            modeled="1 when the index reads this kind (records.MODELED_KINDS); 0: kept raw",
            chain="1 when its type is a chain type (linked into the tree whatever it means)",
            meaning="what the kind means to the index, for a modeled one",
        ),
    },
    "record_kinds": {
        "description": "Per record kind, its first sighting and the sums of its "
                       "record_kind_files rows (kept by ingest; query record_types).",
        "hidden": True,
        "columns": {"type": "record type ('' for none)",
                    "subtype": "system subtype or attachment type ('' for none)",
                    "first_run": "index_meta.ingest_runs of the run that first stored one "
                                 "(NULL: before migration m023)",
                    "first_ingested_at": f"when, {_TS}",
                    "records": "records of this kind in the index",
                    "files": "transcripts holding one",
                    "first_version_key": "lowest version: a sortable key, a space, the version",
                    "last_version_key": "highest version, the same way",
                    "first_timestamp": f"earliest timestamp, {_TS}",
                    "last_timestamp": f"latest timestamp, {_TS}",
                    "last_ingested_at": f"when one was last stored, {_TS}"},
    },
    "record_kind_files": {
        "description": "Per transcript file and record kind, its counts (kept by ingest; "
                       "query record_types).",
        "hidden": True,
        "columns": {"file_id": _FILE, "type": "record type ('' for none)",
                    "subtype": "system subtype or attachment type ('' for none)",
                    "records": "records of this kind in the file",
                    "first_version_key": "lowest version: a sortable key, a space, the version",
                    "last_version_key": "highest version, the same way",
                    "first_timestamp": f"earliest timestamp, {_TS}",
                    "last_timestamp": f"latest timestamp, {_TS}",
                    "last_ingested_at": f"when one was last stored, {_TS}"},
    },
    "record_kind_scans": {
        "description": "Per transcript file, how far its records' kinds are counted.",
        "hidden": True,
        "columns": {"file_id": _FILE, "generation": "the file's generation then",
                    "ingested_offset": "the file's ingested_offset then, bytes",
                    "last_offset": "byte_offset of the last record counted (-1: none)",
                    "last_record_id": "records.id of that record",
                    "version": "the version the next record without one counts",
                    "timestamp": "the timestamp the next record without one counts"},
    },
    "usage": {
        "description": "One row per API call in the transcripts, counted once across every "
                       "file (message.id + requestId; session + message.id without a "
                       "requestId): its tokens by kind and its cost from the prices table. "
                       "Synthetic placeholders and claude -p logs never count.",
        "facets": ["model", "project", "speed", "long_context"],
        "columns": _cols(
            "session_id", "file_id", "timestamp", "message_id",
            record_id="records.id of the line the call's usage is read from (the one with "
                      "the most output tokens: the last streamed)",
            project="the project folder under projects/ of that line's file",
            model="message.model", request_id="requestId (NULL: none; the call is then "
                                              "identified by session + message.id)",
            lines="transcript lines of the call (one per content block, in every copy)",
            input_tokens="usage.input_tokens (uncached input)",
            output_tokens="usage.output_tokens",
            cache_read_tokens="usage.cache_read_input_tokens",
            cache_write_5m_tokens="5-minute cache writes: "
                                  "usage.cache_creation.ephemeral_5m_input_tokens, or "
                                  "cache_creation_input_tokens when the split is absent",
            cache_write_1h_tokens="1-hour cache writes: "
                                  "usage.cache_creation.ephemeral_1h_input_tokens",
            prompt_tokens="every input token of the call (input, cache read, cache writes): "
                          "what the long-context threshold is compared with",
            speed="usage.speed (fast: the fast-mode multiplier applies)",
            price_model="the prices row used (the model id, or it without its -YYYYMMDD "
                        "date); NULL: no price",
            long_context="1 when the call paid the long-context tier (prompt_tokens above "
                         "the model's threshold); NULL when unpriced",
            cost_usd="USD; NULL (never 0) for a model with no price, or a fast call of a "
                     "model without a fast multiplier",
        ),
    },
    "usage_reported": {
        "description": "Sessions for which Claude Code said what they cost (cost-state "
                       "records, claude -p results' total_cost_usd), beside the usage view's "
                       "cost and the difference.",
        "columns": _cols(
            "session_id",
            calls="API calls of the session in the usage view",
            cost_usd="their cost in the usage view, USD (priced calls only)",
            unpriced_calls="calls of the session with no price",
            first_call=f"the session's first call, {_TS}",
            cost_state_usd="the largest totalCostUSD of its cost-state records (a running "
                           "total), USD",
            cost_state_unknown_models="1 when a cost-state record said hasUnknownModelCost",
            cost_state_difference_usd="cost_state_usd less cost_usd",
            executions="claude -p results naming the session with a total_cost_usd",
            executions_usd="the sum of their total_cost_usd, USD",
            executions_difference_usd="executions_usd less cost_usd",
        ),
    },
    "prices": {
        "description": "Per-model rates the usage view costs calls with, USD per million "
                       "tokens (the packaged indexer/prices.json, or session-index prices "
                       "load FILE).",
        "columns": _cols(
            model="message.model id (a dated id matches its undated one)",
            name="the model's name", input="input (uncached), USD/MTok",
            output="output, USD/MTok", cache_read="cache reads (hits), USD/MTok",
            cache_write_5m="5-minute cache writes, USD/MTok",
            cache_write_1h="1-hour cache writes, USD/MTok",
            long_context_above="prompt tokens of a call above which it pays the long_* "
                               "rates on every token (NULL: no tier)",
            long_input="long-context input, USD/MTok", long_output="long-context output, "
                                                                   "USD/MTok",
            long_cache_read="long-context cache reads, USD/MTok",
            long_cache_write_5m="long-context 5-minute cache writes, USD/MTok",
            long_cache_write_1h="long-context 1-hour cache writes, USD/MTok",
            fast_multiplier="what every rate is multiplied by for usage.speed fast "
                            "(NULL: no fast price)",
            snapshot_date="the date of the price file's snapshot",
            source="package (the packaged file) or the path of the file loaded",
            loaded_at=f"when it was loaded, {_TS}",
        ),
    },
    "history_files": {
        "description": "Claude Code's prompt history files (<config dir>/history.jsonl) read, "
                       "as transcripts are: incrementally, a rewrite read again as a new "
                       "generation (ingest/sidecars.py).",
        "columns": dict(
            id="history_files.id", path="the file's path",
            config_dir="the config dir it belongs to",
            inode="inode at the last read", dev="device at the last read",
            size="size at the last read, bytes", mtime_ns="mtime at the last read, ns",
            ingested_offset="bytes read (never past a partial last line)",
            generation="its current generation: 1, then one more at each rewrite",
            head_digest="digest of its first ingested bytes (up to 1 KB): a change is a rewrite",
            tail_digest="digest of the KB before ingested_offset: a change is a rewrite",
            lines="lines read in the current generation",
            retention_days="cleanupPeriodDays of its config dir when last read, days",
            first_ingested_at="when it was first read, ISO-8601 UTC",
            last_ingested_at="when it was last read, ISO-8601 UTC",
            deleted_at="when it was found gone, ISO-8601 UTC"),
    },
    "history_prompts": {
        "description": "One row per line of a history.jsonl: a prompt typed in an interactive "
                       "session (every line kept; one that is not a JSON object has error set).",
        "columns": dict(
            id="history_prompts.id", history_file_id="history_files.id",
            generation="the history file's generation the line is of",
            line_no="line number, 1-based", byte_offset="the line's offset in the file, bytes",
            session_id="the prompt's sessionId (links to the session page)",
            project="the prompt's project: the working directory it was typed in",
            timestamp="when it was typed (the line's epoch milliseconds), ISO-8601 UTC",
            display="the prompt as typed", error="why the line is not a prompt: not UTF-8, "
            "not JSON, not a JSON object; NULL for a prompt",
            raw="the line as written"),
    },
    "session_folders": {
        "description": "The session folders (<project>/<session id>/) beside the transcripts, "
                       "as last scanned: what their tool-results/, subagents/ and workflows/ "
                       "hold.",
        "columns": dict(
            id="session_folders.id", path="the folder's path",
            project_dir="the project folder's name",
            session_id="the session the folder is named for (links to the session page)",
            tool_results="files in tool-results/", subagent_files="files in subagents/",
            workflow_files="files in workflows/", other_files="any other files",
            bytes="their size, bytes", first_mtime="the oldest file's mtime, ISO-8601 UTC",
            last_sidecar_at="the newest file's mtime in tool-results/ and workflows/, "
                            "ISO-8601 UTC",
            last_mtime="the newest file's mtime, ISO-8601 UTC",
            scanned_at="when it was last scanned, ISO-8601 UTC",
            deleted_at="when it was found gone, ISO-8601 UTC",
            signature="a digest of the mtimes of the folder and the folders in it: "
                      "unchanged, its files are not looked at again"),
    },
    "session_links": {
        "description": "What Claude Code's background jobs' state says of a session's parent: "
                       "<config dir>/jobs/<id>/state.json (forkParentSessionId), one row per "
                       "state file as last read (ingest/sidecars.py).",
        "columns": dict(
            id="session_links.id", path="the state file's path",
            session_id="the fork (forkSessionId, else sessionId; links to the session page)",
            parent_session_id="the session it was forked from (forkParentSessionId)",
            boundary_at="forkBoundaryAt: the parent's last record the fork was to copy, "
                        "ISO-8601 UTC",
            mtime="the state file's mtime, ISO-8601 UTC",
            scanned_at="when it was last read, ISO-8601 UTC",
            deleted_at="when it was found gone, ISO-8601 UTC"),
    },
    "store_keys": {
        "description": "Per SessionStore copy: its last append time and the SDK's session "
                       "summary.",
        "columns": _cols(
            "file_id",
            mtime_ms="storage write time of its last append, milliseconds since the epoch",
            summary="the SDK's folded session summary, JSON as stored",
        ),
    },
    "cli_definition": {
        "description": "The nodes of every transcript as Claude Code's resume reads them, with "
                       "the parent each is read under: progress records bridged, the timestamp "
                       "fallback. Slow.",
        "columns": _cols(
            "file_id", "line_no", "uuid", "type", "subtype",
            id="records.id of the node (the last line of its uuid)",
            is_sidechain="1 for a sidechain record",
            parent="the parent through progress records written before it",
            walk_parent="the parent the resume walk takes: parent, else the record of the same "
                        "side with the latest timestamp at or before its own within 5 s",
            ts_ms="its timestamp in milliseconds since the epoch",
        ),
    },
    "leaves_definition": {"description": _DEFINITION.format("leaves"), "columns": _LEAVES_COLS},
    "leaf_ancestry_definition": {"description": _DEFINITION.format("leaf_ancestry"),
                                 "columns": _ANCESTRY_COLS},
    "orphans_definition": {"description": _DEFINITION.format("orphans"),
                           "columns": _ORPHANS_COLS},
    "chain_breaks_definition": {"description": _DEFINITION.format("chain_breaks"),
                                "columns": _CHAIN_BREAKS_COLS},
    "duplicate_uuids_definition": {"description": _DEFINITION.format("duplicate_uuids"),
                                   "columns": _DUPLICATES_COLS},
}
# The caches behind the fast views: same columns, hidden from the index page.
for _view in ("leaves", "leaf_ancestry", "orphans", "chain_breaks", "duplicate_uuids"):
    TABLES[f"{_view}_cache"] = {
        "description": f"The rows of the {_view} view, kept by ingest per changed file; "
                       f"query {_view} instead.",
        "hidden": True,
        "columns": TABLES[_view]["columns"],
    }
# What the caches keep beyond their view's columns (derive_append.py).
TABLES["leaves_cache"]["columns"] = dict(
    TABLES["leaves"]["columns"],
    resume_length="records on the resume walk",
    sdk_length="records on the sdk walk",
    derived_lines="the file's lines the caches cover",
    derive_state="what the next append's extension carries on from (JSON)")
TABLES["leaf_ancestry_cache"]["columns"] = dict(
    {k: v for k, v in TABLES["leaf_ancestry"]["columns"].items() if k != "depth"},
    height="steps from the end of the walk (0 = its root end); depth is the walk's "
           "length less one less height")
# Every view with a file (or a session) per row has the host of that
# file (views.HOST_COLUMN); the caches behind them do not keep it.
for _view in ("cli_definition", "leaves", "leaves_definition", "leaf_ancestry",
              "leaf_ancestry_definition", "orphans", "orphans_definition", "chain_breaks",
              "chain_breaks_definition", "duplicate_uuids", "duplicate_uuids_definition",
              "repair_plan", "session_copies", "file_generations", "session_main_copies",
              "usage"):
    TABLES[_view]["columns"] = dict(TABLES[_view]["columns"], host=_HOST)
TABLES["usage"]["columns"]["host"] = "the host of file_id ('' for this machine)"
# The views the problem classes declare (signals/classes.py), with their
# columns' meaning, units and facets.
for _signal in classes.SIGNAL_VIEWS:
    TABLES[_signal.name] = {
        "description": _signal.description,
        **({"facets": list(_signal.facets)} if _signal.facets else {}),
        **({"units": dict(_signal.units)} if _signal.units else {}),
        "columns": _cols(*_signal.common, **_signal.columns),
    }
# thinking_faults and session_forks read what ingest keeps in SQL
# (derive.keep_sql_caches); their *_definition views read the records.
for _view in ("thinking_faults", "session_forks", "usage"):
    TABLES[f"{_view}_definition"] = {
        "description": f"The SQL the {_view} view is held equal to (by the tests), over the "
                       f"records. Slow: seconds per query on a large index; query {_view} "
                       "instead.",
        "columns": TABLES[_view]["columns"]}
# verdict_facts: what session_verdicts reads of each main transcript
# (signals/verdict.py VERDICT_FACTS_TEMPLATE), kept by ingest.
_VERDICT_FACTS_COLS = _cols(
    "file_id",
    last_assistant_uuid="the last assistant record on the resume chain",
    last_assistant_message_id="its message.id",
    named_uuid="the record the next resume names as previous_message_id",
    named_message_id="its message.id",
    named_synthetic="1 when that record is a synthetic placeholder",
    refused="1 when the API refuses its id (the verdict is poisoned)",
    writer_version="the Claude Code version that last wrote the file",
    wedge="the first refused thinking block of the latest assistant message (JSON: fault, "
          "uuid, block, message_id, record_id), or null",
    splices="api_error splices of the file", spliced_records="the records they leave off the chain",
    graft_height="the chain height a repair cuts a late graft back to, or null",
    truncation="what a resume loses after the last compaction (JSON: cause, lost, boundary, "
               "at, head, tail), or null",
    grafted_records="late_graft orphans of the file",
    nothing_to_cut="1 when no real assistant message is on the resume chain",
    wedge_cut="1 when a real assistant message before the wedge's is on the chain",
    tail_id="records.id of the last assistant record on the chain",
    named_id="records.id of the record named as previous_message_id",
    top_height="the resume chain's top: its height", top_record_id="and its records.id",
    scanned_offset="byte_offset of the file's last record",
    first_party="1 when the file holds a reply of Anthropic's API (a msg_ id)")
TABLES["verdict_facts"] = {
    "description": "What each session's verdict reads of its main transcript's records and "
                   "caches, kept by ingest (derive.keep_sql_caches); session_verdicts reads it.",
    "columns": dict(_VERDICT_FACTS_COLS, host=_HOST)}
TABLES["verdict_facts_definition"] = {
    "description": "The SQL the verdict_facts view is held equal to (by the tests), over the "
                   "records. Slow: seconds on a large index; query verdict_facts instead.",
    "columns": dict(_VERDICT_FACTS_COLS, host=_HOST)}
TABLES["verdict_facts_cache"] = {
    "description": "The verdict's facts of each main transcript, kept by ingest; query "
                   "verdict_facts instead.",
    "hidden": True,
    "columns": _VERDICT_FACTS_COLS}
TABLES["thinking_cache"] = {
    "description": "What the thinking blocks of each main transcript's assistant records are, "
                   "kept by ingest (thinking.py); query thinking_faults instead.",
    "hidden": True,
    "columns": _cols(
        "file_id", record_id="records.id of the assistant record",
        block="the block's index in message.content (empty for kind shown)",
        kind="shown (the record has a thinking block the API showed), unsigned, truncated, or "
             "blanked (empty text, signed: refused where the file shows thinking of the same "
             "model and version)",
        model="the record's message.model", version="the Claude Code version that wrote it"),
}
TABLES["thinking_scans"] = {
    "description": "How far ingest read each main transcript for thinking_cache.",
    "hidden": True,
    "columns": {"file_id": "files.id", "generation": "the file's generation read",
                "scanned_offset": "byte_offset of the last record read (-1: none)"},
}
TABLES["fork_heads_cache"] = {
    "description": "Each main transcript's first user and assistant records and what they say "
                   "of another session, kept by ingest (forks.py); query session_forks instead.",
    "hidden": True,
    "columns": _cols(
        "file_id", first_user="records.id of its first user record (by offset)",
        first_assistant="records.id of its first assistant record",
        forked_from="the first user record's forkedFrom.sessionId",
        assistant_forked_from="the first assistant record's forkedFrom.sessionId",
        user_session_id="the first user record's sessionId",
        assistant_session_id="the first assistant record's sessionId",
        request_session_id="the first assistant record's requestSessionId"),
}
TABLES["sent_names"] = {
    "description": "The prompts stored anew (sentAsUuid) that Claude Code's loader keys by "
                   "their sentAsUuid beside another line of their own uuid (or keyed by it): the resume views "
                   "name such a record by its sentAsUuid, so the other line stays a record "
                   "of its own (docs/how-it-works/resume-rules.md).",
    "columns": _cols(
        "file_id", record_id="records.id of the prompt stored anew",
        line_no="its line in the file (1-based)",
        name="its sentAsUuid: the key the loader keeps it under, its uuid in the resume views",
        host="the host of file_id ('' for this machine)"),
}
TABLES["sent_names_cache"] = {
    "description": "What the sent_names view reads, kept by ingest "
                   "(derive.keep_sql_caches); query sent_names instead.",
    "hidden": True,
    "columns": {k: v for k, v in TABLES["sent_names"]["columns"].items() if k != "host"},
}
TABLES["sent_names_definition"] = {
    "description": "The SQL the sent_names view is held equal to (by the tests), over the "
                   "records; query sent_names instead.",
    "columns": TABLES["sent_names"]["columns"]}
TABLES["usage_calls"] = {
    "description": "One row per API call: the line kept of its copies in every file, and "
                   "its price, kept by ingest (derive.keep_usage_calls; priced again when the "
                   "prices table changes); query usage instead.",
    "hidden": True,
    "columns": dict(
        {c: TABLES["usage"]["columns"][c] for c in (
            "file_id", "session_id", "message_id", "request_id", "model", "timestamp",
            "input_tokens", "output_tokens", "cache_read_tokens", "speed", "price_model",
            "long_context", "cost_usd")},
        pick="output_tokens * 2^32 - record_id of the kept line (the largest is kept)",
        lines="the call's lines in every copy",
        record_id="records.id of the kept line (most output tokens, then the lowest id)",
        w1h="1-hour cache writes", w5m="5-minute cache writes",
        project=TABLES["usage"]["columns"]["project"], host=TABLES["usage"]["columns"]["host"]),
}
TABLES["usage_day_sums"] = {
    "description": "The API calls of usage summed per UTC day, project folder and model, kept "
                   "by ingest with usage_calls (the cost pages read it); query usage instead.",
    "hidden": True,
    "columns": dict(
        day="the calls' day: the first 10 characters of their time (NULL: none)",
        project=TABLES["usage"]["columns"]["project"], model="message.model",
        calls="API calls", input_tokens="their input tokens (uncached)",
        output_tokens="their output tokens", cache_read_tokens="their cache reads",
        cache_write_5m_tokens="their 5-minute cache writes",
        cache_write_1h_tokens="their 1-hour cache writes",
        cost_pico="the priced calls' cost in picodollars (USD * 1e12, each call rounded)",
        unpriced_calls="calls with no price (left out of cost_pico)"),
}
TABLES["usage_day_sums_definition"] = {
    "description": "The sums usage_day_sums is held equal to (by the tests): usage_definition "
                   "per day, project and model. Slow: seconds per query on a large index.",
    "hidden": True,
    "columns": TABLES["usage_day_sums"]["columns"]}
TABLES["usage_scans"] = {
    "description": "How far ingest read each file's usage lines for usage_calls.",
    "hidden": True,
    "columns": {"file_id": "files.id", "generation": "the file's generation read",
                "scanned_offset": "byte_offset of the last record read (-1: none)"},
}
TABLES["usage_dropped"] = {
    "description": "Usage lines deleted since usage_calls was last kept (a trigger notes "
                   "them; ingest picks their calls again and empties it).",
    "hidden": True,
    "columns": {"message_id": "the deleted line's message id",
                "record_id": "its records.id, when it has no message id"},
}
TABLES["sdk_terminals"] = {
    "description": "The Agent SDK's leaf candidates per file: each record no record names as "
                   "parent, with the message it walks up to (kept by ingest; the SDK leaf "
                   "of leaves is the best of them).",
    "hidden": True,
    "columns": {"file_id": "files.id", "uuid": "the terminal record's uuid",
                "terminal_line": "its line", "message_uuid": "the message it walks up to",
                "message_record_id": "records.id of that message line",
                "is_main": "1 for a message of the main chain (not sidechain, team or meta)",
                "message_line": "the line of the message's uuid that wins"},
}
# Full-text search (search.py), there once session-index search --enable ran:
# Datasette's search box on search_text searches the word index.
TABLES["search_text"] = {
    "description": "The text of each record search indexes (user prompts, assistant text and "
                   "thinking, tool names and inputs, tool results up to "
                   f"{search.TOOL_TEXT_CHARS:,} characters, system messages, titles); the "
                   "search box matches words (search_words). Kept current by ingest once "
                   "session-index search --enable ran.",
    "fts_table": "search_words",
    "fts_pk": "key",
    "sort_desc": "key",
    "columns": _cols(
        "file_id", "session_id", "record_id", "type", "timestamp",
        key="time-ordered key: the timestamp in seconds, then the low 12 bits of record_id",
        text="the record's text as indexed"),
}
for _fts, _how in (("search_words", "words (porter unicode61)"),
                   ("search_code", "substrings of 3 characters or more (trigram)")):
    TABLES[_fts] = {
        "description": f"FTS5 index of search_text.text by {_how}; rowid is search_text.key.",
        "hidden": True,
        "columns": {"text": "search_text.text (MATCH it)",
                    **({"session_id": "search_text.session_id (search --session)"}
                       if _fts == "search_words" else {})},
    }
    for _shadow, _cols_of in (("data", {"id": "block id", "block": "index b-tree data"}),
                              ("idx", {"segid": "segment", "term": "term prefix",
                                       "pgno": "page"}),
                              ("docsize", {"id": "rowid", "sz": "tokens per column"}),
                              ("config", {"k": "setting", "v": "value"})):
        TABLES[f"{_fts}_{_shadow}"] = {
            "description": f"FTS5's own storage of {_fts} (a shadow table).",
            "hidden": True, "columns": _cols_of}
TABLES["search_state"] = {
    "description": "One row while search is enabled: every record with text up to "
                   "high_water (records.id) is in search_text.",
    "hidden": True,
    "columns": {"id": "1", "high_water": "records.id indexed up to",
                "enabled_at": f"when search was turned on, {_TS}",
                "code": "1: the trigram index (search_code) is kept too; 0: words only"},
}
TABLES["_sqlite_migrations"] = {
    "description": "Schema migrations applied to the index (sqlite-utils).",
    "hidden": True,
    "columns": {"id": "row id", "migration_set": "session-index",
                "name": "the migration function", "applied_at": f"when, {_TS}"},
}


def canned_queries() -> dict:
    """The canned queries, as the plugin's canned_queries hook gives them to
    every database that is a session index. Their pages open with the rows:
    the SQL is folded away (hide_sql; Datasette's "show" link unfolds it)."""
    return {name: {"title": title, "description": description, "sql": sql, "hide_sql": True}
            for name, (title, sql, description) in QUERIES.items()}


# The memory SQL may take on a served index (anyone who can see the page can
# run SQL: `select zeroblob(1e9)` grew the server past 7 GB): no string or
# blob longer than sql_value_limit_bytes (SQLITE_LIMIT_LENGTH on each of
# Datasette's connections to the index; far above any transcript line), and
# no more than sql_heap_limit_bytes for all of SQLite in the process (PRAGMA
# hard_heap_limit). Past either, the query fails ("string or blob too big",
# "out of memory") and Datasette answers 400.
SQL_MEMORY_LIMITS = {"sql_value_limit_bytes": 256 << 20, "sql_heap_limit_bytes": 2 << 30}


def metadata(database: str = "sessions", queries: bool = True) -> dict:
    """Datasette metadata with the index under ``database`` (the file's stem):
    descriptions, units, facets, hidden caches. The canned queries come from
    the plugin, for any name; ``metadata.yml`` carries them too, for a
    Datasette without the plugin."""
    return {
        "title": TITLE,
        "description_html": DESCRIPTION_HTML,
        "databases": {
            database: {
                "description": "A session index (session-index ingest).",
                # Marks the database the plugins act on (render_cell, pages),
                # and bounds the memory of the SQL run on it (hooks.py).
                "plugins": {PLUGIN: {"index": True, **SQL_MEMORY_LIMITS}},
                # a copy: Datasette fills in what it is handed
                "tables": copy.deepcopy(TABLES),
                **({"queries": canned_queries()} if queries else {}),
            }
        },
    }


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
_Dumper.ignore_aliases = lambda self, data: True


def metadata_yaml(database: str = "sessions") -> str:
    header = ("# Generated from datasette-plugins/metadata.py: edit that, then run\n"
              "#   python -m session_index_web.metadata > metadata.yml\n")
    return header + yaml.dump(metadata(database), Dumper=_Dumper, sort_keys=False,
                              allow_unicode=True, width=100)


if __name__ == "__main__":
    sys.stdout.write(metadata_yaml(*sys.argv[1:2]))
