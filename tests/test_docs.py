"""The docs: a short README, and a site (mkdocs.yml, docs/) that builds in
strict mode and holds every command and every table and view, generated from
the code (indexer/cli/reference.py through docs/hooks.py)."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import click

from indexer.cli.commands import cli
from indexer.index.db import open_index
from session_index_web import metadata

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 250
# Paths of one machine that a page must not name (the docs are for every machine).
MACHINE_PATHS = re.compile(r"/work/|/root/|/home/(?!me/)[a-z]")


def hand_written() -> dict[str, str]:
    """README.md, mkdocs.yml and every page under docs/, by name."""
    files = [README, ROOT / "mkdocs.yml", *sorted((ROOT / "docs").rglob("*.md"))]
    return {str(f.relative_to(ROOT)): f.read_text() for f in files}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site as `mkdocs build --strict` builds it (as .ci/run does)."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                            str(out)], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-3000:]
    return out


def commands(group: click.Group = cli, path: tuple = ()) -> list[tuple]:
    """Every command path, as --help lists them (lazy ones included)."""
    out = []
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        out.append((*path, name))
        if isinstance(command, click.Group):
            out += commands(command, (*path, name))
    return out


def new_index_objects(tmp_path) -> list[tuple[str, str, list[str]]]:
    """(type, name, columns) of every table and view of a new index."""
    conn = open_index(tmp_path / "new.db", create=True).conn
    try:
        return [(kind, name, [c[0] for c in conn.execute(
                    "SELECT name FROM pragma_table_xinfo(?) WHERE hidden IN (0, 1)", (name,))])
                for kind, name in conn.execute(
                    "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view') "
                    "AND name NOT LIKE 'sqlite_%'")]
    finally:
        conn.close()


def anchors(page: Path) -> set[str]:
    return {html.unescape(a) for a in re.findall(r'\sid="([^"]+)"', page.read_text())}


def test_the_readme_is_short_and_links_to_pages_that_exist():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    # the two set-up commands, as .ci/run and the tests rely on them
    assert ("python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/session-index demo"
            in text)
    assert ("python3 -m venv .venv && .venv/bin/pip install '.[test]' && .venv/bin/python -m "
            "pytest" in text)
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert len(links) >= 10
    assert [link for link in links if not (ROOT / link).exists()] == []


def test_every_command_is_in_the_cli_reference(site):
    """Each command, subcommands and the lazily loaded ones (serve, demo)
    included, has a section with its --help; a command dropped from the
    generator (or a hidden one) fails here."""
    page = site / "reference" / "cli" / "index.html"
    ids = anchors(page)
    text = html.unescape(page.read_text())
    paths = commands()
    assert {"ingest", "check", "serve", "demo"} <= {p[0] for p in paths}
    assert ("prices", "load") in paths
    missing = [p for p in paths if "-".join(("session-index", *p)) not in ids]
    assert missing == []
    for path in paths:
        usage = f"Usage: session-index {' '.join(path)}"
        assert usage in text, path


def test_every_table_and_view_is_in_the_sql_contract(site, tmp_path):
    """Every table and view of a new index (what ingest makes) has a section
    with each of its columns, and every canned query one with its SQL."""
    page = site / "reference" / "sql" / "index.html"
    ids = anchors(page)
    text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))
    objects = new_index_objects(tmp_path)
    names = {name for _, name, _ in objects}
    assert {"files", "records", "sessions", "leaves", "orphans", "session_verdicts",
            "usage"} <= names
    assert [name for name in sorted(names) if name not in ids] == []
    sections = re.split(r"\n(?=\S+¶\n(?:table|view)\.)", text)
    by_name = {s.split("¶")[0]: s for s in sections[1:]}
    for kind, name, columns in objects:
        section = by_name[name]
        assert section.startswith(f"{name}¶\n{kind}."), name
        assert [c for c in columns if f"\n{c}\n" not in section] == [], name
    for name, query in metadata.canned_queries().items():
        assert name in ids and query["sql"] in text, name


def test_no_page_names_a_path_of_one_machine():
    found = {name: MACHINE_PATHS.findall(text) for name, text in hand_written().items()}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    nav = re.findall(r":\s+(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert set(nav) <= pages
    # pages written in parallel wait in the nav's comment until they are folded in
    waiting = set(re.findall(r"#\s+docs/(\S+\.md)", (ROOT / "mkdocs.yml").read_text()))
    assert pages - set(nav) <= waiting
