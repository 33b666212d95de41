"""Rows out of a listing command, in the formats sqlite-utils users know:
tab-separated with a header (the default, but for a listing's on a
terminal), ``--json`` (an array), ``--nl`` (one JSON object per line),
``--csv`` and ``--table`` (aligned columns: a listing's default on a
terminal). No rows: nothing
at all on stdout (``--json``: ``[]``), so the exit code and an empty output
both say "none".

Which columns: ``--table`` shows those an operator reads (the listing's
``shown`` columns, ``agent`` when a row is another agent's, and ``host`` when a row
has one); the other formats, and
``--all``, every column; ``--columns a,b`` those, in that order, in any
format (options.output_options puts these two in the click context's meta)."""

from __future__ import annotations

import csv
import json
import sys

import click

from indexer.cli.options import ALL_META, COLUMNS_META
from indexer.transcripts import agents

FORMATS = ("tsv", "json", "nl", "csv", "table")


def chosen(fmt: str | None, out=None, shown=()) -> str:
    """The format given, else tab-separated values (what a script reads),
    but a table on a terminal for a listing that names the columns an
    operator reads (``shown``)."""
    if fmt:
        return fmt
    stream = out if out is not None else sys.stdout
    return "table" if shown and stream.isatty() else "tsv"


def _columns(rows: list[dict], fmt: str, shown) -> list[str]:
    every = list(rows[0])
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    asked = meta.get(COLUMNS_META)
    if asked:
        unknown = [c for c in asked if c not in every]
        if unknown:
            raise click.UsageError(f"no column {', '.join(unknown)}: the columns are "
                                   + ", ".join(every))
        return list(asked)
    if meta.get(ALL_META) or fmt != "table" or not shown:
        return every
    columns = [c for c in shown if c in every]
    if "agent" in every and "agent" not in columns and any(
            row.get("agent") not in (None, agents.CLAUDE_CODE) for row in rows):
        columns.insert(1, "agent")   # sessions of other agents among them
    if "host" in every and "host" not in columns and any(row.get("host") for row in rows):
        columns.append("host")
    return columns


TABLE_CELL_CHARS = 80   # a longer value is cut in a table (the other formats keep it whole)


def _cell(value) -> str:
    return "" if value is None else str(value)


def _short(text: str) -> str:
    return text if len(text) <= TABLE_CELL_CHARS else text[:TABLE_CELL_CHARS - 1] + "…"


def write_rows(rows: list[dict], fmt: str | None, out, shown=()) -> None:
    """``rows`` in format ``fmt`` (None: ``chosen``); ``shown``: the
    columns an operator reads, for a table."""
    fmt = chosen(fmt, out, shown)
    columns = _columns(rows, fmt, shown) if rows else []
    if columns != (list(rows[0]) if rows else []):
        rows = [{c: row[c] for c in columns} for row in rows]
    if fmt == "json":
        out.write(json.dumps(rows, indent=2) + "\n")
        return
    if not rows:
        return
    if fmt == "nl":
        for row in rows:
            out.write(json.dumps(row) + "\n")
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_cell(row[c]) for c in columns] for row in rows)
    elif fmt == "table":
        cells = [columns] + [[_short(_cell(row[c]).replace("\n", " ")) for c in columns]
                             for row in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        out.write("\n".join(lines) + "\n")
    else:
        out.write("\t".join(columns) + "\n")
        for row in rows:
            out.write("\t".join(_cell(row[c]).replace("\t", " ").replace("\n", " ")
                                for c in columns) + "\n")
