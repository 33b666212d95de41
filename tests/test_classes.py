"""Problem classes (indexer/signals/classes.py): each declared once, and on
every surface it declares (its view, listing command, metadata, canned query,
health rows); and the class docs/contributing.md adds as its
example, sessions with more than N compactions, on each of them."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from conftest import Transcript
from indexer.cli import serve as web
from indexer.cli.commands import cli
from indexer.index.db import open_db
from indexer.signals import classes
from indexer.signals.classes import CLASSES, COMPACTIONS_MORE_THAN, SEVERITIES
from session_index_web import health as web_health, metadata as web_metadata

ROOT = Path(__file__).resolve().parent.parent
MANY = "11111111-0000-4000-8000-000000000012"    # compacted 12 times
FEW = "11111111-0000-4000-8000-000000000003"     # 3 times
NONE = "11111111-0000-4000-8000-000000000000"    # never


# --- every class on every surface it declares ---------------------------------

@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A new index: its tables and views, each with its columns."""
    db = open_db(tmp_path_factory.mktemp("fresh") / "index.db")
    names = [r[0] for r in db.conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
    return db, {n: [r[1] for r in db.conn.execute(f"PRAGMA table_info('{n}')")] for n in names}


def _words(text: str) -> str:
    return " ".join(text.split())


def missing_surfaces(cls, fresh) -> list[str]:
    """What a class declares and a surface lacks ([] when it is whole)."""
    db, tables = fresh
    missing = []
    if cls.severity not in {key for key, _, _ in SEVERITIES} or not cls.fix:
        missing.append("severity or fix")
    columns = tables.get(cls.view_name)
    if columns is None:
        return missing + [f"view {cls.view_name} in a new index"]
    described = web_metadata.TABLES.get(cls.view_name, {})
    if not described.get("description") or set(columns) - set(described.get("columns", {})):
        missing.append(f"metadata of {cls.view_name} and each of its columns")
    if cls.listing:
        command = cli.get_command(None, cls.listing.command)
        result = CliRunner().invoke(cli, [cls.listing.command, "--help"])
        text = _words(result.output)
        if (command is None or result.exit_code != 0 or "Example:" not in text
                or f"session-index {cls.listing.command}" not in text
                or _words(cls.fix) not in text
                or not all(p.flag in text for p in cls.listing.params)):
            missing.append(f"listing command {cls.listing.command} with its help")
        else:
            try:
                db.conn.execute(classes.listing_sql(cls), {
                    "now": "2026-01-01T00:00:00.000Z",
                    **{p.name: p.default for p in cls.listing.params}}).fetchall()
            except sqlite3.Error as exc:
                missing.append(f"listing SQL: {exc}")
    if cls.query:
        canned = web_metadata.canned_queries().get(cls.query.name)
        yml = yaml.safe_load((ROOT / "metadata.yml").read_text())
        if (canned is None or canned["sql"] != cls.query.sql
                or cls.query.name not in yml["databases"]["sessions"]["queries"]
                or cls.query.name in tables):
            missing.append(f"canned query {cls.query.name}")
        else:
            params = dict.fromkeys(re.findall(r":(\w+)", cls.query.sql), "")
            try:
                db.conn.execute(cls.query.sql, params).fetchall()
            except sqlite3.Error as exc:
                missing.append(f"canned query SQL: {exc}")
    checks = {c.label: c for c in web_health.CHECKS}
    for row in cls.health:
        check = checks.get(row.label)
        if check is None or check.name != cls.view_name or check.fix != cls.fix:
            missing.append(f"health row {row.label!r}")
            continue
        try:
            cur = db.conn.execute(check.sql)
            assert [d[0] for d in cur.description] == ["session_id", "at", "detail"]
        except (sqlite3.Error, AssertionError) as exc:
            missing.append(f"health row {row.label!r}: {exc}")
    if not (cls.listing or cls.query or cls.health):
        missing.append("any surface at all")
    return missing


@pytest.mark.parametrize("cls", CLASSES, ids=[c.name for c in CLASSES])
def test_every_class_is_on_every_surface_it_declares(cls, fresh):
    assert missing_surfaces(cls, fresh) == []


def test_a_half_declared_class_fails(fresh):
    """The test above can fail: a class whose view no index has, or whose
    listing, canned query and health row no surface generated, is caught."""
    half = classes.ProblemClass(
        "half", "no_such_view", classes.HISTORY, "nothing",
        health=(classes.HealthRow("Half", at="NULL", detail="''"),))
    assert missing_surfaces(half, fresh) == ["view no_such_view in a new index"]
    orphan = classes.ProblemClass(
        "orphan", "files", classes.HISTORY, "nothing",
        listing=classes.Listing("no-such-listing", "Help.", "session-index no-such-listing",
                                "id"),
        query=classes.CannedQuery("no_such_query", "T", "D", "SELECT 1"),
        health=(classes.HealthRow("No such row", at="NULL", detail="''"),))
    assert missing_surfaces(orphan, fresh) == [
        "listing command no-such-listing with its help", "canned query no_such_query",
        "health row 'No such row'"]


def test_names_are_unique_and_views_are_declared_once():
    for names in ([c.name for c in CLASSES],
                  [c.listing.command for c in CLASSES if c.listing],
                  [c.query.name for c in CLASSES if c.query],
                  [row.label for c in CLASSES for row in c.health],
                  [v.name for v in classes.SIGNAL_VIEWS]):
        assert len(names) == len(set(names)), names
    own = [c.view for c in CLASSES if not isinstance(c.view, str)]
    assert all(any(v is view for view in classes.SIGNAL_VIEWS) for v in own)


def test_signals_import_nothing_above_them():
    """signals/ sits below the index: the view registry imports it."""
    path = ROOT / "indexer" / "signals" / "classes.py"
    imports = re.findall(r"^\s*(?:from|import) (indexer\.\w+)", path.read_text(), re.M)
    assert imports and not set(imports) & {"indexer.index", "indexer.ingest", "indexer.repair",
                                           "indexer.cli"}, imports


# --- the example class: sessions with more than N compactions -----------------

def compacted_session(projects: Path, sid: str, compactions: int, *, subagent=0) -> None:
    """A main transcript compacted ``compactions`` times (compact_boundary,
    then the isCompactSummary prompt), and a subagent compacted ``subagent``
    times (a subagent's compactions are not the session's)."""
    t = Transcript(sid)
    t.add("u0", None, "user")
    last = t.add("a0", "u0", "assistant")["uuid"]
    for n in range(1, compactions + 1):
        t.add(f"c{n}", None, "system", subtype="compact_boundary", logicalParentUuid=last,
              content="Conversation compacted")
        t.add(f"s{n}", f"c{n}", "user", isCompactSummary=True)
        last = t.add(f"a{n}", f"s{n}", "assistant")["uuid"]
    t.write(projects / "-tmp-demo")
    if subagent:
        s = Transcript(sid)
        s.add("x0", None, "user", isSidechain=True)
        for n in range(1, subagent + 1):
            s.add(f"xc{n}", None, "system", subtype="compact_boundary", isSidechain=True)
        s.write(projects / "-tmp-demo" / sid / "subagents", "agent-a1.jsonl")


def boundary_times(env, sid):
    return [r["timestamp"] for r in env.rows(
        "SELECT r.timestamp FROM records r JOIN files f ON f.id = r.file_id AND f.kind = 'main' "
        "WHERE f.session_id = ? AND r.subtype = 'compact_boundary' ORDER BY r.line_no", [sid])]


@pytest.fixture
def compacted(env):
    compacted_session(env.projects, MANY, 12, subagent=20)
    compacted_session(env.projects, FEW, 3)
    compacted_session(env.projects, NONE, 0)
    env.ingest(env.projects)
    return env


def expected_row(env, sid, compactions):
    times = boundary_times(env, sid)
    assert len(times) == compactions
    file_id = env.value("SELECT main_file_id FROM sessions WHERE session_id = ?", [sid])
    return {"session_id": sid, "file_id": file_id, "compactions": compactions,
            "first_compaction_at": times[0], "last_compaction_at": times[-1], "host": ""}


def test_the_view_counts_compactions_of_the_main_transcript(compacted):
    rows = compacted.rows("SELECT * FROM session_compactions ORDER BY session_id")
    assert rows == [expected_row(compacted, FEW, 3), expected_row(compacted, MANY, 12)]


def test_the_listing_prints_sessions_with_more_than_n_compactions(compacted):
    def listing(*args):
        return CliRunner().invoke(cli, ["compactions", *args, "--db", str(compacted.path)],
                                  catch_exceptions=False)

    result = listing("--json")   # the default N: 10
    assert COMPACTIONS_MORE_THAN == 10
    assert result.exit_code == 1
    assert json.loads(result.output) == [expected_row(compacted, MANY, 12)]
    result = listing("--more-than", "2", "--json")
    assert result.exit_code == 1
    assert json.loads(result.output) == [expected_row(compacted, MANY, 12),
                                         expected_row(compacted, FEW, 3)]
    result = listing("--more-than", "2")   # tab-separated, a header
    header, *lines = result.output.splitlines()
    assert header.split("\t") == list(expected_row(compacted, MANY, 12))
    assert [line.split("\t")[:3] for line in lines] == [
        [MANY, str(expected_row(compacted, MANY, 12)["file_id"]), "12"],
        [FEW, str(expected_row(compacted, FEW, 3)["file_id"]), "3"]]
    result = listing("--more-than", "12")
    assert (result.exit_code, result.output) == (0, "")
    result = listing("--more-than", "twelve")
    assert result.exit_code == 2 and "--more-than" in result.output


def site_get(db_path: Path, path: str):
    ds = web.make_datasette(str(db_path))
    asyncio.run(ds.invoke_startup())
    response = asyncio.run(ds.client.get(path))
    assert response.status_code == 200, (path, response.text[:1000])
    return response


def test_the_health_page_counts_them_with_the_fix(compacted):
    html = site_get(compacted.path, "/-/session-health").text
    name = compacted.path.stem
    label = f"Sessions with more than {COMPACTIONS_MORE_THAN} compactions"
    [cls] = [c for c in CLASSES if c.name == "compactions"]
    last = expected_row(compacted, MANY, 12)["last_compaction_at"]
    row = re.search(
        rf'<td><a href="/{name}/session_compactions\?compactions__gt=10">{label}</a>'
        r'<div class="si-fix">What to do: ([^<]+)</div></td>\s*'
        r'<td class="si-count">(\d+)</td>\s*<td>([^<]*)</td>', html)
    assert row, html[html.index("Problems by class"):][:3000]
    assert row.groups() == (cls.fix, "1", last)
    history = html[html.index("si-sev-history"):].split("</section>")[0]
    assert label in history
    newest = html[html.index("Newest problems"):]
    assert MANY in newest and "12 compactions" in newest and FEW not in newest


def test_the_canned_query(compacted):
    name = compacted.path.stem
    rows = site_get(compacted.path, f"/{name}/many_compactions.json?_shape=array&more_than=").json()
    assert rows == [expected_row(compacted, MANY, 12)]
    rows = site_get(compacted.path, f"/{name}/many_compactions.json?_shape=array&more_than=0").json()
    assert rows == [expected_row(compacted, MANY, 12), expected_row(compacted, FEW, 3)]


def test_the_readmes_example_is_the_declaration():
    """docs/contributing.md (the README's "Contributing" before): every line
    of its example stands in classes.py as written (its "..." lines shorten it)."""
    readme = (ROOT / "docs" / "contributing.md").read_text()
    section = readme[readme.index("## Adding a problem class"):]
    block = section[section.index("```python\n") + 10:section.index("```\n", section.index("```python"))]
    source = {line.rstrip() for line in (ROOT / "indexer" / "signals" / "classes.py")
              .read_text().splitlines()}
    lines = [line.rstrip() for line in block.splitlines() if line.strip() and "..." not in line]
    assert len(lines) > 30
    assert [line for line in lines if line not in source] == []
