"""The operator signal views, answered for the CLI (``--now``, ``--days``)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from indexer.signals import classes, projects, verdict as verdicts
from indexer.transcripts.agents import OTHER_AGENTS_SQL
from indexer.sql import dict_rows


class BadTime(ValueError):
    """--now is not an ISO-8601 time."""


def iso_now(now: str | None) -> str:
    """``now`` (any ISO-8601 time; naive means UTC) or the clock, as
    YYYY-MM-DDTHH:MM:SS.sssZ, the form every timestamp here compares in."""
    if now is None:
        moment = datetime.now(timezone.utc)
    else:
        try:
            moment = datetime.fromisoformat(now.replace("Z", "+00:00"))
        except ValueError:
            raise BadTime(f"--now {now!r} is not an ISO-8601 time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Each listing command's SQL, given the bound parameters :now and its
# options' (signals/classes.py declares them).
LISTINGS = {name: classes.listing_sql(cls) for name, cls in classes.LISTED.items()}


# Markup Claude Code writes into a user message around what the user typed:
# the context it attaches (the editor's selection or open file, reminders,
# a slash command's expansion, command output, a hook's or a background
# task's note) is no part of a title, and goes with its content; the tags
# around a slash command's name and arguments, a shell command or a skill's
# name are dropped and their text kept (plain_title). Any other tag is the
# user's own text (``Vec<T>``, a question about ``<div>``) and stays.
TITLE_CONTEXT_TAGS = ("ide_selection", "ide_opened_file", "ide_diagnostics", "system-reminder",
                      "command-message", "local-command-caveat", "local-command-stdout",
                      "local-command-stderr", "bash-stdout", "bash-stderr", "user-memory-input",
                      "task-notification", "user-prompt-submit-hook")
TITLE_TEXT_TAGS = ("command-name", "command-args", "bash-input", "skill-name")
_CLAUDE_CODE_TAGS = TITLE_CONTEXT_TAGS + TITLE_TEXT_TAGS
_CONTEXT = re.compile("|".join(rf"<{t}(?=[\s/>])[^>]*>.*?(?:</{t}>|\Z)" for t in TITLE_CONTEXT_TAGS),
                      re.S)
_TAG = re.compile("</?(?:" + "|".join(_CLAUDE_CODE_TAGS) + r")(?=[\s/>])[^<>]*>")
_TAG_NAME = re.compile(r"</?([\w-]*)")
_WS = re.compile(r"\s+")
TITLE_LENGTH = 100  # characters of a title shown
# Characters of a first prompt a title reads (SESSION_TITLE_TEMPLATE's cut).
PROMPT_CHARS = 120


def _cut_tag(text: str) -> str:
    """``text`` without the start of one of Claude Code's tags that
    PROMPT_CHARS' cut left at its end: ``<`` or ``</`` and a prefix of the
    tag's name, or all of it and part of its attributes."""
    start = text.rfind("<")
    if start < 0 or ">" in text[start:]:
        return text
    tag = _TAG_NAME.match(text, start)
    name, rest = tag.group(1), text[tag.end():]
    if rest == "" and any(tag.startswith(name) for tag in _CLAUDE_CODE_TAGS) or (
            name in _CLAUDE_CODE_TAGS and rest[:1].isspace()):
        return text[:start]
    return text


def plain_title(text: str | None, length: int = TITLE_LENGTH) -> str:
    """A session's title (SESSION_TITLE_TEMPLATE) as a person reads it:
    Claude Code's markup stripped (TITLE_CONTEXT_TAGS with their content,
    TITLE_TEXT_TAGS alone; a context tag the SQL's cut leaves open drops the
    rest, and one of its tags the cut leaves unfinished goes), any other
    tag kept as the text it is, whitespace made one space, cut to ``length``
    characters. Plain text: the page that shows it escapes it."""
    text = text or ""
    cut = len(text) >= PROMPT_CHARS   # (only a cut prompt ends in a tag's start)
    text = _TAG.sub(" ", _CONTEXT.sub(" ", text))
    text = _WS.sub(" ", _cut_tag(text) if cut else text).strip()
    return text if len(text) <= length else text[:length - 1].rstrip() + "\u2026"


# The text of a user message's content: the string, or each text block (a
# JSON array's elements; json_each of a string is the string itself), {j}
# the json_each row.
_PROMPT_TEXT = "CASE {j}.type WHEN 'text' THEN {j}.value ELSE {j}.value ->> '$.text' END"
# The tags whose blocks are wholly context: Claude Code writes the editor's
# selection, the open file and its reminders as text blocks of their own
# before the prompt. A first prompt is the first text that does not begin
# with one ({t}: the text).
TITLE_CONTEXT_BLOCK_TAGS = ("ide_selection", "ide_opened_file", "ide_diagnostics",
                            "system-reminder")
_NOT_CONTEXT = ("CASE WHEN substr({t}, 1, 1) = '<' THEN substr({t}, 1, instr({t}, '>')) "
                "ELSE '' END NOT IN ("
                + ", ".join(f"'<{tag}>'" for tag in TITLE_CONTEXT_BLOCK_TAGS) + ")")
# The title a session goes by, most recent first of each kind: the user's
# custom-title, Claude Code's ai-title, an older summary record, else the
# first prompt of its main transcript, its first text that is not wholly
# context (records_titles keeps this cheap: SQLite uses a partial index only
# when the query repeats its WHERE, hence each type's IN list; without it
# each of the three read every record of the file). The first prompt is
# looked for record by record in file order (byte_offset: the order of
# records_file_offset, so SQLite stops at the first user record that has
# one; ordered by line_no it took every user record's text blocks and
# sorted them: 33-41 ms against under 1 ms for a session of 5,000-10,000
# records on a 1M-record index). Pages strip its markup (plain_title).
SESSION_TITLE_TEMPLATE = """coalesce(
  (SELECT t.raw ->> '$.customTitle' FROM records t WHERE t.file_id = {s}.main_file_id
     AND t.type = 'custom-title' AND t.type IN ('custom-title', 'ai-title', 'summary') ORDER BY t.line_no DESC LIMIT 1),
  (SELECT t.raw ->> '$.aiTitle' FROM records t WHERE t.file_id = {s}.main_file_id
     AND t.type = 'ai-title' AND t.type IN ('custom-title', 'ai-title', 'summary') ORDER BY t.line_no DESC LIMIT 1),
  (SELECT t.raw ->> '$.summary' FROM records t WHERE t.file_id = {s}.main_file_id
     AND t.type = 'summary' AND t.type IN ('custom-title', 'ai-title', 'summary') ORDER BY t.line_no DESC LIMIT 1),
  (SELECT prompt FROM (
     SELECT (SELECT substr(""" + _PROMPT_TEXT.format(j="j") + """, 1, """ + str(PROMPT_CHARS) + """)
             FROM json_each(CASE WHEN json_valid(u.raw) THEN u.raw ELSE '{{}}' END,
                            '$.message.content') j
             WHERE (j.type = 'text' OR j.value ->> '$.type' = 'text')
               AND """ + _NOT_CONTEXT.format(t=_PROMPT_TEXT.format(j="j")) + """
             ORDER BY j.id LIMIT 1) AS prompt, u.byte_offset
     FROM records u WHERE u.file_id = {s}.main_file_id AND u.type = 'user' AND NOT u.is_meta)
   WHERE prompt IS NOT NULL ORDER BY byte_offset LIMIT 1),
  -- a Codex CLI session: its first user input that is not the CLI's own context
  (SELECT substr(u.raw ->> '$.payload.content[0].text', 1, """ + str(PROMPT_CHARS) + """)
     FROM records u WHERE u.file_id = {s}.main_file_id AND u.type = 'response_item'
       AND u.subtype = 'message' AND json_valid(u.raw) AND u.raw ->> '$.payload.role' = 'user'
       AND substr(u.raw ->> '$.payload.content[0].text', 1, 1) <> '<'
     ORDER BY u.line_no LIMIT 1),
  -- a Gemini CLI session: its first user message that is not the CLI's own context
  (SELECT substr(CASE WHEN json_type(u.raw, '$.content') = 'text' THEN u.raw ->> '$.content'
                      ELSE u.raw ->> '$.content[0].text' END, 1, """ + str(PROMPT_CHARS) + """)
     FROM records u WHERE u.file_id = {s}.main_file_id AND u.type = 'gemini.user'
       AND json_valid(u.raw) AND substr(coalesce(u.raw ->> '$.content[0].text', ''), 1, 1) <> '<'
     ORDER BY u.line_no LIMIT 1))"""
# session-index sessions: the most recently active first.
# (title, project, activity and records beside the verdict: state is the
# verdict's former name, kept for the scripts that read it).
_RECENT_SESSIONS_TEMPLATE = f"""
  SELECT s.* FROM sessions s
  WHERE {projects.PROJECT_MATCH_TEMPLATE.format(dir="s.project_dir", cwd="s.cwd")}
    AND coalesce(s.last_timestamp, '') >= :since{{agents}}
  ORDER BY s.last_timestamp DESC, s.session_id
  LIMIT :limit"""
_RECENT_SESSIONS = _RECENT_SESSIONS_TEMPLATE.format(agents="")
# (of them, Claude Code's: those a verdict is for)
_RECENT_CLAUDE_CODE_SESSIONS = _RECENT_SESSIONS_TEMPLATE.format(
    agents=f"\n    AND s.agent NOT IN {OTHER_AGENTS_SQL}")
# (a Codex or Gemini CLI session is listed with its agent and no verdict:
# the resume checks are Claude Code's; agents.py)
SESSIONS_SQL = f"""
SELECT s.session_id, {SESSION_TITLE_TEMPLATE.format(s="s")} AS title, s.project_dir,
  s.cwd, s.last_timestamp AS last_activity, s.records, v.verdict AS state, v.verdict,
  v.cause, v.fix, s.agent
FROM ({_RECENT_SESSIONS}) s
LEFT JOIN ({verdicts.SESSIONS_VERDICT_TEMPLATE.format(sessions=_RECENT_CLAUDE_CODE_SESSIONS)}) v
  ON v.session_id = s.session_id
ORDER BY s.last_timestamp DESC, s.session_id
""".strip()


# The columns of `sessions` an operator reads (--table; --all for the rest).
SESSIONS_SHOWN = ("session_id", "title", "last_activity", "records", "verdict", "cause")


def sessions_params(project: str | None = None, since: str | None = None,
                    limit: int = 50) -> dict:
    """SESSIONS_SQL's parameters (blank: any project, any time)."""
    return {"project": projects.project_value(project), "since": iso_now(since) if since else "", "limit": limit}


def sessions(db, project: str | None = None, since: str | None = None,
             limit: int = 50) -> list[dict]:
    """The sessions most recently active, with their title and state."""
    return dict_rows(db.conn, SESSIONS_SQL, sessions_params(project, since, limit))


def listing(db, name: str, now: str | None = None, **options):
    """The rows of listing ``name`` at ``now``; each option not given (or
    None) is the declared default."""
    params = classes.listing_params(classes.LISTED[name], options)
    return dict_rows(db.conn, LISTINGS[name], {**params, "now": iso_now(now)})
