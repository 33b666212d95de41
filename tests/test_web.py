"""The web UI through Datasette's own client (httpx, no server): every page,
every canned query (HTML and .json), every plugin hook, on one index that
holds every problem class (the demo's, plus chain breaks, cycles, duplicates,
a bad line and a transcript full of hostile text)."""

from __future__ import annotations

import asyncio
import http.client
import json
from html import unescape as html_unescape
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from click.testing import CliRunner
from markupsafe import Markup

from conftest import Transcript, write_jsonl
from indexer.cli import demo_data, web
from session_index_web import cells as web_cells, format as web_format, health as web_health, metadata as web_metadata, tree as web_tree
from indexer.cli.commands import cli
from indexer.index.db import open_db
from indexer.signals.classes import SEVERITIES
from indexer.ingest.files import ingest

ROOT = Path(__file__).resolve().parent.parent
sid = demo_data.session_id
PWN = "window.__pwned=1"
# Hostile text: it must render as text and run nothing.
HOSTILE_TEXT = (f'<script>{PWN}</script> "><img src=x onerror="{PWN}"> '
                f"[click me](javascript:{PWN}) <a href=\"javascript:{PWN}\">link</a> "
                "<svg onload=alert(1)>")
HOSTILE_SID = f'"><img src=x onerror={PWN}>/javascript:alert(1)'
HOSTILE_UUID = f'u"><script>{PWN}</script>'
BROKEN_SID = "bbbbbbbb-0000-4000-8000-000000000001"


CSS_URL = "/-/static-plugins/session-index/session-index.css"

def hostile_transcript(projects: Path) -> None:
    t = Transcript(HOSTILE_SID)
    t.add(HOSTILE_UUID, None, "user", message={"role": "user", "content": HOSTILE_TEXT},
          cwd=f"/tmp/<b>{PWN}</b>")
    t.add("h2", HOSTILE_UUID, "assistant", subtype=f"<i onmouseover={PWN}>",
          message={"id": f"<img src=x onerror={PWN}>", "role": "assistant",
                   "model": "<synthetic>", "content": [{"type": "text", "text": HOSTILE_TEXT}]})
    t.add("h3", HOSTILE_UUID, "assistant", ts=f"<script>{PWN}</script>",
          message={"id": "msg_h3", "role": "assistant", "model": "m",
                   "content": [{"type": "tool_use", "id": "x", "name": f"<b>{PWN}</b>",
                                "input": {"url": f"javascript:{PWN}"}}]})
    t.records.append({"type": f"<script>{PWN}</script>", "note": HOSTILE_TEXT})
    t.write(projects / "-tmp-hostile", "hostile-session.jsonl")


def broken_transcript(projects: Path) -> None:
    """A chain break, another root, a duplicate uuid, a cycle and a bad line."""
    t = Transcript(BROKEN_SID)
    t.add("b1", None, "user")
    t.add("b2", "b1", "assistant")
    t.add("b3", "missing-parent", "user")
    t.add("b4", "b3", "assistant")
    t.add("b5", None, "user")
    t.add("b6", "b7", "user", ts="2026-09-01T00:00:00.100Z")
    t.add("b7", "b6", "assistant", ts="2026-09-01T00:00:00.200Z")
    t.add("b8", "b2", "user")
    t.add("b8", "b2", "user")
    t.add("b9", "b8", "assistant")
    lines = [json.dumps(r) for r in t.records]
    lines.insert(3, '{"type": "user", "uuid": "cut off')
    write_jsonl(projects / "-tmp-broken" / f"{BROKEN_SID}.jsonl", lines)


def build_fixture_index(folder: Path) -> Path:
    """The demo index plus the hostile and broken transcripts."""
    db_path = demo_data.build_demo(folder)
    extra = folder / "extra"
    hostile_transcript(extra)
    broken_transcript(extra)
    db = open_db(db_path)
    ingest(db, [str(extra)], config_dir=folder)
    db.conn.close()
    return db_path


class Web:
    """A Datasette on the fixture index, as ``session-index serve`` makes it."""

    def __init__(self, db_path):
        self.path = Path(db_path)
        self.ds = web.make_datasette(db_path)
        self.name = self.path.stem
        asyncio.run(self.ds.invoke_startup())

    def get(self, path, status=200):
        response = asyncio.run(self.ds.client.get(path))
        assert response.status_code == status, (path, response.text[:2000])
        return response

    def json(self, path):
        return self.get(path).json()

    def rows(self, sql, params=()):
        conn = sqlite3.connect(self.path)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in conn.execute(sql, params)]
        finally:
            conn.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return Web(build_fixture_index(tmp_path_factory.mktemp("web")))


def session_url(session_id, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return web_format.session_path(session_id) + ("?" + query if query else "")


def no_live_markup(html: str):
    """The hostile payloads appear only escaped."""
    assert "<script>" + PWN not in html
    assert "<img src=x" not in html
    assert "<svg onload" not in html
    assert 'href="javascript:' not in html
    assert "<i onmouseover" not in html


# --- metadata ----------------------------------------------------------------

def test_metadata_yml_is_generated_from_web_metadata():
    assert (ROOT / "metadata.yml").read_text() == web_metadata.metadata_yaml(), (
        "regenerate: python -m session_index_web.metadata > metadata.yml")
    data = yaml.safe_load((ROOT / "metadata.yml").read_text())
    assert list(data["databases"]) == ["sessions"]
    assert set(data["databases"]["sessions"]["queries"]) == set(web_metadata.QUERIES)


def test_no_canned_query_hides_a_table_or_view():
    assert not set(web_metadata.QUERIES) & set(web_metadata.TABLES)


def test_every_table_view_and_column_is_described(site):
    tables = web_metadata.TABLES
    names = [r["name"] for r in site.rows(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
        "AND name NOT LIKE 'sqlite_%'")]
    assert names
    for name in names:
        assert name in tables, f"{name} is not described in datasette-plugins/metadata.py"
        assert tables[name]["description"]
        columns = [r["name"] for r in site.rows(f"PRAGMA table_info('{name}')")]
        missing = [c for c in columns if c not in tables[name]["columns"]]
        assert missing == [], (name, missing)


def test_every_view_with_a_file_or_a_session_has_host(site):
    """host in every view with a file or a session per row (issue 14); the
    two without one say why (views.py): host_copies has a_host and b_host,
    usage_reported is per session across its copies. Their caches do not
    keep it."""
    from indexer.index import views

    with_host = []
    for name in views.VIEWS:
        columns = [r["name"] for r in site.rows(f"PRAGMA table_info('{name}')")]
        if any(c.endswith(("file_id", "session_id")) for c in columns):
            if name == "host_copies":
                assert {"a_host", "b_host"} <= set(columns)
            elif name != "usage_reported":
                assert "host" in columns, name
                with_host.append(name)
    assert len(with_host) == 35  # 22, session_verdicts and session_compactions (issue 25),
    # unwritten_transcripts, session_forks, thinking_faults and compaction_segments (issue 27),
    # thinking_faults_definition, session_forks_definition and usage_definition (issue 29),
    # sent_names and sent_names_definition (issue 26), verdict_facts and
    # verdict_facts_definition (issue 29)
    for cache in ("leaves_cache", "leaf_ancestry_cache", "orphans_cache"):
        assert "host" not in [r["name"] for r in site.rows(f"PRAGMA table_info('{cache}')")]
    assert {r["host"] for r in site.rows("SELECT host FROM leaves")} == {""}


def test_metadata_uses_the_files_stem_as_database_name(tmp_path):
    path = tmp_path / "my index.db"
    shutil.copy(build_fixture_index(tmp_path / "b"), path)
    other = Web(path)
    assert other.name == "my index"
    assert other.ds.plugin_config("session-index", database="my index", fallback=False)
    data = other.json("/my~20index/session_health.json?_shape=array&session_id="
                      + sid("api-error-splice"))
    assert data[0]["api_error_splices"] == 1


# --- pages of every table and view ------------------------------------------

def test_index_database_and_every_table_page(site):
    assert "Session health" in site.get("/").text  # the menu link
    db_page = site.get(f"/{site.name}").text
    for query in web_metadata.QUERIES:
        assert f"/{site.name}/{query}" in db_page
    for name in web_metadata.TABLES:
        if not site.rows("SELECT 1 FROM sqlite_master WHERE name = ?", [name]) \
                or name.endswith("_definition"):   # kept out (see below)
            continue
        html = site.get(f"/{site.name}/{name}").text
        no_live_markup(html)
        assert site.json(f"/{site.name}/{name}.json?_shape=array") is not None


def test_facets_from_metadata(site):
    data = site.json(f"/{site.name}/orphans.json")
    assert "cause" in data["facet_results"]
    causes = {f["value"] for f in data["facet_results"]["cause"]["results"]}
    assert {"api_error_splice", "parallel_tool_branch", "abandoned_branch",
            "dangling_parent", "unlinked", "other", "compacted", "progress"} <= causes


# --- canned queries ------------------------------------------------------------

def canned(site, name, **params):
    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())
    html = site.get(f"/{site.name}/{name}?{query}").text
    no_live_markup(html)
    return site.json(f"/{site.name}/{name}.json?_shape=array&{query}")


def test_canned_session_health(site):
    [splice] = canned(site, "session_health", session_id=sid("api-error-splice"))
    assert (splice["api_error_splices"], splice["leaves_agree"],
            splice["poisoned_tail"]) == (1, 1, None)
    assert json.loads(splice["orphans_by_cause"]) == {"api_error_splice": 3}
    [seed] = canned(site, "session_health", session_id=sid("seed-000"))
    assert (seed["leaves_agree"], seed["resume_leaf_uuid"] != seed["sdk_leaf_uuid"]) == (0, True)
    [poisoned] = canned(site, "session_health", session_id=sid("poisoned-tail"))
    assert (poisoned["poisoned_tail"], poisoned["failed_executions"]) == (1, 1)
    [expired] = canned(site, "session_health", session_id=sid("expired"))
    assert expired["expiry_status"] == "expired"
    [broken] = canned(site, "session_health", session_id=BROKEN_SID)
    assert (broken["chain_breaks"], broken["duplicate_uuids"]) == (1, 1)
    assert canned(site, "session_health", session_id="no-such-session") == []


def test_canned_resume_chain_and_orphans(site):
    chain = canned(site, "resume_chain", session_id=sid("rewind"))
    assert [r["depth"] for r in chain] == [3, 2, 1, 0]
    assert [r["text"] for r in chain] == [
        "Add a /health endpoint.", "Added GET /health returning 200.",
        "Now make it check the database and the cache.",
        "It checks both, in parallel, with a 2 second timeout."]
    orphans = canned(site, "session_orphans", session_id=sid("rewind"), cause="")
    assert [(r["cause"], r["type"]) for r in orphans] == [
        ("abandoned_branch", "user"), ("abandoned_branch", "assistant"),
        ("progress", "progress"), ("abandoned_branch", "system"), ("abandoned_branch", "user")]
    only = canned(site, "session_orphans", session_id=sid("rewind"), cause="progress")
    assert [r["type"] for r in only] == ["progress"]
    files = canned(site, "session_files", session_id=sid("long-session"))
    assert [(f["kind"], f["agent_id"]) for f in files] == [("main", None), ("subagent", "a1b2c3d4")]


def test_canned_operator_signals(site):
    [poisoned] = canned(site, "poisoned", since="")
    assert (poisoned["session_id"], poisoned["at_resume_tail"], poisoned["failed_resumes"]) == (
        sid("poisoned-tail"), 1, 1)
    assert canned(site, "poisoned", since="2999-01-01") == []
    stale = canned(site, "stale_refs", reason="")
    assert sorted((r["session_id"], r["reason"]) for r in stale) == sorted([
        (sid("never-indexed"), "never_indexed"), (sid("deleted"), "deleted"),
        (sid("expired"), "expired")])
    assert [r["reason"] for r in canned(site, "stale_refs", reason="deleted")] == ["deleted"]
    expiring = canned(site, "expiring_transcripts", days=7)
    assert [(r["session_id"], r["status"]) for r in expiring] == [
        (sid("expired"), "expired"), (sid("expiring"), "expiring")]
    assert [r["status"] for r in canned(site, "expiring_transcripts", days=-5)] == ["expired"]
    # Past the view's 7-day window: every live main transcript expires within a year.
    year = canned(site, "expiring_transcripts", days=366)
    live = site.rows("SELECT count(*) AS n FROM files WHERE kind = 'main' AND deleted_at IS NULL")
    assert len(year) == live[0]["n"] > len(expiring)
    splices = canned(site, "splices", min_orphaned="")
    assert [(r["session_id"], r["orphaned_records"]) for r in splices] == [
        (sid("seed-000"), 1), (sid("api-error-splice"), 3)]
    assert len(canned(site, "splices", min_orphaned=2)) == 1
    failed = canned(site, "failed_runs", error_class="")
    assert sorted(r["error_class"] for r in failed) == ["poisoned_previous_message_id",
                                                        "resume_not_found"]
    [missing] = canned(site, "failed_runs", error_class="resume_not_found")
    assert missing["resume_target"] == sid("never-indexed")
    assert missing["error_message"] == (
        f"No conversation found with session ID: {sid('never-indexed')}")


# --- the health page -----------------------------------------------------------

def test_health_page(site):
    html = site.get("/-/session-health").text
    [last] = site.rows("SELECT value FROM index_meta WHERE key = 'last_ingest_at'")
    assert f'<strong class="si-last-ingest">{last["value"]}</strong>' in html
    labels = [c.label for c in web_health.CHECKS]
    positions = {label: html.find(str(Markup.escape(label))) for label in labels}
    assert all(p > 0 for p in positions.values()), positions
    for check in web_health.CHECKS:
        assert f'href="/{site.name}/{check.name}' in html
    assert f'href="/{site.name}/orphans?cause=parallel_tool_branch"' in html
    # Grouped by severity, in order; in each group classes with problems come
    # first, newest first, empty ones after.
    table = html[html.index("Problems by class"):html.index("Recent sessions")]
    starts = [table.index(f'class="si-severity si-sev-{key}') for key, _, _ in
              SEVERITIES]
    assert starts == sorted(starts)
    for key, title, _ in SEVERITIES:
        group = table[table.index(f'si-sev-{key}'):].split("</section>")[0]
        assert title in group
        labels_here = [c.label for c in web_health.CHECKS if c.severity == key]
        assert all(str(Markup.escape(label)) in group for label in labels_here)
        counts = [int(n) for n in re.findall(r'<td class="si-count">(\d+)</td>', group)]
        assert counts == sorted(counts, key=lambda n: n == 0)
        newest = re.findall(r'<td class="si-count">[1-9]\d*</td>\s*<td>([^<]+)</td>', group)
        assert newest == sorted(newest, reverse=True)
    now = table[table.index("si-sev-now"):].split("</section>")[0]
    assert "Poisoned: a resume names an id the API refuses" in now
    assert "Abandoned branches" not in now
    # Recent sessions with their title and state, linking to their page.
    sessions = html[html.index("Recent sessions"):html.index("Newest problems")]
    assert session_url(sid("poisoned-tail")) in sessions and ">poisoned<" in sessions
    recent = html[html.index("Newest problems"):]
    whens = re.findall(r"<tr>\s*<td>([^<]+)</td>", recent)
    assert whens and whens == sorted(whens, reverse=True)
    assert session_url(sid("poisoned-tail")) in recent
    no_live_markup(html)


def test_health_checks_skip_missing_names_and_report_bad_sql(site):
    db = site.ds.get_database(site.name)
    checks = (web_health.Check("not there", "no_such_view", "SELECT 1"),
              web_health.Check("broken", "files", "SELECT nonsense FROM files"),
              web_health.Check("deleted", "files", "SELECT session_id, deleted_at AS at, "
                               "path AS detail FROM files WHERE deleted_at IS NOT NULL"))
    results, recent = asyncio.run(web_health.run_checks(db, checks))
    assert [(r.check.label, r.total, bool(r.error)) for r in results] == [
        ("deleted", 1, False), ("broken", 0, True)]
    assert [row["session_id"] for row, _ in recent] == [sid("deleted")]


@pytest.mark.parametrize("read_at_most", [0, 1, web_health.READ_AT_MOST])
def test_health_checks_count_and_list_what_their_sql_gives(site, monkeypatch, read_at_most):
    """Every check's total, newest time and newest rows are those of all its
    rows, whether it is counted from the rows it read or on its own (more
    rows than READ_AT_MOST)."""
    monkeypatch.setattr(web_health, "READ_AT_MOST", read_at_most)
    monkeypatch.setattr(web_health, "RECENT_PER_CHECK", 3)
    db = site.ds.get_database(site.name)
    results, _ = asyncio.run(web_health.run_checks(db))
    assert results and not [r.check.label for r in results if r.error]
    assert max(r.total for r in results) > web_health.RECENT_PER_CHECK
    for r in results:
        every = [(row["session_id"], row["at"], row["detail"]) for row in site.rows(
            f"SELECT session_id, at, detail FROM ({r.check.sql})")]
        dated = sorted((row[1] for row in every if row[1] is not None), reverse=True)
        assert r.total == len(every), r.check.label
        assert r.newest == (dated[0] if dated else None), r.check.label
        shown = [(row["session_id"], row["at"], row["detail"]) for row in r.rows]
        assert len(shown) == min(len(every), web_health.RECENT_PER_CHECK), r.check.label
        assert all(row in every for row in shown), r.check.label
        newest = (dated + [None] * len(every))[:len(shown)]
        assert [row[1] for row in shown] == newest, r.check.label


def test_health_checks_of_a_view_that_computes_every_row_read_it_once(site):
    """The checks that filter one of ONE_PASS_VIEWS (views that compute all
    their rows whatever the filter) read it in one statement, not once each;
    test_health_checks_count_and_list_what_their_sql_gives holds their answers."""
    db = site.ds.get_database(site.name)
    statements = []

    class Recorder:
        async def execute(self, sql, params=None):
            statements.append(sql)
            return await db.execute(sql, params)

    asyncio.run(web_health.run_checks(Recorder()))
    groups = {name: [c.sql for c in web_health.CHECKS if c.name == name and c.reads_view]
              for name in web_health.ONE_PASS_VIEWS}
    assert len(groups["session_forks"]) == 2 and len(groups["expired_transcripts"]) == 2
    for name, group in groups.items():
        reading = [sql for sql in statements if any(check in sql for check in group)]
        assert len(reading) == 1 and all(check in reading[0] for check in group), name


def test_stylesheet_is_linked_from_every_page(site):
    css = site.get(CSS_URL)   # served as Datasette serves a plugin's static files
    assert css.headers["content-type"].startswith("text/css") and ".si-node" in css.text
    for path in ("/", f"/{site.name}/records", "/-/session-health"):
        assert f'<link rel="stylesheet" href="{CSS_URL}">' in site.get(path).text


def test_pages_keep_datasettes_permissions(tmp_path):
    db_path = demo_data.build_demo(tmp_path)
    meta = web_metadata.metadata("demo")
    meta["allow"] = {"id": "ops"}
    from datasette.app import Datasette
    ds = Datasette([str(db_path)], metadata=meta)
    record_id = sqlite3.connect(db_path).execute("SELECT max(id) FROM records").fetchone()[0]
    for path in ("/-/session-health", session_url(sid("seed-000")),
                 f"/-/session-record/{record_id}", "/demo/splices.json"):
        assert asyncio.run(ds.client.get(path)).status_code == 403, path
    ops = {"ds_actor": ds.sign({"a": {"id": "ops"}}, "actor")}
    assert asyncio.run(ds.client.get("/-/session-health", cookies=ops)).status_code == 200


def test_session_lookup_redirects(site):
    r = site.get("/-/sessions?session_id=" + quote(HOSTILE_SID, safe=""), status=302)
    assert r.headers["location"] == session_url(HOSTILE_SID)
    assert site.get("/-/sessions", status=302).headers["location"] == "/-/session-health"


# --- the session page ------------------------------------------------------------

def nodes(html):
    """(uuid, cause label, marks) of every node on a session page."""
    out = []
    for m in re.finditer(r'<div class="si-node[^"]*" id="u-([^"]*)".*?<span class="si-cause">'
                         r'([^<]*)</span>(.*?)</div>', html):
        marks = re.findall(r'<span class="si-mark [^"]*">([^<]*)</span>', m.group(3))
        out.append((html_unescape(m.group(1)), m.group(2), [html_unescape(k) for k in marks]))
    return out


def test_session_page_splice(site):
    html = site.get(session_url(sid("api-error-splice"))).text
    drawn = nodes(html)
    assert [c for _, c, _ in drawn] == [
        "resume chain", "resume chain", "resume chain", "api_error_splice", "api_error_splice",
        "api_error_splice", "resume chain", "resume chain", "resume chain", "resume chain",
        "resume chain"]
    assert [m for _, _, m in drawn if m] == [["api_error"], ["api_error"], ["leaf (both readers)"]]
    assert "api_error splice: 3 records" in html
    assert 'class="si-fold' not in html  # small: nothing folded


def test_session_page_marks_both_leaves_when_they_differ(site):
    html = site.get(session_url(sid("seed-000"))).text
    marks = {m for _, _, ms in nodes(html) for m in ms}
    assert {"resume leaf", "SDK leaf", "on the SDK's chain", "api_error"} <= marks
    assert "leaves differ" in html
    # The rule of the current CLI that picked the resume leaf: the late
    # stop_hook_summary is the last row in file order.
    assert "picked by the <code>last_row</code> rule of Claude Code 2.1.332" in html


def test_session_page_counts_what_the_cli_puts_back(site):
    html = site.get(session_url(sid("parallel-tools"))).text
    assert "put back by the CLI after its walk" in html


def test_session_page_poisoned_compaction_parallel(site):
    poisoned = nodes(site.get(session_url(sid("poisoned-tail"))).text)
    assert poisoned[-1][2] == ["leaf (both readers)",
                               "synthetic placeholder, No response requested.: Claude Code's "
                               "placeholder for a turn that got no answer (after an interrupt "
                               "or an auto-resume prompt); sent on resume as written"]
    compaction = site.get(session_url(sid("compaction"))).text
    assert "Compacted history" in compaction
    assert {c for _, c, _ in nodes(compaction)} == {"compacted", "resume chain"}
    assert {"compaction", "compact summary"} <= {m for _, _, ms in nodes(compaction) for m in ms}
    parallel = nodes(site.get(session_url(sid("parallel-tools"))).text)
    assert [c for _, c, _ in parallel].count("parallel_tool_branch") == 1


def test_session_page_folds_a_long_session_and_reaches_its_subagent(site):
    html = site.get(session_url(sid("long-session"))).text
    assert html.count('class="si-fold si-fold-progress"') >= 4
    assert re.search(r"\d+ more records, ", html)
    assert len(nodes(html)) == 422  # every record is in the page, folded or not
    [sub] = site.rows("SELECT id FROM files WHERE agent_id = 'a1b2c3d4'")
    link = session_url(sid("long-session"), file=sub["id"], database=site.name)
    assert link.replace("&", "&amp;") in html
    subpage = site.get(link).text
    assert "Review the lint fixes" in subpage and "si-current" in subpage
    site.get(session_url(sid("long-session"), file=999999), status=404)


def test_session_page_draws_a_window_and_links_the_others(site, monkeypatch):
    whole = site.get(session_url(sid("long-session"))).text
    order = [u for u, _, _ in nodes(whole)]
    verdict = re.search(r'data-verdict="([^"]*)" data-cause="([^"]*)"', whole).groups()
    assert len(order) == 422 and 'class="si-window"' not in whole
    monkeypatch.setattr(web_tree, "WINDOW", 100)
    [f] = site.rows("SELECT main_file_id AS id FROM sessions WHERE session_id = ?",
                    [sid("long-session")])
    first = site.get(session_url(sid("long-session"))).text
    assert [u for u, _, _ in nodes(first)] == order[:100]
    assert "Records 1&ndash;100 of 422 in the order drawn" in first
    nxt = session_url(sid("long-session"), file=f["id"], database=site.name, start=100)
    assert f'<a href="{nxt.replace("&", "&amp;")}" rel="next">next</a>' in first
    assert 'rel="prev"' not in first
    seen = []
    for start in (0, 100, 200, 300, 400):
        page = site.get(session_url(sid("long-session"), start=start)).text
        seen += [u for u, _, _ in nodes(page)]
        # the verdict and the summary are the whole file's on every window
        assert re.search(r'data-verdict="([^"]*)" data-cause="([^"]*)"', page).groups() == verdict
        assert "records on the resume chain of 422 chain records" in page
    assert seen == order
    middle = site.get(session_url(sid("long-session"), start=250)).text   # the window of 200
    for rel, at_start in (("first", 0), ("prev", 100), ("next", 300), ("last", 400)):
        url = session_url(sid("long-session"), file=f["id"], database=site.name, start=at_start)
        assert f'<a href="{url.replace("&", "&amp;")}" rel="{rel}">' in middle, rel
    last = site.get(session_url(sid("long-session"), start=999)).text
    assert "Records 401&ndash;422 of 422" in last and 'rel="next"' not in last
    # A record's link opens the window that draws it; the leaf's link in the
    # summary, drawn in the last window, leads there from the first.
    target = order[250]
    at = site.get(session_url(sid("long-session"), at=target)).text
    assert [u for u, _, _ in nodes(at)] == order[200:300]
    [row] = site.rows("SELECT resume_leaf_uuid FROM leaves WHERE file_id = ?", [f["id"]])
    leaf = row["resume_leaf_uuid"]
    href = session_url(sid("long-session"), file=f["id"], database=site.name, at=leaf) \
        + "#u-" + quote(leaf, safe="")
    if leaf not in order[:100]:
        assert f'href="{href.replace("&", "&amp;")}"' in first
    assert f'href="#u-{quote(leaf, safe="")}"' in site.get(
        session_url(sid("long-session"), at=leaf)).text
    # a hostile or unknown ?start= / ?at= is the first window, never an error
    for args in ({"start": "-5"}, {"start": "9" * 40}, {"start": quote("\u00b2")},
                 {"at": quote("<script>")}):
        page = site.get(session_url(sid("long-session"), **args)).text
        assert [u for u, _, _ in nodes(page)] == order[:100]
        no_live_markup(page)


def test_session_page_broken_transcript(site):
    html = site.get(session_url(BROKEN_SID)).text
    causes = dict((u, c) for u, c, _ in nodes(html))
    assert (causes["b3"], causes["b5"], causes["b6"], causes["b7"]) == (
        "dangling_parent", "unlinked", "other", "other")
    assert "parent missing" in html and "In parent cycles" in html
    assert "chain break" in html


def test_unknown_session_is_404(site):
    html = site.get(session_url("<b>nope</b>"), status=404).text
    assert "&lt;b&gt;nope&lt;/b&gt;" in html


def test_record_raw_is_pretty_text(site):
    [rec] = site.rows("SELECT id, raw FROM records WHERE uuid = ?", [HOSTILE_UUID])
    r = site.get(f"/-/session-record/{rec['id']}?database={site.name}")
    assert r.headers["content-type"].startswith("text/plain")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.text == web_format.pretty_json(rec["raw"])
    assert json.loads(r.text) == json.loads(rec["raw"])
    site.get("/-/session-record/99999999", status=404)


def test_hostile_transcript_renders_as_text(site):
    page = site.get(session_url(HOSTILE_SID)).text
    no_live_markup(page)
    assert Markup.escape(HOSTILE_TEXT)[:60] in page
    assert f'id="u-{Markup.escape(HOSTILE_UUID)}"' in page
    [rec] = site.rows("SELECT id FROM records WHERE uuid = 'h2'")
    for path in (f"/{site.name}/records?session_id={quote(HOSTILE_SID, safe='')}",
                 f"/{site.name}/records/{rec['id']}", f"/{site.name}/orphans",
                 f"/{site.name}/files", f"/{site.name}/sessions", "/-/session-health"):
        no_live_markup(site.get(path).text)


# --- render_cell -----------------------------------------------------------------

def test_render_cell_in_tables(site):
    html = site.get(f"/{site.name}/orphans?session_id={sid('api-error-splice')}").text
    assert f'<a href="{session_url(sid("api-error-splice"))}">' in html
    # a uuid opens the window of the session page that draws it (?at=)
    assert re.search(r'<a href="/-/sessions/[^"]+\?file=\d+&amp;at=[^"#]+#u-[^"]+">', html)
    assert 'class="si-badge" style="background:#c62828" title="cause">api_error_splice' in html
    [rec] = site.rows("SELECT id FROM records WHERE message_id LIKE '%-%' AND type = 'assistant' "
                      "AND session_id = ?", [sid("poisoned-tail")])
    row = site.get(f"/{site.name}/records/{rec['id']}").text
    assert 'title="a synthetic placeholder (model &lt;synthetic&gt;)">synthetic</span>' in row
    assert '<pre class="si-json">{\n  &#34;parentUuid&#34;' in row
    failed = site.get(f"/{site.name}/failed_executions").text
    assert 'title="error_class">resume_not_found</span>' in failed


def test_render_cell_unit():
    class Urls:
        def path(self, p):
            return "/base" + p

        def row(self, db, table, pk, format=None):
            return f"/base/{db}/{table}/{pk}.{format}"

    class Row(dict):
        pass

    urls = Urls()
    r = Row(session_id="s 1", file_id=4, type="user", id=9)
    assert web_cells.render_cell(r, "s 1", "session_id", "records", "d", urls) == \
        '<a href="/base/-/sessions/s%201">s 1</a>'
    assert web_cells.render_cell(r, '"x', "uuid", "records", "d", urls) == \
        '<a href="/base/-/sessions/s%201?file=4&amp;at=%22x#u-%22x">&#34;x</a>'
    # a user record's message_id is not a placeholder's
    assert web_cells.render_cell(r, "abc", "message_id", "records", "d", urls) is None
    assert "synthetic" in web_cells.render_cell(Row(model="<synthetic>"), "abc", "message_id",
                                                None, "d", urls)
    assert web_cells.render_cell(Row(), "msg_1", "message_id", None, "d", urls) is None
    assert "ok</span>" in web_cells.render_cell(Row(), "ok", "error_class", None, "d", urls)
    assert web_cells.render_cell(Row(), "weird", "error_class", None, "d", urls) is None
    assert "leaves differ" in web_cells.render_cell(Row(), 0, "leaves_agree", None, "d", urls)
    assert web_cells.render_cell(Row(), 1, "leaves_agree", None, "d", urls) is None
    big = '{"a": "' + "x" * 30000 + '"}'
    cell = web_cells.render_cell(r, big, "raw", "records", "d", urls)
    assert "more characters" in cell and "/base/d/records/9.json" in cell
    assert web_cells.render_cell(r, b"\x00", "raw", "bad_lines", "d", urls) is None
    assert web_cells.render_cell(r, 5, "other", "records", "d", urls) is None


def test_render_cell_leaves_other_databases_alone(tmp_path):
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (session_id TEXT, raw TEXT)")
    conn.execute("INSERT INTO t VALUES ('s1', '{\"a\":1}')")
    conn.commit()
    conn.close()
    from datasette.app import Datasette
    ds = Datasette([str(other)])
    for _ in range(2):   # (asked, then known: render_cell answers at once)
        html = asyncio.run(ds.client.get("/other/t")).text
        assert "/-/sessions/s1" not in html and "si-json" not in html
    assert asyncio.run(ds.client.get("/-/session-health")).status_code == 404


def test_pages_find_the_index_without_metadata(site):
    from datasette.app import Datasette
    ds = Datasette([str(site.path)])
    html = asyncio.run(ds.client.get("/-/session-health")).text
    assert "Problems by class" in html and f'href="/{site.name}/leaves?leaves_agree=0"' in html


# --- SQL functions -----------------------------------------------------------------

def test_sql_functions(site):
    sql = ("select is_synthetic('assistant', 'claude-x') a, is_synthetic('assistant', '<synthetic>') b, "
           "is_synthetic(null, null) c, json_excerpt(raw, 20) d from records "
           "where uuid = :u")
    data = site.json(f"/{site.name}.json?_shape=array&sql={quote(sql)}&u={quote(HOSTILE_UUID)}")
    assert data == [{"a": 0, "b": 1, "c": None,
                     "d": "<script>window.__pw\u2026"}]
    assert web_format.json_excerpt('{"type":"system","subtype":"api_error",'
                                   '"error":{"message":"429  rate\\nlimit"}}') == "429 rate limit"
    assert web_format.json_excerpt("not json at all", 8) == "not jso\u2026"
    assert web_format.json_excerpt('{"message":{"content":[{"type":"tool_result","content":'
                                   '[{"type":"text","text":"ok"}]}]}}') == "result: ok"
    assert web_format.json_excerpt(None) is None


def test_title_lookups_use_the_titles_index(site):
    """The session page's title (listings.SESSION_TITLE_TEMPLATE): each of
    custom-title, ai-title and summary is found through records_titles, not
    by reading every record of the file (a 10,000-record session: 140 ms
    -> 45 ms for the title)."""
    from session_index_web import pages as web_pages
    conn = sqlite3.connect(site.path)
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + web_pages.SESSION_TITLES_SQL,
                                       {"ids": json.dumps([sid("seed-000")])})]
    conn.close()
    assert sum("USING INDEX records_titles" in step for step in plan) == 3, plan


def test_title_first_prompt_is_looked_for_in_file_order(site):
    """The title's first prompt walks the file's records in byte order
    (records_file_offset) and stops at the first user record with one,
    rather than taking every user record's text blocks and sorting them by
    line (33-38 ms -> 0.5 ms for a 10,000-record session)."""
    from session_index_web import pages as web_pages
    conn = sqlite3.connect(site.path)
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + web_pages.SESSION_TITLES_SQL,
                                       {"ids": json.dumps([sid("seed-000")])})]
    conn.close()
    assert "SEARCH u USING INDEX records_file_offset (file_id=?)" in plan, plan


def test_session_page_layout_reads_a_file_by_its_index(site):
    """The tree's layout and the count of a file's other records read one
    file's records by an index on file_id, never the whole table."""
    conn = sqlite3.connect(site.path)
    for sql in (web_tree.TREE_NODES_SQL, web_tree.OTHER_RECORDS_SQL):
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, {"file_id": 1})]
        reads = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
        assert reads and all(step.startswith("SEARCH") and "(file_id=?" in step
                             for step in reads), plan
    conn.close()


def test_session_page_layout_reads_a_file_in_file_order(site):
    """The layout reads a file's records in the order of records_file_offset
    and sorts nothing (by records_file_uuid it read them in uuid order and
    sorted them: twice the time for a large file), and gives the rows it
    gave in line order; the count of the other records reads the file in
    that order too (by records_file_parent, in parent order: 4-8x the time)."""
    conn = sqlite3.connect(site.path)
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + web_tree.TREE_NODES_SQL,
                                       {"file_id": 1})]
    assert plan[0].startswith("SEARCH r USING INDEX records_file_offset (file_id=?)"), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
    other = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + web_tree.OTHER_RECORDS_SQL,
                                        {"file_id": 1})]
    assert other[0].startswith("SEARCH records USING INDEX records_file_offset (file_id=?"), other
    by_line = web_tree.TREE_NODES_SQL.replace("ORDER BY r.byte_offset", "ORDER BY r.line_no")
    assert by_line != web_tree.TREE_NODES_SQL
    files = [f for (f,) in conn.execute("SELECT id FROM files")]
    for f in files:
        assert (conn.execute(web_tree.TREE_NODES_SQL, {"file_id": f}).fetchall()
                == conn.execute(by_line, {"file_id": f}).fetchall()), f
    assert sum(conn.execute("SELECT count(*) FROM records WHERE file_id = ?", [f]).fetchone()[0]
               for f in files) > 100
    conn.close()


def test_poisoned_tail_asked_only_of_a_file_with_a_placeholder(site):
    """POISONED_TAIL_SQL looks at poisoned_sessions only for a file with a
    synthetic placeholder, and answers as the view does for every file."""
    from session_index_web import pages as web_pages
    conn = sqlite3.connect(site.path)
    view = "SELECT count(*) FROM poisoned_sessions WHERE file_id = ? AND at_resume_tail"
    answers = {f: (conn.execute(web_pages.POISONED_TAIL_SQL, {"file_id": f}).fetchone()[0],
                   conn.execute(view, [f]).fetchone()[0])
               for (f,) in conn.execute("SELECT id FROM files")}
    conn.close()
    assert all(ours == theirs for ours, theirs in answers.values()), answers
    assert any(ours for ours, _ in answers.values())   # the fixture has a poisoned tail


def test_session_page_offers_a_repaired_download_where_a_repair_changes_something(site):
    """The session page's summary lane decides whether a repair changes the
    file (splices, refused thinking, a truncation, a poisoned tail): a
    poisoned tail alone offers the repaired download, a plain session none."""
    from session_index_web import pages as web_pages
    conn = sqlite3.connect(site.path)
    [(file_id,)] = conn.execute("SELECT main_file_id FROM sessions WHERE session_id = ?",
                                [sid("poisoned-tail")]).fetchall()
    assert conn.execute(web_pages.FILE_SPLICES_SQL, {"file_id": file_id}).fetchall() == []
    assert conn.execute(web_pages.POISONED_TAIL_SQL, {"file_id": file_id}).fetchone()[0] > 0

    def nothing_to_repair(f):
        return not any(conn.execute(sql, {"file_id": f}).fetchall() for sql in (
            web_pages.FILE_SPLICES_SQL, web_pages.FILE_THINKING_SQL,
            "SELECT 1 FROM compaction_segments WHERE file_id = :file_id AND truncated IS NOT NULL"
        )) and conn.execute(web_pages.POISONED_TAIL_SQL, {"file_id": f}).fetchone()[0] == 0
    plain = [s for s, f in conn.execute("SELECT session_id, main_file_id FROM sessions "
                                        "WHERE main_file_id IS NOT NULL ORDER BY session_id")
             if nothing_to_repair(f)]
    conn.close()
    assert "repaired</a>" in site.get(session_url(sid("poisoned-tail"))).text
    assert plain and "repaired</a>" not in site.get(session_url(plain[0])).text


def test_session_page_reads_refused_thinking_from_the_cache(site):
    """The session page's thinking alerts read thinking_cache (kept at
    ingest, held equal to its definition by the cache tests), not every
    record of the file."""
    from session_index_web import pages as web_pages
    conn = sqlite3.connect(site.path)
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + web_pages.FILE_THINKING_SQL,
                                       {"file_id": 1})]
    conn.close()
    assert any("thinking_cache" in step for step in plan), plan


def test_pretty_json_changes_only_whitespace():
    raw = ('{"a":1,"a":2,"n":NaN,"big":123456789012345678901234567890,'
           '"s":"x\\ud800\\"{[,:]}","e":{},"l":[],"deep":[[{"k":[1,2]}]]}')
    pretty = web_format.pretty_json(raw)
    assert pretty.startswith('{\n  "a": 1,\n  "a": 2,\n  "n": NaN,')
    assert '"s": "x\\ud800\\"{[,:]}"' in pretty and '"e": {}' in pretty
    tokens = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s"{}\[\],:]+')
    assert tokens.findall(pretty) == tokens.findall(raw)
    assert web_format.pretty_json("plain text") == "plain text"


# --- the tree layout ------------------------------------------------------------------

def row(uuid, parent, type_="user", **kw):
    base = dict(id=abs(hash(uuid)) % 10**9, line_no=1, uuid=uuid, parent_uuid=parent,
                logical_parent_uuid=None, type=type_, subtype=None, timestamp="t",
                is_sidechain=0, model=None, message_id=None, is_api_error=0,
                is_compact_summary=0, excerpt="x")
    base.update(kw)
    return base


def test_tree_layout_is_iterative_and_folds():
    n = 20000
    rows = [row(f"n{i}", f"n{i - 1}" if i else None) for i in range(n)]
    # A long abandoned branch off n5, with a fork at every step of its first 2,000.
    rows += [row(f"a{i}", f"a{i - 1}" if i else "n5") for i in range(3000)]
    rows += [row(f"f{i}", f"a{i}") for i in range(2000)]
    rows += [row(f"p{i}", "n7" if i == 0 else f"p{i - 1}", "progress") for i in range(50)]
    rows += [row("c1", "c2"), row("c2", "c1")]
    ancestry = [{"uuid": f"n{i}", "rule": "resume"} for i in reversed(range(n))]
    causes = {f"a{i}": "abandoned_branch" for i in range(3000)}
    tree = web_tree.build(rows, ancestry, causes, {"resume_leaf_uuid": f"n{n - 1}",
                                                   "sdk_leaf_uuid": f"n{n - 1}"})
    whole = web_tree.window(tree, 0, size=10**6)
    html = str(web_tree.render(whole["spine"], lambda i: f"/r/{i}"))
    assert html.count('<div class="si-node') == n + 3000 + 2000 + 50
    assert "50 progress records" in html
    assert 'class="si-fold si-fold-stretch"' in html
    [(_, cause, cyclic)] = whole["groups"]
    assert cause == "other" and len(list(web_tree._flatten(cyclic))) == 2
    # Windows of 500 split the drawn order: each record in exactly one, the
    # window of a record the one drawing it.
    order = [node.row["uuid"] for node in web_tree.drawn(tree)]
    assert len(order) == len(set(order)) == n + 3000 + 2000 + 50 + 2
    seen = []
    for start in range(0, len(order), 500):
        part = web_tree.window(tree, start, 500)
        seen += [node.row["uuid"] for node in part["nodes"]]
        assert len(part["nodes"]) == min(500, len(order) - start)
    assert seen == order
    assert web_tree.window_start(tree, 0, 500, "c2") == (len(order) - 1) // 500 * 500
    assert web_tree.window_start(tree, 0, 500, "a7") == order.index("a7") // 500 * 500
    assert web_tree.window_start(tree, 777, 500, "no such uuid") == 500
    assert web_tree.window_start(tree, 10**9, 500) == (len(order) - 1) // 500 * 500


# --- the commands and the plugins folder ----------------------------------------------

def test_serve_and_demo_commands(tmp_path):
    runner = CliRunner()
    for name in ("serve", "demo"):
        result = runner.invoke(cli, [name, "--help"])
        assert result.exit_code == 0 and "Example:" in result.output
    result = runner.invoke(cli, ["serve", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 3 and "no index at" in result.output
    (tmp_path / "junk.db").write_bytes(b"not sqlite" * 100)
    result = runner.invoke(cli, ["serve", "--db", str(tmp_path / "junk.db")])
    assert result.exit_code == 3 and "not" in result.output and "Traceback" not in result.output
    result = runner.invoke(cli, ["demo", "--dir", str(tmp_path / "d"), "--no-serve"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(tmp_path / "d" / "demo.db")
    again = runner.invoke(cli, ["demo", "--dir", str(tmp_path / "d"), "--no-serve"])
    assert again.exit_code == 0
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    refused = runner.invoke(cli, ["demo", "--dir", str(tmp_path / "full"), "--no-serve"])
    assert refused.exit_code == 3 and "not empty" in refused.output


def test_serve_refuses_a_taken_port(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        db = demo_data.build_demo(tmp_path)
        result = CliRunner().invoke(cli, ["serve", "--db", str(db), "--port", str(port)])
    assert result.exit_code == 3 and "cannot listen" in result.output


@pytest.mark.parametrize("args", [["serve"], ["demo", "--no-serve"], ["mcp", "--http"]])
@pytest.mark.parametrize("port", ["99999", "-1", "0"])
def test_a_port_out_of_range_is_a_usage_error(tmp_path, args, port):
    # serve and demo took any int and bind() failed: "internal error,
    # OverflowError" and exit 3; mcp --port gave click's range error.
    result = CliRunner().invoke(cli, [*args, "--port", port, "--db" if args[0] != "demo"
                                      else "--dir", str(tmp_path / "x")])
    assert result.exit_code == 2, result.output
    assert f"{port} is not in the range 1<=x<=65535" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("with_metadata", [False, True])
def test_plain_datasette_command_on_any_name(site, tmp_path, with_metadata):
    """datasette some-name.db (the plugin from its entry point; no metadata,
    no plugins dir), and with -m metadata.yml, keyed by another name."""
    shutil.copy(site.path, tmp_path / "some-name.db")
    datasette = Path(sys.executable).parent / "datasette"
    extra = ["-m", str(ROOT / "metadata.yml")] if with_metadata else []
    checks = [("/-/session-health", "Session health"),
              (session_url(sid("seed-000")), "leaves differ"),
              ("/some-name/splices.json?_shape=array&min_orphaned=", sid("seed-000")),
              (CSS_URL, ".si-node")]
    checks += [(f"/some-name/{name}.json?_shape=array", "[") for name in web_metadata.QUERIES]
    # One server of the plain command for every path (a `--get` run per path
    # started Datasette 16 times); each must answer 200 itself, as --get requires.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "datasette.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([str(datasette), str(tmp_path / "some-name.db"), *extra,
                                 "--port", str(port)], stdout=err, stderr=subprocess.STDOUT)

    def get(path):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                get("/-/versions.json")
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        for path, needle in checks:
            status, body = get(path)
            assert status == 200, (path, body[:2000])
            assert needle in body, path
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_package_build_carries_plugins_templates_and_styles(tmp_path):
    """What setuptools puts in the wheel (build_py): the plugins folder as
    session_index_web, the templates and the stylesheet, and every
    subpackage of the core."""
    out = subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q",
                          "build_py", "-d", str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    built = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    plugins = {f"session_index_web/{p.name}"
               for p in (ROOT / "datasette-plugins").glob("*.py")}
    assert plugins and plugins <= built
    assert {"session_index_web/templates/session_health.html",
            "session_index_web/templates/session_tree.html",
            "session_index_web/static/session-index.css", "indexer/cli/serve.py",
            "indexer/index/new_index.json", "indexer/index/prices.json"} <= built
    core = {str(p.relative_to(ROOT)) for p in (ROOT / "indexer").rglob("*.py")}
    assert core <= built


def test_session_page_downloads_original_and_repaired(site):
    from indexer.repair import repair as repairmod
    from indexer.index.db import open_db
    from indexer.ingest.files import stored_bytes

    html = site.get(session_url(sid("api-error-splice"))).text
    links = re.findall(r'href="(/-/session-download/\d+/(?:original|repaired))"', html)
    assert [l.rsplit("/", 1)[1] for l in links] == ["original", "repaired"]
    index = open_db(site.path)
    file_id = int(links[0].split("/")[3])
    original = site.get(links[0])
    assert original.headers["content-disposition"].startswith("attachment")
    assert original.content == b"".join(stored_bytes(index.conn, file_id, with_pending=True))
    repaired = site.get(links[1]).content
    plan = repairmod.plan(index, sid("api-error-splice"))
    assert repaired == repairmod.repaired_bytes(index, plan) != original.content
    # The repaired file's resume chain holds the recovered output.
    lines = [json.loads(l) for l in repaired.splitlines()]
    hook = next(l for l in lines if l.get("subtype") == "stop_hook_summary")
    assert hook["parentUuid"] in {o for o in plan.orphaned if plan.orphaned[o] == "api_error_splice"}
    # A session with nothing to repair offers only the original.
    clean = site.get(session_url(sid("parallel-tools"))).text
    assert "/repaired" not in clean and "/original" in clean
    site.get("/-/session-download/999999/original", status=404)


def test_session_page_lists_the_generations_of_a_rewritten_transcript(site, tmp_path):
    sid_ = "cccccccc-0000-4000-8000-000000000001"
    t = Transcript(sid_)
    t.add("g1", None, "user")
    t.add("g2", "g1", "assistant")
    path = t.write(tmp_path / "projects" / "-tmp-gen")
    first = path.read_bytes()
    db_path = tmp_path / "gen.db"
    db = open_db(db_path)
    ingest(db, [str(tmp_path / "projects")], config_dir=tmp_path)
    t.records = t.records[:1]
    t.write(tmp_path / "projects" / "-tmp-gen")  # shrunk: generation 2
    ingest(db, [str(tmp_path / "projects")], config_dir=tmp_path)
    [gen] = db.conn.execute("SELECT started_at, superseded_at FROM superseded_generations"
                            ).fetchall()
    db.conn.close()
    site_ = Web(db_path)
    html = site_.get(session_url(sid_)).text
    no_live_markup(html)
    rows = re.findall(r"<tr[^>]*><td>(\d+)( \(current\))?</td>\s*<td>([^<]*)</td><td>([^<]*)</td>"
                      r"<td>([^<]*)</td>\s*<td>(\d+)</td>", html)
    assert rows == [("1", "", gen[0], gen[1], "shrunk", "2"),
                    ("2", " (current)", gen[1], "", "", "1")]
    assert ", generation 2" in html
    links = re.findall(r'href="(/-/session-download/\d+/original\?generation=(\d))"', html)
    assert [n for _, n in links] == ["1", "2"]
    old = site_.get(links[0][0])
    assert old.content == first
    assert "generation-1.jsonl" in old.headers["content-disposition"]
    assert site_.get(links[1][0]).content == path.read_bytes()
    site_.get(links[0][0].replace("generation=1", "generation=7"), status=404)
    site_.get(links[0][0].replace("generation=1", "generation=x"), status=404)
    for name in ("superseded_generations", "superseded_lines", "file_generations"):
        no_live_markup(site_.get(f"/{site_.name}/{name}").text)
        assert site_.json(f"/{site_.name}/{name}.json?_shape=array")
    # A transcript never rewritten has no generations table.
    assert "Generations of this transcript" not in site.get(session_url(sid("parallel-tools"))).text


def test_datasette_plugins_lists_the_plugin():
    datasette = Path(sys.executable).parent / "datasette"
    out = subprocess.run([str(datasette), "plugins"], capture_output=True, text=True, timeout=60)
    [plugin] = [p for p in json.loads(out.stdout) if p["name"] == "session-index"]
    assert plugin["static"] and plugin["templates"]
    assert {"canned_queries", "register_routes", "render_cell", "prepare_connection"} <= set(
        plugin["hooks"])


@pytest.mark.parametrize("name,state,fix", [
    ("poisoned-tail", "poisoned", "session-index repair {sid} --write"),
    ("api-error-splice", "spliced", "session-index repair {sid} --write"),
    ("deleted", "missing", "session-index restore {sid}"),
    ("parallel-tools", "resumable", None),
])
def test_the_session_page_opens_with_the_verdict_and_the_fix(site, name, state, fix):
    html = site.get(session_url(sid(name))).text
    banner = html[html.index('<div class="si-verdict'):].split("</div>")[0]
    assert html.index('<div class="si-verdict') < html.index("<h2>")   # before anything else
    assert f"si-verdict-{state}" in banner and f"<strong>{state}</strong>" in banner
    if fix:
        assert f"Fix: <code>{fix.format(sid=sid(name))}</code>" in banner
    else:
        assert "Fix:" not in banner


def test_the_definition_views_are_kept_out_of_the_listings(site):
    html = site.get(f"/{site.name}").text
    assert "orphans_definition" not in html and f'href="/{site.name}/orphans"' in html
    site.get(f"/{site.name}/orphans_definition", status=403)
    # SQL can still name them (orphans_definition: the definition views over
    # the CLI's rules take seconds to prepare, past the time limit under load).
    rows = site.get(f"/{site.name}.json?sql=select+count(*)+as+n+from+orphans_definition"
                    "&_shape=array").json()
    assert rows[0]["n"] >= 1


def test_table_pages_suggest_no_facets_but_show_their_own(site):
    """serve turns Datasette's suggested facets off (a query per column, each
    reading up to every row: about 2 s of the usage page's 2.8 s at 1M
    records); the facets the metadata names are still there, and ?_facet=
    adds any."""
    page = site.json(f"/{site.name}/usage.json?_extra=facet_results,suggested_facets")
    assert page["suggested_facets"] == []
    assert {"model", "project", "speed", "long_context"} <= set(page["facet_results"])
    extra = site.json(f"/{site.name}/usage.json?_facet=host&_extra=facet_results")
    assert "host" in extra["facet_results"]
