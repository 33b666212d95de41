"""Search on by default (indexer/index/search.py, search_state.code): the index
`session-index ingest` makes is searched by words unless --no-search; without
the trigram index a code term is a substring of the stored text and finds
what the trigram index finds; `search --enable` adds the trigram index."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from conftest import Index
from test_search import RECORDS, SID, SID2, assert_consistent, hits, run, ts, write_session
from indexer.cli import entry, web
from indexer.index import search

# Queries whose answers, with and without the trigram index, are compared:
# code terms (identifiers, paths, any substring, CJK), with words, with
# options, and words alone.
QUERIES = [
    ("_recover_orphaned_parallel_tool_results",), ("orphaned_parallel",), ("d_parallel_t",),
    ("sdk/ _recover",), ("Grep _recover",), ("sdk/",), ("会话索引",), ("修复了会话",),
    ("tool)",), ("<script>",), ("[31mred",), ("don't touch",), ('"multi-agent runs"',),
    ("_RECOVER_Orphaned",), ("redirect",), ("pars*",), ("索引",),
    ("_recover", "--session", SID2), ("Grep _recover", "--session", SID),
    ("Grep _recover", "--session", "no-such-session"), ("_recover", "--limit", "1"),
    ("_recover", "--since", "2026-09-01T00:03:30Z"), ("_recover", "--project", "/tmp/other"),
]


def state(index):
    return index.rows("SELECT high_water, code FROM search_state")


def two_indexes(tmp_path):
    """The same transcripts in an index with the trigram index and one without."""
    made = []
    for name, enable in (("code", ["--enable"]), ("words", [])):
        folder = tmp_path / name
        folder.mkdir()
        index = Index(folder)
        write_session(index.projects)
        write_session(index.projects, SID2, RECORDS[:3], folder="-tmp-other", cwd="/tmp/other")
        assert run("ingest", str(index.projects), "--db", str(index.path),
                   "--silent").exit_code == 0
        if enable:
            assert run("search", *enable, "--db", str(index.path)).exit_code == 0
        made.append(index)
    return made


def test_ingest_turns_search_on_by_words_in_a_new_index(tmp_path):
    code, words = two_indexes(tmp_path)
    assert state(words) == [{"high_water": words.value("SELECT max(id) FROM records"),
                             "code": 0}]
    assert state(code)[0]["code"] == 1
    assert words.value("SELECT count(*) FROM search_text") == 16
    assert words.value("SELECT count(*) FROM search_code_data") \
        < code.value("SELECT count(*) FROM search_code_data")
    assert hits(words, "redirect") == hits(code, "redirect") != []
    assert_consistent(words)


def test_without_the_trigram_index_code_terms_find_what_it_finds(tmp_path):
    code, words = two_indexes(tmp_path)
    for query in QUERIES:
        assert hits(words, *query) == hits(code, *query), query
    assert hits(words, "d_parallel_t") == ["a2", "a2"]   # inside words: a substring
    assert hits(words, "_RECOVER_Orphaned") == ["a2", "a2"]   # ASCII case folded


def test_a_code_hit_without_the_trigram_index_has_a_marked_snippet(tmp_path):
    _, words = two_indexes(tmp_path)
    result = run("search", "orphaned_parallel", "--db", str(words.path), "--json",
                 "--session", SID)
    assert json.loads(result.output)[0]["snippet"] == (
        "Grep: _recover_[[orphaned_parallel]]_tool_results\nsdk/")
    long = "x" * 100 + " foo.bar " + "y" * 100 + " foo.bar"
    assert search._substring_snippet(long, ["foo.bar"]) == (
        "…" + "x" * 23 + " \x02foo.bar\x03 " + "y" * 39 + "…")


def test_search_enable_adds_the_trigram_index_to_a_words_only_index(tmp_path):
    code, words = two_indexes(tmp_path)
    result = run("search", "--enable", "--db", str(words.path))
    assert result.exit_code == 0, result.output
    assert state(words)[0]["code"] == 1
    assert_consistent(words)
    assert words.value("SELECT count(*) FROM search_code WHERE search_code MATCH "
                       "'\"orphaned_parallel\"'") == 2
    for query in QUERIES[:6]:
        assert hits(words, *query) == hits(code, *query), query


def test_no_search_and_an_existing_index_keep_search_off(tmp_path):
    index = Index(tmp_path)
    write_session(index.projects)
    result = run("ingest", str(index.projects), "--db", str(index.path), "--no-search",
                 "--silent")
    assert result.exit_code == 0
    assert state(index) == []
    assert run("search", "redirect", "--db", str(index.path)).exit_code == 3
    # An index with records, search off: a later ingest leaves it so.
    write_session(index.projects, SID2, RECORDS[:2], folder="-tmp-other")
    assert run("ingest", str(index.projects), "--db", str(index.path),
               "--silent").exit_code == 0
    assert state(index) == []
    # search --disable on a searched index: the next ingest does not turn it on.
    (tmp_path / "other").mkdir()
    other = Index(tmp_path / "other")
    write_session(other.projects)
    assert run("ingest", str(other.projects), "--db", str(other.path),
               "--silent").exit_code == 0
    assert run("search", "--disable", "--db", str(other.path)).exit_code == 0
    write_session(other.projects, SID2, RECORDS[:2], folder="-tmp-other")
    assert run("ingest", str(other.projects), "--db", str(other.path),
               "--silent").exit_code == 0
    assert state(other) == []


@pytest.mark.parametrize("flag, searched", [([], True), (["--no-search"], False),
                                            (["--search"], True)])
def test_the_fast_path_turns_search_on_as_click_does(tmp_path, capsys, flag, searched):
    index = Index(tmp_path)
    write_session(index.projects)
    assert entry.fast_ingest([str(index.projects), "--db", str(index.path), "--silent",
                              *flag]) == 0
    assert bool(state(index)) is searched
    assert entry.fast_ingest([str(index.projects), "--search", "--no-search"]) is None


def test_rewrites_keep_a_words_only_index_consistent(tmp_path):
    _, words = two_indexes(tmp_path)
    path = words.projects / "-tmp-demo" / f"{SID}.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    kept = lines[:3]
    kept[0] = kept[0].replace(b"login redirect", b"logout redirect")
    path.write_bytes(b"".join(kept))
    assert words.ingest().rewritten_files == 1
    assert hits(words, "payload") == []
    assert hits(words, "[31mred") == []
    assert hits(words, "_recover_orphaned", "--session", SID) == ["a2"]
    assert words.value("SELECT count(*) FROM search_code_data") <= 2   # (its config rows)
    assert_consistent(words)


def test_the_canned_query_finds_code_without_the_trigram_index(tmp_path):
    _, words = two_indexes(tmp_path)
    words.db.conn.close()
    ds = web.make_datasette(words.path)
    asyncio.run(ds.invoke_startup())
    name = words.path.stem
    response = asyncio.run(ds.client.get(
        f"/{name}/search_transcripts.json?q=_recover_orphaned&_shape=array"))
    assert response.status_code == 200, response.text[:2000]
    assert [(r["type"], r["timestamp"], r["snippet"]) for r in response.json()] == [
        ("assistant", ts(3), "Grep: [[_recover_orphaned]]_parallel_tool_results\nsdk/")] * 2


def test_record_text_reads_what_msgspec_refuses_as_json_does():
    # The fields are decoded by msgspec; a line it refuses is read by json.loads.
    assert search.record_text("assistant", '{"message": {"content": [{"type": "tool_use", '
                              '"name": "X", "input": {"v": NaN, "w": "y"}}]}}') == "X: nan\ny"
    assert search.record_text("user", '{"message": "not an object", "content": "c"}') is None
    assert search.record_text("system", '{"content": "a \\ud800 b"}') == "a \ud800 b"
    assert search.record_text("ai-title", '{"aiTitle": "one", "aiTitle": "two"}') == "two"
    assert search.record_text("summary", '[1, 2]') is None
    assert search.record_text("summary", '{"summary": 3}') is None
    assert search.record_text("user", '{"message": {"content": "x"}, "toolUseResult": '
                              '{"stdout": "skipped"}}') == "x"


@pytest.mark.parametrize("search_new", [True, False])
def test_a_watcher_turns_search_on_in_a_new_index(tmp_path, search_new):
    import threading

    from indexer.ingest import watch as watchmod

    index = Index(tmp_path)
    write_session(index.projects)
    log: list[str] = []
    watcher = watchmod.Watcher(index.path, [str(index.projects)], log=log.append,
                               search_new=search_new)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not any(line.startswith("ingest: ") for line in log) and time.monotonic() < deadline:
        time.sleep(0.05)
    watcher.request_stop()
    thread.join(30)
    assert any(line.startswith("ingest: ") for line in log), log
    assert bool(state(index)) is search_new
    if search_new:
        assert hits(index, "redirect") == ["u1", "a1"]


def test_ingest_watch_passes_search_on(tmp_path, monkeypatch):
    from indexer.ingest import watch as watchmod

    seen = []
    monkeypatch.setattr(watchmod, "run_until_signal", lambda *a, **k: seen.append(k["search_new"]))
    for flags in ([], ["--no-search"]):
        assert run("ingest", str(tmp_path), "--db", str(tmp_path / "i.db"), "--watch",
                   *flags).exit_code == 0
    assert seen == [True, False]


def test_each_ingest_transaction_indexes_its_records_but_not_a_backlog(tmp_path, monkeypatch):
    from indexer.ingest import files as ingest_mod

    index = Index(tmp_path)
    write_session(index.projects)
    index.ingest()
    # A backlog: search on, nothing indexed yet (as right after search --enable's mark).
    with index.db.conn:
        for sql in search.ENABLE_SQL:
            index.db.conn.execute(sql, {"now": "2026-09-01T00:00:00Z", "code": 0}
                                  if ":now" in sql else {})
    in_transaction = []
    original = search.catch_up_in

    def catch_up_in(conn, batch=None):
        done = original(conn, batch)
        if conn.in_transaction and batch == search.IN_TRANSACTION_BATCH:
            in_transaction.append(done[1])
        return done
    monkeypatch.setattr(search, "catch_up_in", catch_up_in)
    monkeypatch.setattr(search, "IN_TRANSACTION_BATCH", 5)
    write_session(index.projects, SID2, RECORDS, folder="-tmp-other")
    assert ingest_mod.ingest(index.db, [str(index.projects)]).new_records == len(RECORDS)
    assert in_transaction == [5]   # (the rest after the run, a batch at a time)
    assert_consistent(index)
    assert hits(index, "redirect") == ["u1", "u1", "a1", "a1"]
