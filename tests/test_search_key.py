"""search_text.key, the FTS rowid, in seconds (search.KEY_SHIFT, migration
m095_search_compact_key): --since still exact to the ms, one FTS segment
per catch-up however the files' times interleave, and an index keyed the
old way (ms << 20) migrated to the same answers."""

from __future__ import annotations

import json

from click.testing import CliRunner

from conftest import write_jsonl
from indexer.cli.commands import cli
from indexer.index import migrations, search

SID = "11111111-2222-3333-4444-555555555555"
SID2 = "22222222-3333-4444-5555-666666666666"


def user(uuid, when, content, sid=SID):
    return {"type": "user", "uuid": uuid, "sessionId": sid, "timestamp": when,
            "message": {"role": "user", "content": content}}


def found(index, query, *options):
    """The uuids ``search QUERY --json`` lists, in its order."""
    result = CliRunner().invoke(cli, ["search", query, "--db", str(index.path), "--json",
                                      *options], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    uuid = dict(index.db.conn.execute("SELECT id, uuid FROM records").fetchall())
    return [uuid[row["record_id"]] for row in json.loads(result.output)]


# Three records in one second and one before it; each holds a word and a
# code term (routed to the trigram index, or matched as a substring without it).
IN_ONE_SECOND = [
    user("before", "2026-09-01T00:04:59.999Z", "marker src/app.py"),
    user("early", "2026-09-01T00:05:00.100Z", "marker src/app.py"),
    user("middle", "2026-09-01T00:05:00.500Z", "marker src/app.py"),
    user("late", "2026-09-01T00:05:00.900Z", "marker src/app.py"),
]


def test_since_is_exact_to_the_ms_inside_the_keys_second(index):
    search.enable(index.db, code=False)
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", IN_ONE_SECOND)
    index.ingest()
    # (the key holds the second only: the boundary second is checked by time)
    assert len({k >> search.KEY_SHIFT for (k,) in index.db.conn.execute(
        "SELECT key FROM search_text WHERE record_id > 1")}) == 1
    for code in (False, True):   # without, then with the trigram index
        if code:
            search.enable(index.db, code=True)
        for query in ("marker", "src/app.py", "marker src/app.py"):
            assert found(index, query, "--since", "2026-09-01T00:05:00.500Z") == \
                ["late", "middle"], (code, query)
            assert found(index, query, "--since", "2026-09-01T00:05:00.501Z") == ["late"]
            assert found(index, query, "--since", "2026-09-01T00:05:00Z") == \
                ["late", "middle", "early"]
            assert found(index, query, "--since", "2026-09-01T00:04:59.999Z") == \
                ["late", "middle", "early", "before"]
            assert found(index, query, "--since", "2026-09-01T00:05:00.500Z",
                         "--session", SID) == ["late", "middle"]


def segments(conn) -> int:
    """How many segments the word index has (one row per leaf page in _idx)."""
    return conn.execute("SELECT count(DISTINCT segid) FROM search_words_idx").fetchone()[0]


def test_a_catch_up_writes_one_segment_however_the_files_times_interleave(index):
    # Two sessions whose records alternate in time: by record id, the keys go
    # back at the second file's first record. FTS5 writes a segment out each
    # time a rowid goes back; sorted by key, the transaction writes one.
    minute = "2026-09-01T00:{:02d}:00.000Z"
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl",
                [user(f"a{n}", minute.format(2 * n), f"alpha {n}") for n in range(20)])
    write_jsonl(index.projects / "-tmp-demo" / f"{SID2}.jsonl",
                [user(f"b{n}", minute.format(2 * n + 1), f"beta {n}", SID2) for n in range(20)])
    index.ingest()
    assert search.enable(index.db, code=False) == 40
    assert segments(index.db.conn) == 1
    assert found(index, "alpha")[:3] == ["a19", "a18", "a17"]


def old_keys(conn) -> None:
    """search_text keyed as before m095 ((ms << 20) | (id & 0xFFFFF)), both
    FTS indexes made again on those keys."""
    conn.execute("UPDATE search_text SET key = -1 - key")
    conn.execute(
        "UPDATE search_text SET key = (CAST(round((julianday(timestamp) - 2440587.5) * 86400000.0)"
        " AS INTEGER) << 20) | (record_id & 1048575)")
    conn.execute("INSERT INTO search_words (search_words) VALUES ('rebuild')")
    if conn.execute("SELECT code FROM search_state").fetchone() == (1,):
        conn.execute("INSERT INTO search_code (search_code) VALUES ('rebuild')")


def test_m095_rekeys_an_index_searched_by_the_old_keys(index):
    records = [user(f"r{n}", f"2026-09-01T00:{n:02d}:{n:02d}.{n:03d}Z",
                    f"word{n % 3} common path/to/file{n % 2}.py") for n in range(30)]
    # Two records in one second whose ids share their 12 low bits: one key.
    records.append(user("clash", "2026-09-01T00:07:07.500Z", "clashing common"))
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", records)
    index.ingest()
    conn = index.db.conn
    conn.execute("UPDATE records SET id = 4096 + (SELECT id FROM records WHERE uuid = 'r7') "
                 "WHERE uuid = 'clash'")
    search.enable(index.db, code=True)
    queries = [("common", "--limit", "100"), ("word1",), ("path/to/file1.py",), ("common", "--limit", "5"),
               ("common", "--since", "2026-09-01T00:07:07.200Z"), ("clashing",)]
    before = [found(index, *q) for q in queries]
    assert "clash" in before[0] and "r7" in before[0]
    old_keys(conn)
    assert conn.execute("SELECT min(key) FROM search_text").fetchone()[0] > 1 << 40
    with conn:
        migrations.m095_search_compact_key(index.db)
    keys = dict(conn.execute("SELECT record_id, key FROM search_text"))
    ids = dict(conn.execute("SELECT uuid, id FROM records"))
    stamps = dict(conn.execute("SELECT id, timestamp FROM records"))
    assert keys[ids["r7"]] == search.sort_key(stamps[ids["r7"]], ids["r7"])
    assert keys[ids["clash"]] == keys[ids["r7"]] + 1   # (moved up one)
    assert all(keys[i] >> search.KEY_SHIFT == search.sort_key(stamps[i], i) >> search.KEY_SHIFT
               for i in keys)
    for table in ("search_words", "search_code"):
        conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
    assert [found(index, *q) for q in queries] == before


def test_search_enable_leaves_each_index_one_segment(index, monkeypatch):
    # A catch-up writes a segment a transaction (BATCH records each): after
    # search --enable built them, the indexes are merged into one segment
    # each, which a walk newest first reads once (search.merge).
    monkeypatch.setattr(search, "BATCH", 10)
    write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl",
                [user(f"r{n}", f"2026-09-01T00:{n:02d}:00.000Z", f"word{n} src/f{n}.py")
                 for n in range(30)])
    index.ingest()
    assert search.enable(index.db, code=False) == 30
    assert segments(index.db.conn) == 1
    assert search.enable(index.db, code=True) == 0   # (the trigram index from the text)
    conn = index.db.conn
    assert conn.execute("SELECT count(DISTINCT segid) FROM search_code_idx").fetchone()[0] == 1
    assert found(index, "src/f29.py") == ["r29"]
    assert found(index, "word3") == ["r3"]
