"""The API calls' sums per UTC day, project and model, read since a time.

Ingest keeps ``usage_day_sums`` (migrations.m094_usage_day_sums, kept by
derive.keep_usage_calls with usage_calls: index/views.py): one row per day
(the first 10 characters of the call's time, NULL for none), project folder
and model, with the calls' count, tokens by kind, unpriced calls and cost
in whole picodollars (each call's cost_usd * 1e12 rounded: integers, so a
row adding and taking calls away stays exactly the sum of the calls it
has). The cost pages (``usage --by day|model|project``, cost_by_project,
cost_by_day, chart_cost_by_day) read it instead of grouping every call:
2,198 rows, not 174,937 calls, on the 1M-record bench index.

``:since`` is a time, not a day. A call's time t (a call with none counts
as '', as the pages' ``coalesce(timestamp, '') >= :since`` counts it) is
at or after since s exactly when its day is after s's day; or its day is s
itself (s a day, '' or shorter: every time of that day is at or after it);
or its day is s's day and t >= s (s longer than a day: the calls of that
one day are read from usage_calls, through usage_calls_timestamp). (Text
compares by its bytes: when the first 10 characters of two texts differ,
the texts compare as those do.)
"""

from __future__ import annotations

# A call's cost in whole picodollars (NULL when unpriced), {c} the call.
PICO_COST = "CAST(round({c}.cost_usd * 1e12) AS INTEGER)"
# A call's day: its time's first 10 characters (NULL when it has none, as
# `substr(timestamp, 1, 10)` groups it on the usage view).
CALL_DAY = "substr({c}.timestamp, 1, 10)"

# The sums of the calls at or after {since} (an SQL expression of :since),
# one row per day, project and model: the whole days from usage_day_sums,
# and the calls of since's own day at or after it from usage_calls (only
# when since is longer than a day; the range keeps to that day's entries of
# usage_calls_timestamp: the texts that begin with a 10-character day are
# those from it up to the day with its last character one higher).
SINCE_SUMS_TEMPLATE = f"""
SELECT day, project, model, calls, input_tokens, output_tokens, cache_read_tokens,
  cache_write_5m_tokens, cache_write_1h_tokens, cost_pico, unpriced_calls
FROM usage_day_sums
WHERE coalesce(day, '') > substr({{since}}, 1, 10) OR coalesce(day, '') = {{since}}
UNION ALL
SELECT {CALL_DAY.format(c="c")}, c.project, c.model, 1, coalesce(c.input_tokens, 0),
  coalesce(c.output_tokens, 0), coalesce(c.cache_read_tokens, 0), c.w5m, c.w1h,
  coalesce({PICO_COST.format(c="c")}, 0), c.cost_usd IS NULL
FROM usage_calls c
WHERE length({{since}}) > 10 AND c.timestamp >= {{since}}
  AND c.timestamp < substr({{since}}, 1, 9) || char(unicode(substr({{since}}, 10, 1)) + 1)
  AND substr(c.timestamp, 1, 10) = substr({{since}}, 1, 10)
""".strip()

# A sum of picodollars as dollars rounded to 6 places ({sums} the rows
# summed; total(): a float sum, which never overflows).
DOLLARS = "round(total({sums}.cost_pico) / 1e12, 6)"
