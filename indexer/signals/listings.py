"""The operator signal views, answered for the CLI (``--now``, ``--days``)."""

from __future__ import annotations

from datetime import datetime, timezone

from indexer.index import views
from indexer.signals import verdict as verdicts
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


# Each listing: the SQL, given the bound parameters :now and :days.
LISTINGS = {
    "poisoned": "SELECT * FROM poisoned_sessions ORDER BY at_resume_tail DESC, last_seen DESC",
    "stale": "SELECT * FROM ({}) ORDER BY reason, session_id".format(
        views.STALE_SESSION_REFS_TEMPLATE.format(now=":now")),
    "expiring": "SELECT * FROM ({}) ORDER BY days_left IS NULL, days_left, path".format(
        views.EXPIRED_TRANSCRIPTS_TEMPLATE.format(now=":now", window=":days")),
    "failed": "SELECT * FROM failed_executions ORDER BY log_mtime DESC, line_no DESC",
}


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
# session-index sessions: the most recently active first.
# (title, project, activity and records beside the verdict: state is the
# verdict's former name, kept for the scripts that read it).
_RECENT_SESSIONS = """
  SELECT s.* FROM sessions s
  WHERE (:project = '' OR s.project_dir = :project OR s.cwd = :project)
    AND coalesce(s.last_timestamp, '') >= :since
  ORDER BY s.last_timestamp DESC, s.session_id
  LIMIT :limit"""
SESSIONS_SQL = f"""
SELECT v.session_id, {SESSION_TITLE_TEMPLATE.format(s="s")} AS title, s.project_dir,
  s.cwd, s.last_timestamp AS last_activity, s.records, v.verdict AS state, v.verdict,
  v.cause, v.fix
FROM ({verdicts.SESSIONS_VERDICT_TEMPLATE.format(sessions=_RECENT_SESSIONS)}) v
JOIN sessions s ON s.session_id = v.session_id
ORDER BY s.last_timestamp DESC, s.session_id
""".strip()


def sessions_params(project: str | None = None, since: str | None = None,
                    limit: int = 50) -> dict:
    """SESSIONS_SQL's parameters (blank: any project, any time)."""
    return {"project": project or "", "since": iso_now(since) if since else "", "limit": limit}


def sessions(db, project: str | None = None, since: str | None = None,
             limit: int = 50) -> list[dict]:
    """The sessions most recently active, with their title and state."""
    return dict_rows(db.conn, SESSIONS_SQL, sessions_params(project, since, limit))


def listing(db, name: str, now: str | None = None, days: float = views.EXPIRING_WINDOW_DAYS):
    return dict_rows(db.conn, LISTINGS[name], {"now": iso_now(now), "days": days})
