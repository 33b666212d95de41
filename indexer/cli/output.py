"""Rows out of a listing command, in the formats sqlite-utils users know:
tab-separated with a header (the default), ``--json`` (an array),
``--nl`` (one JSON object per line), ``--csv`` and ``--table`` (aligned
columns). No rows: nothing at all on stdout (``--json``: ``[]``), so the
exit code and an empty output both say "none"."""

from __future__ import annotations

import csv
import json

FORMATS = ("tsv", "json", "nl", "csv", "table")


def _cell(value) -> str:
    return "" if value is None else str(value)


def write_rows(rows: list[dict], fmt: str, out) -> None:
    if fmt == "json":
        out.write(json.dumps(rows, indent=2) + "\n")
        return
    if not rows:
        return
    columns = list(rows[0])
    if fmt == "nl":
        for row in rows:
            out.write(json.dumps(row) + "\n")
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_cell(row[c]) for c in columns] for row in rows)
    elif fmt == "table":
        cells = [columns] + [[_cell(row[c]).replace("\n", " ") for c in columns] for row in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        out.write("\n".join(lines) + "\n")
    else:
        out.write("\t".join(columns) + "\n")
        for row in rows:
            out.write("\t".join(_cell(row[c]).replace("\t", " ").replace("\n", " ")
                                for c in columns) + "\n")
