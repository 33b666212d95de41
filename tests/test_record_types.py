"""Format drift: the record_types view, the kinds new since the last ingest
(status, record-types --new, the health page), kept current through
appends, rewrites, a retracted last line, store appends and deletes, an
upgrade of an older index, and checked on the real corpus against a count
made in plain Python from the files on disk."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Transcript, write_jsonl
from indexer.index import db as dbmod, record_kinds
from indexer.transcripts import records
from indexer.cli.commands import cli
from indexer.index.db import open_db

SID = "11111111-2222-3333-4444-555555555555"
PROJECT = "-tmp-demo"
VIEW_COLUMNS = ("kind", "records", "files", "first_version", "last_version", "first_seen",
                "last_seen", "modeled", "chain")


def T(n: int) -> str:
    return f"2026-09-01T00:00:{n:02d}.000Z"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def view_rows(index, columns=VIEW_COLUMNS):
    return index.rows(f"SELECT {', '.join(columns)} FROM record_types ORDER BY kind")


def main_transcript() -> Transcript:
    t = Transcript(SID)
    t.add("u1", None, "user", version="2.1.9", ts=T(1))
    t.add("a1", "u1", "assistant", version="2.1.9", ts=T(2))
    t.records.append({"type": "mode", "mode": "plan", "sessionId": SID})   # no version, no time
    t.add("s1", "a1", "system", subtype="stop_hook_summary", version="2.1.10", ts=T(4))
    t.add("h1", "s1", "attachment", version="2.1.10", ts=T(5),
          attachment={"type": "hook_success", "hookName": "Stop"})
    t.add("u2", "h1", "user", version="2.1.10", ts=T(6))
    t.add("h2", "u2", "attachment", version="2.1.10", ts=T(7))   # no attachment object
    t.records.append({"type": "custom-title", "customTitle": "x", "sessionId": SID})
    return t


def subagent_lines() -> list:
    base = {"sessionId": SID, "isSidechain": True, "agentId": "x"}
    return [
        {"type": "mode", "mode": "default", **base},   # nothing before it to inherit from
        dict(base, type="user", uuid="x1", parentUuid=None, version="2.0.5", timestamp=T(0),
             message={"role": "user", "content": "task"}),
        dict(base, type="system", subtype="api_error", uuid="x2", parentUuid="x1",
             version="2.0.5", timestamp=T(3)),
        {"note": "no type", "version": "2.1.100", "timestamp": T(9)},
    ]


def execution_log(path: Path) -> None:
    """A `claude -p` stream-json log: not a transcript, its kinds not counted."""
    write_jsonl(path, [
        {"type": "system", "subtype": "init", "session_id": SID},
        {"type": "result", "subtype": "success", "is_error": False, "result": "ok",
         "session_id": SID},
    ])


def build(index) -> None:
    main_transcript().write(index.projects / PROJECT)
    write_jsonl(index.projects / PROJECT / SID / "subagents" / "agent-x.jsonl", subagent_lines())
    execution_log(index.projects.parent / "logs" / "run.jsonl")
    index.ingest(index.projects, index.projects.parent / "logs")


def fresh_count(index) -> dict:
    """Kinds counted afresh from the records table, in plain Python (json on
    raw): {kind: (records, files)} of the transcripts."""
    seen: dict[str, list] = {}
    for raw, file_id in index.db.conn.execute(
            "SELECT r.raw, r.file_id FROM records r JOIN files f ON f.id = r.file_id "
            "WHERE f.kind IN ('main', 'subagent')"):
        kind = kind_of(json.loads(raw))
        entry = seen.setdefault(kind, [0, set()])
        entry[0] += 1
        entry[1].add(file_id)
    return {k: (n, len(files)) for k, (n, files) in seen.items()}


def kind_of(d: dict) -> str:
    t = d.get("type")
    if not isinstance(t, str) or not t:
        return "(no type)" if t in (None, "") else json.dumps(t)
    sub = None
    if t == "system":
        sub = d.get("subtype")
    elif t == "attachment" and isinstance(d.get("attachment"), dict):
        sub = d["attachment"].get("type")
    if isinstance(sub, str):
        return f"{t}/{sub}" if sub else t
    return t if sub is None else f"{t}/{json.dumps(sub)}"


def view_count(index) -> dict:
    """{kind: (records, files)} from the view, once its sums are checked
    against the per-file rows they are kept from."""
    sums = index.rows("""
        SELECT type, subtype, sum(records) AS records, count(*) AS files,
          min(first_version_key) AS first_version_key, max(last_version_key) AS last_version_key,
          min(first_timestamp) AS first_timestamp, max(last_timestamp) AS last_timestamp,
          max(last_ingested_at) AS last_ingested_at
        FROM record_kind_files GROUP BY type, subtype ORDER BY type, subtype""")
    kept = index.rows("""
        SELECT type, subtype, records, files, first_version_key, last_version_key,
          first_timestamp, last_timestamp, last_ingested_at
        FROM record_kinds WHERE records > 0 ORDER BY type, subtype""")
    assert kept == sums
    assert index.value("SELECT count(*) FROM record_kinds WHERE records = 0 AND files > 0") == 0
    return {r["kind"]: (r["records"], r["files"])
            for r in index.rows("SELECT kind, records, files FROM record_types")}


# --- counts, versions, times -------------------------------------------------

def test_counts_versions_and_times_per_kind(index):
    build(index)
    assert view_rows(index) == [
        {"kind": k, "records": n, "files": f, "first_version": v1, "last_version": v2,
         "first_seen": t1, "last_seen": t2, "modeled": m, "chain": c}
        for k, n, f, v1, v2, t1, t2, m, c in [
            # kind, records, files, versions, times, modeled, chain
            ("(no type)", 1, 1, "2.1.100", "2.1.100", T(9), T(9), 0, 0),
            ("assistant", 1, 1, "2.1.9", "2.1.9", T(2), T(2), 1, 1),
            ("attachment", 1, 1, "2.1.10", "2.1.10", T(7), T(7), 0, 1),
            ("attachment/hook_success", 1, 1, "2.1.10", "2.1.10", T(5), T(5), 0, 1),
            # inherits the version and time of the record before it
            ("custom-title", 1, 1, "2.1.10", "2.1.10", T(7), T(7), 1, 0),
            # main: 2.1.9 and T(2) inherited; subagent: first line, nothing to inherit
            ("mode", 2, 2, "2.1.9", "2.1.9", T(2), T(2), 0, 0),
            ("system/api_error", 1, 1, "2.0.5", "2.0.5", T(3), T(3), 1, 1),
            ("system/stop_hook_summary", 1, 1, "2.1.10", "2.1.10", T(4), T(4), 0, 1),
            # 2.1.10 is after 2.1.9 (compared number by number, not as text)
            ("user", 3, 2, "2.0.5", "2.1.10", T(0), T(6), 1, 1),
        ]]
    # The execution log's system/init and result are not transcript records.
    assert index.value("SELECT count(*) FROM records r JOIN files f ON f.id = r.file_id "
                       "WHERE f.kind = 'execution_log'") == 2
    assert fresh_count(index) == view_count(index)
    # type and subtype apart, NULL for none
    assert index.rows("SELECT kind, type, subtype FROM record_types "
                      "WHERE kind IN ('(no type)', 'attachment', 'system/api_error') "
                      "ORDER BY kind") == [
        {"kind": "(no type)", "type": None, "subtype": None},
        {"kind": "attachment", "type": "attachment", "subtype": None},
        {"kind": "system/api_error", "type": "system", "subtype": "api_error"}]


def test_version_key_orders_number_by_number():
    versions = ["2.1.100", "1.0.24", "2.1.9", "2.1.10", "2.0.0", "10.0.0", "2.1.10 (beta)"]
    ordered = sorted(versions, key=record_kinds.version_key)
    assert ordered == ["1.0.24", "2.0.0", "2.1.9", "2.1.10", "2.1.10 (beta)", "2.1.100",
                       "10.0.0"]
    for v in versions:   # the key ends with the version as written, after its first space
        key = record_kinds.version_key(v)
        assert key[key.index(" ") + 1:] == v


# --- new since the last ingest -----------------------------------------------

def test_a_kind_new_in_the_second_ingest_is_reported_then_not_after_a_third(index):
    t = main_transcript()
    path = t.write(index.projects / PROJECT)
    db = str(index.path)
    index.ingest()
    first = {r["kind"] for r in index.rows("SELECT kind FROM record_types WHERE new")}
    assert first == set(fresh_count(index))   # the first run brought every kind
    with open(path, "a") as f:
        for n in range(3):
            f.write(json.dumps({"type": "mode", "mode": f"m{n}", "sessionId": SID}) + "\n")
        f.write(json.dumps({"type": "system", "subtype": "away_summary", "uuid": "aw",
                            "parentUuid": "h2", "sessionId": SID, "version": "2.1.110",
                            "timestamp": T(30)}) + "\n")
        f.write(json.dumps({"type": "user", "uuid": "u3", "parentUuid": "aw",
                            "sessionId": SID, "timestamp": T(31),
                            "message": {"role": "user", "content": "again"}}) + "\n")
    index.ingest()
    # mode and user were in the file already: system/away_summary is the new kind.
    assert index.rows("SELECT kind, records, new FROM record_types WHERE new") == [
        {"kind": "system/away_summary", "records": 1, "new": 1}]
    status = json.loads(run("status", "--db", db, "--json").output)
    assert status["new_record_types"] == {"system/away_summary": 1}
    text = run("status", "--db", db).output
    assert "new record types in the last ingest: system/away_summary (1)\n" in text
    listed = run("record-types", "--new", "--db", db, "--json")
    assert listed.exit_code == 1   # a finding: cron can alert on it
    assert [(r["kind"], r["records"], r["new"]) for r in json.loads(listed.output)] == [
        ("system/away_summary", 1, 1)]
    # A third ingest with nothing new: nothing is new.
    index.ingest()
    assert index.value("SELECT count(*) FROM record_types WHERE new") == 0
    assert json.loads(run("status", "--db", db, "--json").output)["new_record_types"] == {}
    assert "new record types in the last ingest: none\n" in run("status", "--db", db).output
    listed = run("record-types", "--new", "--db", db)
    assert (listed.exit_code, listed.output) == (0, "")
    assert index.value("SELECT value FROM index_meta WHERE key = 'ingest_runs'") == "3"


def test_status_names_the_new_kinds_with_their_counts(index):
    """mode (3) and system/away_summary (1), both first seen in the second run."""
    t = Transcript(SID)
    t.add("u1", None, "user")
    t.add("a1", "u1", "assistant")
    path = t.write(index.projects / PROJECT)
    index.ingest()
    with open(path, "a") as f:
        for n in range(3):
            f.write(json.dumps({"type": "mode", "mode": f"m{n}", "sessionId": SID}) + "\n")
        f.write(json.dumps({"type": "system", "subtype": "away_summary", "uuid": "aw",
                            "parentUuid": "a1", "sessionId": SID, "timestamp": T(30)}) + "\n")
    index.ingest()
    assert record_kinds.new_kinds(index.db.conn) == [("mode", 3), ("system/away_summary", 1)]
    assert (run("status", "--db", index.path).output.splitlines()[-1]
            == "new record types in the last ingest: mode (3), system/away_summary (1)")


def test_record_types_listing_formats_and_since(index):
    build(index)
    db = index.path
    listed = run("record-types", "--db", db, "--json")
    assert listed.exit_code == 0
    rows = json.loads(listed.output)
    assert rows == index.rows(record_kinds.LIST_SQL, {"new": 0, "since": ""})
    assert sorted(r["kind"] for r in rows) == sorted(fresh_count(index))
    assert set(rows[0]) == {d[1] for d in index.db.conn.execute(
        "PRAGMA table_info('record_types')")}
    tsv = run("record-types", "--db", db).output.splitlines()
    assert tsv[0].split("\t")[:3] == ["kind", "type", "subtype"] and len(tsv) == len(rows) + 1
    [stored] = index.rows("SELECT DISTINCT first_ingested_at AS at FROM record_types")
    assert json.loads(run("record-types", "--db", db, "--since", stored["at"], "--json")
                      .output) == rows
    assert run("record-types", "--db", db, "--since", "2999-01-01", "--json").output == "[]\n"
    bad = run("record-types", "--db", db, "--since", "yesterday")
    assert bad.exit_code == 2
    missing = run("record-types", "--db", index.path.parent / "none.db")
    assert missing.exit_code == 3 and missing.output.startswith("Error: no index at")


# --- modeled or not ------------------------------------------------------------

def test_modeled_kinds_and_the_rest(index):
    t = Transcript(SID)
    t.add("u1", None, "user")
    t.add("a1", "u1", "assistant")
    t.add("p1", "a1", "progress")
    t.add("s0", "a1", "system")
    t.add("s1", "a1", "system", subtype="api_error")
    t.add("s2", None, "system", subtype="compact_boundary", logicalParentUuid="a1")
    t.add("s3", "s2", "system", subtype="file_snapshot")
    t.add("s4", "s3", "system", subtype="turn_duration")
    t.add("h1", "s3", "attachment", attachment={"type": "skill_listing"})
    for meta in ({"type": "summary", "summary": "s", "leafUuid": "a1"},
                 {"type": "custom-title", "customTitle": "c"},
                 {"type": "ai-title", "aiTitle": "a"},
                 {"type": "last-prompt", "lastPrompt": "p", "leafUuid": "a1"},
                 {"type": "queue-operation", "operation": "enqueue"},
                 {"type": "cost-state", "totalCostUsd": 1}):
        t.records.append(dict(meta, sessionId=SID))
    t.write(index.projects / PROJECT)
    index.ingest()
    meanings = {(ty, sub): m for ty, sub, m in records.MODELED_KINDS}
    rows = index.rows("SELECT type, subtype, modeled, chain, meaning FROM record_types")
    # every modeled kind is in the fixture, marked with its meaning
    assert {(r["type"], r["subtype"] or "") for r in rows if r["modeled"]} == set(meanings)
    for r in rows:
        key = (r["type"], r["subtype"] or "")
        assert (r["modeled"], r["meaning"]) == ((1, meanings[key]) if key in meanings
                                                else (0, None)), r
        assert r["chain"] == (r["type"] in records.CHAIN_TYPES), r
    unmodeled = {(r["type"], r["subtype"], r["chain"]) for r in rows if not r["modeled"]}
    assert unmodeled == {("system", "turn_duration", 1), ("attachment", "skill_listing", 1),
                         ("queue-operation", None, 0), ("cost-state", None, 0)}


# --- kept current ----------------------------------------------------------------

def test_counts_follow_appends_rewrites_and_a_retracted_last_line(index):
    t = main_transcript()
    lines = [json.dumps(r) for r in t.records]
    path = index.projects / PROJECT / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines[:3]) + "\n")
    index.ingest()
    assert fresh_count(index) == view_count(index) == {
        "user": (1, 1), "assistant": (1, 1), "mode": (1, 1)}
    with open(path, "a") as f:   # appended in slices
        f.write("\n".join(lines[3:6]) + "\n")
    index.ingest()
    with open(path, "a") as f:
        f.write("\n".join(lines[6:]) + "\n")
    index.ingest()
    assert fresh_count(index) == view_count(index)
    assert view_count(index)["user"] == (2, 1)
    # Rewritten shorter (a new generation): the counts are the new generation's.
    path.write_text("\n".join([lines[0], lines[2]]) + "\n")
    index.ingest()
    assert index.value("SELECT generation FROM files") == 2
    assert view_count(index) == fresh_count(index) == {"user": (1, 1), "mode": (1, 1)}
    # A last record without its newline is counted; when the line goes on and
    # turns out not to be a record, it is counted no more.
    with open(path, "a") as f:
        f.write(json.dumps({"type": "tag", "tag": "t", "sessionId": SID}))
    index.ingest()
    assert view_count(index)["tag"] == (1, 1)
    with open(path, "a") as f:
        f.write(" trailing junk\n")
    index.ingest()
    assert index.value("SELECT count(*) FROM bad_lines") == 1
    assert view_count(index) == fresh_count(index) == {"user": (1, 1), "mode": (1, 1)}
    # Kinds stay seen: tag is no longer in the view, its first sighting is kept.
    assert index.value("SELECT count(*) FROM record_kinds WHERE type = 'tag'") == 1
    # Another record that finishes the line the same way is counted once.
    with open(path, "a") as f:
        f.write(json.dumps({"type": "tag", "tag": "u", "sessionId": SID}))
    index.ingest()
    with open(path, "a") as f:
        f.write("   \n")   # whitespace: still the same record, read again
    index.ingest()
    assert view_count(index) == fresh_count(index) == {
        "user": (1, 1), "mode": (1, 1), "tag": (1, 1)}


def test_store_appends_and_deletes(index):
    from indexer.ingest.store import IndexSessionStore

    t = main_transcript()
    t.write(index.projects / PROJECT)
    index.ingest()
    index.ingest()   # nothing is new now
    store = IndexSessionStore(index.path)
    key = {"project_key": PROJECT, "session_id": SID}
    try:
        entries = [dict(r) for r in t.records]
        entries.append({"type": "pr-link", "url": "https://example.com/pr/1", "sessionId": SID})
        asyncio.run(store.append(key, entries[:4]))
        asyncio.run(store.append(key, entries[4:]))
        # The store append counts at once; a kind it brings first is new (until
        # the next ingest run ends).
        assert fresh_count(index) == view_count(index)
        assert view_count(index)["user"] == (4, 2) and view_count(index)["pr-link"] == (1, 1)
        assert index.rows("SELECT kind FROM record_types WHERE new ORDER BY kind") == [
            {"kind": "pr-link"}]
        asyncio.run(store.delete(key))
    finally:
        store.close()
    assert fresh_count(index) == view_count(index)
    assert "pr-link" not in view_count(index)
    assert index.value("SELECT count(*) FROM record_kind_files WHERE file_id NOT IN "
                       "(SELECT id FROM files)") == 0
    index.ingest()
    assert index.value("SELECT count(*) FROM record_types WHERE new") == 0


def test_an_older_index_is_counted_at_upgrade_and_nothing_in_it_is_new(tmp_path):
    from conftest import Index

    index = Index(tmp_path)
    build(index)
    expected = view_rows(index)
    index.db.conn.close()
    # Make it an index of the schema before m023.
    conn = sqlite3.connect(index.path)
    conn.execute("DROP VIEW record_types")
    for table in ("record_kinds", "record_kind_files", "record_kind_scans"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("DROP INDEX files_record_kinds")
    conn.execute("DELETE FROM index_meta WHERE key = 'ingest_runs'")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm023_record_kinds'")
    conn.commit()
    conn.close()
    db = open_db(index.path)   # upgrades: m023 counts what is there
    index.db = db
    assert dbmod.is_current(db.conn)
    assert view_rows(index) == expected
    assert index.rows("SELECT DISTINCT new, first_ingested_at FROM record_types") == [
        {"new": 0, "first_ingested_at": None}]
    with open(index.projects / PROJECT / f"{SID}.jsonl", "a") as f:
        f.write(json.dumps({"type": "agent-name", "name": "n", "sessionId": SID}) + "\n")
    index.ingest()
    assert index.rows("SELECT kind, records FROM record_types WHERE new") == [
        {"kind": "agent-name", "records": 1}]


# --- the web ------------------------------------------------------------------------

def test_health_page_and_canned_query_show_the_new_kinds_escaped(index):
    from indexer.cli import web

    t = main_transcript()
    path = t.write(index.projects / PROJECT)
    index.ingest()
    hostile = '<script>window.__pwned=1</script>'
    with open(path, "a") as f:
        f.write(json.dumps({"type": hostile, "sessionId": SID}) + "\n")
        f.write(json.dumps({"type": "bridge-session", "sessionId": SID}) + "\n")
    index.ingest()
    ds = web.make_datasette(index.path)
    asyncio.run(ds.invoke_startup())
    html = asyncio.run(ds.client.get("/-/session-health")).text
    name = index.path.stem
    [line] = re.findall(r'<p class="si-meta si-new-kinds">(.*?)</p>', html, re.S)
    assert hostile not in html
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;</a> (1)" in line
    assert f'href="/{name}/record_types?kind=bridge-session">bridge-session</a> (1)' in line
    assert f'href="/{name}/record_types">Every record type</a>' in line
    rows = asyncio.run(ds.client.get(
        f"/{name}/format_drift.json?_shape=array&new=1&since=")).json()
    assert sorted((r["kind"], r["records"]) for r in rows) == [(hostile, 1),
                                                               ("bridge-session", 1)]
    everything = asyncio.run(ds.client.get(f"/{name}/format_drift.json?_shape=array")).json()
    assert len(everything) == len(view_count(index))
    # With nothing new, the page says so.
    index.ingest()
    html = asyncio.run(ds.client.get("/-/session-health")).text
    [line] = re.findall(r'<p class="si-meta si-new-kinds">(.*?)</p>', html, re.S)
    assert re.sub(r"\s+", " ", line).startswith("New record types in the last ingest: none.")


# --- the real corpus ---------------------------------------------------------------

def _version(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.findall(r"[0-9]+|[^0-9]+", v))


@pytest.mark.skipif(not CORPUS.is_dir(), reason="no ../shared/corpus")
def test_the_real_corpus_against_a_count_from_the_files(index):
    index.ingest(CORPUS)
    expected: dict[str, dict] = {}
    for path, file_id in index.db.conn.execute(
            "SELECT path, id FROM files WHERE kind IN ('main', 'subagent')").fetchall():
        version = timestamp = None
        for line in Path(path).read_bytes().split(b"\n"):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if not isinstance(d, dict):
                continue
            if isinstance(d.get("version"), str) and d["version"]:
                version = d["version"]
            if isinstance(d.get("timestamp"), str) and d["timestamp"]:
                timestamp = d["timestamp"]
            e = expected.setdefault(kind_of(d), {"records": 0, "files": set(), "versions": set(),
                                                 "times": set()})
            e["records"] += 1
            e["files"].add(file_id)
            if version:
                e["versions"].add(version)
            if timestamp:
                e["times"].add(timestamp)
    assert len(expected) > 10
    got = {r["kind"]: r for r in index.rows("SELECT * FROM record_types")}
    assert set(got) == set(expected)
    for kind, e in expected.items():
        r = got[kind]
        assert (r["records"], r["files"]) == (e["records"], len(e["files"])), kind
        assert (r["first_version"], r["last_version"]) == (
            min(e["versions"], key=_version, default=None),
            max(e["versions"], key=_version, default=None)), kind
        assert (r["first_seen"], r["last_seen"]) == (
            min(e["times"], default=None), max(e["times"], default=None)), kind
    assert sum(r["records"] for r in got.values()) == index.value(
        "SELECT count(*) FROM records r JOIN files f ON f.id = r.file_id "
        "WHERE f.kind IN ('main', 'subagent')")


def test_a_rewrite_that_keeps_every_offset_and_record_id_is_counted_again(index):
    """Lines of the same lengths, other kinds: the new generation's rows take
    the same byte offsets and (the table emptied, SQLite reuses rowids) the
    same ids; the generation says it is another file now."""
    path = index.projects / PROJECT / f"{SID}.jsonl"
    write_jsonl(path, [{"type": "aaaa", "sessionId": SID}, {"type": "bbbb", "sessionId": SID}])
    index.ingest()
    before = index.rows("SELECT id, byte_offset FROM records ORDER BY id")
    write_jsonl(path, [{"type": "cccc", "sessionId": SID}, {"type": "dddd", "sessionId": SID}])
    index.ingest()
    assert index.rows("SELECT id, byte_offset FROM records ORDER BY id") == before
    assert index.value("SELECT generation FROM files") == 2
    assert view_count(index) == fresh_count(index) == {"cccc": (1, 1), "dddd": (1, 1)}


def test_two_ingest_processes_at_once_count_every_record_once(index, tmp_path):
    """Each writer reads a file's count state again under the write lock, so
    two runs over the same new files never count a record twice."""
    import os
    import subprocess
    import sys

    for n in range(40):
        t = Transcript(f"{n:08d}-0000-4000-8000-000000000000")
        for i in range(50):
            t.add(f"u{i}", f"u{i - 1}" if i else None, "user" if i % 2 == 0 else "assistant")
        t.records.append({"type": "mode", "mode": "plan", "sessionId": t.session_id})
        t.write(index.projects / f"-p{n % 4}")
    env = dict(os.environ, CLAUDE_CONFIG_DIR=str(tmp_path / "claude"),
               SESSION_INDEX_MANAGED_SETTINGS=str(tmp_path / "managed.json"))
    procs = [subprocess.Popen([sys.executable, "-m", "indexer", "ingest", str(index.projects),
                               "--db", str(index.path), "--silent"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    assert view_count(index) == fresh_count(index) == {
        "user": (1000, 40), "assistant": (1000, 40), "mode": (40, 40)}
    assert index.value("SELECT value FROM index_meta WHERE key = 'ingest_runs'") == "2"
