"""The price table: per-model rates from a price file, loaded into ``prices``.

The package ships one (``indexer/prices.json``, with the date of its
snapshot and where each rate came from); migration m022_prices loads it, and
``session-index prices load FILE`` loads a newer or a private one. A file
names models by the ``message.model`` id Claude Code writes; rates are USD
per million tokens. Loading upserts: the models a file names get its rates,
its snapshot date and its path as ``source``; the others keep theirs. When a
newer package ships a newer snapshot, ``refresh_packaged`` (run by ``usage``
and ``prices list``) updates the models whose rows came from the package,
never one loaded from a file.

A file that cannot be used raises PricesError (nothing is loaded).
"""

from __future__ import annotations

import json
import math
import re
from datetime import date, datetime, timezone
from pathlib import Path

from indexer.index import views
from indexer.sql import dict_rows, write_lock

PACKAGED = Path(__file__).with_name("prices.json")
# The models the Codex CLI and the Gemini CLI call (transcripts/agents.py):
# packaged too, added by refresh_packaged like any packaged model.
AGENT_PACKAGED = Path(__file__).with_name("agent_prices.json")
PACKAGE_SOURCE = "package"

# The rates of a model (and of its long-context tier), USD per MTok, and
# the multiple of input each cache rate defaults to when a file leaves it out.
RATES = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")
DEFAULT_OF_INPUT = {"cache_read": 0.1, "cache_write_5m": 1.25, "cache_write_1h": 2.0}
MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/\[\]-]{0,199}")

# Upsert one model's rates (the prices table is m022_prices's).
UPSERT_PRICE_SQL = """
INSERT OR REPLACE INTO prices (
  model, name, input, output, cache_read, cache_write_5m, cache_write_1h,
  long_context_above, long_input, long_output, long_cache_read, long_cache_write_5m,
  long_cache_write_1h, fast_multiplier, snapshot_date, source, loaded_at)
VALUES (:model, :name, :input, :output, :cache_read, :cache_write_5m, :cache_write_1h,
  :long_context_above, :long_input, :long_output, :long_cache_read, :long_cache_write_5m,
  :long_cache_write_1h, :fast_multiplier, :snapshot_date, :source, :loaded_at)
""".strip()
# Every price, for `prices list`.
PRICES_SQL = "SELECT * FROM prices ORDER BY model"
# The models whose rows came from the package, with their snapshot dates.
PACKAGED_ROWS_SQL = "SELECT model, snapshot_date FROM prices WHERE source = 'package'"
ALL_MODELS_SQL = "SELECT model FROM prices"


class PricesError(Exception):
    """A price file that cannot be used; ``str(exc)`` says why."""


def _rate(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise PricesError(f"{where}: a rate must be a number >= 0 (USD per MTok), "
                          f"not {value!r}")
    return float(value)


def _rates(spec: dict, where: str) -> dict:
    if "input" not in spec or "output" not in spec:
        raise PricesError(f"{where}: input and output rates are required")
    rates = {"input": _rate(spec["input"], f"{where}.input"),
             "output": _rate(spec["output"], f"{where}.output")}
    for key, times in DEFAULT_OF_INPUT.items():
        rates[key] = (_rate(spec[key], f"{where}.{key}") if spec.get(key) is not None
                      else rates["input"] * times)
    return rates


def parse(data, source: str) -> list[dict]:
    """The rows of a price file's JSON (already decoded), or PricesError."""
    if not isinstance(data, dict):
        raise PricesError(f"{source}: a price file is a JSON object")
    snapshot = data.get("snapshot_date")
    try:
        snapshot = date.fromisoformat(snapshot).isoformat()
    except (TypeError, ValueError):
        raise PricesError(f"{source}: snapshot_date must be a date (YYYY-MM-DD), "
                          f"not {snapshot!r}") from None
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise PricesError(f"{source}: models must be an object of model id -> rates")
    loaded_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")
    rows = []
    for model, spec in models.items():
        where = f"{source}: models[{model!r}]"
        if not MODEL_ID.fullmatch(model):
            raise PricesError(f"{where}: not a model id")
        if not isinstance(spec, dict):
            raise PricesError(f"{where}: rates must be an object")
        row = {"model": model, "name": spec.get("name") if isinstance(spec.get("name"), str)
               else None, **_rates(spec, where)}
        long = spec.get("long_context")
        if long is not None:
            if not isinstance(long, dict):
                raise PricesError(f"{where}.long_context must be an object")
            above = long.get("above_input_tokens")
            if isinstance(above, bool) or not isinstance(above, int) or above <= 0:
                raise PricesError(f"{where}.long_context.above_input_tokens must be a "
                                  f"positive integer, not {above!r}")
            row["long_context_above"] = above
            row.update({f"long_{k}": v for k, v in
                        _rates(long, f"{where}.long_context").items()})
        else:
            row["long_context_above"] = None
            row.update({f"long_{k}": None for k in RATES})
        fast = spec.get("fast")
        row["fast_multiplier"] = None if fast is None else _rate(fast, f"{where}.fast")
        row.update(snapshot_date=snapshot, source=source, loaded_at=loaded_at)
        rows.append(row)
    return rows


def read(path) -> list[dict]:
    """The rows of the price file at ``path``."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except OSError as exc:
        raise PricesError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PricesError(f"{path} is not a JSON file: {exc}") from None
    return parse(data, PACKAGE_SOURCE if Path(path) in (PACKAGED, AGENT_PACKAGED)
                 else str(Path(path).resolve()))


def store(conn, rows: list[dict]) -> None:
    """Upsert ``rows`` (in the caller's transaction), and price the calls
    of usage_calls again by them."""
    conn.executemany(UPSERT_PRICE_SQL, rows)
    views.reprice_usage_calls(conn)


def load_file(db, path) -> dict:
    """Load the price file at ``path`` into the index: the models it names get
    its rates. Returns ``{"models", "added", "updated", "snapshot_date", "source"}``."""

    rows = read(path)
    with write_lock(db) as conn:
        known = {m for (m,) in conn.execute(ALL_MODELS_SQL)}
        store(conn, rows)
    added = sum(r["model"] not in known for r in rows)
    return {"models": len(rows), "added": added, "updated": len(rows) - added,
            "snapshot_date": rows[0]["snapshot_date"], "source": rows[0]["source"]}


def refresh_packaged(db) -> int:
    """Bring the rows that came from the package up to the packaged file's
    snapshot (and add the models it prices that the table lacks); rows loaded
    from a file are left alone. Returns how many rows changed; writes only
    when some must."""

    rows = read(PACKAGED) + read(AGENT_PACKAGED)
    def stale(conn):
        packaged = dict(conn.execute(PACKAGED_ROWS_SQL).fetchall())
        known = {m for (m,) in conn.execute(ALL_MODELS_SQL)}
        return [r for r in rows if r["model"] not in known
                or (r["model"] in packaged and packaged[r["model"]] < r["snapshot_date"])]

    if not stale(db.conn):
        return 0
    with write_lock(db) as conn:
        todo = stale(conn)
        store(conn, todo)
    return len(todo)


def listing(db) -> list[dict]:

    return dict_rows(db.conn, PRICES_SQL)
