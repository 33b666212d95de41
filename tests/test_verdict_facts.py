"""Issue 29, item 1: the verdict's file facts kept at ingest
(verdict_facts_cache, signals/verdict.py VERDICT_FACTS_TEMPLATE).

session_verdicts reads a kept row per main transcript instead of walking
each file's chain; every answer must stay what the verdict computed from
the records gives (verdict.SESSION_VERDICTS_DEFINITION_SQL, the same
template over facts computed live). conftest's assert_caches_match_definitions
holds both (the facts and every verdict) on every fixture, the corpus and
the random trees; here: the demo (a session of every verdict) grown,
cut, rewritten and deleted between ingests, the migration's fill, a
changed definition's refill, and check's own answer.
"""
from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from conftest import Index, assert_verdicts_match_definition
from indexer.cli import demo_data
from indexer.index import migrations, views
from indexer.signals import verdict


def demo_index(tmp_path: Path) -> tuple[Index, Path]:
    """The demo's index, as an Index over its projects folder."""
    db_path = demo_data.build_demo(tmp_path)
    index = Index.__new__(Index)
    index.path, index.projects = db_path, tmp_path / "projects"
    from indexer.index.db import open_db
    index.db = open_db(db_path)
    return index, tmp_path / "projects"


def verdict_counts(index) -> Counter:
    return Counter(r["verdict"] for r in index.rows("SELECT verdict FROM session_verdicts"))


def test_the_demo_kept_facts_give_every_verdict_as_computed(tmp_path):
    index, _ = demo_index(tmp_path)
    kinds = verdict_counts(index)
    # the demo holds a session of every verdict: the comparison covers each
    assert set(kinds) == set(verdict.EXIT_CODES), kinds
    assert index.value("SELECT count(*) FROM verdict_facts_cache") == index.value(
        "SELECT count(*) FROM files WHERE kind = 'main'")
    index.assert_caches_match_definitions()


@pytest.mark.parametrize("seed", range(2))
def test_kept_facts_follow_cuts_appends_rewrites_and_deletes(tmp_path, seed):
    """Every main transcript of the demo cut to a prefix of its lines
    (a rewrite: the file shrank), then grown back a few lines at a time
    (appends), one rewritten with a line changed in the middle, one
    deleted: after every ingest each verdict is the one computed from the
    records (a keep missed on any path fails it)."""
    rng = random.Random(seed)
    index, projects = demo_index(tmp_path)
    mains = sorted(p for p in projects.rglob("*.jsonl") if "subagents" not in p.parts)
    whole = {p: p.read_bytes().splitlines(keepends=True) for p in mains}
    for p, lines in whole.items():
        p.write_bytes(b"".join(lines[:rng.randrange(1, max(2, len(lines)))]))
    index.ingest()
    index.assert_caches_match_definitions()
    seen = Counter(verdict_counts(index))
    while True:
        grown = False
        for p, lines in whole.items():
            have = len(p.read_bytes().splitlines())
            if have < len(lines):
                p.write_bytes(b"".join(lines[:have + rng.randrange(1, 6)]))
                grown = True
        index.ingest()
        index.assert_caches_match_definitions()
        seen.update(verdict_counts(index))
        if not grown:
            break
    assert len(seen) >= 4, seen   # the verdicts changed on the way
    # a line changed in the middle (a rewrite), a file deleted
    victim, gone = rng.sample(mains, 2)
    lines = whole[victim]
    middle = len(lines) // 2
    victim.write_bytes(b"".join(lines[:middle] + lines[middle + 1:]))
    gone.unlink()
    index.ingest()
    index.assert_caches_match_definitions()


def test_the_migration_fills_the_facts_an_index_holds(tmp_path):
    """m092 fills verdict_facts_cache with its own copy of the definition
    (M092_VERDICT_FACTS_SQL), so an index upgraded and served before its
    next ingest gives its verdicts: the same as computed from the records."""
    index, _ = demo_index(tmp_path)
    conn = index.db.conn
    conn.execute("DELETE FROM verdict_facts_cache")
    conn.execute(migrations.M092_VERDICT_FACTS_SQL)
    assert index.value("SELECT count(*) FROM verdict_facts_cache") > 10
    index.assert_caches_match_definitions()


def test_a_changed_definition_fills_the_facts_again(tmp_path):
    """An index whose facts were kept by another definition (its hash in
    index_meta differs) gets them all again at the next ingest."""
    index, _ = demo_index(tmp_path)
    conn = index.db.conn
    conn.execute("UPDATE verdict_facts_cache SET refused = 1 - refused, splices = splices + 1")
    conn.execute("INSERT OR REPLACE INTO index_meta VALUES ('verdict_facts_hash', 'older')")
    conn.commit()
    assert not views.nothing_to_derive(conn)
    index.ingest()
    assert index.value("SELECT value FROM index_meta WHERE key = 'verdict_facts_hash'") == \
        views.VERDICT_FACTS_HASH
    index.assert_caches_match_definitions()


def test_the_verdicts_read_the_kept_facts(tmp_path):
    """session_verdicts reads verdict_facts_cache (the health page, the
    chart, sessions, show): a kept fact changed by hand changes the verdict
    (a verdict still computed from the records would not move)."""
    index, _ = demo_index(tmp_path)
    sid = demo_data.session_id("long-session")
    before = index.rows("SELECT verdict FROM session_verdicts WHERE session_id = ?", [sid])
    assert before == [{"verdict": "resumable"}]
    index.db.conn.execute(
        "UPDATE verdict_facts_cache SET splices = 1 WHERE file_id = "
        "(SELECT main_file_id FROM sessions WHERE session_id = ?)", [sid])
    after = index.rows("SELECT verdict, cause FROM session_verdicts WHERE session_id = ?", [sid])
    assert after == [{"verdict": "spliced", "cause": "api_error_splice"}]
    with pytest.raises(AssertionError):
        assert_verdicts_match_definition(index.db.conn)


def test_the_plan_reads_a_kept_row_per_session(tmp_path):
    """Every session's verdict (what chart_verdicts_by_day counts) looks up
    each file's facts by its key and walks no chain."""
    index, _ = demo_index(tmp_path)
    plan = " | ".join(r["detail"] for r in index.rows(
        "EXPLAIN QUERY PLAN " + verdict.SESSION_VERDICTS_SQL))
    assert "leaf_ancestry_cache" not in plan and "orphans_cache" not in plan, plan
    assert "SEARCH vf USING INTEGER PRIMARY KEY" in plan, plan   # verdict_facts_cache


def test_the_orphan_rows_of_the_health_page_read_a_covering_index(tmp_path):
    """m093: the health page's orphan rows (a cause's orphans, newest first)
    read orphans_cache_cause_time alone; the questions by file and cause
    (an append's, the verdict facts' splices and grafts) keep
    orphans_cache_cause (SQLite has no statistics: a wider index could be
    taken where a narrower one answers)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "datasette-plugins"))
    from session_index_web import health
    from indexer.ingest import derive, derive_append

    index, _ = demo_index(tmp_path)

    def plan(sql, params=()):
        return " | ".join(r["detail"] for r in index.rows("EXPLAIN QUERY PLAN " + sql, params))

    orphan_checks = [c for c in health.CHECKS if c.name == "orphans"]
    assert len(orphan_checks) >= 5
    for check in orphan_checks:   # its newest rows in the index's order: no sort of them all
        read = plan(health.CHECK_SQL.format(sql=check.sql, limit=10))
        assert "COVERING INDEX orphans_cache_cause_time (cause=?)" in read, check.label
        assert "TEMP B-TREE" not in read, (check.label, read)
    ids = {"file_ids": "[1]"}
    for sql in derive.KEEP_VERDICT_FACTS_SQLS:
        assert "orphans_cache_cause_time" not in plan(sql, ids)
    assert "orphans_cache_cause (cause=? AND file_id=?)" in plan(
        derive_append.CONCURRENT_IN_FILE_SQL, [1])


def test_session_health_computes_one_sessions_verdict(tmp_path):
    """session_health asks session_verdicts for :session_id only: SQLite
    flattened its subquery and computed every session's verdict (2 s at a
    million records) until it was DISTINCT. Counted in SQLite steps: one
    session's row costs far less than every session's verdict."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "datasette-plugins"))
    from session_index_web.metadata import SESSION_HEALTH_SQL
    from test_append_derive import sqlite_steps

    index, _ = demo_index(tmp_path)
    sessions = index.value("SELECT count(*) FROM session_verdicts")
    assert sessions >= 10
    sid = demo_data.session_id("long-session")
    one = sqlite_steps(index, lambda: index.rows(SESSION_HEALTH_SQL, {"session_id": sid}))
    every = sqlite_steps(index, lambda: index.rows("SELECT * FROM session_verdicts"))
    assert one * 2 < every, (one, every)   # (64 against 182; 159 without DISTINCT)


def test_the_verdict_chart_reads_only_what_each_verdict_needs(tmp_path):
    """chart_verdicts_by_day reads the verdict alone (verdict.verdict_only:
    the layer SQLite may flatten, so that only the subqueries each session's
    verdict comes to run): every session's verdict as session_verdicts
    gives it, for at most 0.6 of the SQLite steps of the layer kept whole
    (0.52 here; the chart on the 1M-record bench index: 187 -> 58 ms)."""
    from indexer.signals import charts
    from test_append_derive import linear_session, sqlite_steps

    index, projects = demo_index(tmp_path)
    for n in range(60):   # and sessions that are resumable, the most common verdict
        sid = f"{n:08d}-2929-4000-8000-00000000c4a7"
        path = projects / "plain" / f"{sid}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n"
                                for r in linear_session(sid, 6)))
    index.ingest()
    only = verdict.SESSIONS_VERDICT_ONLY_TEMPLATE.format(sessions="SELECT * FROM sessions")
    whole = verdict.SESSIONS_VERDICT_TEMPLATE.format(sessions="SELECT * FROM sessions")
    by_session = "SELECT session_id, host, verdict FROM ({}) ORDER BY session_id"
    assert index.rows(by_session.format(only)) == index.rows(by_session.format(whole)) \
        == index.rows("SELECT v.session_id, v.host, v.verdict FROM session_verdicts v "
                      "JOIN sessions s ON s.session_id = v.session_id AND s.host = v.host "
                      "ORDER BY v.session_id")
    assert len(verdict_counts(index)) >= 5
    chart = []
    ours = sqlite_steps(index, lambda: chart.extend(index.rows(charts.VERDICTS_BY_DAY_SQL,
                                                                {"since": ""})))
    flat = verdict._KEPT_LAYER.replace("DISTINCT ", "")
    kept = charts.VERDICTS_BY_DAY_SQL.replace(flat, verdict._KEPT_LAYER)
    assert flat in charts.VERDICTS_BY_DAY_SQL and kept != charts.VERDICTS_BY_DAY_SQL
    kept_rows = []
    theirs = sqlite_steps(index, lambda: kept_rows.extend(index.rows(kept, {"since": ""})))
    assert chart == kept_rows and sum(r["sessions"] for r in chart) >= 10
    assert ours * 5 <= theirs * 3, (ours, theirs)   # (186 against 359)
