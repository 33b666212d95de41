"""The web UI's bounds (issue 29): every query of the plugin's pages runs
under Datasette's SQL time limit, a hostile ``?q=`` (a NUL byte, thousands of
words, 10,000 characters) is a 400 or a bounded answer, never a 500 or a
held server, and the SQL anyone can run has a memory limit."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import quote

import pytest

from test_search import SID, searchable  # noqa: F401  (the fixture)
from indexer.cli import web
from indexer.index import search
from session_index_web import format as web_format, metadata as web_metadata
from session_index_web import health as web_health, pages as web_pages

HOSTILE_QUERIES = {
    "nul": "login\x00redirect",
    "thousands of words": " ".join(f"word{i}*" for i in range(2_000)),
    "10k characters": "x" * 10_000,
}


def served(index, **settings):
    """A Datasette on the index as ``serve`` makes it (its settings changed
    by ``settings``)."""
    ds = web.make_datasette(index.path)
    ds._settings.update(settings)
    ds.sql_time_limit_ms = ds.setting("sql_time_limit_ms")
    asyncio.run(ds.invoke_startup())
    return ds


def search_url(query):
    return web_format.session_path(SID) + "?q=" + quote(query)


@pytest.mark.parametrize("query", HOSTILE_QUERIES.values(), ids=HOSTILE_QUERIES.keys())
def test_a_hostile_query_is_refused_or_bounded(searchable, query):  # noqa: F811
    searchable.db.conn.close()
    ds = served(searchable)
    response = asyncio.run(ds.client.get(search_url(query)))
    assert response.status_code in (200, 400), response.text[:2000]
    # the page is the session's, the query echoed escaped and cut
    assert f"Session {SID}" in response.text
    assert "x" * (search.MAX_QUERY_CHARS + 1) not in response.text
    if response.status_code == 400:
        assert "Not searched: the query " in response.text


def test_a_nul_in_the_query_is_a_space(searchable):  # noqa: F811
    searchable.db.conn.close()
    ds = served(searchable)
    page = asyncio.run(ds.client.get(search_url(HOSTILE_QUERIES["nul"]))).text
    assert "<mark>login</mark>" in page and "<mark>redirect</mark>" in page


def test_the_health_page_answers_while_three_hostile_searches_run(searchable):  # noqa: F811
    searchable.db.conn.close()
    ds = served(searchable)

    async def all_at_once():
        hostile = [ds.client.get(search_url(q)) for q in HOSTILE_QUERIES.values()]

        async def health():
            t0 = time.monotonic()
            response = await ds.client.get("/-/session-health")
            return response, time.monotonic() - t0

        return await asyncio.gather(health(), *hostile)

    (health, seconds), *answers = asyncio.run(all_at_once())
    assert health.status_code == 200 and "Session health" in health.text
    assert seconds < 10
    assert [a.status_code for a in answers] == [200, 400, 400]


def test_the_search_stops_at_its_time_limit(searchable, monkeypatch):  # noqa: F811
    searchable.db.conn.close()
    ds = served(searchable)
    monkeypatch.setattr(web_pages, "SEARCH_TIME_LIMIT_MS", 0)
    response = asyncio.run(ds.client.get(search_url("login")))
    assert response.status_code == 200
    assert "The search took longer than 0 ms and was stopped" in response.text
    assert "<mark>" not in response.text


def test_a_page_past_the_time_limit_is_a_503_not_a_500(searchable):  # noqa: F811
    searchable.db.conn.close()
    ds = served(searchable, sql_time_limit_ms=0)
    for path in ("/-/session-health", web_format.session_path(SID)):
        response = asyncio.run(ds.client.get(path))
        assert response.status_code == 503, (path, response.text[:500])
        assert response.text.startswith("This page's query took longer than the SQL time limit")


def test_a_part_of_the_health_page_past_the_time_limit_is_left_out(searchable, monkeypatch):  # noqa: F811,E501
    """The recently active sessions (a verdict per session: it passed the
    limit under load on a 1M-record index, and the page was a 500): left
    out with a note, the rest of the page shown."""
    searchable.db.conn.close()
    ds = served(searchable, sql_time_limit_ms=200)
    slow = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1e9) "
            "SELECT NULL AS session_id FROM n WHERE i = 0 AND :project = :since AND :limit")
    monkeypatch.setattr(web_pages.signals, "SESSIONS_SQL", slow)
    response = asyncio.run(ds.client.get("/-/session-health"))
    assert response.status_code == 200
    assert ("Not shown: the recently active sessions (its query took longer\n  than the SQL "
            "time limit, 200 ms)") in response.text
    assert 'class="si-last-ingest"' in response.text   # the rest of the page is there
    assert web_health.CHECKS[0].label in response.text


def test_sql_has_a_memory_limit(searchable):  # noqa: F811
    """``select zeroblob(1e9)`` grew the server past 7 GB: now no value is
    longer than sql_value_limit_bytes, and SQLite's heap in the process is
    bounded."""
    searchable.db.conn.close()
    ds = served(searchable)
    name = searchable.path.stem
    limits = web_metadata.SQL_MEMORY_LIMITS
    assert limits["sql_value_limit_bytes"] < 1e9
    t0 = time.monotonic()
    response = asyncio.run(ds.client.get(f"/{name}.json?sql=" + quote("select zeroblob(1e9)")))
    assert response.status_code == 400
    assert "too big" in response.json()["error"]
    assert time.monotonic() - t0 < 5
    fits = asyncio.run(ds.client.get(f"/{name}.json?_shape=array&sql="
                                     + quote("select length(zeroblob(1000)) AS n")))
    assert fits.json() == [{"n": 1000}]
    heap = asyncio.run(ds.get_database(name).execute("PRAGMA hard_heap_limit")).first()[0]
    assert heap == limits["sql_heap_limit_bytes"]
