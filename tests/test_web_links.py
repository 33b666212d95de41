"""Every link the web UI makes leads to a page: the health page's and the
usage page's links, crawled on the demo index plus a transcript holding a
call under another session's id (a forked line keeps the sessionId it was
written with, as the corpus's dag_fork.jsonl does), each answer 200. The
session page of an id the index holds no transcript of, but names (a failed
run's session, a stale reference, a call's sessionId), says what the index
holds of it, under check's verdict."""

from __future__ import annotations

import asyncio
import re
from html import unescape
from urllib.parse import urlsplit

import pytest

from conftest import Transcript
from indexer.cli import demo_data, web
from indexer.index.db import open_db
from indexer.ingest.files import ingest
from session_index_web.format import session_path

PARENT = "f0f0f0f0-0000-4000-8000-000000000001"
FORKED = "f0f0f0f0-0000-4000-8000-000000000002"   # only in PARENT's transcript
USAGE = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0,
         "cache_creation_input_tokens": 0}
HREF = re.compile(r'href="([^"]*)"')


def forked_transcript(projects):
    """PARENT's transcript, whose second answer is a line written under FORKED."""
    t = Transcript(PARENT)
    t.add("p1", None, "user")
    t.add("p2", "p1", "assistant", message={
        "id": "msg_p2", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "reply"}], "usage": USAGE}, requestId="req_p2")
    t.add("p3", "p2", "user")
    forked = t.add("p4", "p3", "assistant", message={
        "id": "msg_p4", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "forked reply"}], "usage": USAGE},
        requestId="req_p4")
    forked["sessionId"] = FORKED
    t.write(projects / "-tmp-forked")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("links")
    db_path = demo_data.build_demo(folder)
    forked_transcript(folder / "extra")
    db = open_db(db_path)
    ingest(db, [str(folder / "extra")], config_dir=folder)
    db.conn.close()
    datasette = web.make_datasette(db_path)
    asyncio.run(datasette.invoke_startup())
    return datasette


def crawl(ds, page):
    """The status of every link of ``page`` within the site, and of the page."""
    async def run():
        html = (await ds.client.get(page)).text
        links = sorted({unescape(h) for h in HREF.findall(html)
                        if h.startswith("/") and not h.startswith("//")})
        answers = {page: (await ds.client.get(page)).status_code}
        for link in links:
            answers[link] = (await ds.client.get(urlsplit(link)._replace(fragment="").geturl(),
                                                 follow_redirects=True)).status_code
        return answers
    return asyncio.run(run())


def sessions(*names):
    return [session_path(n) for n in names]


@pytest.mark.parametrize("page, linked", [
    # (the failed run's session: no transcript of it)
    ("/-/session-health", sessions(demo_data.session_id("fresh-after-missing"))),
    ("/demo/usage?_size=max", sessions(FORKED)),
    # (the reference and the resume target no transcript is of)
    ("/demo/stale_session_refs", sessions(demo_data.session_id("never-indexed"))),
    ("/demo/failed_executions", sessions(demo_data.session_id("fresh-after-missing"),
                                         demo_data.session_id("never-indexed"))),
    # (a uuid opens its session's page at its file: records.file_id, a foreign key, comes
    # to render_cell expanded, {"value": 1, "label": "1"})
    ("/demo/records?_size=30", [session_path(demo_data.session_id("long-session"))
                                + "?file=1&at="]),
])
def test_every_link_of_the_page_answers_200(ds, page, linked):
    answers = crawl(ds, page)
    assert {link: status for link, status in answers.items() if status != 200} == {}
    assert [start for start in linked if not any(link.startswith(start) for link in answers)] \
        == []


def test_the_page_of_a_session_only_named_says_what_the_index_holds_of_it(ds):
    async def get(path):
        return await ds.client.get(path)
    forked = asyncio.run(get(session_path(FORKED))).text
    assert 'data-verdict="missing"' in forked and "no transcript with this id was ever seen" \
        in forked
    assert f'href="{session_path(PARENT)}?file=' in forked and "1 record(s) in" in forked
    assert asyncio.run(get(session_path("never-named-anywhere"))).status_code == 404
