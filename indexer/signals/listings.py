"""The operator signal views, answered for the CLI (``--now``, ``--days``)."""

from __future__ import annotations

from datetime import datetime, timezone

from indexer.index import views
from indexer.signals import classes
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


# The title a session goes by, most recent first of each kind: the user's
# custom-title, Claude Code's ai-title, an older summary record, else the
# first prompt of its main transcript (records_titles keeps this cheap).
SESSION_TITLE_TEMPLATE = """coalesce(
  (SELECT t.raw ->> '$.customTitle' FROM records t WHERE t.file_id = {s}.main_file_id
     AND t.type = 'custom-title' ORDER BY t.line_no DESC LIMIT 1),
  (SELECT t.raw ->> '$.aiTitle' FROM records t WHERE t.file_id = {s}.main_file_id
     AND t.type = 'ai-title' ORDER BY t.line_no DESC LIMIT 1),
  (SELECT t.raw ->> '$.summary' FROM records t WHERE t.file_id = {s}.main_file_id
     AND t.type = 'summary' ORDER BY t.line_no DESC LIMIT 1),
  (SELECT substr(CASE WHEN json_type(u.raw, '$.message.content') = 'text'
                      THEN u.raw ->> '$.message.content'
                      ELSE u.raw ->> '$.message.content[0].text' END, 1, 120)
     FROM records u WHERE u.file_id = {s}.main_file_id AND u.type = 'user' AND NOT u.is_meta
       AND json_valid(u.raw) ORDER BY u.line_no LIMIT 1))"""
# What a resume of the session meets, from the views: the check verdict
# without the stat of the file (check says it for one session).
SESSION_STATE_TEMPLATE = """CASE
  WHEN {s}.deleted_at IS NOT NULL THEN 'missing'
  WHEN EXISTS (SELECT 1 FROM poisoned_sessions p WHERE p.session_id = {s}.session_id
               AND p.at_resume_tail) THEN 'poisoned'
  WHEN EXISTS (SELECT 1 FROM api_error_splices a WHERE a.file_id = {s}.main_file_id)
    THEN 'spliced'
  ELSE 'resumable' END"""
# What to do about each state, for the pages and listings (check words its
# own, with the details of one session).
ADVICE = {
    "missing": ("no transcript a resume opens is on disk: claude --resume fails with "
                "\"No conversation found\"", "session-index restore {sid}"),
    "poisoned": ("the resume chain ends at a synthetic placeholder: the next resume gets "
                 "the previous_message_id 400", "session-index repair {sid} --write"),
    "poisoned_uncuttable": ("the resume chain ends at a synthetic placeholder and holds no "
                            "real assistant message to cut back to: no repair can help",
                            "start a new session"),
    "spliced": ("late api_error records orphan recovered output: a resume drops it",
                "session-index repair {sid} --write"),
    "resumable": ("the resume chain ends at a real message", None),
}


# One session's state, and whether a poisoned tail has nothing to cut back to.
SESSION_VERDICT_SQL = f"""
SELECT {SESSION_STATE_TEMPLATE.format(s="s")} AS state,
  {views.NOTHING_TO_CUT_TEMPLATE.format(file="s.main_file_id")} AS stuck
FROM sessions s WHERE s.session_id = :session_id
""".strip()


def verdict_key(state: str, stuck) -> str:
    """The ADVICE key of a session's state."""
    return "poisoned_uncuttable" if state == "poisoned" and stuck else state


def advice(state: str, session_id: str) -> tuple[str, str | None]:
    """(why, the command that fixes it or what to do) for a session state."""
    why, fix = ADVICE[state]
    return why, fix.format(sid=session_id) if fix else None


# session-index sessions: the most recently active first.
SESSIONS_SQL = f"""
SELECT s.session_id, {SESSION_TITLE_TEMPLATE.format(s="s")} AS title, s.project_dir,
  s.cwd, s.last_timestamp AS last_activity, s.records,
  {SESSION_STATE_TEMPLATE.format(s="s")} AS state
FROM sessions s
WHERE (:project = '' OR s.project_dir = :project OR s.cwd = :project)
  AND coalesce(s.last_timestamp, '') >= :since
ORDER BY s.last_timestamp DESC, s.session_id
LIMIT :limit
""".strip()


def sessions_params(project: str | None = None, since: str | None = None,
                    limit: int = 50) -> dict:
    """SESSIONS_SQL's parameters (blank: any project, any time)."""
    return {"project": project or "", "since": iso_now(since) if since else "", "limit": limit}


def sessions(db, project: str | None = None, since: str | None = None,
             limit: int = 50) -> list[dict]:
    """The sessions most recently active, with their title and state."""
    return dict_rows(db.conn, SESSIONS_SQL, sessions_params(project, since, limit))


def listing(db, name: str, now: str | None = None, **options):
    """The rows of listing ``name`` at ``now``; each option not given (or
    None) is the declared default."""
    params = classes.listing_params(classes.LISTED[name], options)
    return dict_rows(db.conn, LISTINGS[name], {**params, "now": iso_now(now)})
