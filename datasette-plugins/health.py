"""The health page's problem classes: one list, one line each.

Each ``Check`` is a health row of a problem class (declared in
indexer/signals/classes.py, with its severity and its fix): its label, the
table or view it lives in (the page
links there, with ``link`` as its query string) and a query returning one row
per problem with three columns: ``session_id``, ``at`` (when it happened,
ISO-8601) and ``detail`` (a few words). The page counts each class, shows
its newest problem, sorts classes by it, and lists the newest problems of all
classes. A check whose table or view is not in the index is skipped, so a
class can be listed before the index has it.

Each class has a severity (classes.SEVERITIES): it breaks a resume now, it will
break one soon, or it is history and information; the page groups by it.
``at`` means one thing everywhere (WHEN): when the problem happened (the
record's time, the deletion, the failure, the cache of the stale id, the
file's last write for a bad line), or for an expiry, when cleanup deletes
the transcript.

The problem logic is in the views; these queries only pick columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from indexer.index.record_kinds import NEW_KINDS_SQL
from indexer.chain import definitions
from indexer.index import usage, views
from indexer.index.status import FILES_TO_DERIVE_SQL
from indexer.signals import classes
from indexer.signals.classes import HISTORY

WHEN = ("when it happened (the record's time, the deletion, the failure), or for an expiry, "
        "when cleanup deletes the transcript")


@dataclass(frozen=True)
class Check:
    label: str
    name: str   # the table or view (or canned query) the count links to
    sql: str    # rows of (session_id, at, detail)
    link: str = ""  # query string added to the link
    severity: str = HISTORY
    fix: str = ""   # what an operator does about it
    reads_view: bool = False   # sql reads the view `name` by its name (a filter of it)


def checks_of(cls: classes.ProblemClass) -> tuple[Check, ...]:
    """The checks of one problem class: one per health row."""
    return tuple(Check(row.label, cls.view_name, row.sql(cls.view_name), row.link,
                       cls.health_severity(row), cls.fix, reads_view=not row.source)
                 for row in cls.health)


# One check per health row of each problem class (signals/classes.py).
CHECKS = tuple(check for cls in classes.CLASSES for check in checks_of(cls))

RECENT_PER_CHECK = 10
RECENT_TOTAL = 20
# A check's rows are read newest first, up to READ_AT_MOST: a check with
# fewer is counted from them (one pass over its view); only one with more is
# counted again on its own (COUNT_SQL).
READ_AT_MOST = 500

# A check's newest rows (SQLite sorts NULL last under DESC: a row with no
# time comes after every dated one). With no window count over all its rows,
# a check whose view a covering index holds in `at`'s order (the orphan rows:
# orphans_cache_cause_time) reads its newest rows from the index instead of
# sorting all of them (parallel tool branches: 39,225 rows sorted, 79 ms, at a
# million records).
CHECK_SQL = "SELECT session_id, at, detail FROM ({sql}) ORDER BY at DESC LIMIT {limit}"
# A check's total, when it has more rows than READ_AT_MOST.
COUNT_SQL = "SELECT count(*) FROM ({sql})"

# Views that compute all their rows whatever a check's filter asks (their
# steps are MATERIALIZED, or judge every file at the clock): the checks that
# filter one of them read it once, in one statement (ONE_PASS_SQL), not once
# each. At a million records: session_forks 28 ms a pass (2 checks),
# expired_transcripts 16 ms (2), unwritten_transcripts 6 ms (2),
# thinking_faults 2 ms (3).
ONE_PASS_VIEWS = frozenset({"session_forks", "expired_transcripts", "unwritten_transcripts",
                            "thinking_faults"})
# The view computed once as a CTE of its own name (which the checks' SQL
# then reads; main.{view} is the view itself), and each check's newest rows
# under its position k.
ONE_PASS_SQL = "WITH {view} AS MATERIALIZED (SELECT * FROM main.{view})\n{parts}"
ONE_PASS_PART = "SELECT {k} AS k, * FROM ({check})"

# The names a check can depend on.
NAMES_SQL = "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"

# The index's last ingest (written by ingest) and its size.
OVERVIEW_SQL = """
SELECT (SELECT value FROM index_meta WHERE key = 'last_ingest_at') AS last_ingest_at,
       (SELECT count(*) FROM sessions) AS sessions,
       (SELECT count(*) FROM files) AS files,
       (SELECT max(id) FROM records) AS records
""".strip()


# The record kinds the most recent ingest run brought (record_types.new).
NEW_KINDS_VIEW = "record_types"


@dataclass
class Result:
    check: Check
    total: int
    newest: str | None
    rows: list
    error: str | None = None


async def run_checks(db, checks=CHECKS) -> tuple[list[Result], list]:
    """Run every check whose table exists on a Datasette ``Database``: the
    results (classes with problems first, newest first) and the newest
    problems of all classes, newest first."""
    names = {r[0] for r in await db.execute(NAMES_SQL)}
    read = max(READ_AT_MOST, RECENT_PER_CHECK)
    found = {}   # check -> its newest rows (up to read + 1), or the exception
    checks = [check for check in checks if check.name in names]
    shared = {}  # a ONE_PASS_VIEWS view -> the checks that filter it
    for check in checks:
        if check.reads_view and check.name in ONE_PASS_VIEWS:
            shared.setdefault(check.name, []).append(check)
    for view, group in shared.items():
        if len(group) < 2:
            continue
        parts = "\nUNION ALL\n".join(
            ONE_PASS_PART.format(k=k, check=CHECK_SQL.format(sql=c.sql, limit=read + 1))
            for k, c in enumerate(group))
        try:
            rows = [dict(r) for r in await db.execute(ONE_PASS_SQL.format(view=view, parts=parts))]
        except Exception:  # each check on its own says which one fails
            continue
        for k, check in enumerate(group):
            mine = [{c: row[c] for c in ("session_id", "at", "detail")}
                    for row in rows if row["k"] == k]
            # (newest first, no time last, as CHECK_SQL orders them)
            found[check] = sorted(mine, key=lambda row: (row["at"] is not None, row["at"] or ""),
                                  reverse=True)
    results = []
    for check in checks:
        try:
            rows = found.get(check)
            if rows is None:
                rows = [dict(r) for r in await db.execute(
                    CHECK_SQL.format(sql=check.sql, limit=read + 1))]
            total = len(rows) if len(rows) <= read else (
                await db.execute(COUNT_SQL.format(sql=check.sql))).first()[0]
        except Exception as exc:  # a view whose columns changed: say so, keep going
            results.append(Result(check, 0, None, [], error=str(exc)))
            continue
        newest = rows[0]["at"] if rows else None
        results.append(Result(check, total, newest, rows[:RECENT_PER_CHECK]))
    results.sort(key=lambda r: r.newest or "", reverse=True)
    results.sort(key=lambda r: r.total == 0)
    recent = sorted(((row, r.check) for r in results for row in r.rows if row["at"]),
                    key=lambda item: item[0]["at"], reverse=True)
    return results, recent[:RECENT_TOTAL]


async def overview(db) -> dict:
    rows = await db.execute(OVERVIEW_SQL)
    return dict(rows.first())


async def new_kinds(db) -> list[dict] | None:
    """The kinds the most recent ingest run brought, most records first:
    [{kind, records}]; None for an index without the record_types view."""
    if NEW_KINDS_VIEW not in {r[0] for r in await db.execute(NAMES_SQL)}:
        return None
    return [dict(r) for r in await db.execute(NEW_KINDS_SQL)]
# The fleet panel: each host that ships here (session-index ship), its files
# and records here, its last heartbeat and how old that is at :now (seconds),
# its last message stored; and the sessions whose copies on two hosts differ.
FLEET_HOSTS_SQL = """
SELECT h.host, h.last_heartbeat_at, h.last_message_at,
  CAST(round((julianday(:now) - julianday(h.last_heartbeat_at)) * 86400) AS INTEGER)
    AS heartbeat_age_s,
  (SELECT count(*) FROM files f WHERE f.host = h.host) AS files,
  (SELECT coalesce(sum(f.records), 0) FROM files f WHERE f.host = h.host) AS records
FROM fleet_hosts h ORDER BY h.host
""".strip()
FLEET_DIVERGED_SQL = "SELECT count(DISTINCT session_id) FROM host_copies WHERE diverged"
# What the central quarantined (status.QUARANTINED_SQL lists them).
FLEET_QUARANTINED_SQL = "SELECT count(*) FROM fleet_quarantine"
# The byte ranges of hosts' files that never came (status.GAPS_SQL lists them).
FLEET_GAPS_SQL = "SELECT count(*), coalesce(sum(end - start), 0) FROM fleet_gaps"


async def fleet_panel(db, now: str) -> dict | None:
    """{hosts: [...], diverged: N, quarantined: N, gaps: N, gap_bytes: N,
    to_derive: N} when hosts ship to this index, messages were quarantined
    or gaps recorded, else None (and None for an index without the fleet
    tables). to_derive: the files whose stored lines the caches do not show
    yet (a central behind its hosts derives once per
    fleet_central.DERIVE_BEHIND_S; status's files_to_derive)."""
    if "fleet_gaps" not in {r[0] for r in await db.execute(NAMES_SQL)}:
        return None
    hosts = [dict(r) for r in await db.execute(FLEET_HOSTS_SQL, {"now": now})]
    quarantined = (await db.execute(FLEET_QUARANTINED_SQL)).first()[0]
    gaps, gap_bytes = (await db.execute(FLEET_GAPS_SQL)).first()
    if not hosts and not quarantined and not gaps:
        return None
    for h in hosts:
        age = h["heartbeat_age_s"]
        h["stale"] = age is None or age > views.STALE_HEARTBEAT_S
    return {"hosts": hosts, "diverged": (await db.execute(FLEET_DIVERGED_SQL)).first()[0],
            "quarantined": quarantined, "gaps": gaps, "gap_bytes": gap_bytes,
            "to_derive": (await db.execute(FILES_TO_DERIVE_SQL)).first()[0]}


# The usage panel: the API calls of the last USAGE_WINDOW_DAYS (at or after
# :since), each counted once: the usage view's calls whose time is in the
# window (usage_calls_timestamp); tokens of every kind; the price snapshot
# in use.
WINDOW_USAGE_SQL = "(SELECT * FROM usage WHERE timestamp >= :since)"
USAGE_PANEL_SQL = f"""
SELECT count(*) AS calls, round(sum(cost_usd), 2) AS cost_usd,
  sum(cost_usd IS NULL) AS unpriced_calls,
  sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0) + coalesce(cache_read_tokens, 0)
      + cache_write_5m_tokens + cache_write_1h_tokens) AS tokens,
  group_concat(DISTINCT CASE WHEN cost_usd IS NULL THEN coalesce(model, '?') END)
    AS unpriced_models,
  (SELECT max(snapshot_date) FROM prices) AS prices_snapshot
FROM {WINDOW_USAGE_SQL}
""".strip()
# Claude Code's own figures beside the index's, for the sessions begun in
# the window (all their calls are in it; a cost-state figure is a running
# total of a whole session): usage.COMPARISON_SQL over usage_reported's
# definition narrowed to them.
BEGUN_SESSIONS = (f"(SELECT session_id FROM files WHERE kind IN {definitions.TRANSCRIPT_KINDS} "
                  "AND session_id IS NOT NULL GROUP BY session_id "
                  "HAVING min(first_timestamp) >= :since)")
# Is there a figure of Claude Code's own to compare with (cheap: indexed)?
REPORTS_EXIST_SQL = """
SELECT EXISTS (SELECT 1 FROM records WHERE type = 'cost-state')
    OR EXISTS (SELECT 1 FROM records WHERE type = 'result')
""".strip()
USAGE_WINDOW_DAYS = 7


def panel_comparison_sql() -> str:
    reported = views.USAGE_REPORTED_TEMPLATE.format(
        usage=WINDOW_USAGE_SQL, cost_state_sessions=f" AND r.session_id IN {BEGUN_SESSIONS}",
        run_sessions=f" AND session_id IN {BEGUN_SESSIONS}")
    return usage.COMPARISON_TEMPLATE.format(source=f"({reported})")


async def usage_panel(db, now: str) -> dict | None:
    """The usage panel's figures (None when the index has no usage view):
    ``since`` (USAGE_WINDOW_DAYS before ``now``), the window's totals, and
    the comparison lines with Claude Code's own figures for the sessions
    begun in it."""
    names = {r[0] for r in await db.execute(NAMES_SQL)}
    if "usage" not in names:
        return None
    moment = datetime.fromisoformat(now.replace("Z", "+00:00")) - timedelta(
        days=USAGE_WINDOW_DAYS)
    since = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    panel = dict((await db.execute(USAGE_PANEL_SQL, {"since": since})).first())
    panel.update(since=since, days=USAGE_WINDOW_DAYS, comparison=[])
    if (await db.execute(REPORTS_EXIST_SQL)).first()[0]:
        found = dict((await db.execute(panel_comparison_sql(), {"since": since})).first())
        panel["comparison"] = usage.comparison_lines(found)
    return panel
