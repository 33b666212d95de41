"""The operator signal views, answered for the CLI (``--now``, ``--days``)."""

from __future__ import annotations

from datetime import datetime, timezone

from . import views
from .db import dict_rows


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


def listing(db, name: str, now: str | None = None, days: float = views.EXPIRING_WINDOW_DAYS):
    return dict_rows(db.conn, LISTINGS[name], {"now": iso_now(now), "days": days})
