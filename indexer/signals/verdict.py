"""The verdict: will a resume of this session work, and if not, what is lost
and how is it fixed. Defined once, in SQL, so that ``check``, ``sessions``,
the health page, the session page, ``show``, a fleet's central index and an
operator's own dashboard (the ``session_verdicts`` view) all give the same
answer.

The first verdict that matches wins:

| verdict | exit | meaning |
|---|---|---|
| missing | 4 | a resume opens no transcript: it fails with "No conversation found"; or the one it opens stopped being written while the session went on (signals/unwritten.py) |
| poisoned | 5 | the resume chain ends at a synthetic placeholder: the resume gets a 400 |
| wedged | 11 | the latest assistant message holds a thinking block the API refuses, and the Claude Code that resumes (the one that last wrote the session, or check --claude-version) resends it on every resume |
| spliced | 6 | late records orphan later conversation: api_error records flushed late orphan recovered output, or a tool result grafted late onto an answered call (late_graft) takes the resume from the conversation that went on: the resume drops it |
| truncated | 12 | a resume loses conversation after the last compaction that the user did not abandon: the walk stops at a parent never written (or one the relink dropped) before it comes to the compaction's summary, or the records the compaction kept are in the file but its preservedSegment does not lead from its tail to its head, so Claude Code relinks nothing (signals/compaction.py) |
| resumable | 0 | go ahead |

Which transcript a resume opens is the chain's question (mainfile.py, the
rules of definitions.MAIN_FILE_RULE_TEMPLATE): a verdict is given for a session on
a host, the main transcript chosen there and the rule that chose it. The
session's own choice is ``session_hosts``; ``check --cwd`` asks for the file
a resume from another directory opens, through the same template with its
own subject row.
"""

from __future__ import annotations

from indexer.transcripts.agents import OTHER_AGENTS_SQL
from indexer.chain import definitions
from indexer.signals import compaction
from indexer.signals import unwritten as unwritten_
from indexer.sql import dict_rows
from indexer.transcripts import records, thinking

# The verdicts, in the order they are tried, and the exit code of each (check).
EXIT_CODES = {"missing": 4, "poisoned": 5, "wedged": 11, "spliced": 6, "truncated": 12,
              "resumable": 0}

# The main-file rules under which a resume loads the chosen file: a bare
# `claude --resume` (definitions.OPENED_BY_RESUME, and check --cwd's worktree rule)
# or the Agent SDK from the session store.
LOADED_RULES = (*definitions.OPENED_BY_RESUME, "named_in_worktree_project", "store_copy")
_LOADED = "(" + ", ".join(f"'{r}'" for r in LOADED_RULES) + ")"
# A main-file rule {rule} under which no transcript is loaded: missing.
NOT_LOADED_TEMPLATE = "({rule} IS NULL OR {rule} NOT IN " + _LOADED + ")"

# The start of a poisoned verdict's reason: the record whose id the next
# resume sends (records.PREVIOUS_MESSAGE_ID_RECORD), a synthetic placeholder.
_POISONED_REASON = """'the last message a resume names as previous_message_id is a synthetic '
      || 'placeholder with a requestId (message.id '
      || coalesce('''' || tail_message_id || '''', 'None') || ', uuid ' || tail_uuid
      || '): Claude Code 2.1.247 and newer, resuming against api.anthropic.com, send its id '
      || 'and get a 400 (2.1.119-2.1.128 with the tengu_prompt_cache_diagnostics flag named '
      || 'API-error placeholders too; 2.1.116 and older send none); '"""
# A provider's reply named as previous_message_id in a session Anthropic's
# API answered too.
_FOREIGN_REASON = """'the last message a resume names as previous_message_id is another '
      || 'provider''s reply (message.id ' || coalesce('''' || tail_message_id || '''', 'None')
      || ', uuid ' || tail_uuid || ', with a requestId) in a session api.anthropic.com also '
      || 'answered: Claude Code 2.1.247 and newer, resuming against api.anthropic.com, send '
      || 'its id and get a 400; resume through the provider that wrote it (its '
      || 'ANTHROPIC_BASE_URL: no previous_message_id is sent there), or start a new session'"""

# The time a verdict is given at (the never_written cause reads prompts within
# the cleanup period): the clock.
CLOCK = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
# The causes signals/unwritten.py gives, with its sentence as the reason.
UNWRITTEN_CAUSES = ("never_written", "husk", "stopped_writing")
_UNWRITTEN_IN = "(" + ", ".join(f"'{c}'" for c in UNWRITTEN_CAUSES) + ")"
# The latest assistant message a resume of file {file} sends: the message.id
# of the last message on its resume chain when that is a real assistant
# record (the CLI sends the records of one message.id as one message). An
# API-error placeholder is not sent, so it is passed over; when the chain
# ends at a user record (a prompt, a tool result) the CLI puts a placeholder
# of its own after it, and NULL: no message of the file is the latest (the
# oracle: tests/test_wedged_oracle.py).
LATEST_MESSAGE_ID_TEMPLATE = f"""(SELECT CASE WHEN r.type = 'assistant'
    AND NOT ({records.SYNTHETIC_RECORD.format(r="r")}) THEN r.message_id END
  FROM leaf_ancestry_cache k JOIN records r ON r.id = k.record_id
  WHERE k.file_id = {{file}} AND k.rule = 'resume' AND r.type IN ('user', 'assistant')
    AND NOT (r.type = 'assistant' AND coalesce(r.is_api_error, 0))
  ORDER BY k.height DESC LIMIT 1)"""
# The Claude Code version that last wrote file {file} (the last record in
# file order with a version): the one taken to resume it unless check
# --claude-version names another.
WRITER_VERSION_TEMPLATE = """(SELECT v.version FROM records v
  WHERE v.file_id = {file} AND v.version IS NOT NULL ORDER BY v.byte_offset DESC LIMIT 1)"""
# The thinking blocks the API refuses (thinking.py) in the latest assistant
# message on file {file}'s resume chain, the one the fewest versions recover
# from first (thinking.RECOVERS_FROM), then in chain order: record_id, uuid,
# message_id, block, fault. Only that message's records are read (and, for
# an empty signed block, the file's shown thinking of its model and
# version, as far as the first). (CROSS: that message's records first, by
# records_file_message; SQLite else walked the whole resume chain, reading
# every record on it.)
LATEST_FAULTS_TEMPLATE = """(SELECT lf.* FROM ({faults}) lf
  CROSS JOIN leaf_ancestry_cache lk ON lk.file_id = lf.file_id AND lk.rule = 'resume'
    AND lk.record_id = lf.record_id
  ORDER BY """ + thinking.RECOVERS_FROM_KEY.format(fault="lf.fault") + """ DESC, lk.height,
    lf.block)"""


# The late grafts of file {file} a repair drops (orphans named late_graft,
# walk.is_late_graft, whose graft branch holds no prompt typed after it):
# the height of the chain record the graft hangs from, which the repair
# cuts the chain back to (views.REPAIR_PLAN_TEMPLATE); NULL when none. (CROSS:
# the file's late grafts first, by orphans_cache_cause; SQLite may else walk the
# whole resume chain looking each record up among the orphans.)
GRAFT_CUT_TEMPLATE = """(SELECT min(ga.height) FROM orphans_cache go
  CROSS JOIN leaf_ancestry_cache ga ON ga.file_id = go.file_id AND ga.rule = 'resume'
    AND ga.uuid = go.branch_point_uuid
  WHERE go.file_id = {file} AND go.cause = 'late_graft'
    AND NOT EXISTS (SELECT 1 FROM leaf_ancestry_cache gk JOIN records gr ON gr.id = gk.record_id
                    WHERE gk.file_id = go.file_id AND gk.rule = 'resume'
                      AND gk.height > ga.height AND gr.type = 'user'
                      AND NOT gr.is_meta AND NOT gr.is_tool_result))"""


# A real assistant message on file {file}'s resume chain before the latest one
# ({message}, its message.id): what a repair of a wedged session cuts back to.
WEDGE_CUT_TEMPLATE = f"""EXISTS (
  SELECT 1 FROM leaf_ancestry_cache k JOIN records t ON t.id = k.record_id
  WHERE k.file_id = {{file}} AND k.rule = 'resume' AND t.type = 'assistant'
    AND NOT ({records.SYNTHETIC_RECORD.format(r="t")}) AND t.message_id IS NOT {{message}})"""


def latest_faults(file: str) -> str:
    """LATEST_FAULTS_TEMPLATE for the file expression ``file``."""
    latest = LATEST_MESSAGE_ID_TEMPLATE.format(file=file)
    return LATEST_FAULTS_TEMPLATE.format(faults=thinking.thinking_faults_sql(
        "{a}.file_id = " + file + " AND {a}.message_id = " + latest,
        displayed="{a}.file_id = " + file, once=False))


# What each fault is and what the API answers (thinking.FAULTS), as SQL
# over the fault {fault}.
FAULT_TEXT = ("CASE {fault} " + " ".join(
    "WHEN '%s' THEN '%s (the API answers: %s)'" % (
        name, meaning.replace("'", "''"), answer.replace("`", "").replace("'", "''"))
    for name, answer, meaning in thinking.FAULTS) + " END")
# The version that recovers from the wedge's fault (thinking.RECOVERS_FROM).
_RECOVERS = thinking.RECOVERS_FROM_VERSION.format(fault="json_extract(wedge, '$.fault')")
# The start of a wedged verdict's reason (its row's wedge, resumer_version).
_WEDGED_REASON = ("""'the latest assistant message on the resume chain (message.id '
      || coalesce(json_extract(wedge, '$.message_id'), 'None') || ', uuid '
      || coalesce(json_extract(wedge, '$.uuid'), 'None') || ', content block '
      || json_extract(wedge, '$.block') || ') holds a thinking block the API refuses: '
      || """ + FAULT_TEXT.format(fault="json_extract(wedge, '$.fault')") + """
      || '; Claude Code ' || resumer_version || ' sends it on every resume, gets the 400 and '
      || 'stays stuck (every version before ' || """ + _RECOVERS + """ || ' does on this '
      || 'answer; ' || """ + _RECOVERS + """ || ' and newer strip every thinking block and '
      || 'send again, losing the thinking); '""")

# The api_error_splices of file f (the view's episodes, for one file).
_FILE_SPLICES = definitions.API_ERROR_SPLICES_TEMPLATE.format(files=" AND o.file_id = f.id")

# The verdict's facts of each main transcript {files} picks (a condition on
# files f): what the verdict reads of the file's own records and of its
# caches (leaf_ancestry_cache, orphans_cache, thinking_cache,
# duplicate_uuids_cache), and nothing else. Ingest keeps them in
# verdict_facts_cache (derive.keep_verdict_facts, with the other caches of
# every derive and store append: one file's facts read a few rows of it,
# so an append stays flat, tests/test_verdict_cost.py), so that a verdict
# for every session reads a row per file, not a file's chain (the
# verdict_facts view; verdict_facts_definition computes them, and the tests
# hold the two equal). The rest of the verdict (history.jsonl prompts,
# session folders, the session's other files, the clock, check's --cwd and
# --claude-version) is read when it is asked. Columns:
#   file_id; last_assistant_uuid, last_assistant_message_id: the last
#     assistant record on the resume chain; named_uuid, named_message_id,
#     named_synthetic: the record the next resume names as
#     previous_message_id (records.PREVIOUS_MESSAGE_ID_RECORD) and whether it
#     is a synthetic placeholder; refused: 1 when the API refuses that id
#   writer_version: the Claude Code that last wrote the file
#     (WRITER_VERSION_TEMPLATE)
#   wedge: the first refused thinking block of the latest assistant message,
#     as JSON (fault, uuid, block, message_id, record_id), or NULL;
#     wedge_cut: 1 when a real assistant message before it is on the chain
#   splices, spliced_records: the file's api_error_splices and the records
#     they leave off the chain; graft_height: GRAFT_CUT_TEMPLATE;
#     grafted_records: the late_graft orphans; truncation:
#     compaction.TRUNCATION_TEMPLATE; nothing_to_cut: NOTHING_TO_CUT_TEMPLATE
#   tail_id, named_id: the records.id of those two; top_height,
#     top_record_id: the resume chain's top (its leaf's height and record);
#     scanned_offset: the byte_offset of the file's last record;
#     first_party: 1 when the file holds a reply of Anthropic's API
#     (records.FIRST_PARTY_REPLY_IN)
# The five facts that look down the chain or the file for the first record
# of a kind (the tail, the named record, a real assistant message, the
# writer's version, a first-party reply) read all of it when none is there (a transcript without
# requestIds or versions): kept, they look only above {above} (a height) and
# after {after} (a byte_offset), and else take what the file's row said
# before ({tail_before}, {named_before}, {nothing_before}, {writer_before},
# {first_party_before}):
# FACTS_ARGS, from the start (the definition), or APPENDED_FACTS_ARGS, from
# the kept row {old} of a file whose chain up to its old top is unchanged
# (derive.keep_verdict_facts: an append).
# (DISTINCT keeps SQLite from flattening the inner layer, which would copy
# each subquery into every expression naming it.)
VERDICT_FACTS_COLUMNS = (
    "file_id, last_assistant_uuid, last_assistant_message_id, named_uuid, named_message_id, "
    "named_synthetic, refused, writer_version, wedge, splices, spliced_records, graft_height, "
    "truncation, grafted_records, nothing_to_cut, wedge_cut, tail_id, named_id, top_height, "
    "top_record_id, scanned_offset, first_party")
# WRITER_VERSION_TEMPLATE after byte_offset {after}.
_WRITER_VERSION_AFTER = WRITER_VERSION_TEMPLATE.replace(
    "v.version IS NOT NULL", "v.version IS NOT NULL AND v.byte_offset > {after}")
# NOTHING_TO_CUT_TEMPLATE above height {above}.
_NOTHING_TO_CUT_ABOVE = definitions.NOTHING_TO_CUT_TEMPLATE.replace(
    "k.rule = 'resume'", "k.rule = 'resume' AND k.height > {above}")
# records.FIRST_PARTY_REPLY_IN after byte_offset {after}.
_FIRST_PARTY_AFTER = records.FIRST_PARTY_REPLY_IN.replace(
    "fp.file_id = {file} AND", "fp.file_id = {file} AND fp.byte_offset > {after} AND")
assert "{after}" in _WRITER_VERSION_AFTER and "{above}" in _NOTHING_TO_CUT_ABOVE
assert "{after}" in _FIRST_PARTY_AFTER
# Does the API refuse the named record n's id? (A CASE: under an AND SQLite
# ran the EXISTS over the file's assistant records even with no named
# record: O(file) on every append.)
_REFUSED = ("CASE WHEN " + records.REFUSED_MESSAGE_ID.format(r="n") + " THEN ("
            + records.SYNTHETIC_RECORD.format(r="n") + " OR x.first_party) END")
VERDICT_FACTS_TEMPLATE = f"""
SELECT x.file_id, t.uuid AS last_assistant_uuid, t.message_id AS last_assistant_message_id,
  n.uuid AS named_uuid, n.message_id AS named_message_id,
  coalesce({records.SYNTHETIC_RECORD.format(r="n")}, 0) AS named_synthetic,
  coalesce({_REFUSED}, 0) AS refused,
  x.writer_version, x.wedge, x.splices, x.spliced_records, x.graft_height,
  x.truncation, x.grafted_records, x.nothing_to_cut,
  CASE WHEN x.wedge IS NOT NULL THEN {WEDGE_CUT_TEMPLATE.format(
      file="x.file_id", message="json_extract(x.wedge, '$.message_id')")} END AS wedge_cut,
  x.tail_id, x.named_id, x.top_height, x.top_record_id, x.scanned_offset, x.first_party
FROM (
  SELECT DISTINCT f.id AS file_id,
    coalesce((SELECT k.record_id FROM leaf_ancestry_cache k JOIN records r ON r.id = k.record_id
     WHERE k.file_id = f.id AND k.rule = 'resume' AND k.height > {{above}}
       AND r.type = 'assistant'
     ORDER BY k.height DESC LIMIT 1), {{tail_before}}) AS tail_id,
    coalesce((SELECT k.record_id FROM leaf_ancestry_cache k JOIN records r ON r.id = k.record_id
     WHERE k.file_id = f.id AND k.rule = 'resume' AND k.height > {{above}}
       AND {records.PREVIOUS_MESSAGE_ID_RECORD.format(r="r")}
     ORDER BY k.height DESC LIMIT 1), {{named_before}}) AS named_id,
    {{nothing_before}} AND {_NOTHING_TO_CUT_ABOVE.format(file="f.id", above="{above}")}
      AS nothing_to_cut,
    coalesce({_WRITER_VERSION_AFTER.format(file="f.id", after="{after}")}, {{writer_before}})
      AS writer_version,
    (SELECT json_object('fault', lf.fault, 'uuid', lf.uuid, 'block', lf.block,
                        'message_id', lf.message_id, 'record_id', lf.record_id)
     FROM {latest_faults("f.id")} lf LIMIT 1) AS wedge,
    (SELECT count(*) FROM ({_FILE_SPLICES})) AS splices,
    (SELECT sum(orphaned_records) FROM ({_FILE_SPLICES}))
      AS spliced_records,
    {GRAFT_CUT_TEMPLATE.format(file="f.id")} AS graft_height,
    {compaction.TRUNCATION_TEMPLATE.format(file="f.id")} AS truncation,
    (SELECT count(*) FROM orphans_cache x WHERE x.file_id = f.id
       AND x.cause = 'late_graft') AS grafted_records,
    (SELECT max(k.height) FROM leaf_ancestry_cache k
     WHERE k.file_id = f.id AND k.rule = 'resume') AS top_height,
    (SELECT k.record_id FROM leaf_ancestry_cache k WHERE k.file_id = f.id AND k.rule = 'resume'
     ORDER BY k.height DESC LIMIT 1) AS top_record_id,
    (SELECT max(byte_offset) FROM records WHERE file_id = f.id) AS scanned_offset,
    {{first_party_before}} OR {_FIRST_PARTY_AFTER.format(file="f.id", after="{after}")}
      AS first_party
  FROM files f {{old}} WHERE f.kind = 'main' AND {{files}}
) x
LEFT JOIN records t ON t.id = x.tail_id
LEFT JOIN records n ON n.id = x.named_id
""".strip()
# Every fact from the start of the chain and of the file.
FACTS_ARGS = {"above": "-1", "after": "-1", "tail_before": "NULL", "named_before": "NULL",
              "nothing_before": "1", "writer_before": "NULL", "first_party_before": "0",
              "old": ""}
# The kept row o of a file whose resume chain still has its old top record
# at its old height (an append grew it there, so the chain below is the same):
# the first-of-a-kind facts looked for only in what the append added.
STILL_TOPPED = ("o.top_record_id IS (SELECT k.record_id FROM leaf_ancestry_cache k "
                "WHERE k.file_id = o.file_id AND k.rule = 'resume' AND k.height = o.top_height)")
APPENDED_FACTS_ARGS = {
    "above": "coalesce(o.top_height, -1)", "after": "coalesce(o.scanned_offset, -1)",
    "tail_before": "o.tail_id", "named_before": "o.named_id",
    "nothing_before": "o.nothing_to_cut", "writer_before": "o.writer_version",
    "first_party_before": "o.first_party",
    "old": "JOIN verdict_facts_cache o ON o.file_id = f.id AND " + STILL_TOPPED}
# The facts ingest keeps (verdict_facts_cache), and the same computed from
# the records for every main transcript (the tests hold the two equal).
VERDICT_FACTS_DEFINITION_SQL = VERDICT_FACTS_TEMPLATE.format(files="1", **FACTS_ARGS)
# The views (with the host of the file, as every view with a file has).
VERDICT_FACTS_VIEW_SQL = (f"SELECT {definitions.prefixed(VERDICT_FACTS_COLUMNS, 'c')}, "
                          f"{definitions.HOST_OF.format(file_id='c.file_id')} AS host "
                          "FROM verdict_facts_cache c")
VERDICT_FACTS_DEFINITION_VIEW_SQL = definitions.with_host(VERDICT_FACTS_DEFINITION_SQL)
# The facts VERDICT_TEMPLATE reads: the kept ones, or (check, and the
# tests' definition of every verdict) computed for the files {files} picks.
KEPT_FACTS = "verdict_facts_cache"
FACTS_OF_FILES_TEMPLATE = "(" + VERDICT_FACTS_TEMPLATE.format(
    files="{files}", **FACTS_ARGS).replace("{", "{{").replace("}", "}}").replace(
    "{{files}}", "{files}") + ")"


# The verdict of each subject row. {subject} is a query (or a table) with the
# columns session_id, host ('' is this machine), file_id (the main transcript
# a resume opens, or NULL), rule (why it is that file: a main_file_rule, or
# check --cwd's ambiguous / none_named; NULL when the session has no main
# transcript at all), gone_now (1 when check found the file gone from disk
# just now), cwd, candidates (check --cwd's named copies, comma-separated)
# and unscanned (check --cwd: named copies with messages elsewhere that the
# CLI's scan of every folder does not count), claude_version (check
# --claude-version: the Claude Code that resumes; NULL: the one that last
# wrote the file). {facts}: the file facts it reads (KEPT_FACTS, or
# FACTS_OF_FILES_TEMPLATE: a table or query with VERDICT_FACTS_TEMPLATE's
# columns; a file without a row has none). Columns out:
#   verdict  missing, poisoned, wedged, spliced, truncated or resumable (EXIT_CODES)
#   cause    why, one word: never_seen, never_written, subagents_only, ambiguous,
#            not_in_cwd_folders, none_named, not_named, no_messages, husk,
#            stopped_writing, deleted (never_written, husk, stopped_writing:
#            signals/unwritten.py, from history.jsonl and the session folder);
#            synthetic_tail, synthetic_tail_uncuttable, foreign_reply;
#            thinking_refused, thinking_uncuttable; api_error_splice, late_graft;
#            unreached_after_compaction, segment_not_relinked
#            (compaction.TRUNCATION_TEMPLATE); real_tail, store_copy
#   reason   the sentence check prints; fix: the command (or the step) that
#            fixes it, NULL for a resumable session
#   tail_uuid, tail_message_id: the last assistant record on the resume
#            chain (poisoned: the one the next resume names as
#            previous_message_id, records.PREVIOUS_MESSAGE_ID_RECORD); splices, spliced_records: api_error_splices of the file
#            and the records they leave off the chain; grafted_records: the
#            records late grafts leave off it (orphans named late_graft)
#   truncated_records, compaction_uuid: what a truncated resume loses (its
#            conversation records) and the last compaction's boundary
#   resumer_version: the Claude Code taken to resume (claude_version, else
#            the file's writer); thinking_fault, thinking_uuid,
#            thinking_block, thinking_message_id: the first thinking block
#            the API refuses in the latest assistant message (thinking.py),
#            also when that version recovers (check warns then)
# Every subquery is correlated to one subject row, so a query that selects a
# few sessions reads only their rows.
VERDICT_TEMPLATE = f"""
SELECT session_id, host, file_id, rule AS main_file_rule, path, verdict, cause,
  CASE WHEN verdict = 'missing' AND host <> '' THEN 'on host ' || host || ': ' ELSE '' END ||
  CASE WHEN cause IN {_UNWRITTEN_IN} THEN {unwritten_.REASON_TEMPLATE.format(
      cause="cause", sid="session_id", deleted_at="unwritten_deleted_at", path="path",
      last_timestamp="last_message_at")}
  ELSE CASE cause
    WHEN 'never_seen' THEN 'no transcript with this id was ever seen; ' || fails || ': '
      || 'start a new session (or restore the transcript)'
    WHEN 'subagents_only' THEN 'only subagent transcripts of this session are in the index ('
      || subagent_files || '): its main transcript, the one a resume opens, is gone (Claude '
      || 'Code''s cleanup deletes <project>/' || session_id || '.jsonl and leaves the '
      || 'subagents) or was never indexed; ' || fails || ': start a new session'
    WHEN 'ambiguous' THEN (length(candidates) - length(replace(candidates, ', ', ',')) + 1)
      || ' transcripts named ' || session_id || '.jsonl (' || candidates || ') and none in '
      || 'the project folder of ' || cwd || ': the CLI finds several and ' || fails
      || '; run the resume from the working directory of the one to resume (check --cwd DIR '
      || 'says which it opens)'
    WHEN 'not_in_cwd_folders' THEN 'no transcript named ' || session_id || '.jsonl in the '
      || 'project folder of ' || cwd || ', and the CLI''s scan of every project folder counts '
      || 'none of the ' || unscanned || ' elsewhere (it looks for the compact "type":"user" '
      || 'text Claude Code writes, which they lack): ' || fails
    WHEN 'none_named' THEN 'none of the session''s transcripts on disk is named '
      || session_id || '.jsonl with a message in it: ' || fails
      || ': start a new session (or restore the transcript)'
    WHEN 'not_named' THEN 'the session''s transcript on disk, ' || path || ', is not named '
      || session_id || '.jsonl: the CLI opens only <project folder>/' || session_id
      || '.jsonl, so ' || fails || '; copy it to that name in the project folder of the cwd '
      || 'the resume runs from to resume it'
    WHEN 'no_messages' THEN path || ' holds no user or assistant message: ' || fails
      || ': start a new session (or restore the transcript)'
    WHEN 'deleted' THEN 'the transcript was deleted ('
      || CASE WHEN gone_now OR deleted_at IS NULL THEN 'since the last ingest'
              ELSE deleted_at END || '); ' || fails
      || ': start a new session (or restore the transcript)'
    WHEN 'synthetic_tail' THEN {_POISONED_REASON}
      || 'end the chain at the last real assistant message (session-index repair '
      || session_id || ' --write), or start a new session'
    WHEN 'synthetic_tail_uncuttable' THEN {_POISONED_REASON}
      || 'no real assistant message comes before it, so there is nothing to cut back to and '
      || 'no repair can help: start a new session'
    WHEN 'foreign_reply' THEN {_FOREIGN_REASON}
    WHEN 'thinking_uncuttable' THEN {_WEDGED_REASON}
      || 'there is no earlier assistant message to cut back to: resume with Claude Code '
      || {_RECOVERS} || ' or newer (it drops the thinking), or start a new session'
    WHEN 'thinking_refused' THEN {_WEDGED_REASON}
      || 'cut the chain back to the last message the API accepts (session-index repair '
      || session_id || ' --write), or resume with Claude Code ' || {_RECOVERS} || ' or newer'
    WHEN 'api_error_splice' THEN splices || ' api_error splice(s) leave ' || spliced_records
      || ' record(s) of recovered output off the resume chain: a resume drops them; '
      || 're-parent the record after each error chain onto the last orphaned record '
      || '(session-index repair ' || session_id || ' --write; see api_error_splices)'
    WHEN 'late_graft' THEN grafted_records || ' record(s) of the conversation that went on '
      || 'from an earlier answer to a tool call are off the resume chain: the last row is a '
      || 'result of that call written after them (a permission response drained at '
      || 'start-up, anthropics/claude-code#62301), so a resume continues the old branch and '
      || 'drops them; drop the graft so that the resume continues the newer conversation '
      || '(session-index repair ' || session_id || ' --write; the graft stays in the backup)'
    WHEN 'unreached_after_compaction' THEN json_extract(truncation, '$.lost')
      || ' conversation record(s) after the last compaction (boundary '
      || json_extract(truncation, '$.boundary') || ', '
      || coalesce(json_extract(truncation, '$.at'), '?') || ') are '
      || 'off the resume chain: the walk up from the leaf stops at a parentUuid that is not '
      || 'in the file, or at one the compaction relink dropped (a copy a second /compact '
      || 're-appended, anthropics/claude-code#92089, #46603), so a resume drops them; '
      || 're-parent the record the walk stops at onto the last of them (session-index repair '
      || session_id || ' --write)'
    WHEN 'segment_not_relinked' THEN json_extract(truncation, '$.lost')
      || ' conversation record(s) the last compaction kept (boundary '
      || json_extract(truncation, '$.boundary') || ') are in the file, but the walk '
      || 'from its preservedSegment.tailUuid ' || json_extract(truncation, '$.tail')
      || ' up the parents never reaches its headUuid ' || json_extract(truncation, '$.head')
      || ', so Claude Code relinks nothing and a resume drops them; set the headUuid to '
      || 'where that walk ends (session-index repair ' || session_id || ' --write)'
    WHEN 'store_copy' THEN coalesce('the local transcript was deleted (' || local_deleted_at
        || ')',
        'no local transcript was ever indexed')
      || ', but the session store holds it (' || file_records || ' records, ' || path
      || '): resumable from the store; the resume must load it from the store (the Agent '
      || 'SDK with ClaudeAgentOptions(session_store=IndexSessionStore(<this index>), '
      || 'resume=<id>)); a bare `claude --resume` fails with "No conversation found"'
    ELSE 'the resume chain ends at a real message' END END AS reason,
  CASE cause
    WHEN 'deleted' THEN 'session-index restore ' || session_id
    WHEN 'husk' THEN 'session-index restore ' || session_id
    WHEN 'stopped_writing' THEN 'start a new session (the prompts after ' || last_message_at
      || ' are in history.jsonl), or resume knowing that what came after is lost'
    WHEN 'not_named' THEN 'cp ' || path || ' <project folder of the cwd>/' || session_id
      || '.jsonl'
    WHEN 'ambiguous' THEN 'session-index check ' || session_id || ' --cwd DIR'
    WHEN 'synthetic_tail' THEN 'session-index repair ' || session_id || ' --write'
    WHEN 'api_error_splice' THEN 'session-index repair ' || session_id || ' --write'
    WHEN 'late_graft' THEN 'session-index repair ' || session_id || ' --write'
    WHEN 'thinking_refused' THEN 'session-index repair ' || session_id || ' --write'
    WHEN 'unreached_after_compaction' THEN 'session-index repair ' || session_id || ' --write'
    WHEN 'segment_not_relinked' THEN 'session-index repair ' || session_id || ' --write'
    WHEN 'real_tail' THEN NULL
    WHEN 'store_copy' THEN NULL
    ELSE 'start a new session' END AS fix,
  tail_uuid, tail_message_id, splices, spliced_records, grafted_records,
  json_extract(truncation, '$.lost') AS truncated_records,
  json_extract(truncation, '$.boundary') AS compaction_uuid, resumer_version,
  json_extract(wedge, '$.fault') AS thinking_fault,
  json_extract(wedge, '$.uuid') AS thinking_uuid,
  json_extract(wedge, '$.block') AS thinking_block,
  json_extract(wedge, '$.message_id') AS thinking_message_id
FROM (
  SELECT *, CASE verdict
      WHEN 'missing' THEN CASE
        WHEN rule = 'ambiguous' THEN 'ambiguous'
        WHEN rule = 'none_named' AND unscanned > 0 THEN 'not_in_cwd_folders'
        WHEN rule = 'none_named' THEN 'none_named'
        WHEN rule = 'not_named' THEN 'not_named'
        WHEN rule = 'named_no_messages' THEN 'no_messages'
        WHEN unwritten = 'stopped_writing' THEN 'stopped_writing'
        WHEN file_id IS NOT NULL AND unwritten = 'husk' THEN 'husk'
        WHEN file_id IS NOT NULL THEN 'deleted'
        WHEN unwritten = 'never_written' THEN 'never_written'
        WHEN subagent_files > 0 THEN 'subagents_only'
        ELSE 'never_seen' END
      WHEN 'poisoned' THEN CASE WHEN NOT named_synthetic THEN 'foreign_reply'
                                WHEN nothing_to_cut THEN 'synthetic_tail_uncuttable'
                                ELSE 'synthetic_tail' END
      WHEN 'wedged' THEN CASE WHEN wedge_cut THEN 'thinking_refused'
                              ELSE 'thinking_uncuttable' END
      WHEN 'spliced' THEN CASE WHEN splices > 0 THEN 'api_error_splice' ELSE 'late_graft' END
      WHEN 'truncated' THEN json_extract(truncation, '$.cause')
      WHEN 'resumable' THEN CASE WHEN rule = 'store_copy' THEN 'store_copy'
                                 ELSE 'real_tail' END
    END AS cause
  FROM (
    SELECT j.*,
      CASE WHEN j.refused THEN j.named_uuid ELSE j.last_assistant_uuid END AS tail_uuid,
      CASE WHEN j.refused THEN j.named_message_id ELSE j.last_assistant_message_id END
        AS tail_message_id,
      CASE
        WHEN j.file_id IS NULL OR {NOT_LOADED_TEMPLATE.format(rule="j.rule")} THEN 'missing'
        WHEN j.unwritten = 'stopped_writing' THEN 'missing'
        WHEN j.refused THEN 'poisoned'
        WHEN j.wedge IS NOT NULL AND {thinking.STAYS_STUCK.format(
            v="j.resumer_version", fault="json_extract(j.wedge, '$.fault')")}
          THEN 'wedged'
        WHEN j.splices > 0 OR j.graft_height IS NOT NULL THEN 'spliced'
        WHEN j.truncation IS NOT NULL THEN 'truncated'
        ELSE 'resumable' END AS verdict
    FROM (SELECT *, CASE WHEN host = '' THEN {unwritten_.CAUSE_TEMPLATE.format(
        deleted_at="unwritten_deleted_at", last_timestamp="last_message_at", now=CLOCK)}
      END AS unwritten FROM (  -- DISTINCT (the rows are distinct anyway) keeps SQLite from flattening this
            -- layer, which would copy each subquery into every expression naming it
      SELECT DISTINCT a.session_id, a.host, a.file_id, a.rule, a.gone_now, a.cwd, a.candidates,
        a.unscanned, f.path, f.deleted_at, f.records AS file_records,
        f.last_timestamp AS last_message_at,
        coalesce(f.deleted_at, CASE WHEN a.gone_now THEN 'since the last ingest' END)
          AS unwritten_deleted_at,
        {unwritten_.EVIDENCE_TEMPLATE.format(sid="a.session_id")},
        '`claude --resume` fails with "No conversation found with session ID: '
          || a.session_id || '"' AS fails,
        -- the file's facts (VERDICT_FACTS_TEMPLATE; what they are with no file)
        vf.last_assistant_uuid, vf.last_assistant_message_id, vf.named_uuid,
        vf.named_message_id, coalesce(vf.named_synthetic, 0) AS named_synthetic,
        coalesce(vf.refused, 0) AS refused,
        coalesce(a.claude_version, vf.writer_version) AS resumer_version,
        vf.wedge, coalesce(vf.splices, 0) AS splices, vf.spliced_records, vf.graft_height,
        vf.truncation, coalesce(vf.grafted_records, 0) AS grafted_records,
        coalesce(vf.nothing_to_cut, 1) AS nothing_to_cut, vf.wedge_cut,
        (SELECT count(*) FROM files x WHERE x.session_id = a.session_id
           AND x.kind = 'subagent' AND coalesce(x.host, '') = a.host) AS subagent_files,
        (SELECT coalesce(x.deleted_at, 'since the last ingest') FROM files x
         WHERE x.session_id = a.session_id AND x.kind = 'main' AND x.origin <> 'store'
           AND coalesce(x.host, '') = a.host
         ORDER BY x.deleted_at IS NOT NULL, x.mtime DESC, x.id DESC LIMIT 1) AS local_deleted_at
      FROM {{subject}} a LEFT JOIN files f ON f.id = a.file_id
      LEFT JOIN {{facts}} vf ON vf.file_id = a.file_id
    )) j
  )
)
""".strip()


# The subject columns VERDICT_TEMPLATE reads, for rows that carry only a
# session, its host and its main file (no check --cwd facts).
_PLAIN = ("0 AS gone_now, NULL AS cwd, NULL AS candidates, 0 AS unscanned, "
          "NULL AS claude_version")

# The sessions known only from history.jsonl and their session folders (no
# transcript of them in the index) whose transcript was never written
# (signals/unwritten.py): a verdict is given for them too.
NEVER_WRITTEN_SQL = f"""
SELECT session_id FROM (
  SELECT i.session_id, NULL AS deleted_at, NULL AS last_message_at,
    {unwritten_.EVIDENCE_TEMPLATE.format(sid="i.session_id")}
  FROM (SELECT session_id FROM history_prompts WHERE session_id IS NOT NULL
        UNION SELECT session_id FROM session_folders WHERE deleted_at IS NULL) i
  WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = i.session_id))
WHERE {unwritten_.CAUSE_TEMPLATE.format(deleted_at="deleted_at", last_timestamp="last_message_at",
                                        now=CLOCK)} = 'never_written'
""".strip()

# session_verdicts: the verdict of every session on every host that holds a
# transcript of it (session_hosts: host '' is this machine), and of a
# session with no main transcript on its own host (sessions.host: only
# subagent transcripts left). `WHERE session_id = ?` reads that session only.
# session_verdicts' subject rows.
_SESSION_VERDICTS_SUBJECT = f"""(
  SELECT session_id, host, main_file_id AS file_id, main_file_rule AS rule, {_PLAIN}
  FROM session_hosts h
  WHERE NOT EXISTS (SELECT 1 FROM sessions o WHERE o.session_id = h.session_id
                    AND o.agent IN {OTHER_AGENTS_SQL})   -- (a Codex or Gemini CLI session: no verdict)
  UNION ALL
  SELECT s.session_id, s.host, NULL, NULL, {_PLAIN} FROM sessions s
  WHERE s.agent NOT IN {OTHER_AGENTS_SQL} AND NOT EXISTS (SELECT 1 FROM session_hosts h
                    WHERE h.session_id = s.session_id AND h.host = s.host)
  UNION ALL
  SELECT session_id, '', NULL, NULL, {_PLAIN} FROM ({NEVER_WRITTEN_SQL}))"""
SESSION_VERDICTS_SQL = VERDICT_TEMPLATE.format(subject=_SESSION_VERDICTS_SUBJECT,
                                               facts=KEPT_FACTS)
# The same verdicts from facts computed from the records (the tests hold
# the two equal).
SESSION_VERDICTS_DEFINITION_SQL = VERDICT_TEMPLATE.format(
    subject=_SESSION_VERDICTS_SUBJECT, facts=FACTS_OF_FILES_TEMPLATE.format(files="1"))


# session_verdicts with its session_hosts rows narrowed to those @HOSTS@
# picks (a condition on session_hosts h) before the verdict is computed; the
# sessions without a main transcript on their host and those never written
# whole (verdicts_of_hosts).
_NARROWED_VERDICTS = SESSION_VERDICTS_SQL.replace(
    "  FROM session_hosts h\n  WHERE NOT EXISTS", "  FROM session_hosts h\n  WHERE (@HOSTS@) AND NOT EXISTS", 1)
assert _NARROWED_VERDICTS != SESSION_VERDICTS_SQL


def verdicts_of_hosts(hosts: str) -> str:
    """session_verdicts' rows for the session_hosts rows (alias h) that
    ``hosts`` picks, and of every session with no main transcript on its
    host or never written: for a question only such rows can answer yes to,
    which SQLite cannot push into the view when it is an OR (the health
    page's missing row: the verdict of every session, seconds at a million
    records)."""
    return _NARROWED_VERDICTS.replace("@HOSTS@", hosts)


def verdicts_of_main_files(file_ids: str) -> str:
    """session_verdicts' rows of the sessions whose main transcript (on a
    host) is one of ``file_ids`` (a query of files.id): the view, narrowed
    before it is computed, for a question only such files can answer yes to
    (a poisoned verdict needs a synthetic record in the file, a spliced one
    an api_error splice): SQLite cannot push such a filter into the view."""
    return VERDICT_TEMPLATE.format(subject=f"""(
  SELECT session_id, host, main_file_id AS file_id, main_file_rule AS rule, {_PLAIN}
  FROM session_hosts WHERE main_file_id IN ({file_ids}))""", facts=KEPT_FACTS)


# The verdict of the sessions {sessions} (a query over the sessions table, its
# rows aliased s) on their default host, as `sessions` and the pages list them.
SESSIONS_VERDICT_TEMPLATE = VERDICT_TEMPLATE.format(subject=f"""(
  SELECT s.session_id, s.host, h.main_file_id AS file_id, h.main_file_rule AS rule, {_PLAIN}
  FROM ({{sessions}}) s
  LEFT JOIN session_hosts h ON h.session_id = s.session_id AND h.host = s.host)""",
    facts=KEPT_FACTS)

# VERDICT_TEMPLATE's layer that reads the subject's file, facts and
# evidence: its DISTINCT (a no-op: one row per subject row) keeps SQLite from
# flattening it, which would copy each of its subqueries into every
# expression naming its column: what a query of a session's whole row wants.
_KEPT_LAYER = "SELECT DISTINCT a.session_id, a.host, a.file_id, a.rule,"


def verdict_only(template: str) -> str:
    """``template`` (made from VERDICT_TEMPLATE) for a query that reads only
    the verdict of many sessions (chart_verdicts_by_day): without the
    layer's DISTINCT SQLite flattens it into the verdict's CASE and runs, for
    each session, only the subqueries that CASE comes to (most sessions stop
    at the file's kept facts: no history.jsonl prompts, session folder,
    subagent count or reason read), and builds no temporary index of every
    row. The same rows; 187 -> 58 ms for the chart on the 1M-record bench
    index. (For a session's whole row, reason and fix, it costs more.)"""
    out = template.replace(_KEPT_LAYER, _KEPT_LAYER.replace("DISTINCT ", ""), 1)
    assert out != template, "VERDICT_TEMPLATE's layer changed"
    return out


# SESSIONS_VERDICT_TEMPLATE for a query that reads only the verdict column.
SESSIONS_VERDICT_ONLY_TEMPLATE = verdict_only(SESSIONS_VERDICT_TEMPLATE)

# One session's verdict on :host for the file :file_id chosen by :rule (check,
# after it has brought the index up to date and chosen the file; --cwd may
# choose another than session_hosts did). Its facts are computed for that
# file (a few ms): the answer never rests on a kept row.
CHECK_VERDICT_SQL = VERDICT_TEMPLATE.format(subject="""(
  SELECT :session_id AS session_id, :host AS host, :file_id AS file_id, :rule AS rule,
         :gone_now AS gone_now, :cwd AS cwd, :candidates AS candidates,
         :unscanned AS unscanned, :claude_version AS claude_version)""",
    facts=FACTS_OF_FILES_TEMPLATE.format(files="f.id = :file_id"))

# One session's verdict on its default host (sessions.host; this machine for
# a session known only from history.jsonl and its folder), as the session
# page and `show` state it.
SESSION_VERDICT_SQL = """
SELECT v.* FROM session_verdicts v
WHERE v.session_id = :session_id AND v.host = coalesce(
  (SELECT s.host FROM sessions s WHERE s.session_id = :session_id), '')
""".strip()


def of_session(conn, session_id: str) -> dict | None:
    """The session's verdict row (session_verdicts) on its default host;
    None when the index holds no transcript of it."""
    rows = dict_rows(conn, SESSION_VERDICT_SQL, {"session_id": session_id})
    return rows[0] if rows else None


def unseen_subject(session_id: str) -> dict:
    """CHECK_VERDICT_SQL's parameters for a session id the index holds no
    transcript of, on this machine (the subject check's _subject builds when
    it finds no file): its verdict as check gives it (missing, never_seen)."""
    return {"session_id": session_id, "host": "", "file_id": None, "rule": None,
            "gone_now": 0, "cwd": None, "candidates": "", "unscanned": 0,
            "claude_version": None}


def headline(verdict: str, reason: str) -> str:
    """A verdict as check prints it (and show begins): 'VERDICT: REASON'."""
    return f"{verdict}: {reason}"
