"""A real server and a real browser: `session-index serve` as a subprocess on a
free loopback port, Debian's Chromium driven by Playwright. Opens the health
page and session pages, clicks a node to see its raw JSON, and checks that a
transcript full of <script>, onerror= and javascript: payloads renders as
text and runs nothing. Screenshots go to the test's tmp dir."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest

from test_web import BROKEN_SID, HOSTILE_SID, HOSTILE_TEXT, HOSTILE_UUID, build_fixture_index, sid

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

if not CHROMIUM.exists():
    pytest.skip("/usr/bin/chromium is absent (apt-get install -y chromium)",
                allow_module_level=True)
playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
# A real server and browser, waits with timeouts: in the serial xdist group (conftest.py).
pytestmark = pytest.mark.xdist_group("timing")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser")
    db = build_fixture_index(folder)
    port = free_port()
    command = Path(sys.executable).parent / "session-index"
    log = open(folder / "serve.log", "wb")
    proc = subprocess.Popen([str(command), "serve", "--db", str(db), "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, cwd=folder,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
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
    yield base, folder
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.dialogs = []

    def on_dialog(dialog):
        page.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    yield page
    context.close()


def session_url(base, session_id):
    return f"{base}/-/sessions/{quote(session_id, safe='')}"


def test_health_page_in_a_browser(server, page):
    base, folder = server
    page.goto(base + "/")
    page.click("details.nav-menu summary")
    page.click("text=Session health")
    page.wait_for_url(base + "/-/session-health")
    assert page.inner_text("h1") == "Session health"
    assert page.inner_text(".si-last-ingest") not in ("", "never")
    rows = page.locator("table.si-health tbody tr.si-has")
    assert rows.count() >= 10
    page.screenshot(path=str(folder / "health.png"), full_page=True)
    page.click("text=api_error splices: --resume drops recovered output")
    page.wait_for_url("**/api_error_splices")
    page.locator("td.col-session_id a").first.wait_for()
    assert page.locator("td.col-session_id a").count() == 2


def test_session_page_click_shows_raw_json(server, page):
    base, folder = server
    page.goto(session_url(base, sid("api-error-splice")))
    assert page.locator(".si-node").count() == 11
    node = page.locator(".si-node.si-spine", has_text="api_error").first
    node.click()
    page.wait_for_function(
        "document.getElementById('si-raw').textContent.includes('\"subtype\": \"api_error\"')")
    raw = page.inner_text("#si-raw")
    assert raw.startswith("{\n") and '"retryAttempt": 1' in raw
    assert "si-selected" in node.get_attribute("class")
    page.screenshot(path=str(folder / "session.png"), full_page=True)
    # Folds of a long session open, and stay open when a record inside is clicked.
    page.goto(session_url(base, sid("long-session")))
    fold = page.locator("details.si-fold-stretch").first
    fold.locator("summary").first.click()
    inner = fold.locator("details.si-fold-progress").first
    inner.locator("summary").click()
    inner.locator(".si-node").first.click()
    page.wait_for_function(
        "document.getElementById('si-raw').textContent.includes('hook_progress')")
    assert fold.evaluate("d => d.open") and inner.evaluate("d => d.open")
    page.screenshot(path=str(folder / "long-session.png"))
    # A link to a record deep in a fold opens the folds and selects it.
    uuid = page.locator(".si-fold-stretch .si-node").nth(20).get_attribute("id")[2:]
    page.goto(session_url(base, sid("long-session")) + "#u-" + uuid)
    page.wait_for_function(f"document.getElementById('u-{uuid}').classList.contains('si-selected')")
    assert page.locator(f"#u-{uuid}").is_visible()
    # A link to a record the window does not draw (an old #u- link, or a
    # record of another window) reloads the page with ?at=: the server
    # draws the window that holds it (test_web), and it loads only once.
    page.goto(session_url(base, sid("long-session")) + "?database=index#u-not-drawn")
    page.wait_for_url("**at=not-drawn#u-not-drawn")
    assert "database=index" in page.url and page.locator(".si-node").count() == 422
    page.wait_for_timeout(300)
    assert page.url.endswith("?database=index&at=not-drawn#u-not-drawn")


def assert_inert(page):
    """Nothing of the hostile payload ran or became markup on this page."""
    page.mouse.move(200, 300)
    page.mouse.move(600, 500)
    page.wait_for_timeout(300)  # an <img onerror> would have fired by now
    assert page.evaluate("window.__pwned") is None, page.url
    assert page.locator("img").count() == 0, page.url
    assert page.locator('a[href^="javascript:"]').count() == 0, page.url
    assert page.locator("script", has_text="pwned").count() == 0, page.url
    assert page.dialogs == [], page.url


def test_hostile_transcript_runs_nothing(server, page):
    base, folder = server
    page.goto(session_url(base, HOSTILE_SID))
    assert page.locator("h1 code").inner_text() == HOSTILE_SID
    texts = page.locator(".si-excerpt").all_inner_texts()
    assert HOSTILE_TEXT[:40] in texts[0]
    assert_inert(page)
    page.locator(".si-node").first.click()
    page.wait_for_function("document.getElementById('si-raw').textContent.includes('pwned')")
    assert '"content": "<script>window.__pwned=1</script>' in page.inner_text("#si-raw")
    assert page.evaluate("id => !!document.getElementById(id)", "u-" + HOSTILE_UUID)
    page.screenshot(path=str(folder / "hostile.png"), full_page=True)
    assert_inert(page)
    for path in (f"/demo/records?session_id={quote(HOSTILE_SID, safe='')}",
                 "/demo/sessions", "/demo/files", "/demo/orphans", "/-/session-health",
                 f"/-/sessions/{quote(BROKEN_SID)}",
                 f"/demo/session_orphans?session_id={quote(HOSTILE_SID, safe='')}&cause="):
        page.goto(base + path)
        assert_inert(page)
    page.goto(base + f"/demo/records?session_id={quote(HOSTILE_SID, safe='')}")
    page.screenshot(path=str(folder / "hostile-records.png"), full_page=True)
    row = page.locator("td.col-id a").first
    row.click()
    assert "&lt;script&gt;" not in page.inner_text("pre.si-json")
    assert "<script>window.__pwned=1</script>" in page.inner_text("pre.si-json")
    assert_inert(page)


# Set SESSION_INDEX_SCREENSHOTS=docs/screenshots to refresh the docs' pictures.
SHOTS = os.environ.get("SESSION_INDEX_SCREENSHOTS")


def shot(page, folder, name):
    page.screenshot(path=str(folder / name), full_page=True)
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / name), full_page=True)


def test_health_page_groups_by_severity_in_a_browser(server, page):
    base, folder = server
    page.goto(base + "/-/session-health")
    groups = page.locator("section.si-severity h3")
    assert [t.split(" ")[0] for t in groups.all_inner_texts()] == ["Breaks", "Will", "History"]
    now = page.locator("section.si-sev-now")
    assert "Poisoned: a resume names an id the API refuses" in now.inner_text()
    assert "Abandoned branches" not in now.inner_text()
    # Only what breaks a resume now is red; history is grey.
    colour = lambda sel: page.locator(sel).evaluate(  # noqa: E731
        "e => getComputedStyle(e).borderLeftColor")
    assert colour("section.si-sev-now") == "rgb(183, 28, 28)"
    assert colour("section.si-sev-history") in ("rgb(144, 164, 174)", "rgb(46, 125, 50)")
    recent = page.locator("table.si-sessions tbody tr")
    assert recent.count() >= 5
    assert page.locator("table.si-sessions tr.si-state-poisoned").count() >= 1
    shot(page, folder, "health-severity.png")


@pytest.mark.parametrize("name,state,fix", [
    ("poisoned-tail", "poisoned", "session-index repair {} --write"),
    ("api-error-splice", "spliced", "session-index repair {} --write"),
    ("deleted", "missing", "session-index restore {}"),
])
def test_session_page_states_the_verdict_and_the_fix_in_a_browser(server, page, name, state,
                                                                  fix):
    base, folder = server
    page.goto(session_url(base, sid(name)))
    banner = page.locator(".si-verdict")
    assert banner.is_visible()
    box, title = banner.bounding_box(), page.locator("h1").bounding_box()
    assert box["y"] > title["y"] and box["y"] < page.locator("h2").first.bounding_box()["y"]
    assert banner.locator("strong").first.inner_text() == state
    assert banner.locator("code").inner_text() == fix.format(sid(name))
    assert banner.evaluate("e => getComputedStyle(e).borderTopColor") == "rgb(183, 28, 28)"
    shot(page, folder, f"session-{state}.png")
