"""``session-index usage daily|weekly|monthly|session|blocks|calls``: the
usage view's calls (views.USAGE_SQL: each API call once, priced) grouped
into a report, in a time zone.

The calls are the usage view's rows, read through its own definition
(views.USAGE_CALLS_TEMPLATE and USAGE_PRICED_TEMPLATE) with the files it
reads narrowed to those that hold a line in the time range: a call's figures
are those of its line with the most output tokens, and that line's file
always holds a line in the range when the call is in it, so every figure is
the view's (only ``lines``, the call's lines in the files read, can be
fewer). The grouping is Python's: a period is a date in an IANA time zone
(zoneinfo), which SQLite cannot compute.

- daily, weekly (weeks start on ``start_of_week``), monthly: one row per
  period with calls, tokens of each kind, total tokens, cost, the models.
- session: one row per session (its title, project folder and cwd, first
  and last call).
- blocks: Anthropic's 5-hour billing windows as ccusage computes them: a
  block starts at the hour (UTC) of the first call after the last block,
  lasts 5 hours, and ends early when 5 hours pass without a call; the block
  that holds ``now`` is active and is projected to its end at its burn
  rate (cost and tokens per minute between its first and last call).
- calls: the calls themselves, with the files and sessions that hold each:
  the evidence of any figure above.

Every row has ``calls`` and ``unpriced_calls``: a call of a model without a
price is counted in its tokens and left out of ``cost_usd`` (never 0).
"""

from __future__ import annotations

import json
import os
import re
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from indexer.chain.definitions import TRANSCRIPT_KINDS
from indexer.index import views
from indexer.index import usage
from indexer.index.clock import WEEKDAYS, iso
from indexer.sql import dict_rows

REPORTS = ("daily", "weekly", "monthly", "session", "blocks")
# A report's rows in --json are under its ccusage name.
JSON_KEYS = {"daily": "daily", "weekly": "weekly", "monthly": "monthly",
             "session": "sessions", "blocks": "blocks"}
TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_read_tokens",
               "cache_write_5m_tokens", "cache_write_1h_tokens")
BLOCK_HOURS = 5
# An open end of a range, above every timestamp (and '' below every one).
OPEN_UNTIL = "9999-12-31T23:59:59.999"

# The usage view's calls whose time is in [:since, :until), reading only the
# files with a line in that range (files.first_timestamp/last_timestamp).
# Bounds are 'YYYY-MM-DDTHH:MM:SS.fff' in UTC without the Z, so that a
# stored time with microseconds ('...00.000500Z') or none ('...00Z')
# compares as the instant it is; a call with no time is in the range only
# when the range is open at both ends.
RANGE_USAGE = ("(WITH calls AS (" + views.USAGE_CALLS_TEMPLATE.format(indexed="INDEXED BY records_usage",
    files=" AND coalesce(last_timestamp, '') >= :since "
          "AND coalesce(first_timestamp, '') < :until", where="")
    + "\n),\n" + views.USAGE_PRICED_TEMPLATE + ")")
REPORT_CALLS_SQL = f"""
SELECT timestamp, session_id, project, model, message_id, request_id, lines,
  {", ".join(TOKEN_KINDS)}, cost_usd
FROM {RANGE_USAGE}
WHERE coalesce(timestamp, '') >= :since AND coalesce(timestamp, '') < :until
ORDER BY timestamp, message_id
""".strip()
# The copies of the calls with these message ids (:ids, a JSON array) in the
# files read: per call key (as the usage view keys a call), how many files
# hold a line of it and their sessions.
CALL_COPIES_SQL = f"""
SELECT message_id, request_id, CASE WHEN request_id IS NULL THEN session_id END AS own_session,
  count(DISTINCT file_id) AS files, group_concat(DISTINCT session_id) AS sessions
FROM records INDEXED BY records_usage
WHERE has_usage AND message_id IN (SELECT value FROM json_each(:ids))
  AND file_id IN (SELECT id FROM files WHERE kind IN {TRANSCRIPT_KINDS}
                  AND coalesce(last_timestamp, '') >= :since
                  AND coalesce(first_timestamp, '') < :until)
GROUP BY 1, 2, 3
""".strip()
# One session's calls in its own transcripts (the statusline: the files of
# the session only, so it costs what the session holds).
SESSION_USAGE_SQL = f"""
SELECT count(*) AS calls, round(sum(cost_usd), 6) AS cost_usd,
  sum(cost_usd IS NULL) AS unpriced_calls
FROM (WITH calls AS ({views.USAGE_CALLS_TEMPLATE.format(indexed="INDEXED BY records_usage",
    files=" AND session_id = :session_id", where="")}
),
{views.USAGE_PRICED_TEMPLATE})
WHERE session_id = :session_id
""".strip()


class BadTime(ValueError):
    """A --since/--until that is no date, time or word we know."""


class BadZone(ValueError):
    """A --timezone that is no IANA zone name."""


# ---------------------------------------------------------------- times

def zone(name: str | None):
    """The time zone ``name`` (IANA, e.g. Europe/Berlin; UTC), else this
    machine's: $TZ, else /etc/localtime's zone, else its UTC offset now."""
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise BadZone(f"{name!r} is not an IANA time zone (e.g. UTC, Europe/Berlin, "
                          "America/New_York)") from None
    env = os.environ.get("TZ", "").lstrip(":")
    for candidate in (env, _localtime_name()):
        if candidate:
            try:
                return ZoneInfo(candidate)
            except (ZoneInfoNotFoundError, ValueError):
                pass
    return datetime.now().astimezone().tzinfo


def _localtime_name() -> str | None:
    try:
        target = os.readlink("/etc/localtime")
    except OSError:
        return None
    parts = Path(target).parts
    return "/".join(parts[parts.index("zoneinfo") + 1:]) if "zoneinfo" in parts else None


def zone_name(tz) -> str:
    return getattr(tz, "key", None) or str(tz)


UTC = timezone.utc


def stored(moment: datetime) -> str:
    """An aware time as the index stores one (clock.iso)."""
    return iso(moment.timestamp())


def bound(moment: datetime) -> str:
    """A range bound as the report's SQL compares it: UTC, milliseconds, no Z."""
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds")[:23]


def parse_time(text: str) -> datetime:
    """A stored time (ISO-8601, Z, any fraction of a second) as a datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


AGO = re.compile(r"(\d+)\s*(hour|day|week)s?\s+ago")


def when(text: str, tz, now: datetime, end: bool = False) -> datetime:
    """``text`` (--since, or with ``end`` --until) as an instant: a date
    (YYYY-MM-DD or YYYYMMDD; its midnight in ``tz``, with ``end`` the next
    midnight: --until a date includes it), a time (ISO-8601; without a zone,
    in ``tz``; --until a time excludes it), or a word: now, today, yesterday,
    N hours ago (a time), N days ago, N weeks ago (dates). BadTime for any
    other text, and for an instant Python's dates cannot hold in UTC
    (99999999 days ago; the day after 9999-12-31)."""
    try:
        moment = _when(text, tz, now, end)
        bound(moment)   # (its UTC form, as the report's SQL compares it)
    except OverflowError:
        raise BadTime(f"{text!r} is out of the range of dates (years 1 to 9999)") from None
    return moment


def _when(text: str, tz, now: datetime, end: bool) -> datetime:
    word = text.strip().lower()
    local_today = now.astimezone(tz).date()
    day = None
    if word == "now":
        return now
    if word == "today":
        day = local_today
    elif word == "yesterday":
        day = local_today - timedelta(days=1)
    elif m := AGO.fullmatch(word):
        n, unit = int(m.group(1)), m.group(2)
        if unit == "hour":
            return now - timedelta(hours=n)
        day = local_today - timedelta(days=n * (7 if unit == "week" else 1))
    elif re.fullmatch(r"\d{8}", word):
        try:
            day = date(int(word[:4]), int(word[4:6]), int(word[6:]))
        except ValueError:
            raise BadTime(f"{text!r} is not a date") from None
    elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", word):
        try:
            day = date.fromisoformat(word)
        except ValueError:
            raise BadTime(f"{text!r} is not a date") from None
    else:
        try:
            moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise BadTime(f"{text!r} is not a date (YYYY-MM-DD, YYYYMMDD), an ISO-8601 time, "
                          "or now, today, yesterday, N hours/days/weeks ago") from None
        return moment if moment.tzinfo else moment.replace(tzinfo=tz)
    if end:
        day += timedelta(days=1)
    return datetime(day.year, day.month, day.day, tzinfo=tz)


def clock(now: str | None = None) -> datetime:
    """``now`` (ISO-8601, UTC without a zone) or the clock, aware."""
    if now is None:
        return datetime.now(timezone.utc)
    moment = datetime.fromisoformat(now.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def time_range(since: str | None, until: str | None, tz, now: datetime) -> dict:
    """The SQL parameters of --since/--until (blank: open)."""
    return {"since": bound(when(since, tz, now)) if since else "",
            "until": bound(when(until, tz, now, end=True)) if until else OPEN_UNTIL}


# ---------------------------------------------------------------- sums

def totals_of(calls: list[dict]) -> dict:
    """calls, each token kind, total_tokens, cost_usd (priced calls only),
    unpriced_calls and the models of ``calls``."""
    out = {"calls": len(calls), **{k: sum(c[k] or 0 for c in calls) for k in TOKEN_KINDS}}
    out["total_tokens"] = sum(out[k] for k in TOKEN_KINDS)
    out["cost_usd"] = round(sum(c["cost_usd"] for c in calls if c["cost_usd"] is not None), 6)
    out["unpriced_calls"] = sum(c["cost_usd"] is None for c in calls)
    out["models"] = sorted({c["model"] or "?" for c in calls})
    return out


def breakdown_of(calls: list[dict]) -> list[dict]:
    """The figures of ``calls`` per model, costliest first."""
    by_model: dict[str, list] = {}
    for c in calls:
        by_model.setdefault(c["model"] or "?", []).append(c)
    rows = []
    for model, group in by_model.items():
        row = totals_of(group)
        del row["models"]
        rows.append({"model": model, **row})
    return sorted(rows, key=lambda r: (-r["cost_usd"], r["model"]))


def _key(report: str, moment: datetime | None, start_of_week: int) -> str | None:
    if moment is None:
        return None
    day = moment.date()
    if report == "daily":
        return day.isoformat()
    if report == "weekly":
        return (day - timedelta(days=(day.weekday() - start_of_week) % 7)).isoformat()
    return day.isoformat()[:7]


# The column each report's rows are keyed by.
PERIOD_COLUMN = {"daily": "date", "weekly": "week", "monthly": "month"}


def read_calls(db, since: str | None = None, until: str | None = None, tz=None,
               now: datetime | None = None) -> tuple[list[dict], dict]:
    """The usage view's calls in the range, oldest first, each with its
    time in ``tz`` (``local``, None without one); and the range's params."""
    now = now or clock()
    params = time_range(since, until, tz, now)
    calls = dict_rows(db.conn, REPORT_CALLS_SQL, params)
    for c in calls:
        c["local"] = parse_time(c["timestamp"]).astimezone(tz) if c["timestamp"] else None
    return calls, params


def report(db, kind: str, *, since: str | None = None, until: str | None = None,
           tz=None, now: datetime | None = None, breakdown: bool = False,
           start_of_week: str = "sunday", evidence: bool = False) -> dict:
    """The report ``kind`` (REPORTS) as a dict: its rows under
    JSON_KEYS[kind], ``totals``, the time zone and range. With ``breakdown``
    each row has its figures per model; with ``evidence``, its calls."""
    tz = tz or timezone.utc
    now = now or clock()
    calls, params = read_calls(db, since, until, tz, now)
    if kind == "blocks":
        groups = _blocks(calls, now)
    elif kind == "session":
        groups = _sessions(db, calls)
    else:
        week_start = WEEKDAYS.index(start_of_week)
        grouped: dict = {}
        for c in calls:
            grouped.setdefault(_key(kind, c["local"], week_start), []).append(c)
        groups = [({PERIOD_COLUMN[kind]: key}, group) for key, group in
                  sorted(grouped.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))]
    rows = []
    for head, group in groups:
        row = {**head, **totals_of(group)}
        if kind == "blocks" and row.get("active"):
            row.update(_projection(row, now))
        if breakdown:
            row["breakdown"] = breakdown_of(group)
        if evidence:
            row["calls_counted"] = call_rows(db, group, params)
        rows.append(row)
    out = {JSON_KEYS[kind]: rows, "totals": totals_of(calls)}
    if breakdown:
        out["totals"]["breakdown"] = breakdown_of(calls)
    out.update(timezone=zone_name(tz), since=since, until=until)
    return out


def _sessions(db, calls: list[dict]) -> list[tuple[dict, list]]:
    """(session head, its calls) per session, most recently active last."""
    grouped: dict = {}
    for c in calls:
        grouped.setdefault(c["session_id"], []).append(c)
    facts = usage.session_facts(db, grouped)
    out = []
    for sid, group in grouped.items():
        f = facts.get(sid, {})
        times = [c["local"] for c in group if c["local"] is not None]
        out.append(({"session_id": sid, "title": f.get("title"),
                     "project": f.get("project_dir") or group[0]["project"],
                     "cwd": f.get("cwd"),
                     "first_call": min(times).isoformat() if times else None,
                     "last_call": max(times).isoformat() if times else None}, group))
    return sorted(out, key=lambda hg: (hg[0]["last_call"] or "", hg[0]["session_id"] or ""))


def _blocks(calls: list[dict], now: datetime) -> list[tuple[dict, list]]:
    """ccusage's 5-hour blocks (module docstring) over the timed calls."""
    span = timedelta(hours=BLOCK_HOURS)
    blocks: list[list] = []
    start = last = None
    for c in calls:
        if c["local"] is None:
            continue
        t = c["local"].astimezone(timezone.utc)
        if start is None or t - start > span or t - last > span:
            start = t.replace(minute=0, second=0, microsecond=0)
            blocks.append([start, []])
        blocks[-1][1].append(c)
        last = t
    out = []
    for start, group in blocks:
        tz = group[0]["local"].tzinfo
        first = group[0]["local"].astimezone(timezone.utc)
        final = group[-1]["local"].astimezone(timezone.utc)
        end = start + span
        active = start <= now < end and now - final < span
        out.append(({"start": start.astimezone(tz).isoformat(),
                     "end": end.astimezone(tz).isoformat(),
                     "first_call": first.astimezone(tz).isoformat(),
                     "last_call": final.astimezone(tz).isoformat(),
                     "active": active}, group))
    return out


def _projection(row: dict, now: datetime) -> dict:
    """The active block's burn rate (per minute between its first and last
    call) and its figures projected to the block's end at that rate."""
    first, final = (parse_time(row[k]) for k in ("first_call", "last_call"))
    minutes = (final - first).total_seconds() / 60
    remaining = max(0.0, (parse_time(row["end"]) - now).total_seconds() / 60)
    out = {"remaining_minutes": round(remaining, 1)}
    if minutes <= 0:
        return dict(out, cost_per_hour=None, tokens_per_minute=None,
                    projected_cost_usd=None, projected_total_tokens=None)
    cost_rate, token_rate = row["cost_usd"] / minutes, row["total_tokens"] / minutes
    return dict(out, cost_per_hour=round(cost_rate * 60, 6),
                tokens_per_minute=round(token_rate, 1),
                projected_cost_usd=round(row["cost_usd"] + cost_rate * remaining, 6),
                projected_total_tokens=round(row["total_tokens"] + token_rate * remaining))


# ---------------------------------------------------------------- evidence

CALL_COLUMNS = ("time", "session_id", "project", "model", "message_id", "request_id",
                "lines", "files", "sessions", *TOKEN_KINDS, "cost_usd")


def call_rows(db, calls: list[dict], params: dict) -> list[dict]:
    """``calls`` as the evidence lists them: the time in the report's zone,
    the files that hold a line of each call and their sessions (a fork, a
    copy or a resumed session repeats a call: it counts once)."""
    ids = sorted({c["message_id"] for c in calls if c["message_id"]})
    copies = {(r["message_id"], r["request_id"], r["own_session"]): r for r in dict_rows(
        db.conn, CALL_COPIES_SQL, {"ids": json.dumps(ids), "since": params["since"],
                                    "until": params["until"]})}
    out = []
    for c in calls:
        found = copies.get((c["message_id"], c["request_id"],
                            c["session_id"] if c["request_id"] is None else None), {})
        out.append({"time": c["local"].isoformat() if c["local"] else None,
                    **{k: c[k] for k in ("session_id", "project", "model", "message_id",
                                         "request_id", "lines")},
                    "files": found.get("files", 1),
                    "sessions": sorted((found.get("sessions") or c["session_id"] or "")
                                       .split(",")),
                    **{k: c[k] for k in TOKEN_KINDS}, "cost_usd": c["cost_usd"]})
    return out


def calls(db, *, since=None, until=None, tz=None, now=None, day=None, week=None,
          month=None, session=None, block=None, model=None,
          start_of_week: str = "sunday") -> list[dict]:
    """The calls a report row counts (``day``, ``week`` (its first day),
    ``month``, ``session``, ``block`` (its start), as the row names them),
    and ``model``: the evidence of the row's figures."""
    tz = tz or timezone.utc
    now = now or clock()
    found, params = read_calls(db, since, until, tz, now)
    week_start = WEEKDAYS.index(start_of_week)
    if day:
        found = [c for c in found if _key("daily", c["local"], week_start) == day]
    if week:
        found = [c for c in found if _key("weekly", c["local"], week_start) == week]
    if month:
        found = [c for c in found if _key("monthly", c["local"], week_start) == month]
    if session:
        found = [c for c in found if c["session_id"] == session]
    if block:
        start = parse_time(block)
        start = start if start.tzinfo else start.replace(tzinfo=tz)
        found = next((g for head, g in _blocks(found, now)
                      if parse_time(head["start"]) == start), [])
    if model:
        found = [c for c in found if c["model"] == model]
    return call_rows(db, found, params)


def session_cost(db, session_id: str) -> dict:
    """The calls of ``session_id`` in its own transcripts: calls, cost_usd,
    unpriced_calls (the statusline)."""
    return dict_rows(db.conn, SESSION_USAGE_SQL, {"session_id": session_id})[0]
