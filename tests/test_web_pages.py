"""Issue 30, items 3 and 4, through Datasette's own client (httpx, no server):
the charts' canned queries against the index's own rows, the chart markup and
its offline scripts, `/` as the health page, data first on table, view and
canned-query pages, session titles with Claude Code's markup stripped,
relative times, and the global search box and its results page. The browser
draws and looks at them in test_browser_pages.py."""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
import sqlite3
import tomllib
from collections import Counter, defaultdict
from datetime import datetime, timezone
from html import unescape
from pathlib import Path
from urllib.parse import quote

import pytest
from datasette.app import Datasette
from markupsafe import escape

from conftest import Transcript
from indexer.index import search
from indexer.index.db import open_db
from indexer.ingest.files import ingest
from indexer.signals import charts, listings
from indexer.signals.classes import COMPACTIONS_MORE_THAN
from session_index_web import charts as web_charts, format as web_format, metadata as web_metadata
from session_index_web.pages import RECENT_SESSIONS
from test_web import HOSTILE_SID, PWN, Web, build_fixture_index, no_live_markup, sid

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "datasette-plugins"

# Two sessions whose first prompt is wrapped in Claude Code's markup: a slash
# command (a string), and the editor's selection as a block of its own before
# the prompt (a list of text blocks).
COMMAND_SID = "cccccccc-0000-4000-8000-000000000030"
COMMAND_PROMPT = ("<command-message>review is running\u2026</command-message>\n"
                  "<command-name>/review</command-name>\n<command-args>the parser</command-args>")
COMMAND_TITLE = "/review the parser"
SELECTION_SID = "cccccccc-0000-4000-8000-000000000031"
SELECTION_BLOCKS = [
    {"type": "text", "text": "<ide_selection>The user selected the lines 3 to 9 from /src/loop.py:\n"
                             "while True:\n    pass</ide_selection>"},
    {"type": "text", "text": "Why does <b>this</b> loop never end?"}]
# (the <b> is the user's own text: kept, and shown escaped)
SELECTION_TITLE = "Why does <b>this</b> loop never end?"
SEARCH_WORD = "zanzibar"


def markup_transcripts(projects: Path) -> None:
    t = Transcript(COMMAND_SID)
    t.add("m1", None, "user", message={"role": "user", "content": COMMAND_PROMPT})
    t.add("m2", "m1", "assistant")
    t.write(projects / "-tmp-markup", f"{COMMAND_SID}.jsonl")
    t = Transcript(SELECTION_SID)
    t.add("s1", None, "user", message={"role": "user", "content": SELECTION_BLOCKS})
    t.add("s2", "s1", "assistant", message={
        "id": "msg_s2", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": f"It never breaks: {SEARCH_WORD} <script>{PWN}</script>"}]})
    t.write(projects / "-tmp-markup", f"{SELECTION_SID}.jsonl")


def build_pages_index(folder: Path) -> Path:
    """test_web's index (the demo, hostile and broken transcripts), the two
    transcripts above, and search enabled."""
    db_path = build_fixture_index(folder)
    markup_transcripts(folder / "markup")
    db = open_db(db_path)
    ingest(db, [str(folder / "markup")], config_dir=folder)
    search.enable(db)
    db.conn.close()
    return db_path


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return Web(build_pages_index(tmp_path_factory.mktemp("pages")))


def rows(site, sql, params=None):
    return site.rows(sql, params or {})


# --- the charts' queries, against the index's own rows ----------------------

def test_cost_by_day_is_the_usage_views_calls_per_day_and_model(site):
    expected = defaultdict(lambda: [0, 0.0, 0])
    for call in rows(site, "SELECT timestamp, model, cost_usd FROM usage"):
        day = call["timestamp"] or ""
        if not re.match(r"\d{4}-\d\d-\d\d", day):
            continue
        key = (day[:10], call["model"] or "(no model)")
        expected[key][0] += 1
        expected[key][1] += call["cost_usd"] or 0
        expected[key][2] += call["cost_usd"] is None
    got = rows(site, charts.COST_BY_DAY_SQL, {"since": ""})
    assert len(got) >= 10 and len({r["model"] for r in got}) >= 2
    assert {(r["day"], r["model"]): [r["calls"], r["cost_usd"], r["unpriced_calls"]]
            for r in got} == {k: [n, round(c, 6), u] for k, (n, c, u) in expected.items()}
    assert [(r["day"], r["model"]) for r in got] == sorted(expected)
    since = got[len(got) // 2]["day"]
    assert rows(site, charts.COST_BY_DAY_SQL, {"since": since}) == [
        r for r in got if r["day"] >= since]


def test_verdicts_by_day_counts_each_sessions_verdict_on_its_day(site):
    verdicts = {r["session_id"]: r["verdict"] for r in rows(
        site, "SELECT v.session_id, v.verdict FROM session_verdicts v "
              "JOIN sessions s ON s.session_id = v.session_id AND s.host = v.host")}
    expected = Counter()
    for s in rows(site, "SELECT session_id, last_timestamp FROM sessions"):
        if re.match(r"\d{4}-\d\d-\d\d", s["last_timestamp"] or ""):
            expected[(s["last_timestamp"][:10], verdicts[s["session_id"]])] += 1
    got = rows(site, charts.VERDICTS_BY_DAY_SQL, {"since": ""})
    assert {(r["day"], r["verdict"]): r["sessions"] for r in got} == dict(expected)
    assert len({r["verdict"] for r in got}) >= 4
    # The hostile transcript's time is not a day: it is not on the chart.
    assert HOSTILE_SID in {s["session_id"] for s in rows(site, "SELECT session_id FROM sessions")}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", r["day"]) for r in got)


def test_session_sizes_bucket_every_session_by_records_and_compactions(site):
    compactions = {r["session_id"]: r["compactions"] for r in rows(
        site, "SELECT session_id, compactions FROM session_compactions")}
    expected = Counter()
    for s in rows(site, "SELECT session_id, records FROM sessions"):
        size = len(str(max(s["records"] or 0, 1)))   # 1-9: 1, 10-99: 2, ...
        n = compactions.get(s["session_id"], 0)
        expected[(min(size, 6), 0 if n == 0 else 1 if n == 1
                  else 2 if n <= COMPACTIONS_MORE_THAN else 3)] += 1
    got = rows(site, charts.SESSION_SIZES_SQL, {"since": ""})
    assert {(r["size_order"], r["compactions_order"]): r["sessions"] for r in got} == dict(expected)
    assert sum(r["sessions"] for r in got) == rows(site, "SELECT count(*) AS n FROM sessions")[0]["n"]
    assert {r["compactions_order"] for r in got} >= {0, 1, 3}
    labels = {r["size_order"]: r["size"] for r in got}
    assert labels[1] == "1-9 records" and labels[2] == "10-99 records"


def test_chart_queries_are_canned_queries_and_answer_as_json(site):
    for chart in web_charts.CHARTS:
        assert web_metadata.canned_queries()[chart.name]["sql"] == chart.query.sql
        data = site.json(f"/{site.name}/{chart.name}.json?_shape=array&since=")
        assert data == rows(site, chart.query.sql, {"since": ""}) and data


# --- the charts on the pages ------------------------------------------------

def figures(html):
    return re.findall(r'<figure class="si-chart" id="chart-(\w+)" data-chart="\w+" '
                      r'data-src="([^"]+)" data-spec="([^"]+)">(.*?)</figure>', html, re.S)


def test_health_page_and_chart_pages_show_every_chart_with_its_data_linked(site):
    names = [c.name for c in web_charts.CHARTS]
    for path, wanted in [("/-/session-health", names), ("/-/charts", names),
                         *((f"/-/charts/{n}", [n]) for n in names)]:
        html = site.get(path).text
        found = figures(html)
        assert [f[0] for f in found] == wanted, path
        for name, src, spec, inner in found:
            src = unescape(src)
            # The data beside the chart is the very URL it is drawn from.
            assert f'class="si-chart-json" href="{src.replace("&", "&amp;")}"' in inner
            assert src == f"/{site.name}/{name}.json?_shape=array&since="
            assert site.json(src) == rows(site, web_charts.BY_NAME[name].query.sql, {"since": ""})
            assert json.loads(unescape(spec)) == web_charts.BY_NAME[name].spec()
        # Offline: every script is served by this Datasette, none from elsewhere.
        scripts = re.findall(r'<script[^>]* src="([^"]+)"', html)
        assert scripts == [f"/-/static-plugins/session-index/{p}" for p in web_charts.SCRIPTS]
    site.get("/-/charts/no_such_chart", status=404)
    one = site.get("/-/charts/chart_cost_by_day?since=2026-11-25").text
    assert unescape(figures(one)[0][1]).endswith("since=2026-11-25")


def test_chart_scripts_are_served_with_their_licences_and_packaged():
    ds = Datasette([], memory=True)
    for path in web_charts.SCRIPTS:
        response = asyncio.run(ds.client.get(f"/-/static-plugins/session-index/{path}"))
        assert response.status_code == 200 and "javascript" in response.headers["content-type"]
        assert response.content == (PLUGIN / "static" / path).read_bytes()
    vendor = PLUGIN / "static" / "vendor"
    for library in ("d3", "plot"):
        assert "Permission to use, copy, modify" in (vendor / f"{library}-LICENSE.txt").read_text()
    # pyproject's package-data carries every file of static/ and templates/.
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["package-data"]["session_index_web"]
    for folder in ("static", "templates"):
        for f in (PLUGIN / folder).rglob("*"):
            if f.is_file():
                rel = f.relative_to(PLUGIN).as_posix()
                assert any(fnmatch.fnmatch(rel, p) and rel.count("/") == p.count("/")
                           for p in patterns), rel


# --- pages: /, data first, titles, times, search ------------------------------

def test_root_is_the_health_page_and_stock_index_without_a_session_index(site):
    root = site.get("/").text
    assert "<h1>Session health</h1>" in root and 'class="si-chart"' in root
    plain = Datasette([], memory=True)
    response = asyncio.run(plain.client.get("/"))
    assert response.status_code == 200 and "_memory" in response.text
    assert "Session health</h1>" not in response.text and "si-global-search" not in response.text


def test_other_databases_keep_datasettes_table_page(tmp_path):
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (a)").connection.commit()
    ds = Datasette([str(path)], metadata={"databases": {"other": {"tables": {"t": {
        "description": "a table", "columns": {"a": "the column"}}}}}})
    html = asyncio.run(ds.client.get("/other/t")).text
    assert '<dl class="column-descriptions">' in html and "si-about" not in html
    assert "si-data-first" not in html and "si-global-search" not in html


def test_table_and_view_pages_fold_their_descriptions(site):
    for table in ("sessions", "orphans", "records"):
        html = site.get(f"/{site.name}/{table}").text
        about = html.index('<details class="si-about">')
        columns = web_metadata.TABLES[table]["columns"]
        folded = html[about:html.index("</details>", about)]
        assert f"what its {len(columns)} columns mean" in folded
        assert all(f"<dt>{name}</dt>" in folded for name in columns)
        assert "si-data-first" in re.search(r'<body class="([^"]+)"', html).group(1)
        assert about < html.index('<table class="rows-and-columns">')


def test_canned_query_pages_fold_their_sql(site):
    url = f"/{site.name}/chart_cost_by_day"
    html = site.get(url).text
    assert '<pre id="sql-query">' not in html and '<textarea id="sql-editor"' not in html
    assert '<table class="rows-and-columns">' in html
    assert re.search(r'\(<a href="[^"]*_show_sql=1">show</a>\)', html)
    shown = site.get(url + "?_show_sql=1").text
    assert "FROM usage" in unescape(shown)


def test_session_titles_strip_claude_codes_markup(site):
    for session_id, title in ((COMMAND_SID, COMMAND_TITLE), (SELECTION_SID, SELECTION_TITLE)):
        html = site.get(web_format.session_path(session_id)).text
        assert f'<h1 class="si-titled">{escape(title)} <span class="si-title-id">Session <code>' \
               f"{session_id}</code></span></h1>" in html
        assert f"<title>{escape(title)}: Session {session_id}</title>" in html
    # The health page's recent sessions: each title as plain_title reads it.
    health = site.get("/-/session-health").text
    titles = [r["title"] for r in listings.sessions(_Db(site.path), limit=RECENT_SESSIONS)]
    shown = [unescape(t) for t in re.findall(r'<td class="si-title">(.*?)</td>', health)]
    assert shown == [listings.plain_title(t) for t in titles] and shown != titles
    hostile = site.get(web_format.session_path(HOSTILE_SID)).text
    # (the user's own tags are text: shown escaped, not stripped)
    assert re.search(r'<h1 class="si-titled">&lt;script&gt;window.__pwned=1&lt;/script&gt; '
                     r'&#34;&gt;&lt;img src=x', hostile)
    no_live_markup(hostile)


@pytest.mark.parametrize("text,title", [
    (COMMAND_PROMPT, COMMAND_TITLE),
    ("<ide_opened_file>The user opened x.py in the IDE</ide_opened_file> Explain it", "Explain it"),
    ("<ide_selection>cut off by the SQL's 120 characters", ""),
    ("<bash-input>ls -la</bash-input>", "ls -la"),
    # A prompt cut at PROMPT_CHARS inside one of Claude Code's tags: the start of it goes.
    ("<command-name>/review</command-name> " + "w " * 40 + "the parser</com",
     "/review " + "w " * 40 + "the parser"),
    ("<command-name>/review</command-name> " + "w " * 38 + "the parser <command-args x",
     "/review " + "w " * 38 + "the parser"),
    # The user's own tags and angle brackets are text.
    ("see <a hr", "see <a hr"),
    ("a < b and  c > d", "a < b and c > d"),
    ("Why is a<b false when comparing strings?", "Why is a<b false when comparing strings?"),
    ("Use Vec<T> and fix the <div>", "Use Vec<T> and fix the <div>"),
    ("Why is a<b", "Why is a<b"),
    ("<task-notification><task-id>b1</task-id></task-notification> Go on", "Go on"),
    ("x" * 150, "x" * 99 + "\u2026"),
    (None, ""),
])
def test_plain_title(text, title):
    assert listings.plain_title(text) == title


NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("iso,ago", [
    ("2026-12-03T09:00:00.000Z", "3 hours ago"),
    ("2026-12-03T11:59:59Z", "1 second ago"),
    ("2026-12-03T12:00:00Z", "just now"),
    ("2026-11-26T12:00:00Z", "1 week ago"),
    ("2026-10-01T00:00:00Z", "2 months ago"),
    ("2026-12-05T12:00:00+00:00", "in 2 days"),
    ("2026-12-03T13:30:00", "in 1 hour"),
    (f"<script>{PWN}</script>", ""),
    (None, ""),
])
def test_relative_time(iso, ago):
    assert web_format.relative_time(iso, NOW) == ago


def test_times_show_how_long_ago_beside_the_iso_time(site):
    before = datetime.now(timezone.utc)
    html = site.get(web_format.session_path(sid("api-error-splice"))).text
    after = datetime.now(timezone.utc)
    times = re.findall(r'<time datetime="([^"]+)">\1</time> <span class="si-ago">\(([^)]+)\)</span>',
                       html)
    assert len(times) == 2
    for iso, ago in times:   # the page's clock read between the test's two
        assert ago in (web_format.relative_time(iso, before), web_format.relative_time(iso, after))
    health = site.get("/-/session-health").text
    assert len(re.findall(r'<td class="si-ago">\d+ \w+ ago</td>', health)) >= 5   # problems
    recent = health[health.index("<h2>Recent sessions</h2>"):health.index("Newest problems")]
    assert len(re.findall(r'<td><time datetime="[^"]+">[^<]+</time> <span class="si-ago">'
                          r'\(\d+ \w+ ago\)</span></td>', recent)) >= 5
    assert web_format.when(f"<script>{PWN}</script>") == f"&lt;script&gt;{PWN}&lt;/script&gt;"


def test_a_search_box_on_every_page(site):
    box = ('<form class="si-global-search" action="/-/search" method="get" role="search">')
    for path in ("/", "/-/session-health", f"/{site.name}", f"/{site.name}/sessions",
                 f"/{site.name}/orphans", f"/{site.name}/chart_cost_by_day", "/-/charts",
                 web_format.session_path(sid("api-error-splice")), "/-/search?q=x"):
        html = site.get(path).text
        assert box in html, path
        assert f'<input type="hidden" name="database" value="{site.name}">' in html


def test_search_page_lists_what_was_said_with_titles_escaped(site):
    html = site.get(f"/-/search?q={SEARCH_WORD}").text
    body = html[html.index("<h1>"):]
    hits = search.search(_Db(site.path), SEARCH_WORD, limit=100)
    assert len(hits) == 1 and body.count('<tr>') == 2   # the header and the hit
    assert f"1 record holds <strong>{SEARCH_WORD}</strong>" in body
    link = web_format.session_path(SELECTION_SID) + "?q=" + SEARCH_WORD
    assert f'<a href="{link}">{escape(SELECTION_TITLE)}</a>' in body
    assert f"<mark>{SEARCH_WORD}</mark> &lt;script&gt;" in body
    assert re.search(r'<td><time datetime="[^"]+">[^<]+</time> <span class="si-ago">', body)
    assert f'value="{SEARCH_WORD}"' in html   # the box keeps the query
    no_live_markup(html)
    hostile = site.get("/-/search?q=" + quote("pwned")).text
    assert hostile.count("<tr>") >= 3 and "&lt;script&gt;" in hostile
    no_live_markup(hostile)
    assert "Nothing to search for" in site.get("/-/search?q=" + quote('""')).text
    assert "<table" not in site.get("/-/search").text[len("<!DOCTYPE"):].split("<h1>")[1]


def test_search_page_says_when_search_is_not_enabled(tmp_path):
    from indexer.index import search as searchmod

    path = build_fixture_index(tmp_path)
    db = open_db(path)
    assert searchmod.disable(db)   # (the demo's index has search on, as ingest makes one)
    db.conn.close()
    web = Web(path)
    html = web.get("/-/search?q=anything").text
    assert "Search is not enabled on this index: run session-index search --enable." in html


class _Db:
    def __init__(self, path):
        self.conn = sqlite3.connect(path)
