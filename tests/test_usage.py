"""Usage and cost: the usage view counts each API call once and prices it
from the prices table; the usage and prices commands; Claude Code's own
figures beside it; the health page's panel."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Index, write_jsonl
from indexer.index import prices as pricesmod, usage as usagemod
from indexer.cli import web
from indexer.cli.commands import cli

SONNET = "claude-sonnet-4-5-20250929"   # $3 / $15, cache read 0.3, writes 3.75 / 6; >200k tier
OPUS = "claude-opus-4-7"                 # $5 / $25, fast x6
HAIKU = "claude-haiku-4-5-20251001"      # $1 / $5, no fast multiplier
USAGE_COLUMNS = ("session_id", "model", "lines", "input_tokens", "output_tokens",
                 "cache_read_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens",
                 "long_context", "cost_usd")


def usage(inp=0, out=0, read=0, w5=None, w1=None, total=None, speed=None):
    """A usage object as Claude Code writes it: cache_creation split when
    w5 or w1 is given, cache_creation_input_tokens their sum (or total)."""
    u = {"input_tokens": inp, "output_tokens": out, "cache_read_input_tokens": read,
         "cache_creation_input_tokens": total if total is not None else (w5 or 0) + (w1 or 0)}
    if w5 is not None or w1 is not None:
        u["cache_creation"] = {"ephemeral_5m_input_tokens": w5 or 0,
                               "ephemeral_1h_input_tokens": w1 or 0}
    if speed:
        u["speed"] = speed
    return u


def assistant(session, uuid, mid, rid, u, model=SONNET, ts="2026-11-30T10:00:00.000Z",
              parent=None, block="text"):
    rec = {"type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": session,
           "timestamp": ts, "cwd": "/work/app",
           "message": {"id": mid, "type": "message", "role": "assistant", "model": model,
                       "content": [{"type": block, "text": "x"}], "usage": u}}
    if rid is not None:
        rec["requestId"] = rid
    return rec


def user(session, uuid, parent=None, ts="2026-11-30T09:59:59.000Z"):
    return {"type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": session,
            "timestamp": ts, "cwd": "/work/app", "message": {"role": "user", "content": "go"}}


S1, S2 = "11111111-0000-0000-0000-000000000001", "22222222-0000-0000-0000-000000000002"


def transcript(index, session, records, project="-work-app"):
    return write_jsonl(index.projects / project / f"{session}.jsonl",
                       [user(session, f"u-{session[:4]}")] + records)


def calls(index, where="1", params=()):
    return index.rows(f"SELECT {', '.join(USAGE_COLUMNS)} FROM usage WHERE {where} "
                      "ORDER BY session_id, model, cost_usd", params)


def cost(inp=0, out=0, read=0, w5=0, w1=0, rates=(3, 15, 0.3, 3.75, 6), times=1):
    """The cost in USD of token counts at rates per MTok (Sonnet 4.5's by default)."""
    return times * (inp * rates[0] + out * rates[1] + read * rates[2] + w5 * rates[3]
                    + w1 * rates[4]) / 1e6


def close(rows, expected):
    """Rows equal, cost_usd compared to 1e-12."""
    assert len(rows) == len(expected), rows
    for row, want in zip(rows, expected):
        got, exp = dict(row), dict(want)
        c1, c2 = got.pop("cost_usd"), exp.pop("cost_usd")
        assert got == exp
        assert (c1 is None and c2 is None) or abs(c1 - c2) < 1e-12, (c1, c2)


def test_split_content_blocks_count_once_with_the_final_usage(index):
    # One response streamed as three lines (thinking, text, tool_use): each
    # repeats the usage as it stood, output_tokens growing to the final 260.
    transcript(index, S1, [
        assistant(S1, "a1", "msg_A", "req_A", usage(3, 1, 1000, w5=200), block="thinking"),
        assistant(S1, "a2", "msg_A", "req_A", usage(3, 9, 1000, w5=200), parent="a1"),
        assistant(S1, "a3", "msg_A", "req_A", usage(3, 260, 1000, w5=200), parent="a2",
                  block="tool_use"),
    ])
    index.ingest()
    close(calls(index), [
        {"session_id": S1, "model": SONNET, "lines": 3, "input_tokens": 3,
         "output_tokens": 260, "cache_read_tokens": 1000, "cache_write_5m_tokens": 200,
         "cache_write_1h_tokens": 0, "long_context": 0,
         "cost_usd": cost(3, 260, 1000, 200)}])
    assert index.value("SELECT count(*) FROM records WHERE has_usage") == 3


def test_a_fork_repeats_a_call_under_another_session_counted_once(index):
    rec = assistant(S1, "a1", "msg_F", "req_F", usage(10, 50, 0, w5=100))
    transcript(index, S1, [rec])
    transcript(index, S2, [dict(rec, sessionId=S2)], project="-work-app-fork")
    index.ingest()
    assert index.value("SELECT count(*) FROM records WHERE has_usage") == 2
    close(calls(index), [
        {"session_id": S1, "model": SONNET, "lines": 2, "input_tokens": 10,
         "output_tokens": 50, "cache_read_tokens": 0, "cache_write_5m_tokens": 100,
         "cache_write_1h_tokens": 0, "long_context": 0, "cost_usd": cost(10, 50, 0, 100)}])


def test_without_request_id_a_call_counts_once_per_session(index):
    a = assistant(S1, "a1", "msg_N", None, usage(10, 5))
    b = assistant(S1, "a2", "msg_N", None, usage(10, 7), parent="a1")
    transcript(index, S1, [a, b])
    transcript(index, S2, [dict(b, sessionId=S2)], project="-work-other")
    index.ingest()
    close(calls(index), [
        {"session_id": S1, "model": SONNET, "lines": 2, "input_tokens": 10, "output_tokens": 7,
         "cache_read_tokens": 0, "cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0,
         "long_context": 0, "cost_usd": cost(10, 7)},
        {"session_id": S2, "model": SONNET, "lines": 1, "input_tokens": 10, "output_tokens": 7,
         "cache_read_tokens": 0, "cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0,
         "long_context": 0, "cost_usd": cost(10, 7)}])


def test_five_minute_and_one_hour_cache_writes_are_priced_apart(index):
    transcript(index, S1, [
        assistant(S1, "a1", "msg_5", "req_5", usage(0, 0, w5=1000, w1=0)),
        assistant(S1, "a2", "msg_1", "req_1", usage(0, 0, w5=0, w1=1000), parent="a1"),
        # no split: the whole cache_creation_input_tokens is a 5-minute write
        assistant(S1, "a3", "msg_T", "req_T", usage(0, 0, total=1000), parent="a2"),
    ])
    index.ingest()
    rows = index.rows("SELECT message_id, cache_write_5m_tokens AS w5, "
                      "cache_write_1h_tokens AS w1, cost_usd FROM usage ORDER BY message_id")
    assert rows == [
        {"message_id": "msg_1", "w5": 0, "w1": 1000, "cost_usd": pytest.approx(0.006)},
        {"message_id": "msg_5", "w5": 1000, "w1": 0, "cost_usd": pytest.approx(0.00375)},
        {"message_id": "msg_T", "w5": 1000, "w1": 0, "cost_usd": pytest.approx(0.00375)}]


def test_the_long_context_tier_applies_to_every_token_above_200k(index):
    # 200,000 prompt tokens exactly: standard rates; one more: long rates on all.
    transcript(index, S1, [
        assistant(S1, "a1", "msg_at", "req_at", usage(100_000, 1000, 99_000, w5=500, w1=500)),
        assistant(S1, "a2", "msg_over", "req_over", usage(100_001, 1000, 99_000, w5=500, w1=500),
                  parent="a1"),
    ])
    index.ingest()
    rows = index.rows("SELECT message_id, prompt_tokens, long_context, cost_usd FROM usage "
                      "ORDER BY message_id")
    long_rates = (6, 22.5, 0.6, 7.5, 12)
    assert rows == [
        {"message_id": "msg_at", "prompt_tokens": 200_000, "long_context": 0,
         "cost_usd": pytest.approx(cost(100_000, 1000, 99_000, 500, 500))},
        {"message_id": "msg_over", "prompt_tokens": 200_001, "long_context": 1,
         "cost_usd": pytest.approx(cost(100_001, 1000, 99_000, 500, 500, rates=long_rates))}]


def test_the_fast_multiplier_and_a_fast_call_with_no_fast_price(index):
    opus = (5, 25, 0.5, 6.25, 10)
    transcript(index, S1, [
        assistant(S1, "a1", "msg_s", "req_s", usage(10, 100, 1000, w1=100, speed="standard"),
                  model=OPUS),
        assistant(S1, "a2", "msg_f", "req_f", usage(10, 100, 1000, w1=100, speed="fast"),
                  model=OPUS, parent="a1"),
        assistant(S1, "a3", "msg_h", "req_h", usage(10, 100, speed="fast"), model=HAIKU,
                  parent="a2"),
    ])
    index.ingest()
    rows = index.rows("SELECT message_id, speed, price_model, cost_usd FROM usage "
                      "ORDER BY message_id")
    assert rows == [
        {"message_id": "msg_f", "speed": "fast", "price_model": OPUS,
         "cost_usd": pytest.approx(cost(10, 100, 1000, 0, 100, rates=opus, times=6))},
        {"message_id": "msg_h", "speed": "fast", "price_model": "claude-haiku-4-5",
         "cost_usd": None},
        {"message_id": "msg_s", "speed": "standard", "price_model": OPUS,
         "cost_usd": pytest.approx(cost(10, 100, 1000, 0, 100, rates=opus))}]


def test_synthetic_placeholders_never_count_and_unpriced_models_are_null(index):
    synthetic = assistant(S1, "a2", "6b0c5a52-0000-4000-8000-000000000000", None,
                          usage(0, 0), model="<synthetic>", parent="a1")
    synthetic["isApiErrorMessage"] = True
    transcript(index, S1, [
        assistant(S1, "a1", "msg_u", "req_u", usage(5, 5), model="claude-unknown-9"),
        synthetic,
    ])
    index.ingest()
    assert index.rows("SELECT model, price_model, long_context, cost_usd FROM usage") == [
        {"model": "claude-unknown-9", "price_model": None, "long_context": None,
         "cost_usd": None}]
    result = CliRunner().invoke(cli, ["usage", "--db", str(index.path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"calls": 1, "input_tokens": 5, "output_tokens": 5, "cache_read_tokens": 0,
         "cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0, "cost_usd": None,
         "unpriced_calls": 1, "unpriced_models": "claude-unknown-9"}]
    assert "1 calls of models with no price (claude-unknown-9)" in result.stderr


def test_a_newer_price_file_is_loaded_and_kept(index, tmp_path):
    transcript(index, S1, [
        assistant(S1, "a1", "msg_1", "req_1", usage(1_000_000, 0), model=HAIKU),
        assistant(S1, "a2", "msg_2", "req_2", usage(1_000_000, 0), model="claude-next-1",
                  parent="a1"),
    ])
    index.ingest()
    assert index.rows("SELECT model, cost_usd FROM usage ORDER BY model") == [
        {"model": HAIKU, "cost_usd": 1.0}, {"model": "claude-next-1", "cost_usd": None}]
    newer = tmp_path / "prices-2027.json"
    newer.write_text(json.dumps({"snapshot_date": "2027-01-15", "models": {
        "claude-haiku-4-5": {"input": 2, "output": 10},
        "claude-next-1": {"input": 7, "output": 30, "cache_write_1h": 15}}}))
    run = CliRunner().invoke(cli, ["prices", "load", str(newer), "--db", str(index.path),
                                   "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output) == {"models": 2, "added": 1, "updated": 1,
                                      "snapshot_date": "2027-01-15",
                                      "source": str(newer.resolve())}
    assert index.rows("SELECT model, cost_usd FROM usage ORDER BY model") == [
        {"model": HAIKU, "cost_usd": 2.0}, {"model": "claude-next-1", "cost_usd": 7.0}]
    assert index.rows("SELECT model, cache_read, cache_write_5m, cache_write_1h, snapshot_date "
                      "FROM prices WHERE model IN ('claude-haiku-4-5', 'claude-next-1') "
                      "ORDER BY model") == [
        {"model": "claude-haiku-4-5", "cache_read": pytest.approx(0.2), "cache_write_5m": 2.5,
         "cache_write_1h": 4.0, "snapshot_date": "2027-01-15"},
        {"model": "claude-next-1", "cache_read": pytest.approx(0.7), "cache_write_5m": 8.75,
         "cache_write_1h": 15.0, "snapshot_date": "2027-01-15"}]
    # The packaged file never overwrites a row loaded from a file...
    assert pricesmod.refresh_packaged(index.db) == 0
    # ...but brings back a packaged model that is missing.
    index.db.conn.execute("DELETE FROM prices WHERE model = 'claude-opus-4-7'")
    assert pricesmod.refresh_packaged(index.db) == 1
    assert index.value("SELECT source FROM prices WHERE model = 'claude-opus-4-7'") == "package"


@pytest.mark.parametrize("content, says", [
    ("not json", "is not a JSON file"),
    ('{"models": {"m": {"input": 1, "output": 1}}}', "snapshot_date must be a date"),
    ('{"snapshot_date": "2027-01-01", "models": {"m": {"input": -1, "output": 1}}}',
     "a rate must be a number >= 0"),
    ('{"snapshot_date": "2027-01-01", "models": {"m": {"input": 1}}}',
     "input and output rates are required"),
    ('{"snapshot_date": "2027-01-01", "models": {"m": {"input": 1, "output": 1, '
     '"long_context": {"above_input_tokens": 0, "input": 2, "output": 2}}}}',
     "above_input_tokens must be a positive integer"),
])
def test_a_price_file_that_cannot_be_used_loads_nothing(index, tmp_path, content, says):
    index.ingest()
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    before = index.rows("SELECT * FROM prices ORDER BY model")
    result = CliRunner().invoke(cli, ["prices", "load", str(bad), "--db", str(index.path)])
    assert result.exit_code == 3
    assert result.output.startswith("Error: ") and says in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert index.rows("SELECT * FROM prices ORDER BY model") == before


def test_the_packaged_price_file_loads_with_its_snapshot():
    rows = pricesmod.read(pricesmod.PACKAGED)
    data = json.loads(pricesmod.PACKAGED.read_text())
    assert {r["model"] for r in rows} == set(data["models"])
    assert {r["snapshot_date"] for r in rows} == {data["snapshot_date"]}
    assert data["source"] and data["notes"]
    for r in rows:   # the caching multipliers the pricing page states (its Haiku 3
        # row says $0.30 for 5-minute writes, not 1.25 x $0.25)
        if r["model"] != "claude-3-haiku":
            assert r["cache_write_5m"] == pytest.approx(1.25 * r["input"]), r["model"]
        assert r["cache_write_1h"] == pytest.approx(2 * r["input"]), r["model"]


def cost_state(session, usd, unknown=False):
    return {"type": "cost-state", "sessionId": session, "totalCostUSD": usd,
            "hasUnknownModelCost": unknown, "modelUsage": {}}


def test_claude_codes_own_figures_beside_the_index(index):
    transcript(index, S1, [
        assistant(S1, "a1", "msg_1", "req_1", usage(1_000_000, 0), model=HAIKU),   # $1
        cost_state(S1, 1.0), cost_state(S1, 3.5),
    ])
    write_jsonl(index.projects / "-work-app" / "run.jsonl", [
        {"type": "system", "subtype": "init", "session_id": S1},
        {"type": "result", "subtype": "success", "is_error": False, "session_id": S1,
         "result": "ok", "num_turns": 1, "total_cost_usd": 2.75, "duration_ms": 5},
    ])
    index.ingest()
    assert index.rows("SELECT * FROM usage_reported") == [
        {"session_id": S1, "calls": 1, "cost_usd": 1.0, "unpriced_calls": 0,
         "first_call": "2026-11-30T10:00:00.000Z", "cost_state_usd": 3.5,
         "cost_state_unknown_models": 0, "cost_state_difference_usd": 2.5,
         "executions": 1, "executions_usd": 2.75, "executions_difference_usd": 1.75}]
    result = CliRunner().invoke(cli, ["usage", "--db", str(index.path), "--by", "session",
                                      "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)[0]
    assert {k: row[k] for k in ("session_id", "calls", "cost_usd", "cost_state_usd",
                                "cost_state_difference_usd", "executions_usd",
                                "executions_difference_usd")} == {
        "session_id": S1, "calls": 1, "cost_usd": 1.0, "cost_state_usd": 3.5,
        "cost_state_difference_usd": 2.5, "executions_usd": 2.75,
        "executions_difference_usd": 1.75}
    assert result.stderr.splitlines() == [
        "cost-state records: $3.500000 over 1 sessions; the index computes $1.000000 for them "
        "(difference $+2.500000)",
        "claude -p results (total_cost_usd): $2.750000 over 1 sessions; the index computes "
        "$1.000000 for them (difference $+1.750000)"]


def test_usage_by_day_project_model_and_since(index):
    transcript(index, S1, [
        assistant(S1, "a1", "msg_1", "req_1", usage(1_000_000, 0), model=HAIKU,
                  ts="2026-11-20T10:00:00Z"),
        assistant(S1, "a2", "msg_2", "req_2", usage(0, 1_000_000), model=HAIKU,
                  ts="2026-11-29T10:00:00Z", parent="a1"),
    ])
    transcript(index, S2, [
        assistant(S2, "b1", "msg_3", "req_3", usage(1_000_000, 0), model=OPUS,
                  ts="2026-11-29T11:00:00Z")], project="-work-shop")

    def run(*args):
        result = CliRunner().invoke(cli, ["usage", "--db", str(index.path), "--json", *args])
        assert result.exit_code == 0, result.output
        return [{k: r[k] for k in r if k in ("day", "project", "model", "calls", "cost_usd")}
                for r in json.loads(result.stdout)]

    index.ingest()
    assert run("--by", "day") == [{"day": "2026-11-29", "calls": 2, "cost_usd": 10.0},
                                  {"day": "2026-11-20", "calls": 1, "cost_usd": 1.0}]
    assert run("--by", "project") == [{"project": "-work-app", "calls": 2, "cost_usd": 6.0},
                                      {"project": "-work-shop", "calls": 1, "cost_usd": 5.0}]
    assert run("--by", "project", "--since", "2026-11-25") == [
        {"project": "-work-app", "calls": 1, "cost_usd": 5.0},
        {"project": "-work-shop", "calls": 1, "cost_usd": 5.0}]
    assert run("--by", "model") == [{"model": HAIKU, "calls": 2, "cost_usd": 6.0},
                                    {"model": OPUS, "calls": 1, "cost_usd": 5.0}]
    assert run("--since", "2027-01-01") == []
    csv = CliRunner().invoke(cli, ["usage", "--db", str(index.path), "--csv", "--by", "model"])
    assert csv.stdout.splitlines()[0] == (
        "model,calls,input_tokens,output_tokens,cache_read_tokens,cache_write_5m_tokens,"
        "cache_write_1h_tokens,cost_usd,unpriced_calls,unpriced_models")


def test_a_rewritten_file_takes_its_usage_rows_with_it(index):
    path = transcript(index, S1, [
        assistant(S1, "a1", "msg_1", "req_1", usage(1_000_000, 0)),
        assistant(S1, "a2", "msg_2", "req_2", usage(1_000_000, 0), parent="a1"),
    ])
    index.ingest()
    assert index.value("SELECT count(*) FROM usage") == 2
    transcript(index, S1, [assistant(S1, "a1", "msg_9", "req_9", usage(0, 1_000_000))])
    assert path.exists()
    index.ingest()
    assert index.rows("SELECT message_id, cost_usd FROM usage") == [
        {"message_id": "msg_9", "cost_usd": 15.0}]
    assert index.value("SELECT count(*) FROM records WHERE has_usage") == 1


def test_a_last_line_that_goes_on_leaves_the_usage_with_its_row(index):
    # A whole last line stored without its newline, which then goes on
    # (ingest retracts its row and reads it again as a bad line): its call
    # goes from the usage view, from the index it is read through too.
    path = transcript(index, S1, [assistant(S1, "a1", "msg_1", "req_1", usage(1_000_000, 0),
                                            model=HAIKU)])
    with open(path, "ab") as f:
        f.write(json.dumps(assistant(S1, "a2", "msg_2", "req_2", usage(0, 1_000_000),
                                     model=HAIKU, parent="a1")).encode())
    index.ingest()
    assert index.rows("SELECT message_id, cost_usd FROM usage ORDER BY 1") == [
        {"message_id": "msg_1", "cost_usd": 1.0}, {"message_id": "msg_2", "cost_usd": 5.0}]
    with open(path, "ab") as f:
        f.write(b" and more\n")
    index.ingest()
    assert index.value("SELECT count(*) FROM bad_lines") == 1
    assert index.rows("SELECT message_id, cost_usd FROM usage") == [
        {"message_id": "msg_1", "cost_usd": 1.0}]
    assert index.value("SELECT count(*) FROM records INDEXED BY records_usage "
                       "WHERE has_usage") == 1


def test_the_health_page_panel_shows_the_last_seven_days(index):
    from datetime import datetime, timedelta, timezone

    def ago(**delta):
        return (datetime.now(timezone.utc) - timedelta(**delta)).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")

    recent, old = ago(hours=1), ago(days=10)
    index.projects.joinpath("-work-app").mkdir(parents=True)
    write_jsonl(index.projects / "-work-app" / f"{S1}.jsonl", [
        user(S1, "u-1", ts=recent),
        assistant(S1, "a1", "msg_1", "req_1", usage(1_000_000, 0), model=HAIKU, ts=recent),
        assistant(S1, "a2", "msg_2", "req_2", usage(1, 1), model="<b>claude-evil</b>",
                  parent="a1", ts=recent),
        cost_state(S1, 3.25)])
    # a session of ten days ago: in the usage view, not in the panel
    write_jsonl(index.projects / "-work-app" / f"{S2}.jsonl", [
        user(S2, "u-2", ts=old),
        assistant(S2, "b1", "msg_3", "req_3", usage(0, 1_000_000), model=HAIKU, ts=old),
        cost_state(S2, 9.0)])
    index.ingest()
    assert index.value("SELECT sum(cost_usd) FROM usage") == 6.0
    ds = web.make_datasette(index.path)
    asyncio.run(ds.invoke_startup())
    html = asyncio.run(ds.client.get("/-/session-health")).text
    assert "<h2>Usage and cost</h2>" in html
    assert '<td class="si-count si-recent-calls">2</td>' in html
    assert '<td class="si-count si-recent-cost">1.0</td>' in html
    assert "1 calls have no price" in html and "&lt;b&gt;claude-evil&lt;/b&gt;" in html
    assert "<b>claude-evil</b>" not in html
    assert ("Sessions begun in these 7 days, Claude Code's cost-state records: $3.250000 over "
            "1 sessions; the index computes $1.000000 for them (difference $+2.250000)"
            ) in html.replace("&#39;", "'")
    data = asyncio.run(ds.client.get("/index/cost_by_project.json?_shape=array&since=")).json()
    assert [(r["project"], r["calls"], r["cost_usd"], r["unpriced_calls"]) for r in data] == [
        ("-work-app", 3, 6.0, 1)]


# --- the real corpus, checked by a computation of its own -----------------------

def corpus_calls(root: Path) -> dict:
    """Each API call of the transcripts under ``root``, read as plain JSON:
    key (message.id + requestId, else session + message.id) -> the usage of
    its line with the most output tokens (the first such line seen)."""
    found = {}
    for path in sorted(root.rglob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if not isinstance(r, dict) or r.get("type") != "assistant" or "session_id" in r:
                continue
            m = r.get("message")
            if not isinstance(m, dict) or not isinstance(m.get("usage"), dict) \
                    or m.get("model") == "<synthetic>":
                continue
            if not m.get("id"):
                key = ("line", str(path), len(found))
            elif r.get("requestId"):
                key = ("request", m["id"], r["requestId"])
            else:
                key = ("session", r.get("sessionId"), m["id"])
            u = m["usage"]
            out = u.get("output_tokens") or 0
            if key not in found or out > (found[key][1].get("output_tokens") or 0):
                found[key] = (m.get("model"), u)
    return found


def python_cost(model, u, rates):
    p = rates.get(model) or rates.get(model[:-9] if model and model[-9:-8] == "-"
                                      and model[-8:].isdigit() else None)
    cc = u.get("cache_creation")
    w5 = (cc or {}).get("ephemeral_5m_input_tokens", 0) if cc else \
        u.get("cache_creation_input_tokens") or 0
    w1 = (cc or {}).get("ephemeral_1h_input_tokens", 0) if cc else 0
    inp, out, read = (u.get(k) or 0 for k in ("input_tokens", "output_tokens",
                                               "cache_read_input_tokens"))
    if p is None:
        return None
    long = p["long_context"] and inp + read + w5 + w1 > p["long_context"]["above_input_tokens"]
    r = p["long_context"] if long else p
    times = (p.get("fast") or None) if u.get("speed") == "fast" else 1
    if times is None:
        return None
    return times * (inp * r["input"] + out * r["output"] + read * r["cache_read"]
                    + w5 * r["cache_write_5m"] + w1 * r["cache_write_1h"]) / 1e6


@pytest.mark.skipif(not CORPUS.is_dir(), reason="no ../shared/corpus")
def test_corpus_totals_match_an_independent_count(tmp_path):
    idx = Index(tmp_path)
    idx.ingest(CORPUS)
    rates = {m: dict(spec, long_context=spec.get("long_context"))
             for m, spec in json.loads(pricesmod.PACKAGED.read_text())["models"].items()}
    found = corpus_calls(CORPUS)
    expected_cost = [python_cost(model, u, rates) for model, u in found.values()]
    priced = [c for c in expected_cost if c is not None]
    totals = idx.rows("SELECT count(*) AS calls, sum(output_tokens) AS output, "
                      "sum(cache_read_tokens) AS cache_read, sum(cost_usd) AS cost, "
                      "sum(cost_usd IS NULL) AS unpriced FROM usage")[0]
    assert totals["calls"] == len(found) > 1000
    assert totals["output"] == sum(u.get("output_tokens") or 0 for _, u in found.values())
    assert totals["cache_read"] == sum(u.get("cache_read_input_tokens") or 0
                                       for _, u in found.values())
    # every Claude model in the corpus has a price (issue 30: it had Claude 3 Sonnet unpriced)
    assert totals["unpriced"] == len(expected_cost) - len(priced) == 0
    assert totals["cost"] == pytest.approx(sum(priced), rel=1e-9)
    # far fewer calls than assistant lines: split blocks counted once
    assert idx.value("SELECT count(*) FROM records WHERE has_usage") > 1.5 * len(found)


def test_the_cost_by_day_canned_query_is_usage_by_day(index):
    """The web's cost_by_day: the rows `usage --by day` prints, newest day
    first, each call once, unpriced calls counted apart."""
    index.projects.joinpath("-work-app").mkdir(parents=True)
    write_jsonl(index.projects / "-work-app" / f"{S1}.jsonl", [
        user(S1, "u-1", ts="2026-11-30T09:00:00.000Z"),
        assistant(S1, "a1", "msg_1", "req_1", usage(1_000_000, 0), model=HAIKU,
                  ts="2026-11-30T10:00:00.000Z"),
        assistant(S1, "a2", "msg_2", "req_2", usage(1, 1), model="claude-unknown",
                  parent="a1", ts="2026-11-30T11:00:00.000Z"),
        assistant(S1, "a3", "msg_3", "req_3", usage(0, 1_000_000), model=HAIKU,
                  parent="a2", ts="2026-12-01T08:00:00.000Z")])
    index.ingest()
    ds = web.make_datasette(index.path)
    asyncio.run(ds.invoke_startup())
    rows = asyncio.run(ds.client.get("/index/cost_by_day.json?_shape=array&since=")).json()
    assert [(r["day"], r["calls"], r["cost_usd"], r["unpriced_calls"]) for r in rows] == [
        ("2026-12-01", 1, 5.0, 0), ("2026-11-30", 2, 1.0, 1)]
    assert rows == usagemod.summary(index.db, by="day")   # what `usage --by day` prints
