"""Token usage and cost, summed from the ``usage`` view (one row per API
call, views.USAGE_SQL), and set beside what Claude Code itself reported
(``usage_reported``: cost-state records, `claude -p` results)."""

from __future__ import annotations

import json

from indexer.signals.listings import SESSION_TITLE_TEMPLATE, plain_title
from indexer.signals.usage_sums import DOLLARS, SINCE_SUMS_TEMPLATE
from indexer.sql import dict_rows

# What --by groups on: (the column it prints, its expression on the usage view).
GROUPS = {"day": ("day", "substr(timestamp, 1, 10)"), "session": ("session_id", "session_id"),
          "model": ("model", "model"), "project": ("project", "project")}

# The sums of one group of calls (or of all, {key} blank). cost_usd counts
# priced calls only; unpriced_calls and unpriced_models say what it leaves
# out (NULL when none is priced). :since bounds the calls' time (blank: all).
# This is the definition, over every call; --by session reads it, the other
# groupings read SUMS_SUMMARY_TEMPLATE (tests hold the two equal).
SUMMARY_TEMPLATE = """
SELECT {key}count(*) AS calls,
  sum(coalesce(input_tokens, 0)) AS input_tokens,
  sum(coalesce(output_tokens, 0)) AS output_tokens,
  sum(coalesce(cache_read_tokens, 0)) AS cache_read_tokens,
  sum(cache_write_5m_tokens) AS cache_write_5m_tokens,
  sum(cache_write_1h_tokens) AS cache_write_1h_tokens,
  round(sum(cost_usd), 6) AS cost_usd,
  sum(cost_usd IS NULL) AS unpriced_calls,
  group_concat(DISTINCT CASE WHEN cost_usd IS NULL THEN coalesce(model, '?') END)
    AS unpriced_models
FROM usage
WHERE coalesce(timestamp, '') >= :since
{group_by}
""".strip()
# SUMMARY_TEMPLATE from the sums per day, project and model
# (signals/usage_sums.py): no grouping of every call (143-193 ms on the
# 1M-record bench index), a few ms. The same rows; a cost may differ from
# the definition's in its 6th decimal place (a float sum in another order).
SUMS_SUMMARY_TEMPLATE = f"""
SELECT {{key}}coalesce(sum(s.calls), 0) AS calls,
  sum(s.input_tokens) AS input_tokens,
  sum(s.output_tokens) AS output_tokens,
  sum(s.cache_read_tokens) AS cache_read_tokens,
  sum(s.cache_write_5m_tokens) AS cache_write_5m_tokens,
  sum(s.cache_write_1h_tokens) AS cache_write_1h_tokens,
  CASE WHEN sum(s.calls) > sum(s.unpriced_calls) THEN {DOLLARS.format(sums="s")} END AS cost_usd,
  sum(s.unpriced_calls) AS unpriced_calls,
  group_concat(DISTINCT CASE WHEN s.unpriced_calls THEN coalesce(s.model, '?') END)
    AS unpriced_models
FROM (
{SINCE_SUMS_TEMPLATE.format(since=":since")}
) s
{{group_by}}
""".strip()
# The groupings the sums answer: the column grouped on.
SUMS_GROUPS = {"day": "s.day", "model": "s.model", "project": "s.project"}

# Each session's title (listings.SESSION_TITLE_TEMPLATE), project folder and
# cwd, for the sessions in :ids (a JSON array).
SESSION_FACTS_SQL = f"""
SELECT s.session_id, {SESSION_TITLE_TEMPLATE.format(s="s")} AS title,
  s.project_dir, s.cwd
FROM sessions s WHERE s.session_id IN (SELECT value FROM json_each(:ids))
""".strip()
# Per session, the reported figures beside the index's (--by session).
REPORTED_COLUMNS = ("cost_state_usd", "cost_state_difference_usd", "executions_usd",
                    "executions_difference_usd")
SESSION_REPORTED_SQL = ("SELECT session_id, " + ", ".join(REPORTED_COLUMNS)
                        + " FROM usage_reported")

# The index's cost against each of Claude Code's own figures, over the
# sessions that have one (all their calls since :since: the figures are
# running totals of whole sessions). {source}: the rows of usage_reported
# (the health page's panel: its definition narrowed to the panel's window).
COMPARISON_TEMPLATE = """
SELECT count(cost_state_usd) AS cost_state_sessions,
  round(sum(cost_state_usd), 6) AS cost_state_usd,
  round(sum(CASE WHEN cost_state_usd IS NOT NULL THEN coalesce(cost_usd, 0) END), 6)
    AS cost_state_index_usd,
  round(sum(cost_state_difference_usd), 6) AS cost_state_difference_usd,
  count(executions_usd) AS executions_sessions,
  round(sum(executions_usd), 6) AS executions_usd,
  round(sum(CASE WHEN executions_usd IS NOT NULL THEN coalesce(cost_usd, 0) END), 6)
    AS executions_index_usd,
  round(sum(executions_difference_usd), 6) AS executions_difference_usd
FROM {source}
""".strip()
COMPARISON_SQL = COMPARISON_TEMPLATE.format(
    source="usage_reported WHERE coalesce(first_call, '') >= :since")


class BadGroup(ValueError):
    """--by names no grouping."""


def summary_sql(by: str | None, definition: bool = False) -> str:
    """The SQL of the sums in total or per --by group: from the sums per day,
    project and model when they answer it, else (or with definition) over
    every call of the usage view."""
    if by is not None and by not in GROUPS:
        raise BadGroup(f"--by must be one of {', '.join(GROUPS)}, not {by!r}")
    sums = not definition and (by is None or by in SUMS_GROUPS)
    template = SUMS_SUMMARY_TEMPLATE if sums else SUMMARY_TEMPLATE
    if by is None:
        return template.format(key="", group_by="")
    column, expr = GROUPS[by]
    expr = SUMS_GROUPS[by] if sums else expr
    order = "1 DESC" if by == "day" else "cost_usd DESC, 1"
    return template.format(key=f"{expr} AS {column}, ", group_by=f"GROUP BY 1 ORDER BY {order}")


def summary(db, by: str | None = None, since: str | None = None) -> list[dict]:
    """Calls, tokens by kind and cost, in total or per day/session/model/
    project, newest day or costliest group first. By session, each row also
    has the session's title and project folder, and Claude Code's own figures for it and the differences (NULL where it
    reported none)."""
    rows = dict_rows(db.conn, summary_sql(by), {"since": since or ""})
    if by is None and rows and not rows[0]["calls"]:
        return []
    if by == "session":
        reported = {r["session_id"]: r for r in dict_rows(db.conn, SESSION_REPORTED_SQL)}
        facts = session_facts(db, [r["session_id"] for r in rows])
        for i, row in enumerate(rows):
            found, fact = reported.get(row["session_id"], {}), facts.get(row["session_id"], {})
            rows[i] = {"session_id": row["session_id"], "title": fact.get("title"),
                       "project": fact.get("project_dir"), **row}
            rows[i].update({c: found.get(c) for c in REPORTED_COLUMNS})
    return rows


def session_facts(db, session_ids) -> dict:
    """Each session's title (on one line), project folder and cwd, by id."""
    rows = dict_rows(db.conn, SESSION_FACTS_SQL, {"ids": json.dumps([s for s in session_ids
                                                                      if s])})
    for r in rows:
        r["title"] = plain_title(r["title"]) or None
    return {r["session_id"]: r for r in rows}


def comparison(db, since: str | None = None) -> dict:
    """Claude Code's own figures against the index's, summed over the
    sessions that have them (counts 0 when none do)."""
    return dict_rows(db.conn, COMPARISON_SQL, {"since": since or ""})[0]


def comparison_lines(found: dict) -> list[str]:
    """The comparison in words, one line per source that has figures."""
    lines = []
    for key, what in (("cost_state", "cost-state records"),
                      ("executions", "claude -p results (total_cost_usd)")):
        # (a figure of $0 against $0 says nothing: not printed)
        if found[f"{key}_sessions"] and (found[f"{key}_usd"] or found[f"{key}_index_usd"]):
            lines.append(
                f"{what}: ${found[f'{key}_usd']:.6f} over {found[f'{key}_sessions']} "
                f"sessions; the index computes ${found[f'{key}_index_usd']:.6f} for them "
                f"(difference ${found[f'{key}_difference_usd']:+.6f})")
    return lines
