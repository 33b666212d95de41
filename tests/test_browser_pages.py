"""Issue 30, items 3 and 4, in a real browser: `session-index serve` as a
subprocess, Debian's Chromium through Playwright at 1280x800 (a laptop's
first screen), no network but the server's. Each chart must draw one mark
per row of its query (read from the index file, not from the page), with the
rows' own values in the marks' titles; the rows of table, view, canned-query
and search pages must be in the first screen. Screenshots of every chart and
page go to the test's folder, and to $SESSION_INDEX_SCREENSHOTS (e.g.
docs/screenshots) when it is set."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from session_index_web import charts as web_charts, format as web_format, metadata as web_metadata
from test_browser import CHROMIUM, assert_inert, browser, free_port  # noqa: F401 (browser: the fixture)
from test_web import HOSTILE_SID
from test_web_pages import (COMMAND_SID, COMMAND_TITLE, SEARCH_WORD, SELECTION_SID,
                            SELECTION_TITLE, build_pages_index)

playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
pytestmark = pytest.mark.xdist_group("timing")
if not CHROMIUM.exists():
    pytest.skip("/usr/bin/chromium is absent", allow_module_level=True)

SCREEN = {"width": 1280, "height": 800}
SHOTS = os.environ.get("SESSION_INDEX_SCREENSHOTS")
# The SVG marks Plot draws for a chart (one rect per row; not the legend's).
MARKS = "svg g[aria-label='rect'] > rect, svg g[aria-label='bar'] > rect"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser-pages")
    db = build_pages_index(folder)
    port = free_port()
    log = open(folder / "serve.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "session-index"), "serve",
                             str(db), "-p", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            cwd=folder, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(base + "/-/session-health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("serve did not start: " + (folder / "serve.log").read_text())
        time.sleep(0.2)
    yield base, folder, db
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture
def page(browser, server):   # noqa: F811 (the fixture imported from test_browser)
    base = server[0]
    context = browser.new_context(viewport=SCREEN)
    page = context.new_page()
    page.dialogs, page.errors, page.elsewhere = [], [], []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))

    def only_the_server(route):   # offline: nothing but the server answers
        if route.request.url.startswith(base):
            route.continue_()
        else:
            page.elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_server)
    yield page
    assert page.errors == [] and page.elsewhere == []
    context.close()


def shot(page, folder, name, full_page=False):
    page.screenshot(path=str(folder / name), full_page=full_page)
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / name), full_page=full_page)


def query_rows(db, chart):
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(chart.query.sql, {"since": ""})]
    finally:
        conn.close()


def assert_drawn_from_the_index(page, db, chart):
    """The chart's figure drew one mark per row of its query, each mark's
    title naming its row's x, fill and y values."""
    figure = page.locator(f"figure[data-chart='{chart.name}']")
    page.wait_for_function(
        f"document.querySelector(\"figure[data-chart='{chart.name}']\")"
        ".getAttribute('data-drawn') !== null", timeout=20_000)
    expected = query_rows(db, chart)
    assert figure.get_attribute("data-drawn") == "1" and len(expected) >= 5
    marks = figure.locator(MARKS)
    assert marks.count() == len(expected) == int(figure.get_attribute("data-rows"))
    titles = sorted(marks.evaluate_all("ms => ms.map(m => m.querySelector('title').textContent)"))
    assert titles == sorted(f"{r[chart.x]}\n{r[chart.fill]}\n{chart.y_label}: {r[chart.y]}"
                            for r in expected)
    plot = figure.locator(".si-chart-plot svg:has(g[aria-label='rect']), "
                          ".si-chart-plot svg:has(g[aria-label='bar'])")
    assert plot.count() == 1 and plot.bounding_box()["height"] > 200


@pytest.mark.parametrize("chart", web_charts.CHARTS, ids=lambda c: c.name)
def test_each_chart_on_its_own_page_draws_its_querys_rows(server, page, chart):
    base, folder, db = server
    page.goto(base + f"/-/charts/{chart.name}")
    assert page.inner_text("h1") == chart.query.title
    assert_drawn_from_the_index(page, db, chart)
    box = page.locator(f"figure[data-chart='{chart.name}'] {MARKS}").last.bounding_box()
    assert box["y"] + box["height"] <= SCREEN["height"]   # the chart is the first screen
    shot(page, folder, f"chart-{chart.name.removeprefix('chart_').replace('_', '-')}.png")
    # Its data, one click away: the JSON it was drawn from.
    figure = page.locator(f"figure[data-chart='{chart.name}']")
    src = figure.get_attribute("data-src")
    figure.locator("a.si-chart-json").click()
    page.wait_for_url(base + src)
    assert page.evaluate("() => JSON.parse(document.body.innerText)") == query_rows(db, chart)


def test_root_is_the_health_page_with_every_chart(server, page):
    base, folder, db = server
    page.goto(base + "/")
    assert page.inner_text("h1") == "Session health"
    for chart in web_charts.CHARTS:
        assert_drawn_from_the_index(page, db, chart)
    page.locator("div.si-charts").scroll_into_view_if_needed()
    shot(page, folder, "health-charts.png")
    shot(page, folder, "health-full.png", full_page=True)


def assert_data_first(page, what):
    """The first row of the page's table is wholly inside the first screen."""
    row = page.locator("table tbody tr").first
    box = row.bounding_box()
    assert box and box["y"] >= 0 and box["y"] + box["height"] <= SCREEN["height"], (what, box)
    assert page.evaluate("window.scrollY") == 0


@pytest.mark.parametrize("path,name", [
    ("/demo/sessions", "table"),                    # a table
    ("/demo/orphans", "view"),                      # a view
    ("/demo/poisoned?_size=10", "canned-query"),    # a problem class's canned query
    ("/demo/chart_cost_by_day", "chart-query"),     # a chart's canned query
])
def test_table_view_and_query_pages_open_with_their_rows(server, page, path, name):
    base, folder, _ = server
    page.goto(base + path)
    assert_data_first(page, path)
    about = page.locator("details.si-about")
    if name in ("table", "view"):
        assert not about.evaluate("d => d.open")
        assert not page.locator("dl.si-column-descriptions").is_visible()
        assert page.locator("dl.column-descriptions").first.is_hidden()
        about.locator("summary").click()
        assert page.locator("dl.si-column-descriptions dt").first.is_visible()
        page.locator("details.si-about summary").click()
    else:
        assert page.locator("pre#sql-query, textarea#sql-editor").count() == 0
        page.click("text=show")
        sql = web_metadata.canned_queries()[path.split("/")[2].split("?")[0]]["sql"]
        shown = page.locator(".cm-editor, pre#sql-query").first.inner_text()
        assert sql.splitlines()[0] in shown and sql.splitlines()[-1] in shown
        page.go_back()
    shot(page, folder, f"data-first-{name}.png")


def test_session_page_titles_and_relative_times(server, page):
    base, folder, _ = server
    for session_id, title in ((COMMAND_SID, COMMAND_TITLE), (SELECTION_SID, SELECTION_TITLE)):
        page.goto(base + web_format.session_path(session_id))
        assert page.locator("h1").inner_text().startswith(title)
        assert page.locator("h1 code").inner_text() == session_id
        assert page.title().startswith(title)
    shot(page, folder, "session-title.png")
    times = page.locator("p.si-meta time")
    assert times.count() == 2
    for i in range(2):
        iso = times.nth(i).get_attribute("datetime")
        assert times.nth(i).inner_text() == iso
        ago = times.nth(i).locator("xpath=following-sibling::span[1]").inner_text()
        assert ago.startswith("(") and ago.endswith(" ago)")
    page.goto(base + web_format.session_path(HOSTILE_SID))
    assert "<script>" not in page.locator("h1").inner_html()
    assert_inert(page)


def test_search_from_any_page(server, page):
    base, folder, _ = server
    page.goto(base + "/demo/sessions")
    box = page.locator("form.si-global-search input[type=search]")
    assert box.is_visible() and box.bounding_box()["y"] < 60
    box.fill(SEARCH_WORD)
    box.press("Enter")
    page.wait_for_url(f"{base}/-/search?q={SEARCH_WORD}&database=demo")
    assert_data_first(page, "search")
    hit = page.locator("table.si-search-results tbody tr")
    assert hit.count() == 1 and hit.locator("mark").inner_text() == SEARCH_WORD
    shot(page, folder, "search.png")
    hit.locator(f"a:has-text('{SELECTION_TITLE}')").click()
    page.wait_for_url(f"**/-/sessions/{SELECTION_SID}?q={SEARCH_WORD}")
    assert page.locator("h1 code").inner_text() == SELECTION_SID
    # Hostile text found by the search renders as text and runs nothing.
    page.goto(base + "/-/search?q=pwned")
    assert page.locator("table.si-search-results tbody tr").count() >= 2
    assert_inert(page)
