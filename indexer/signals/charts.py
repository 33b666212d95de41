"""The charts' data: one canned query per chart, each declared once here.

The web UI (datasette-plugins/charts.py) draws each chart from its query's
Datasette JSON (``/DB/QUERY.json?_shape=array``), and links that URL beside
the chart: what a chart shows is always a query anyone can read, run
elsewhere or export. Each query returns few rows whatever the size of the
index (one per day and model, per day and verdict, per size and compaction
bucket), so the charts stay within Datasette's row limit.

Blank parameters mean "any" (as in every canned query): ``:since`` is an
ISO time, the earliest day a chart shows.
"""

from __future__ import annotations

from indexer.signals.classes import COMPACTIONS_MORE_THAN, CannedQuery
from indexer.signals.usage_sums import DOLLARS, SINCE_SUMS_TEMPLATE
from indexer.signals.verdict import SESSIONS_VERDICT_ONLY_TEMPLATE

# A stored time that begins with a day (YYYY-MM-DD): the charts by day leave
# out rows whose time is not one (a transcript can hold any text there).
_A_DAY = "'[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*'"
# A day and nothing more (the day of a time _A_DAY matches).
_A_DAY_ONLY = "'[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'"

# chart_cost_by_day: one row per UTC day and model of the API calls (the
# usage view, each call once) since :since: day (YYYY-MM-DD), model, calls,
# cost_usd (total(): 0 when no call of the row is priced) and unpriced_calls
# (calls left out of cost_usd, their model has no price); a call whose
# timestamp is not a time is left out. COST_BY_DAY_DEFINITION_SQL over every
# call; COST_BY_DAY_SQL (the chart's query) the same rows from the sums per
# day, project and model (usage_sums.py; tests hold the two equal).
COST_BY_DAY_DEFINITION_SQL = f"""
SELECT substr(timestamp, 1, 10) AS day, coalesce(model, '(no model)') AS model,
  count(*) AS calls, round(total(cost_usd), 6) AS cost_usd,
  sum(cost_usd IS NULL) AS unpriced_calls
FROM usage
WHERE timestamp GLOB {_A_DAY} AND timestamp >= coalesce(nullif(:since, ''), '')
GROUP BY day, model ORDER BY day, model
""".strip()
COST_BY_DAY_SQL = f"""
SELECT s.day, coalesce(s.model, '(no model)') AS model,
  sum(s.calls) AS calls, {DOLLARS.format(sums="s")} AS cost_usd,
  sum(s.unpriced_calls) AS unpriced_calls
FROM (
{SINCE_SUMS_TEMPLATE.format(since="coalesce(nullif(:since, ''), '')")}
) s
WHERE s.day GLOB {_A_DAY_ONLY}
GROUP BY day, model ORDER BY day, model
""".strip()

# chart_verdicts_by_day: one row per UTC day of last activity and verdict:
# how many sessions last active that day have that verdict now (each
# session on its default host, as the sessions listing gives it; the
# verdict alone: verdict.verdict_only).
VERDICTS_BY_DAY_SQL = f"""
SELECT substr(s.last_timestamp, 1, 10) AS day, v.verdict, count(*) AS sessions
FROM ({SESSIONS_VERDICT_ONLY_TEMPLATE.format(sessions=f'''
  SELECT s.* FROM sessions s
  WHERE s.last_timestamp GLOB {_A_DAY}
    AND s.last_timestamp >= coalesce(nullif(:since, ''), '')''')}) v
JOIN sessions s ON s.session_id = v.session_id
GROUP BY day, v.verdict ORDER BY day, v.verdict
""".strip()

# chart_session_sizes: sessions by size (records of every transcript of the
# session, in powers of ten: size_order 1 is 1-9 records) and by how many
# times their main transcript was compacted (session_compactions;
# compactions_order 0 is none), last active since :since.
_SIZE_BUCKETS = ((10, "1-9"), (100, "10-99"), (1_000, "100-999"), (10_000, "1,000-9,999"),
                 (100_000, "10,000-99,999"))
_SIZE_CASE = ("CASE " + " ".join(f"WHEN coalesce(s.records, 0) < {top} THEN {i + 1}"
                                 for i, (top, _) in enumerate(_SIZE_BUCKETS))
              + f" ELSE {len(_SIZE_BUCKETS) + 1} END")
_SIZE_LABEL = ("CASE size_order " + " ".join(f"WHEN {i + 1} THEN '{label} records'"
                                            for i, (_, label) in enumerate(_SIZE_BUCKETS))
               + " ELSE '100,000+ records' END")
SESSION_SIZES_SQL = f"""
WITH sized AS (
  SELECT {_SIZE_CASE} AS size_order,
    CASE WHEN coalesce(c.compactions, 0) = 0 THEN 0 WHEN c.compactions = 1 THEN 1
         WHEN c.compactions <= {COMPACTIONS_MORE_THAN} THEN 2 ELSE 3 END AS compactions_order
  FROM sessions s LEFT JOIN session_compactions c
    ON c.session_id = s.session_id AND c.host = s.host
  WHERE coalesce(s.last_timestamp, '') >= coalesce(nullif(:since, ''), '')
)
SELECT size_order, {_SIZE_LABEL} AS size, compactions_order,
  CASE compactions_order WHEN 0 THEN 'no compaction' WHEN 1 THEN '1 compaction'
    WHEN 2 THEN '2-{COMPACTIONS_MORE_THAN} compactions'
    ELSE 'more than {COMPACTIONS_MORE_THAN} compactions' END AS compactions,
  count(*) AS sessions
FROM sized GROUP BY size_order, compactions_order ORDER BY size_order, compactions_order
""".strip()

COST_BY_DAY = CannedQuery(
    "chart_cost_by_day", "Cost by day and model",
    "API calls and their cost per UTC day and model since :since (blank: all), each call "
    "once (the usage view); unpriced_calls are left out of cost_usd.", COST_BY_DAY_SQL)
VERDICTS_BY_DAY = CannedQuery(
    "chart_verdicts_by_day", "Sessions by verdict over time",
    "Sessions per UTC day of their last activity since :since (blank: all) and their "
    "verdict now (session_verdicts).", VERDICTS_BY_DAY_SQL)
SESSION_SIZES = CannedQuery(
    "chart_session_sizes", "Session sizes and compactions",
    "Sessions by size (records, in powers of ten) and by how many times their main "
    "transcript was compacted, last active since :since (blank: all).", SESSION_SIZES_SQL)

# The charts, in the order the pages show them.
CHARTS = (COST_BY_DAY, VERDICTS_BY_DAY, SESSION_SIZES)
