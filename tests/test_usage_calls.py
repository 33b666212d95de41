"""usage_calls (migrations.m090_usage_calls): each API call picked once
across files, kept at ingest. The usage view reads it; usage_definition is
the view as it was, over the records. Every surface that reads usage (the
`usage --by` listing, cost_by_project, cost_by_day, chart_cost_by_day, the
health page's usage panel) gives the same answers as over the definition,
on the corpus and on random transcripts whose forks copy calls and whose
rewrites delete them."""

from __future__ import annotations

import json
import random
import re

import pytest

from conftest import CORPUS, Index, write_jsonl
from indexer.index import usage as usagemod
from indexer.signals import charts
from session_index_web import health, metadata

SONNET = "claude-sonnet-4-5-20250929"
OPUS = "claude-opus-4-7"
MODELS = (SONNET, OPUS, "claude-haiku-4-5-20251001", "<synthetic>", "no-such-model")

# Every SQL a surface runs, and what it must equal: the same question over
# every call of the usage view (the cost pages read the sums per day,
# project and model, usage_day_sums: m094).
SURFACES = {
    **{f"usage --by {by}": (usagemod.summary_sql(by), usagemod.summary_sql(by, definition=True))
       for by in (None, *usagemod.GROUPS)},
    "cost_by_project": (metadata.COST_BY_PROJECT_SQL, metadata.COST_BY_PROJECT_DEFINITION_SQL),
    "cost_by_day": (metadata.COST_BY_DAY_SQL, usagemod.summary_sql("day", definition=True)),
    "chart_cost_by_day": (charts.COST_BY_DAY_SQL, charts.COST_BY_DAY_DEFINITION_SQL),
    "health usage panel": (health.USAGE_PANEL_SQL, health.USAGE_PANEL_SQL),
}
# A time within a day, a day, shorter than a day, and one a character
# longer than a day (the sums answer whole days; usage_calls the calls of
# since's own day at or after it).
SINCES = ("", "2026-11-30T12:00:00.000Z", "2026-12-01", "2026-12-01T00:00:00.5", "2026-11",
          "2026-11-30T", "2026-11-29T23")


def over_definition(sql: str) -> str:
    """The same SQL over the usage view's definition (the records)."""
    changed = re.sub(r"\bFROM usage\b(?!_)", "FROM usage_definition", sql)
    assert changed != sql
    return changed


def comparable(rows):
    """Rows as compared: a group_concat(DISTINCT) list as a set, and a sum
    of costs (rounded to 6 places) to the last place: both depend on the
    order SQLite reads the calls in, which is not the definition's (a sum of
    floats in another order can land on the other side of a rounding)."""
    return [{k: (frozenset(v.split(",")) if k == "unpriced_models" and v else
                 pytest.approx(v, rel=1e-9, abs=1.01e-6) if isinstance(v, float) else v)
             for k, v in r.items()} for r in rows]


def assert_surfaces_match(index: Index) -> int:
    """Every surface's rows, read from usage_calls and from the definition,
    for several :since; returns how many calls usage has."""
    index.assert_caches_match_definitions()   # usage is in SQL_CACHED_VIEWS
    for name, (sql, definition) in SURFACES.items():
        for since in SINCES:
            ours = comparable(index.rows(sql, {"since": since}))
            theirs = comparable(index.rows(over_definition(definition), {"since": since}))
            assert ours == theirs, (name, since)
    return index.value("SELECT count(*) FROM usage")


def test_the_corpus_answers_the_same_from_usage_calls(tmp_path):
    idx = Index(tmp_path)
    idx.ingest(CORPUS)
    assert assert_surfaces_match(idx) > 1000
    assert idx.value("SELECT count(*) FROM usage_calls") == idx.value(
        "SELECT count(*) FROM usage_definition")


def assistant(session, uuid, parent, mid, rid, out, model, ts, speed=None):
    rec = {"type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": session,
           "timestamp": ts, "cwd": "/work/app",
           "message": {"type": "message", "role": "assistant", "model": model,
                       "content": [{"type": "text", "text": "x"}],
                       "usage": {"input_tokens": out % 7, "output_tokens": out,
                                 "cache_read_input_tokens": 3 * out,
                                 "cache_creation_input_tokens": 5,
                                 **({"cache_creation": {"ephemeral_5m_input_tokens": 2,
                                                        "ephemeral_1h_input_tokens": 3}}
                                    if out % 2 else {}),
                                 **({"speed": speed} if speed else {})}}}
    if mid is not None:
        rec["message"]["id"] = mid
    if rid is not None:
        rec["requestId"] = rid
    return rec


class World:
    """Random sessions whose calls share message ids (forks copy a prefix of
    another session's lines under their own id), written, rewritten,
    appended to and removed between ingests."""

    def __init__(self, index: Index, seed: int):
        self.index, self.rng = index, random.Random(seed)
        self.files: dict[str, tuple] = {}   # session -> (path, records)
        self.n = 0

    def line(self, session, parent):
        rng = self.rng
        self.n += 1
        call = rng.randrange(12)
        mid = None if rng.random() < 0.08 else f"msg_{call}"
        rid = None if rng.random() < 0.2 else f"req_{call}_{rng.randrange(2)}"
        ts = f"2026-11-{rng.choice(('29', '30'))}T{rng.randrange(24):02d}:00:00.000Z" \
            if rng.random() < 0.6 else f"2026-12-01T00:00:00.{rng.randrange(1000):03d}Z"
        return assistant(session, f"a{self.n}", parent, mid, rid, rng.choice((1, 5, 5, 40)),
                         rng.choice(MODELS), ts, speed="fast" if rng.random() < 0.1 else None)

    def lines(self, session, count, parent=None):
        out = []
        for _ in range(count):
            out.append(self.line(session, parent))
            parent = out[-1]["uuid"]
        return out

    def write(self, session, records):
        project = f"-work-p{int(session[-1]) % 3}"
        path = write_jsonl(self.index.projects / project / f"{session}.jsonl", records)
        self.files[session] = (path, records)

    def step(self, op):
        rng, sessions = self.rng, sorted(self.files)
        op = op if sessions else "new"
        session = f"5e55{self.n:04d}-0000-0000-0000-00000000000{rng.randrange(10)}"
        if op == "new":
            self.write(session, self.lines(session, rng.randrange(1, 8)))
        elif op == "fork":   # another session's lines, copied under this id
            _, parent = self.files[rng.choice(sessions)]
            copied = [dict(r, sessionId=session) for r in parent[:rng.randrange(len(parent) + 1)]]
            self.write(session, copied + self.lines(session, rng.randrange(1, 3),
                                                    copied[-1]["uuid"] if copied else None))
        elif op == "append":
            s = rng.choice(sessions)
            path, records = self.files[s]
            added = self.lines(s, rng.randrange(1, 4), records[-1]["uuid"] if records else None)
            self.write(s, records + added)
        elif op == "rewrite":   # fewer or other lines: the old ones are deleted
            s = rng.choice(sessions)
            path, records = self.files[s]
            kept = records[:rng.randrange(len(records))]
            self.write(s, kept + self.lines(s, rng.randrange(0 if kept else 1, 2),
                                            kept[-1]["uuid"] if kept else None))
        else:
            s = rng.choice(sessions)
            self.files.pop(s)[0].unlink()
        return op


@pytest.mark.parametrize("seed", range(4))
def test_random_forks_appends_and_rewrites_answer_the_same(tmp_path, seed):
    idx = Index(tmp_path)
    world = World(idx, seed)
    ops = ["fork", "fork", "append", "append", "rewrite", "rewrite", "remove"]
    ops += world.rng.choices(ops + ["new"], k=4)
    world.rng.shuffle(ops)
    for op in ["new", "new"] + ops:
        world.step(op)
        if world.rng.random() < 0.6:
            idx.ingest()
            assert_surfaces_match(idx)
    idx.ingest()
    assert assert_surfaces_match(idx) > 0


def test_a_rewrite_that_drops_the_kept_copy_picks_the_call_again(index):
    """A call's kept line (most output tokens) is in the fork; the fork is
    rewritten without the call (usage_dropped: no line of the new file names
    it): the call is picked again from the parent's copy, and its lines
    counted again."""
    parent, fork = "aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002"
    first = assistant(parent, "a1", None, "msg_1", "req_1", 10, SONNET, "2026-11-30T10:00:00Z")
    world = World(index, 0)
    world.write(parent, [first])
    final = assistant(fork, "a2", "a1", "msg_1", "req_1", 90, SONNET, "2026-11-30T10:00:01Z")
    world.write(fork, [dict(first, sessionId=fork), final])
    index.ingest()
    assert index.rows("SELECT session_id, output_tokens, lines FROM usage") == [
        {"session_id": fork, "output_tokens": 90, "lines": 3}]
    world.write(fork, [assistant(fork, "b1", None, "msg_2", "req_2", 7, SONNET,
                                 "2026-11-30T11:00:00Z")])
    index.ingest()
    assert index.rows("SELECT session_id, output_tokens, lines FROM usage "
                      "ORDER BY output_tokens") == [
        {"session_id": fork, "output_tokens": 7, "lines": 1},
        {"session_id": parent, "output_tokens": 10, "lines": 1}]
    assert_surfaces_match(index)


def test_a_changed_definition_fills_usage_calls_again(index):
    """usage_calls filled by another definition (index_meta.usage_calls_hash)
    is filled again at the next ingest, from the records."""
    world = World(index, 1)
    world.write("cccccccc-0000-0000-0000-000000000003",
                world.lines("cccccccc-0000-0000-0000-000000000003", 5))
    index.ingest()
    with index.db.conn:
        index.db.conn.execute("UPDATE usage_calls SET output_tokens = 0")
        index.db.conn.execute("UPDATE index_meta SET value = 'old' WHERE key = 'usage_calls_hash'")
    index.ingest()
    assert_surfaces_match(index)


def test_a_one_line_append_keeps_usage_calls_in_flat_cost(index):
    """An append reads only the usage lines it added (usage_scans) and picks
    their calls again: its SQL work at 4,000 records is at most 2x that at
    200 (as test_append_derive asks of the whole append)."""
    from test_append_derive import linear_session, sqlite_steps

    costs = {}
    for n in (200, 4000):
        sid = f"{n:08d}-2929-4000-8000-000000000001"
        records = linear_session(sid, n + 1)
        for i, r in enumerate(records):
            if r["type"] == "assistant":
                r["requestId"] = f"req{n}-{i}"
                r["message"].update(model=SONNET, usage={"input_tokens": 1, "output_tokens": i})
        path = index.projects / "p" / f"{sid}.jsonl"
        write_jsonl(path, records[:-1])
        index.ingest()
        with open(path, "a") as f:
            f.write(json.dumps(records[-1]) + "\n")
        costs[n] = sqlite_steps(index, index.ingest)
        assert index.value("SELECT count(*) FROM usage WHERE session_id = ?", [sid]) == \
            sum(r["type"] == "assistant" for r in records)
    assert costs[4000] <= 2 * costs[200], costs
    assert_surfaces_match(index)


def test_a_store_delete_picks_the_calls_of_its_lines_again(index):
    """A session store copy holds a call's kept line (more output tokens than
    the local file's) and a call of its own; deleting the copy picks the
    first again from the local file and drops the second."""
    import asyncio

    from indexer.ingest.store import IndexSessionStore

    sid = "dddddddd-0000-0000-0000-000000000004"
    local = assistant(sid, "a1", None, "msg_1", "req_1", 10, SONNET, "2026-11-30T10:00:00Z")
    World(index, 0).write(sid, [local])
    index.ingest()
    store = IndexSessionStore(index.path)
    try:
        key = {"project_key": "-work-p1", "session_id": sid}
        asyncio.run(store.append(key, [
            assistant(sid, "a1", None, "msg_1", "req_1", 90, SONNET, "2026-11-30T10:00:00Z"),
            assistant(sid, "a2", "a1", "msg_9", "req_9", 5, SONNET, "2026-11-30T10:00:02Z")]))
        assert index.rows("SELECT message_id, output_tokens, lines FROM usage "
                          "ORDER BY message_id") == [
            {"message_id": "msg_1", "output_tokens": 90, "lines": 2},
            {"message_id": "msg_9", "output_tokens": 5, "lines": 1}]
        asyncio.run(store.delete(key))
    finally:
        store.close()
    assert index.rows("SELECT message_id, output_tokens, lines FROM usage") == [
        {"message_id": "msg_1", "output_tokens": 10, "lines": 1}]
    assert_surfaces_match(index)


def test_kept_prices_follow_every_change_to_the_prices_table(index, tmp_path):
    """usage_calls keeps each call's price (m091): `prices load` prices
    every call again at once; a change made to prices by hand is noted by a
    trigger and the next ingest prices them again (until then usage keeps
    the prices it had, as every cache follows the next ingest)."""
    from click.testing import CliRunner

    from indexer.cli.commands import cli

    world = World(index, 2)
    for session in ("dddddddd-0000-0000-0000-000000000001", "dddddddd-0000-0000-0000-000000000002"):
        world.write(session, world.lines(session, 30))
    index.ingest()
    assert_surfaces_match(index)
    kept = index.value("SELECT sum(cost_usd) FROM usage_calls")
    assert kept and index.value("SELECT count(*) FROM usage_calls WHERE price_model IS NULL "
                                "AND model = ?", [SONNET]) == 0

    # by hand: noted, the view prices as it reads, the kept prices stale
    with index.db.conn:
        index.db.conn.execute("UPDATE prices SET output = output * 10 WHERE model LIKE ?",
                              ["claude-sonnet-4-5%"])
    assert index.value("SELECT count(*) FROM index_meta WHERE key = 'usage_prices_stale'") == 1
    assert index.value("SELECT sum(cost_usd) FROM usage") == kept
    assert index.value("SELECT sum(cost_usd) FROM usage_definition") > kept
    index.ingest()   # prices every call again
    assert index.value("SELECT count(*) FROM index_meta WHERE key = 'usage_prices_stale'") == 0
    repriced = index.value("SELECT sum(cost_usd) FROM usage_calls")
    assert repriced > kept
    assert_surfaces_match(index)

    # prices load: at once, no note left
    model = index.value("SELECT price_model FROM usage_calls WHERE model = ? LIMIT 1", [SONNET])
    newer = tmp_path / "prices.json"
    newer.write_text(json.dumps({"snapshot_date": "2027-01-15",
                                 "models": {model: {"input": 3, "output": 1500}}}))
    run = CliRunner().invoke(cli, ["prices", "load", str(newer), "--db", str(index.path)])
    assert run.exit_code == 0, run.output
    assert index.value("SELECT count(*) FROM index_meta WHERE key = 'usage_prices_stale'") == 0
    assert index.value("SELECT sum(cost_usd) FROM usage_calls") > repriced
    assert_surfaces_match(index)


def test_the_cost_pages_read_the_day_sums_and_one_day_of_calls(index):
    """The cost pages (usage --by day|model|project and in total,
    cost_by_project, cost_by_day, chart_cost_by_day) read usage_day_sums
    (m094), and usage_calls only for since's own day, through
    usage_calls_timestamp: never a scan of every call, nor the usage page's
    facet indexes (by project, SQLite read every call through one: 18 -> 122
    ms on the 1M-record index)."""
    pages = {name: sql for name, (sql, _) in SURFACES.items()
             if name not in ("usage --by session", "health usage panel")}
    for name, sql in pages.items():
        plan = [r["detail"] for r in index.rows("EXPLAIN QUERY PLAN " + sql,
                                                 {"since": "2026-12-01T10"})]
        calls = [step for step in plan if "usage_calls" in step]
        assert calls and all(step.startswith("SEARCH c USING INDEX usage_calls_timestamp")
                             for step in calls), (name, plan)
        assert any("usage_day_sums" in step for step in plan), (name, plan)


def test_m091_prices_the_calls_an_index_holds(index):
    """m091 prices the calls usage_calls holds with its own copy of the
    pricing SQL (M091_PRICE_CALLS_SQL), so an index upgraded and served
    before its next ingest shows their costs: the same as the definition's."""
    from indexer.index import migrations

    world = World(index, 3)
    for session in ("eeeeeeee-0000-0000-0000-000000000001", "eeeeeeee-0000-0000-0000-000000000002"):
        world.write(session, world.lines(session, 30))
    index.ingest()
    conn = index.db.conn
    conn.execute("UPDATE usage_calls SET price_model = NULL, long_context = NULL, "
                 "cost_usd = NULL")   # as m090 left them
    conn.execute(migrations.M091_PRICE_CALLS_SQL)
    assert index.value("SELECT count(*) FROM usage_calls WHERE cost_usd IS NOT NULL") > 10
    assert_surfaces_match(index)


def test_calls_with_no_time_or_an_odd_one_are_summed_as_the_definition_does(index):
    """usage_day_sums keys a call by its time's first 10 characters: a call
    with no timestamp (NULL), an empty one, one that is not a time and one
    shorter than a day are counted by every cost page, for every :since,
    as over every call."""
    sid = "ffffffff-0000-0000-0000-000000000001"
    times = [None, "", "yesterday", "2026-11", "2026-11-30T23:59:59Z", "2026-11-30T23:59:59Z",
             "2026-12-01T00:00:00.1Z", "2026-11-30"]
    records, parent = [], None
    for i, ts in enumerate(times):
        rec = assistant(sid, f"t{i}", parent, f"msg_t{i}", f"req_t{i}", 10 + i,
                        (SONNET, OPUS, "no-such-model")[i % 3], ts or "")
        if ts is None:
            del rec["timestamp"]
        records.append(rec)
        parent = rec["uuid"]
    World(index, 0).write(sid, records)
    index.ingest()
    no_time = index.value("SELECT count(*) FROM usage WHERE timestamp IS NULL")
    assert no_time >= 1
    assert index.value("SELECT sum(calls) FROM usage_day_sums WHERE day IS NULL") == no_time
    assert assert_surfaces_match(index) == len(times)


def test_the_usage_pages_facets_count_through_an_index(index):
    """The usage table page's facets (model, project, speed, long_context)
    each count the calls through an index of their column (m094), not a
    scan and sort of every call (55-75 ms each on the 1M-record index)."""
    for column in metadata.TABLES["usage"]["facets"]:
        sql = (f"select {column} as value, count(*) as count from (select * from usage) "
               f"where {column} is not null group by {column} order by count desc, value limit 31")
        plan = [r["detail"] for r in index.rows("EXPLAIN QUERY PLAN " + sql)]
        assert any(f"COVERING INDEX usage_calls_{column} " in step for step in plan), plan
