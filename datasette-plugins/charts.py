"""The charts: how each chart's data (the canned queries of
``indexer/signals/charts.py``) is drawn, on the health page and on a page of
its own (``/-/charts/NAME``).

A chart is a ``<figure class="si-chart">`` whose ``data-src`` is its query's
Datasette JSON URL (``?_shape=array``), the same URL linked beside it, and
whose ``data-spec`` says how to draw it; ``static/session-index-charts.js``
fetches the rows and draws them with Observable Plot (vendored with d3 in
``static/vendor/``: no CDN, the pages work offline). Every label a chart
shows comes from the rows as text (SVG text nodes), never as markup.
"""

from __future__ import annotations

import json
from collections import namedtuple
from urllib.parse import urlencode

from indexer.signals import charts

PLUGIN = "session-index"
# The scripts each page with a chart loads, in order (d3, then Plot, then ours).
SCRIPTS = ("vendor/d3-7.9.2.min.js", "vendor/plot-0.6.17.umd.min.js", "session-index-charts.js")

# Verdict colours: what breaks a resume now is red or orange, resumable green.
VERDICT_COLOURS = {"resumable": "#2e7d32", "missing": "#b71c1c", "poisoned": "#ad1457",
                   "wedged": "#6a1b9a", "spliced": "#e65100", "truncated": "#f9a825"}
# Compaction buckets (chart_session_sizes), from none (grey) to many (dark blue).
COMPACTION_COLOURS = ("#b0bec5", "#64b5f6", "#1e88e5", "#0d47a1")


class ChartView(namedtuple("ChartView", "query mark x y fill x_label y_label colours")):
    """How one chart is drawn: ``mark`` rectY (x a UTC day, one bar per day
    stacked by ``fill``) or barY (x a label in the rows' order, stacked by
    ``fill``); ``colours``: ``fill`` value -> colour, or a list of colours
    in the rows' order of ``fill`` values, or None for Plot's own."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return self.query.name

    def spec(self) -> dict:
        return {"mark": self.mark, "x": self.x, "y": self.y, "fill": self.fill,
                "x_label": self.x_label, "y_label": self.y_label, "colours": self.colours}


CHARTS = (
    ChartView(charts.COST_BY_DAY, "rectY", "day", "cost_usd", "model",
              "Day (UTC)", "Cost (USD)", None),
    ChartView(charts.VERDICTS_BY_DAY, "rectY", "day", "sessions", "verdict",
              "Day of last activity (UTC)", "Sessions", VERDICT_COLOURS),
    ChartView(charts.SESSION_SIZES, "barY", "size", "sessions", "compactions",
              "Session size", "Sessions", list(COMPACTION_COLOURS)),
)
BY_NAME = {c.name: c for c in CHARTS}


def figure(chart: ChartView, urls, database: str, since: str = "") -> dict:
    """What a page needs to show ``chart``: its title and description, the
    JSON URL it is drawn from (linked beside it), its canned query's page
    and its own page."""
    params = urlencode({"since": since})
    query = urls.query(database, chart.name)
    return {"name": chart.name, "title": chart.query.title,
            "description": chart.query.description,
            "data_url": f"{query}.json?_shape=array&{params}",
            "table_url": f"{query}?{params}",
            "page_url": urls.path(f"/-/charts/{chart.name}"),
            "spec": json.dumps(chart.spec())}


def script_urls(urls) -> list[str]:
    return [urls.static_plugins(PLUGIN, path) for path in SCRIPTS]
