"""How the web UI answers an error (session_index_web.errors): with rich
importable, as the [test] extra has it, Datasette 0.65's default handler
prints every error with rich and answers a URL no route matches with a 500
(rich raises outside an except block); through the plugin each error gets
Datasette's own status, JSON and template, and nothing on stdout."""

from __future__ import annotations

import asyncio

import pytest
from datasette import hookimpl
from datasette.plugins import pm

from indexer.cli import web
from indexer.index.db import open_db

pytest.importorskip("rich")   # (the default handler prints with rich only when it imports)


def empty_index(folder):
    path = folder / "index.db"
    open_db(path).conn.close()
    return path


def get_all(ds, paths):
    async def run():
        await ds.invoke_startup()
        return [await ds.client.get(p) for p in paths]
    return asyncio.run(run())


def test_errors_answer_as_datasette_does_without_a_rich_traceback(tmp_path, capsys):
    ds = web.make_datasette(empty_index(tmp_path))
    not_found = ["/-/session-download/abc/original",   # no route matches
                 "/-/session-download/1/other",
                 "/robots.txt",
                 "/-/session-download/999/original",     # the route's own NotFound
                 "/-/sessions/no-such-session",
                 "/no-such-database.json"]
    bad = ["/index/records?_size=abc", "/index/records.json?_size=abc"]
    answers = get_all(ds, not_found + bad)
    assert [r.status_code for r in answers] == [404] * len(not_found) + [400, 400]
    assert "<title>Error 404</title>" in answers[0].text   # Datasette's error.html
    assert answers[5].json() == {"ok": False, "error": "Database not found", "status": 404,
                                 "title": None}
    assert "<title>Error 400</title>" in answers[-2].text
    assert answers[-1].json() == {"ok": False, "error": "_size must be a positive integer",
                                  "status": 400, "title": None}
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err


BROKEN = "test-broken-page"


class Broken:
    """A plugin whose page raises: an unexpected exception."""

    __name__ = BROKEN   # (Datasette lists its plugins by it)

    @hookimpl
    def register_routes(self):
        async def broken(request):
            raise RuntimeError("the page broke")
        return [(r"^/-/broken(\.json)?$", broken)]


def test_an_unexpected_exception_is_logged_and_answered_500(tmp_path, capsys):
    pm.register(Broken(), name=BROKEN)
    try:
        ds = web.make_datasette(empty_index(tmp_path))
        html, as_json = get_all(ds, ["/-/broken", "/-/broken.json"])
    finally:
        pm.unregister(name=BROKEN)
    assert html.status_code == 500 and "<title>Error 500</title>" in html.text
    assert (as_json.status_code, as_json.json()) == (500, {
        "ok": False, "error": "the page broke", "status": 500, "title": None})
    out, err = capsys.readouterr()
    assert out == ""   # (the default handler prints it with rich and its locals, on stdout)
    assert err.count("Traceback (most recent call last)") == 2   # (each request's, to stderr)
    assert err.count("RuntimeError: the page broke") == 2
