"""Sessions whose transcript was never written, stopped being written, or
was deleted while its session folder lived on: the evidence is what Claude
Code writes besides the transcript (ingest/sidecars.py): the prompts of
``history.jsonl`` and the session folder's ``tool-results/``, ``subagents/``
and ``workflows/``.

The causes, the first that applies:

- ``never_written``: no transcript of the session was ever indexed on this
  machine, yet its folder holds tool results or workflow files (Claude
  Code's cleanup deletes tool results with their transcript: these survive
  only when the transcript never was, or was deleted otherwise), or it has
  prompts in history.jsonl within the cleanup period (cleanup never touches
  history.jsonl; within the period the transcript should still be there).
  anthropics/claude-code #76829, #79369, #79188, #70219, #91284; #95403 when
  the transcript was deleted before the index saw it.
- ``husk``: the transcript the index holds was deleted from disk while its
  folder's tool results survive (#95403: not the cleanup, which deletes them
  together).
- ``stopped_writing``: the transcript is there, but prompts (history.jsonl)
  or tool results were written more than STOPPED_AFTER_MINUTES after its
  newest record and its subagents' (a subagent's tool results come while
  the main transcript waits): the session went on and the transcript did not
  (#53417, #79375, #91284). A resume loads it as it was when it stopped.

A prompt counts only when it is one the transcript would hold: slash
commands (``/exit``, ``/resume`` in a session that never sent a message),
``!`` shell escapes and ``#`` memory notes are history lines of sessions
that need no transcript. Subagent files alone are not evidence (the
cleanup of 2.1.88 left them; a run killed mid-subagent outlives its
transcript's last line): the verdict's ``subagents_only`` says those.
"""

from __future__ import annotations

# Evidence this long after the transcript's newest record means it stopped.
STOPPED_AFTER_MINUTES = 5
DEFAULT_RETENTION_DAYS = 30

# A history line that is a prompt the transcript would hold (its alias {p}).
CONVERSATION_PROMPT = ("{p}.error IS NULL AND {p}.session_id IS NOT NULL "
                       "AND substr(ltrim(coalesce({p}.display, '')), 1, 1) NOT IN ('/', '!', '#')")

# The evidence of the session {sid} (an SQL expression), as a select list:
#   prompts, first_prompt_at, last_prompt_at, project: its conversation
#     prompts in history.jsonl (the project of the last)
#   retention_days: cleanupPeriodDays of the config dir of its history file
#   folder: its session folder on disk (the newest, when several)
#   tool_results, folder_subagent_files, workflow_files: files in the
#     folders' tool-results/, subagents/ and workflows/
#   last_sidecar_at: the newest file's mtime in tool-results/ and workflows/
#   local_mains: main transcripts of it ever indexed from this machine's disk
#   session_last_at: the newest record of its transcripts here, subagents'
#     included (a subagent's tool results are written while the main
#     transcript waits for its answer)
EVIDENCE_TEMPLATE = f"""
  (SELECT count(*) FROM history_prompts p
   WHERE p.session_id = {{sid}} AND {CONVERSATION_PROMPT.format(p="p")}) AS prompts,
  (SELECT min(p.timestamp) FROM history_prompts p
   WHERE p.session_id = {{sid}} AND {CONVERSATION_PROMPT.format(p="p")}) AS first_prompt_at,
  (SELECT max(p.timestamp) FROM history_prompts p
   WHERE p.session_id = {{sid}} AND {CONVERSATION_PROMPT.format(p="p")}) AS last_prompt_at,
  (SELECT p.project FROM history_prompts p
   WHERE p.session_id = {{sid}} AND {CONVERSATION_PROMPT.format(p="p")}
   ORDER BY p.timestamp DESC LIMIT 1) AS project,
  (SELECT max(hf.retention_days) FROM history_files hf WHERE hf.id IN (
     SELECT p.history_file_id FROM history_prompts p WHERE p.session_id = {{sid}})) AS retention_days,
  (SELECT d.path FROM session_folders d WHERE d.session_id = {{sid}} AND d.deleted_at IS NULL
   ORDER BY d.last_mtime DESC LIMIT 1) AS folder,
  (SELECT sum(d.tool_results) FROM session_folders d
   WHERE d.session_id = {{sid}} AND d.deleted_at IS NULL) AS tool_results,
  (SELECT sum(d.subagent_files) FROM session_folders d
   WHERE d.session_id = {{sid}} AND d.deleted_at IS NULL) AS folder_subagent_files,
  (SELECT sum(d.workflow_files) FROM session_folders d
   WHERE d.session_id = {{sid}} AND d.deleted_at IS NULL) AS workflow_files,
  (SELECT max(d.last_sidecar_at) FROM session_folders d
   WHERE d.session_id = {{sid}} AND d.deleted_at IS NULL) AS last_sidecar_at,
  (SELECT count(*) FROM files x WHERE x.session_id = {{sid}} AND x.kind = 'main'
     AND x.origin = 'file' AND coalesce(x.host, '') = '') AS local_mains,
  (SELECT max(x.last_timestamp) FROM files x WHERE x.session_id = {{sid}}
     AND x.kind IN ('main', 'subagent') AND x.origin = 'file' AND coalesce(x.host, '') = '')
    AS session_last_at
""".strip()

# The cause over the evidence columns (EVIDENCE_TEMPLATE's, unqualified) and
# the main transcript a resume opens: {deleted_at} and {last_timestamp} its
# files columns (NULL when there is none); {now} the time it is. NULL: none.
CAUSE_TEMPLATE = f"""
CASE
  WHEN local_mains = 0 AND coalesce(retention_days, {DEFAULT_RETENTION_DAYS}) <> 0 AND (
       coalesce(tool_results, 0) + coalesce(workflow_files, 0) > 0
       OR julianday(last_prompt_at) + coalesce(retention_days, {DEFAULT_RETENTION_DAYS})
          > julianday({{now}}))
    THEN 'never_written'
  WHEN {{deleted_at}} IS NOT NULL AND coalesce(tool_results, 0) + coalesce(workflow_files, 0) > 0
    THEN 'husk'
  WHEN {{deleted_at}} IS NULL AND {{last_timestamp}} IS NOT NULL
       AND julianday(max(coalesce(last_prompt_at, ''), coalesce(last_sidecar_at, '')))
           - julianday(max({{last_timestamp}}, coalesce(session_last_at, '')))
           > {STOPPED_AFTER_MINUTES} / 1440.0
    THEN 'stopped_writing'
END
""".strip()

# The sessions whose main transcript (on this machine) a prompt or a tool
# result came after: the only ones with a transcript that can be
# stopped_writing (a superset: no 5-minute margin, any prompt), found with two
# index probes a session, for narrowing a query before the verdict of every
# session is computed.
STOPPED_CANDIDATES_SQL = """
SELECT h.session_id FROM session_hosts h JOIN files f ON f.id = h.main_file_id
WHERE h.host = '' AND f.last_timestamp IS NOT NULL AND (
  EXISTS (SELECT 1 FROM history_prompts p WHERE p.session_id = h.session_id
          AND p.timestamp > f.last_timestamp)
  OR EXISTS (SELECT 1 FROM session_folders d WHERE d.session_id = h.session_id
             AND d.last_sidecar_at > f.last_timestamp))
""".strip()

# The time after which the session went on unwritten (stopped_writing: the
# transcript's newest record; never_written: its first trace), and the
# newest trace of it, over the same columns.
EVIDENCE_AT_TEMPLATE = ("max(coalesce(last_prompt_at, ''), coalesce(last_sidecar_at, ''))")

# The sentence of each cause, over the same columns and {last_timestamp},
# {deleted_at} and {path} (the transcript's): what check says.
REASON_TEMPLATE = """
CASE {cause}
  WHEN 'never_written' THEN 'no transcript ' || {sid} || '.jsonl was ever written (or it was '
    || 'deleted before it was indexed, outside the cleanup period: anthropics/claude-code#95403), '
    || 'yet the session ran: '
    || trim(CASE WHEN prompts > 0 THEN prompts || ' prompt(s) in history.jsonl (' || first_prompt_at
         || ' to ' || last_prompt_at || ')' ELSE '' END
       || CASE WHEN prompts > 0 AND folder IS NOT NULL THEN ', ' ELSE '' END
       || CASE WHEN folder IS NOT NULL THEN coalesce(tool_results, 0) || ' tool result(s), '
         || coalesce(folder_subagent_files, 0) || ' subagent file(s) and ' || coalesce(workflow_files, 0)
         || ' workflow file(s) in ' || folder ELSE '' END)
    || '. Claude Code''s transcript writer never wrote it (#76829, #79369, #70219, #91284: '
    || 'persistence off in some terminals and multiplexers, or a writer that never started); '
    || '`claude --resume` fails with "No conversation found"'
  WHEN 'husk' THEN 'the transcript was deleted (' || coalesce({deleted_at}, '?') || ') while '
    || 'its session folder ' || folder || ' keeps ' || coalesce(tool_results, 0)
    || ' tool result(s): not Claude Code''s cleanup, which deletes them together '
    || '(anthropics/claude-code#95403); `claude --resume` fails with "No conversation found"'
  WHEN 'stopped_writing' THEN 'the transcript ' || coalesce({path}, '') || ' stopped being '
    || 'written at ' || {last_timestamp} || ', but the session went on: '
    || trim(CASE WHEN last_prompt_at > {last_timestamp} THEN 'prompts in history.jsonl until '
         || last_prompt_at ELSE '' END
       || CASE WHEN last_prompt_at > {last_timestamp} AND last_sidecar_at > {last_timestamp}
         THEN ', ' ELSE '' END
       || CASE WHEN last_sidecar_at > {last_timestamp} THEN 'tool results until '
         || last_sidecar_at || ' in ' || folder ELSE '' END)
    || ' (anthropics/claude-code#53417, #79375, #91284: the writer stopped, the session did '
    || 'not); a resume loads the conversation as it was at ' || {last_timestamp}
    || ' and what came after is lost'
END
""".strip()

# unwritten_transcripts: one row per session with evidence of a transcript
# never written, deleted with its folder left (husk), or stopped
# (CAUSE_TEMPLATE), on this machine: session_id, cause, project (the cwd of
# its last prompt), path (its main transcript, when there is one),
# last_message_at (that transcript's newest record), the evidence columns
# (EVIDENCE_TEMPLATE), evidence_at (its newest trace), reason (the sentence
# check prints) and host (''). {now}: the time it is.
UNWRITTEN_TRANSCRIPTS_TEMPLATE = f"""
SELECT session_id, cause, project, path, last_message_at, prompts, first_prompt_at,
  last_prompt_at, folder, tool_results, folder_subagent_files AS subagent_files, workflow_files,
  last_sidecar_at,
  {EVIDENCE_AT_TEMPLATE} AS evidence_at,
  {REASON_TEMPLATE.format(cause="cause", sid="session_id", deleted_at="deleted_at",
                          path="path", last_timestamp="last_message_at")} AS reason,
  '' AS host
FROM (
  SELECT *, {CAUSE_TEMPLATE.format(deleted_at="deleted_at", last_timestamp="last_message_at",
                                   now="{now}")} AS cause
  FROM (
    SELECT i.session_id, m.path, m.deleted_at, m.last_timestamp AS last_message_at,
      {EVIDENCE_TEMPLATE.format(sid="i.session_id")}
    FROM (SELECT session_id FROM history_prompts WHERE session_id IS NOT NULL
          UNION SELECT session_id FROM session_folders) i
    LEFT JOIN session_hosts h ON h.session_id = i.session_id AND h.host = ''
    LEFT JOIN files m ON m.id = h.main_file_id
  )
)
WHERE cause IS NOT NULL
""".strip()
