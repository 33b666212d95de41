"""The docs site's generated pages: the CLI reference from the click commands
and the SQL contract from a new index's schema and the declarations that
describe it (session_index_web.metadata, indexer/signals/classes.py), so
neither can drift from the code.

``docs/hooks.py`` (mkdocs.yml's hook) puts them in place of a marker line
at build time: ``<!-- generated: cli-reference -->`` in
docs/reference/cli.md, ``<!-- generated: sql-contract -->`` in
docs/reference/sql.md. tests/test_docs.py builds the site and fails when a
command, a table or a view is missing from it.
"""

from __future__ import annotations

import os
import tempfile

import click

from indexer.cli.commands import cli
from indexer.index.db import open_index
from indexer.signals import classes
from session_index_web import metadata

PROG = "session-index"
# The width --help is wrapped at in the reference (a terminal's is its own;
# 80 fits the page's code column).
HELP_WIDTH = 80
MARKERS = {
    "<!-- generated: cli-reference -->": lambda: cli_reference(),
    "<!-- generated: sql-contract -->": lambda: sql_contract(),
}

# Every table, view and virtual table of an index, in the order they were
# made, without SQLite's own.
SCHEMA_OBJECTS_SQL = """
SELECT type, name FROM sqlite_master
WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'
ORDER BY rowid
""".strip()
# The columns of one table or view, in order (with hidden ones of virtual tables).
COLUMNS_SQL = "SELECT name, type FROM pragma_table_xinfo(?) WHERE hidden IN (0, 1)"


def expand(markdown: str) -> str:
    """``markdown`` with each marker line replaced by its generated text."""
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown


# --- The CLI -----------------------------------------------------------------

def command_paths(group: click.Group = cli, path: tuple = ()) -> list[tuple[tuple, click.Command]]:
    """Every command under ``group``, groups and their subcommands alike, as
    (its names from the top, the command), in --help's order. The lazy
    commands (serve, demo) are listed as --help lists them."""
    out = []
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        out.append(((*path, name), command))
        if isinstance(command, click.Group):
            out.extend(command_paths(command, (*path, name)))
    return out


def help_text(path: tuple) -> str:
    """``session-index PATH --help`` as it prints, wrapped at HELP_WIDTH."""
    settings = {**cli.context_settings, "max_content_width": HELP_WIDTH,
                "terminal_width": HELP_WIDTH}
    ctx = click.Context(cli, info_name=PROG, **settings)
    command = cli
    for name in path:
        command = command.get_command(ctx, name)
        ctx = click.Context(command, info_name=name, parent=ctx)
    return command.get_help(ctx)


def cli_reference() -> str:
    """One section per command, its heading the command line that runs it,
    its body its --help."""
    parts = [f"## {PROG}\n\n```text\n{help_text(())}\n```\n"]
    for path, command in command_paths():
        summary = command.get_short_help_str(limit=200)
        parts.append(f"## {PROG} {' '.join(path)}\n\n{summary}\n\n"
                     f"```text\n{help_text(path)}\n```\n")
    return "\n".join(parts)


# --- The SQL contract --------------------------------------------------------

def schema() -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(type, name, [(column, declared type)]) of every table and view of a
    new index, made in a temporary folder as ``ingest`` makes one."""
    with tempfile.TemporaryDirectory() as folder:
        index = open_index(os.path.join(folder, "new.db"), create=True)
        conn = index.conn
        try:
            objects = conn.execute(SCHEMA_OBJECTS_SQL).fetchall()
            return [(kind, name, [tuple(c) for c in conn.execute(COLUMNS_SQL, (name,))])
                    for kind, name in objects]
        finally:
            conn.close()


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _object_section(kind: str, name: str, columns: list, described: dict) -> str:
    about = described.get(name, {})
    hidden = " Hidden in the web UI's table list." if about.get("hidden") else ""
    lines = [f"### `{name}`\n", f"*{kind}.* {_cell(about.get('description', ''))}{hidden}\n"]
    if columns:
        lines.append("| column | type | meaning |\n|---|---|---|")
        meanings = about.get("columns", {})
        for column, declared in columns:
            lines.append(f"| `{column}` | {declared or ''} | {_cell(meanings.get(column, ''))} |")
    return "\n".join(lines) + "\n"


def sql_contract() -> str:
    """Every table and view of a new index with its columns and what they
    mean, the problem classes that read them, and the canned queries."""
    described = metadata.TABLES
    objects = schema()
    shown = [o for o in objects if not described.get(o[1], {}).get("hidden")]
    hidden = [o for o in objects if described.get(o[1], {}).get("hidden")]
    parts = ["## Every table and view\n",
             "Every table and view of an index this version makes, in the order the "
             "migrations made them, with what each column means (from "
             "`datasette-plugins/metadata.py`, which the web UI and `metadata.yml` show "
             "too).\n"]
    parts += [_object_section(kind, name, cols, described) for kind, name, cols in shown]
    parts.append("## Internal tables\n\nCaches, search tables and bookkeeping the views "
                 "above read; the web UI hides them.\n")
    parts += [_object_section(kind, name, cols, described) for kind, name, cols in hidden]
    parts.append("## Problem classes\n\nEach declared once in `indexer/signals/classes.py`; "
                 "the listing, the canned query and the health page's rows are made from "
                 "the declaration.\n\n"
                 "| class | severity | view | listing | canned query | what to do |\n"
                 "|---|---|---|---|---|---|")
    for c in classes.CLASSES:
        listing = f"`{PROG} {c.listing.command}`" if c.listing else ""
        query = f"`{c.query.name}`" if c.query else ""
        parts.append(f"| {c.name} | {c.severity} | `{c.view_name}` | {listing} | {query} | "
                     f"{_cell(c.fix or '')} |")
    parts.append("\n## Canned queries\n\nDatasette's canned queries on every index "
                 "(`/sessions/NAME`, `.json` for JSON; a blank parameter means any).\n")
    for name, query in metadata.canned_queries().items():
        parts.append(f"### `{name}`\n\n**{query['title']}.** {_cell(query['description'])}\n\n"
                     f"```sql\n{query['sql']}\n```\n")
    return "\n".join(parts)

