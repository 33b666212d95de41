"""Full-text search (indexer/index/search.py): enabled per index, kept current by
ingest, rewrites, the session store and watch mode; queries quoted safely,
routed to the word or the trigram index; snippets escaped in JSON and HTML."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from click.testing import CliRunner

from conftest import Transcript, run_on_tty, write_jsonl
from test_watch import live  # noqa: F401  (the watcher fixture)
from indexer.index import search
from indexer.cli import web
from session_index_web import format as web_format
from indexer.cli.commands import cli

SID = "11111111-2222-3333-4444-555555555555"
SID2 = "22222222-3333-4444-5555-666666666666"
HOSTILE = "<script>alert(1)</script> \x1b[31mred\x1b[0m payload"


def text(uuid, parent, type_, body, ts, **fields):
    """A user or assistant record whose content is ``body`` (a string or blocks)."""
    if type_ == "user":
        message = {"role": "user", "content": body}
    else:
        message = {"id": f"msg_{uuid}", "type": "message", "role": "assistant",
                   "model": "claude-x", "content": body}
    return dict(uuid=uuid, parent=parent, type_=type_, ts=ts, message=message, **fields)


def ts(minute):
    return f"2026-09-01T00:{minute:02d}:00.000Z"


RECORDS = [
    # u1 is newer than a1, though written before it: newest first is by time.
    text("u1", None, "user", "We fixed the login redirect in the auth middleware", ts(30)),
    text("a1", "u1", "assistant", [{"type": "text", "text":
                                    "The redirect after login keeps the next parameter"}], ts(2)),
    text("a2", "a1", "assistant", [{"type": "tool_use", "id": "tu1", "name": "Grep", "input": {
        "pattern": "_recover_orphaned_parallel_tool_results", "path": "sdk/"}}], ts(3)),
    text("u2", "a2", "user", "recover orphaned parallel tool results, please", ts(4)),
    text("a3", "u2", "assistant", [{"type": "thinking", "thinking":
                                    "multi-agent runs share one index; don't touch the parser"}],
         ts(5)),
    text("u3", "a3", "user", "a multi agent setup", ts(6)),
    text("a4", "u3", "assistant", [{"type": "text", "text": "CI failed again"}], ts(7)),
    text("u4", "a4", "user", "CIRCLE is a vendor", ts(8)),
    text("u5", "u4", "user", "我们修复了会话索引工具的问题", ts(9)),
    text("u6", "u5", "user", "索引 很快", ts(10)),
    text("a5", "u6", "assistant", [{"type": "text", "text": "parsing the config"}], ts(11)),
    text("u7", "a5", "user", [{"type": "tool_result", "tool_use_id": "tu1", "content":
                               "zebrafish " + "filler " * 700 + "quokka"}], ts(12)),
    text("a6", "u7", "assistant", [{"type": "text", "text": HOSTILE}], ts(13)),
]


def write_session(projects, sid=SID, records=RECORDS, folder="-tmp-demo", cwd="/tmp/demo"):
    t = Transcript(sid)
    for r in records:
        r = dict(r)
        t.add(r.pop("uuid"), r.pop("parent"), r.pop("type_"), cwd=cwd, **r)
    return t.write(projects / folder)


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def searchable(index):
    write_session(index.projects)
    index.ingest()
    result = run("search", "--enable", "--db", str(index.path))
    assert result.exit_code == 0, result.output
    return index


def hits(index, query, *options):
    """The uuids of the records ``search QUERY --json`` lists, in its order."""
    result = run("search", query, "--db", str(index.path), "--json", *options)
    assert result.exit_code == 0, result.output
    uuid = dict(index.db.conn.execute("SELECT id, uuid FROM records").fetchall())
    return [uuid[row["record_id"]] for row in json.loads(result.output)]


def assert_consistent(index):
    """search_text holds exactly the records with text, and both FTS indexes
    agree with it."""
    ids = {r for (r,) in index.db.conn.execute("SELECT record_id FROM search_text")}
    expected = {i for i, t, raw in index.db.conn.execute("SELECT id, type, raw FROM records")
                if search.record_text(t, raw)}
    assert ids == expected
    for fts in ("search_words", "search_code"):
        index.db.conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")


def searched(index):
    """How much of search is there: its state row, text rows, trigger."""
    return index.rows(
        "SELECT (SELECT count(*) FROM search_state) AS state, "
        "(SELECT count(*) FROM search_text) AS text, "
        "(SELECT count(*) FROM sqlite_master WHERE type = 'trigger' "
        " AND name = 'search_forget_record') AS trigger")[0]


def test_search_is_off_until_enabled_and_a_default_ingest_indexes_nothing(index):
    write_session(index.projects)
    index.ingest()
    nothing = {"state": 0, "text": 0, "trigger": 0}
    assert searched(index) == nothing
    result = run("search", "redirect", "--db", str(index.path))
    assert result.exit_code == 3
    assert result.output == (f"Error: search is not enabled on this index: run 'session-index "
                             f"search --enable' first (on {index.path})\n")
    enabled = run("search", "--enable", "--db", str(index.path))
    assert enabled.exit_code == 0
    assert enabled.output.startswith(f"search enabled on {index.path}: 13 records indexed in ")
    assert hits(index, "redirect") == ["u1", "a1"]
    # On no index at all: no index is made.
    missing = run("search", "--enable", "--db", str(index.path.parent / "none.db"))
    assert missing.exit_code == 3 and not (index.path.parent / "none.db").exists()
    # --disable drops it all; searching is refused again, ingest goes on.
    assert searched(index) == {"state": 1, "text": 13, "trigger": 1}
    assert run("search", "--disable", "--db", str(index.path)).exit_code == 0
    assert searched(index) == nothing
    assert index.value("SELECT count(*) FROM search_words WHERE search_words MATCH 'redirect'") \
        == 0
    assert run("search", "redirect", "--db", str(index.path)).exit_code == 3
    write_session(index.projects, SID2, RECORDS[:1])
    assert index.ingest().new_records == 1


def test_phrases_prefixes_and_newest_first(searchable):
    assert hits(searchable, "redirect") == ["u1", "a1"]          # u1 is newer
    assert hits(searchable, '"login redirect"') == ["u1"]         # a phrase
    assert hits(searchable, "login redirect") == ["u1", "a1"]    # both words, any order
    assert hits(searchable, "redir*") == ["u1", "a1"]             # a prefix
    # porter stems a prefix ("pars" -> "par"): the prefix as typed must be there too,
    # so "parallel" (u2) is not a hit; "parsing" and "parser" are.
    assert hits(searchable, "pars*") == ["a5", "a3"]
    assert hits(searchable, "running") == ["a3"]                  # stemmed: runs ~ running
    assert hits(searchable, "fixing") == ["u1"]                   # fixed ~ fixing


def test_code_identifiers_go_to_the_trigram_index(searchable):
    assert search.compile_query("_recover_orphaned_parallel_tool_results") == {
        "code": '"_recover_orphaned_parallel_tool_results"'}
    # Only the identifier, not the prose with the same words.
    assert hits(searchable, "_recover_orphaned_parallel_tool_results") == ["a2"]
    # (the word index splits the identifier at its underscores: words find it)
    assert hits(searchable, "recover orphaned parallel tool results") == ["u2", "a2"]
    assert hits(searchable, "orphaned_parallel") == ["a2"]        # any substring
    assert hits(searchable, "Grep") == ["a2"]                     # tool names
    assert hits(searchable, "sdk/ _recover") == ["a2"]


def test_hyphens_apostrophes_and_fts_syntax_are_text(searchable):
    assert hits(searchable, "multi-agent") == ["u3", "a3"]        # as a phrase: multi agent
    assert hits(searchable, "don't") == ["a3"]
    assert hits(searchable, "\"don't touch") == ["a3"]            # an unclosed quote
    for query in ('"', "*", ":", "(", "'", "-", '""', "* * *"):
        result = run("search", query, "--db", str(searchable.path))
        assert result.exit_code == 2, query
        assert result.output.splitlines()[-1].startswith("Error: nothing to search for"), query
    for query in ("NOT", "a OR b", "NEAR(x y)", "col:val", "x AND", "^a", "a + b", "{x}",
                  "redirect NOT login", "tool)"):
        result = run("search", query, "--db", str(searchable.path), "--json")
        assert result.exit_code == 0, (query, result.output)
    assert hits(searchable, "redirect NOT login") == []     # NOT is a word; none has it
    assert hits(searchable, "tool)") == []


def test_short_terms_and_cjk(searchable):
    assert search.compile_query("CI") == {"words": 'text : ("CI")'}
    assert hits(searchable, "CI") == ["a4"]                       # a word: not CIRCLE
    assert hits(searchable, "ci*") == ["u4", "a4"]
    # CJK: 3 characters or more are substrings (trigram); unicode61 would
    # see the whole sentence as one word.
    assert search.compile_query("会话索引") == {"code": '"会话索引"'}
    assert hits(searchable, "会话索引") == ["u5"]
    assert hits(searchable, "修复了会话") == ["u5"]
    # 2 characters: the word index, which finds them where they stand alone.
    assert hits(searchable, "索引") == ["u6"]


def test_tool_results_are_indexed_up_to_the_bound(searchable):
    assert hits(searchable, "zebrafish") == ["u7"]
    assert hits(searchable, "quokka") == []                       # past 4,000 characters
    (stored,) = searchable.db.conn.execute(
        "SELECT text FROM search_text WHERE record_id = "
        "(SELECT id FROM records WHERE uuid = 'u7')").fetchone()
    assert len(stored) == search.TOOL_TEXT_CHARS + 1 and stored.endswith("…")


def test_filters_by_session_project_and_time(searchable):
    write_session(searchable.projects, SID2, RECORDS[:3], folder="-tmp-other", cwd="/tmp/other")
    searchable.ingest()
    other = searchable.db.conn.execute(
        "SELECT uuid FROM records WHERE session_id = ? ORDER BY timestamp DESC", [SID2]).fetchall()
    assert other == [("u1",), ("a2",), ("a1",)]
    sessions = dict(searchable.db.conn.execute("SELECT id, session_id FROM records"))

    def sessions_of(query, *options):
        result = run("search", query, "--db", str(searchable.path), "--json", *options)
        return [sessions[r["record_id"]] for r in json.loads(result.output)]

    # The trigram index, and both, with --session.
    # (one timestamp: the later row first)
    assert sessions_of("_recover_orphaned") == [SID2, SID]
    assert sessions_of("_recover_orphaned", "--session", SID2) == [SID2]
    assert sessions_of("Grep _recover", "--session", SID) == [SID]
    assert sessions_of("Grep _recover", "--session", "no-such-session") == []
    # The session id is not text: its parts are not words of the records.
    assert sessions_of(SID2.split("-")[1]) == []
    everything = hits(searchable, "redirect")
    assert len(everything) == 4
    assert hits(searchable, "redirect", "--session", SID2) == ["u1", "a1"]
    rows = json.loads(run("search", "redirect", "--db", str(searchable.path), "--json",
                          "--project", "/tmp/other").output)
    assert [(r["session_id"], r["project"]) for r in rows] == [(SID2, "-tmp-other")] * 2
    assert len(hits(searchable, "redirect", "--project", "-tmp-demo")) == 2
    assert hits(searchable, "redirect", "--since", "2026-09-01T00:10:00Z") == ["u1", "u1"]
    assert hits(searchable, "redirect", "--limit", "1") == ["u1"]
    bad = run("search", "redirect", "--db", str(searchable.path), "--since", "soon")
    assert bad.exit_code == 2


def test_the_cli_prints_session_time_type_and_a_marked_snippet(searchable):
    result = run("search", '"login redirect"', "--db", str(searchable.path))
    assert result.exit_code == 0
    record_id = searchable.value("SELECT id FROM records WHERE uuid = 'u1'")
    assert result.output.splitlines() == [
        "session_id\ttimestamp\ttype\tproject\tsnippet\trecord_id",
        f"{SID}\t{ts(30)}\tuser\t-tmp-demo\tWe fixed the [[login redirect]] in the auth "
        f"middleware\t{record_id}"]
    assert run("search", "nothing-like-this", "--db", str(searchable.path)).output == ""
    assert run("search", "nothing-like-this", "--db", str(searchable.path),
               "--json").output == "[]\n"


def test_hostile_text_stays_text_in_json_and_terminal_output(searchable):
    result = run("search", "payload", "--db", str(searchable.path), "--json")
    (row,) = json.loads(result.output)
    # The escape sequences are gone (a snippet cannot drive a terminal);
    # the markup is text for whoever renders it.
    assert row["snippet"] == "<script>alert(1)</script>  [31mred [0m [[payload]]"
    assert "\x1b" not in result.output and "\\u001b" not in result.output
    tsv = run("search", "script", "--db", str(searchable.path))
    assert "\x1b" not in tsv.output
    assert tsv.output.splitlines()[1].split("\t")[4] == \
        "<[[script]]>alert(1)</[[script]]>  [31mred [0m payload"


def test_html_snippets_escape_hostile_text_and_keep_the_marks():
    html = str(search.html_snippet("<script>x</script> \x02payload\x03 & <b>"))
    assert html == "&lt;script&gt;x&lt;/script&gt; <mark>payload</mark> &amp; &lt;b&gt;"


def test_incremental_after_appends_and_rewrites_leaves_no_stale_hits(searchable):
    path = searchable.projects / "-tmp-demo" / f"{SID}.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    # An append.
    with open(path, "ab") as f:
        f.write(json.dumps({"type": "user", "uuid": "u8", "parentUuid": "a6", "sessionId": SID,
                            "timestamp": ts(40), "message": {"role": "user",
                                                             "content": "wombat sighted"}})
                .encode() + b"\n")
    assert searchable.ingest().new_records == 1
    assert hits(searchable, "wombat") == ["u8"]
    assert_consistent(searchable)
    # A rewrite: the file loses its last lines and one line changes. Its
    # records are the newest rows, so the new ones reuse their rowids.
    kept = lines[:3]
    kept[0] = kept[0].replace(b"login redirect", b"logout redirect")
    path.write_bytes(b"".join(kept))
    summary = searchable.ingest()
    assert summary.rewritten_files == 1
    assert hits(searchable, "wombat") == []
    assert hits(searchable, "payload") == []
    assert hits(searchable, '"login redirect"') == []
    assert hits(searchable, '"logout redirect"') == ["u1"]
    assert hits(searchable, "_recover_orphaned_parallel_tool_results") == ["a2"]
    assert_consistent(searchable)
    # Growing again after the rewrite.
    path.write_bytes(b"".join(kept) + b"".join(lines[3:5]))
    searchable.ingest()
    assert hits(searchable, "multi-agent") == ["a3"]
    assert_consistent(searchable)


def test_a_rewrite_of_an_older_file_lowers_the_mark_so_reused_rowids_are_indexed(searchable):
    first = searchable.projects / "-tmp-demo" / f"{SID}.jsonl"
    write_session(searchable.projects, SID2, RECORDS[:2], folder="-tmp-other")
    searchable.ingest()
    # The first file's records are below the second's; rewriting it deletes
    # them and appends new rows above.
    first.write_bytes(first.read_bytes().splitlines(keepends=True)[0].replace(
        b"login", b"signin"))
    searchable.ingest()
    assert hits(searchable, '"signin redirect"') == ["u1"]
    assert len(hits(searchable, "redirect")) == 3
    assert_consistent(searchable)
    # The last file rewritten: its rowids are reused by its new lines.
    second = searchable.projects / "-tmp-other" / f"{SID2}.jsonl"
    second.write_bytes(second.read_bytes().splitlines(keepends=True)[1].replace(
        b"keeps", b"drops"))
    searchable.ingest()
    assert hits(searchable, "drops") == ["a1"]
    assert hits(searchable, "keeps") == []
    assert_consistent(searchable)


def test_store_appends_are_searchable_at_once_and_deletes_take_their_text(searchable):
    from indexer.ingest.store import IndexSessionStore

    store = IndexSessionStore(searchable.path)
    key = {"project_key": "-tmp-store", "session_id": SID2}
    try:
        asyncio.run(store.append(key, [{
            "type": "user", "uuid": "s1", "parentUuid": None, "sessionId": SID2,
            "timestamp": ts(50), "message": {"role": "user", "content": "platypus mirrored"}}]))
        assert hits(searchable, "platypus") == ["s1"]
        assert_consistent(searchable)
        asyncio.run(store.delete(key))
        assert hits(searchable, "platypus") == []
        assert_consistent(searchable)
    finally:
        store.close()


@pytest.mark.xdist_group("timing")
def test_results_appear_under_ingest_watch_within_a_second(live):  # noqa: F811
    from test_watch import poll

    project = live.projects / "-tmp-demo"
    write_session(live.projects)
    assert run("ingest", str(live.projects), "--db", str(live.db), "--silent").exit_code == 0
    assert run("search", "--enable", "--db", str(live.db)).exit_code == 0
    proc = live.watch()
    path = project / f"{SID}.jsonl"

    def found():
        return live.value(
            "SELECT r.uuid FROM search_words JOIN search_text t ON t.key = search_words.rowid "
            "JOIN records r ON r.id = t.record_id WHERE search_words MATCH 'narwhal' "
            "ORDER BY search_words.rowid DESC LIMIT 1")

    for n in range(3):
        written = time.monotonic()
        with open(path, "ab") as f:
            f.write(json.dumps({"type": "user", "uuid": f"w{n}", "parentUuid": "a6",
                                "sessionId": SID, "timestamp": ts(50 + n), "message": {
                                    "role": "user", "content": f"narwhal {n}"}}).encode() + b"\n")
        poll(lambda: found() == f"w{n}" or None, "the new record's text", timeout=1.0)
        assert time.monotonic() - written < 1.0
    assert proc.stop() == 0


def test_datasette_search_box_session_page_and_canned_query(searchable):
    searchable.db.conn.close()
    ds = web.make_datasette(searchable.path)
    asyncio.run(ds.invoke_startup())
    name = searchable.path.stem

    def get(path):
        response = asyncio.run(ds.client.get(path))
        assert response.status_code == 200, (path, response.text[:2000])
        return response

    # The table's search box: the word index.
    table = get(f"/{name}/search_text.json?_search=multi-agent&_shape=array").json()
    assert sorted(r["text"] for r in table) == [
        "a multi agent setup", "multi-agent runs share one index; don't touch the parser"]
    assert 'name="_search"' in get(f"/{name}/search_text").text
    # The canned query, :q as one phrase.
    canned = get(f"/{name}/search_transcripts.json?q=_recover_orphaned&_shape=array").json()
    assert [(r["type"], r["snippet"]) for r in canned] == [
        ("assistant", "Grep: [[_recover_orphaned]]_parallel_tool_results\nsdk/")]
    canned = get(f"/{name}/search_transcripts.json?q=login%20redirect&_shape=array").json()
    assert [r["timestamp"] for r in canned] == [ts(30)]
    # The session page's search field: within the session, escaped, marked.
    page = get(web_format.session_path(SID) + "?q=script").text
    assert 'name="q" value="script"' in page
    assert ("&lt;<mark>script</mark>&gt;alert(1)&lt;/<mark>script</mark>&gt;" in page)
    assert "<script>alert" not in page
    other = get(web_format.session_path(SID) + "?q=%3Cscript%3E").text
    assert 'value="&lt;script&gt;"' in other and 'value="<script>' not in other
    none = get(web_format.session_path(SID) + "?q=nothinglikethis").text
    assert "No record of this session matches" in none


def test_record_text_takes_each_kind_of_record():
    def raw(**r):
        return json.dumps(r)

    assert search.record_text("summary", raw(type="summary", summary="Fixed login")) == \
        "Fixed login"
    assert search.record_text("custom-title", raw(customTitle="my title")) == "my title"
    assert search.record_text("ai-title", raw(aiTitle="ai title")) == "ai title"
    assert search.record_text("system", raw(content="API Error: 529")) == "API Error: 529"
    assert search.record_text("user", raw(message={"content": [
        {"type": "image", "source": {}}, {"type": "text", "text": "look"}]})) == "look"
    assert search.record_text("assistant", raw(message={"content": [
        {"type": "tool_use", "name": "Bash", "input": {"command": "ls -la", "timeout": 5,
                                                       "flags": ["a", True]}}]})) == \
        "Bash: ls -la\n5\na"
    assert search.record_text("user", raw(message={"content": [
        {"type": "tool_result", "content": [{"type": "text", "text": "out"}]}]})) == "out"
    assert search.record_text("user", "not json") is None
    assert search.record_text("user", raw(message={"content": ""})) is None
    assert search.record_text("user", "[1]") is None


def test_each_control_character_of_the_text_is_a_space_and_nothing_else_changes():
    # Every code point (lone surrogates too, which json.loads can give), as
    # the character class [\x00-\x08\x0b\x0c\x0e-\x1f\x7f] cleans them.
    every = "".join(map(chr, range(0x110000)))
    expected = "".join(" " if (c < 0x20 and c not in (0x09, 0x0A, 0x0D)) or c == 0x7F
                       else chr(c) for c in range(0x110000))
    assert search._clean(every) == expected
    assert search.record_text("user", json.dumps(
        {"message": {"content": "a\x1b[31mred\x00\ud800\u00e9\x7f\tz\r\n"}})) == \
        "a [31mred \ud800\u00e9 \tz"
    assert search.clean_query("x\x00y\u2028") == "x y\u2028"


def test_the_sort_key_orders_by_time_and_survives_odd_timestamps():
    assert search.sort_key("2026-09-01T00:00:01.000Z", 5) > \
        search.sort_key("2026-09-01T00:00:00.999Z", 10 ** 9)
    assert search.sort_key(None, 7) == 7
    assert search.sort_key("not a time", 7) == 7
    assert search.sort_key("1960-01-01T00:00:00Z", 7) == 7
    assert search.sort_key("9999-12-31T23:59:59Z", 7) < 1 << 63
    assert search.sort_key("2026-09-01T00:00:00", 1) == search.sort_key(
        "2026-09-01T00:00:00Z", 1)


def test_two_records_with_one_sort_key_are_both_indexed(index):
    # Records 1 and 1 + 2**20 with the same timestamp share a key's low bits.
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", [
        {"type": "user", "uuid": "k1", "sessionId": SID, "timestamp": ts(1),
         "message": {"role": "user", "content": "same key one"}}])
    index.ingest()
    index.db.conn.execute(
        "INSERT INTO records (id, file_id, line_no, byte_offset, type, timestamp, raw) "
        "SELECT ?, file_id, 2, 1000, 'user', timestamp, "
        "json_set(raw, '$.message.content', 'same key two') FROM records WHERE uuid = 'k1'",
        [1 + (1 << search.KEY_SHIFT)])
    assert run("search", "--enable", "--db", str(index.path)).exit_code == 0
    assert len(hits_any(index, "same key")) == 2
    assert_consistent(index)


def hits_any(index, query):
    result = run("search", query, "--db", str(index.path), "--json")
    return json.loads(result.output)


def test_on_a_terminal_matches_are_bold_and_enable_shows_progress(searchable):
    import subprocess
    import sys

    def on_tty(*args, stream="stdout"):
        return run_on_tty([sys.executable, "-m", "indexer", *args, "--db", searchable.path],
                          stream)

    line = on_tty("search", '"login redirect"').splitlines()[1]
    assert "We fixed the \x1b[1mlogin redirect\x1b[0m in the auth" in line
    assert "[[" not in line
    assert run("search", "--disable", "--db", str(searchable.path)).exit_code == 0
    assert "Indexing text" in on_tty("search", "--enable", stream="stderr")
    assert "[[login redirect]]" in subprocess.run(
        [sys.executable, "-m", "indexer", "search", '"login redirect"', "--db",
         str(searchable.path)], capture_output=True, text=True, timeout=60).stdout
