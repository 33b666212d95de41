"""The usage reports as people read them (aligned columns, money as
``$1,234.56``, tokens with thousands separators, a totals row) and as
machines do (``--json``: the report's dict, raw numbers; ``--nl``, ``--csv``,
``--tsv``: one flat row per period, or per period and model with
--breakdown)."""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal

from indexer.cli import output
from indexer.index.usage_report import JSON_KEYS, PERIOD_COLUMN, TOKEN_KINDS

# The human table's figure columns: (heading, key).
FIGURES = (("Calls", "calls"), ("Input", "input_tokens"), ("Output", "output_tokens"),
           ("Cache read", "cache_read_tokens"), ("Cache write 5m", "cache_write_5m_tokens"),
           ("Cache write 1h", "cache_write_1h_tokens"), ("Total tokens", "total_tokens"),
           ("Cost", "cost_usd"))
# A report's leading columns: (heading, key).
HEADS = {"daily": (("Date", "date"), ("Models", "models")),
         "weekly": (("Week", "week"), ("Models", "models")),
         "monthly": (("Month", "month"), ("Models", "models")),
         "session": (("Session", "session_id"), ("Title", "title"), ("Project", "project"),
                     ("Last call", "last_call")),
         "blocks": (("Block start", "start"), ("Status", "status"), ("Models", "models"))}
TITLE_WIDTH = 40
DATED = re.compile(r"-\d{8}$")


def _dollars(usd: float, places: str) -> Decimal:
    """``usd`` rounded half up as written (0.01065 is $0.0107, not the
    binary float's $0.0106)."""
    return Decimal(repr(usd)).quantize(Decimal(places), rounding=ROUND_HALF_UP)


def money(usd) -> str:
    return "" if usd is None else f"${_dollars(usd, '0.01'):,}"


def tokens(n) -> str:
    return "" if n is None else f"{n:,}"


def short_model(model: str) -> str:
    """claude-sonnet-4-5-20250929 -> sonnet-4-5."""
    return DATED.sub("", model.removeprefix("claude-"))


def _minutes(m: float) -> str:
    m = int(m)
    return f"{m // 60}h{m % 60:02d}m"


def _short_time(iso: str | None) -> str:
    return "" if not iso else iso[:16].replace("T", " ")


def _cell(row: dict, key: str) -> str:
    value = row.get(key)
    if key == "cost_usd":
        return money(value) + ("*" if row.get("unpriced_calls") else "")
    if key in TOKEN_KINDS or key in ("calls", "total_tokens"):
        return tokens(value)
    if key == "models":
        return ", ".join(dict.fromkeys(short_model(m) for m in value or []))
    if key in ("last_call", "start"):
        return _short_time(value)
    if key == "session_id":
        return (value or "")[:8]
    if key == "title":
        text = value or ""
        return text if len(text) <= TITLE_WIDTH else text[:TITLE_WIDTH - 1] + "…"
    if key == "status":
        return (f"active, {_minutes(row['remaining_minutes'])} left" if row.get("active")
                else "")
    return "" if value is None else str(value)


def _table(headings: list[str], lines: list[list[str] | None], right: set[int]) -> str:
    """Aligned columns (``right``: the right-aligned ones); None: a rule."""
    cells = [headings] + [line for line in lines if line is not None]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headings))]

    def fmt(r):
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(r, widths))).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [fmt(headings), rule]
    out += [rule if line is None else fmt(line) for line in lines]
    return "\n".join(out) + "\n"


def human(report: dict, kind: str) -> str:
    """The report as aligned columns, with a totals row; the active block's
    projection, each row's breakdown and calls (--evidence) below it."""
    heads, rows = HEADS[kind], report[JSON_KEYS[kind]]
    headings = [h for h, _ in heads] + [h for h, _ in FIGURES]
    right = set(range(len(heads), len(headings)))
    lines: list = []
    for row in rows:
        lines.append([_cell(row, k) for _, k in heads] + [_cell(row, k) for _, k in FIGURES])
        for part in row.get("breakdown", []):
            lines.append(["  " + short_model(part["model"])] + [""] * (len(heads) - 1)
                         + [_cell(part, k) for _, k in FIGURES])
        if row.get("projected_cost_usd") is not None:
            lines.append(["  projected"] + [""] * (len(heads) - 1)
                         + [""] * 6 + [tokens(row["projected_total_tokens"]),
                                       money(row["projected_cost_usd"])])
    totals = report["totals"]
    lines.append(None)
    lines.append(["Total"] + [""] * (len(heads) - 1) + [_cell(totals, k) for _, k in FIGURES])
    text = _table(headings, lines, right)
    if kind == "blocks":
        active = [r for r in rows if r.get("active")]
        for r in active:
            if r.get("cost_per_hour") is not None:
                text += (f"Active block: {money(r['cost_per_hour'])}/hour, "
                         f"{tokens(round(r['tokens_per_minute']))} tokens/minute; projected "
                         f"{money(r['projected_cost_usd'])} by {_short_time(r['end'])}\n")
    if any(r.get("calls_counted") for r in rows):
        text += "\n" + evidence_text(rows, kind)
    if totals["unpriced_calls"]:
        text += (f"* leaves out {tokens(totals['unpriced_calls'])} calls of models with no "
                 "price (session-index prices load FILE)\n")
    return text + f"Times in {report['timezone']}.\n"


def evidence_text(rows: list[dict], kind: str) -> str:
    """Each row's calls, under its key."""
    key = (PERIOD_COLUMN.get(kind) or {"session": "session_id", "blocks": "start"}[kind])
    out = []
    for row in rows:
        out.append(f"{key} {row[key]}: {row['calls']} calls")
        for c in row.get("calls_counted", []):
            copies = (f", {c['files']} files ({', '.join(s[:8] for s in c['sessions'])})"
                      if c["files"] > 1 else "")
            out.append(f"  {_short_time(c['time'])}  {c['message_id'] or '-'}  "
                       f"{short_model(c['model'] or '?')}  {tokens(_total(c))} tokens  "
                       f"{_fine_money(c['cost_usd'])}  {c['lines']} "
                       f"line{'s' if c['lines'] != 1 else ''}{copies}")
    return "\n".join(out) + "\n"


def _fine_money(usd) -> str:
    """A call's cost, to a hundredth of a cent (most calls cost less than one)."""
    return "unpriced" if usd is None else f"${_dollars(usd, '0.0001'):,}"


def _total(call: dict) -> int:
    return sum(call[k] or 0 for k in TOKEN_KINDS)


def flat_rows(report: dict, kind: str) -> list[dict]:
    """One row per report row (models joined by commas), or per row and model
    when the report has a breakdown; no totals row."""
    rows = []
    for row in report[JSON_KEYS[kind]]:
        base = {k: (",".join(v) if k == "models" else v) for k, v in row.items()
                if k not in ("breakdown", "calls_counted")}
        if "breakdown" in row:
            keep = {k: v for k, v in base.items()
                    if k not in TOKEN_KINDS and k not in ("calls", "total_tokens", "cost_usd",
                                                          "unpriced_calls", "models")}
            rows += [{**keep, **part} for part in row["breakdown"]]
        else:
            rows.append(base)
    return rows


def write(report: dict, kind: str, fmt: str | None, out) -> None:
    if fmt == "json":
        out.write(json.dumps(report, indent=2) + "\n")
    elif fmt in (None, "table"):
        out.write(human(report, kind))
    else:
        output.write_rows(flat_rows(report, kind), fmt, out)
