"""Forks (anthropics/claude-code #95234, #85875): a transcript copied from
another session is linked to its parent by what its records say, read whole
with its own session whatever sessionId its copies carry, and an empty fork
(title rows only) is listed; every surface names them (the session_forks
view, the forks listing, the health page, the session page, check).

tests/fixtures/forks holds what the real Claude Code 2.1.332 wrote against
the fake Messages API: fork_session/ (``claude -p``, ``--resume``, then
``--resume PARENT --fork-session`` twice, and a fork of the first fork) and
branch/ (an interactive session and its ``/branch``). The desktop fork of
#95234 and the empty fork of #85875 are made from them as the threads
describe (the CLI of today writes neither)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import CORPUS
from oracle_checks import CLAUDE, resume_in
from indexer.cli import web
from indexer.cli.commands import cli
from indexer.index import search
from indexer.index.db import open_db
from indexer.ingest.files import ingest
from indexer.repair.check import check

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "forks"
PARENT = "10035187-9754-48eb-920d-d2d1c0c9c5d0"
FORK1 = "7352505c-b744-4fe4-b9cb-0c23b2f52607"      # --fork-session of PARENT
FORK2 = "5649b2d1-c2be-494c-97f3-7d957ab50a7e"      # a second --fork-session of PARENT
FORK_OF_FORK = "b820e73c-88f7-4e58-974f-e31ea4da01e9"   # --fork-session of FORK1
BRANCHED = "4352fdca-f12b-432d-9c89-dc365315861e"   # an interactive session ...
BRANCH = "01c6b9a4-2bcd-46f1-bb3d-31f8d82b300d"     # ... and its /branch
DESKTOP = "d0d0d0d0-1111-4222-8333-444444444444"    # #95234: copies keep the parent's id
EMPTY = "e0e0e0e0-1111-4222-8333-444444444444"      # #85875: title rows only

EXPECTED = {  # session: (kind, parent, link)
    FORK1: ("fork", PARENT, "request_session_id"),
    FORK2: ("fork", PARENT, "request_session_id"),
    FORK_OF_FORK: ("fork", FORK1, "request_session_id"),
    BRANCH: ("fork", BRANCHED, "forked_from"),
    DESKTOP: ("fork", PARENT, "copied_session_id"),
    EMPTY: ("empty", BRANCH, "job_state"),   # the job's state.json names its parent
}


def desktop_fork(parent_text: str, fork_text: str) -> str:
    """FORK1 as the desktop app writes a fork (#95234): the records copied
    from the parent keep the parent's sessionId, the new ones carry the
    fork's."""
    parent_uuids = {json.loads(line).get("uuid") for line in parent_text.splitlines()} - {None}
    out = []
    for line in fork_text.splitlines():
        record = json.loads(line)
        record.pop("requestSessionId", None)
        record["sessionId"] = PARENT if record.get("uuid") in parent_uuids else DESKTOP
        out.append(json.dumps(record, separators=(",", ":")))
    return "\n".join(out) + "\n"


def empty_fork(branch_text: str) -> str:
    """A fork holding only ai-title and agent-name rows (#85875), with the
    title the real /branch gave its fork."""
    name = next(json.loads(line)["agentName"] for line in branch_text.splitlines()
                if json.loads(line).get("type") == "agent-name")
    rows = [{"type": "ai-title", "aiTitle": name, "sessionId": EMPTY},
            {"type": "agent-name", "agentName": name, "sessionId": EMPTY}]
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)


@pytest.fixture
def world(tmp_path, monkeypatch):
    config = tmp_path / "config"
    projects = config / "projects"
    proj = projects / "-tmp-work"
    proj.mkdir(parents=True)
    for src in sorted(FIXTURES.glob("*/*.jsonl")):
        shutil.copy(src, proj)
    (proj / f"{DESKTOP}.jsonl").write_text(desktop_fork(
        (proj / f"{PARENT}.jsonl").read_text(), (proj / f"{FORK1}.jsonl").read_text()))
    (proj / f"{EMPTY}.jsonl").write_text(empty_fork((proj / f"{BRANCH}.jsonl").read_text()))
    job = config / "jobs" / EMPTY[:8]   # #85875: "state.json still records forkParentSessionId"
    job.mkdir(parents=True)
    (job / "state.json").write_text(json.dumps({   # the fields 2.1.332's job state carries
        "state": "working", "sessionId": EMPTY, "resumeSessionId": EMPTY,
        "daemonShort": EMPTY[:8], "cwd": "/tmp/work", "forkSourceAlive": True,
        "forkBoundaryAt": "2026-12-03T18:36:32.869Z", "forkSessionId": EMPTY,
        "forkParentSessionId": BRANCH, "createdAt": "2026-12-03T18:40:00.000Z"}))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    monkeypatch.setenv("SESSION_INDEX_MANAGED_SETTINGS", str(tmp_path / "managed.json"))
    db = open_db(tmp_path / "index.db")
    ingest(db, [str(projects)])
    return {"db": db, "path": tmp_path / "index.db", "proj": proj, "config": config}


def rows(db, sql, params=()):
    cur = db.conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def test_the_view_links_each_fork_to_its_parent(world):
    found = {r["session_id"]: r for r in rows(world["db"], "SELECT * FROM session_forks")}
    assert {s: (r["kind"], r["parent_session_id"], r["link"]) for s, r in found.items()} \
        == EXPECTED
    files = {r["session_id"]: r["id"] for r in rows(
        world["db"], "SELECT id, session_id FROM files WHERE kind = 'main'")}
    for session_id, (kind, parent, _) in EXPECTED.items():
        row = found[session_id]
        assert row["parent_file_id"] == (files[parent] if parent else None)
        if kind == "fork":   # the copies came first; its own conversation after them
            assert row["copied_records"] > 0 and row["forked_at"] is not None
    assert found[DESKTOP]["foreign_records"] == found[DESKTOP]["copied_records"] > 0
    assert {found[s]["foreign_records"] for s in (FORK1, FORK2, FORK_OF_FORK, BRANCH)} == {0}
    # a fork of a fork copied its parent's records, its parent's copies included
    assert found[FORK_OF_FORK]["copied_records"] > found[FORK1]["copied_records"]


# The session page's forks as the view gives them (what the page asked before).
VIEW_FORKS_OF_SESSION_SQL = """
SELECT session_id, kind, parent_session_id, link, copied_records, foreign_records, forked_at
FROM session_forks WHERE session_id = :session_id OR parent_session_id = :session_id
ORDER BY session_id <> :session_id, forked_at, session_id
""".strip()


def steps(db, sql, params) -> tuple[list, int]:
    """The rows of ``sql`` and the SQLite virtual-machine steps (hundreds) it took."""
    count = [0]

    def tick():
        count[0] += 1

    db.conn.set_progress_handler(tick, 100)
    try:
        found = db.conn.execute(sql, params).fetchall()
    finally:
        db.conn.set_progress_handler(None, 0)
    return found, count[0]


def test_the_session_page_asks_the_view_of_the_transcripts_that_can_name_it(world):
    """The session page's forks (pages.SESSION_FORKS_SQL) are the view's rows
    for every session, forks, parents, a fork of a fork, the empty fork and
    plain sessions alike, and are computed only for the transcripts that can
    name the session: for a session that is no fork, among 150 others and
    150 empty forks, half the view's cost or less."""
    from test_append_derive import linear_session
    from session_index_web import pages

    for n in range(150):
        sid = f"{n:08d}-2929-4000-8000-00000000f0f0"
        (world["proj"] / f"{sid}.jsonl").write_text("".join(
            json.dumps(r, separators=(",", ":")) + "\n" for r in linear_session(sid, 6)))
        # and as many empty forks (title rows only), which the view judges
        # whatever the session asked
        empty = f"{n:08d}-2929-4000-8000-00000000e0e0"
        (world["proj"] / f"{empty}.jsonl").write_text(json.dumps(
            {"type": "custom-title", "customTitle": f"fork {n}", "sessionId": empty},
            separators=(",", ":")) + "\n")
    ingest(world["db"], [str(world["config"] / "projects")])
    db = world["db"]
    sessions = [s for (s,) in db.conn.execute("SELECT session_id FROM sessions")]
    assert set(EXPECTED) | {PARENT, BRANCHED} <= set(sessions) and len(sessions) > 300
    costs = {}
    for sid in sessions + ["no-such-session"]:
        ours, costs[sid, "page"] = steps(db, pages.SESSION_FORKS_SQL, {"session_id": sid})
        theirs, costs[sid, "view"] = steps(db, VIEW_FORKS_OF_SESSION_SQL, {"session_id": sid})
        assert ours == theirs, sid
    assert {r[0] for r in db.conn.execute(pages.SESSION_FORKS_SQL, {"session_id": PARENT})} \
        == {FORK1, FORK2, DESKTOP}
    plain = "00000007-2929-4000-8000-00000000f0f0"
    assert costs[plain, "page"] * 2 <= costs[plain, "view"], costs


def test_the_view_reads_what_ingest_keeps_as_lines_come(world):
    """Issue 29: session_forks reads fork_heads_cache (each main
    transcript's first user and assistant records, what they say of another
    session), kept as derive adds records, equal to session_forks_definition
    (the same over the records) as a copy of FORK1 is written line by line
    (no fork before its first user line); rewritten with records naming only
    itself, it is none."""
    from conftest import views_differ

    db, proj = world["db"], world["proj"]
    assert views_differ(db.conn, "session_forks", "session_forks_definition") == ([], [])
    late = "f0f0f0f0-1111-4222-8333-444444444444"
    lines = (proj / f"{FORK1}.jsonl").read_text().splitlines(keepends=True)
    seen = []
    for line in lines:
        with open(proj / f"{late}.jsonl", "a") as f:
            f.write(line)
        ingest(db, [str(proj.parent)])
        assert views_differ(db.conn, "session_forks", "session_forks_definition") == ([], [])
        seen.append([(r["kind"], r["parent_session_id"]) for r in rows(
            db, "SELECT * FROM session_forks WHERE session_id = ?", [late])])
    assert seen[0] == [] and seen[-1] == [("fork", FORK1)]   # its lines carry FORK1's id
    assert db.conn.execute("SELECT count(*) FROM fork_heads_cache").fetchone()[0] == \
        db.conn.execute("SELECT count(*) FROM files WHERE kind = 'main'").fetchone()[0]
    own = [json.loads(line) for line in lines]
    for record in own:
        record.pop("requestSessionId", None)
        record.pop("forkedFrom", None)
        record["sessionId"] = late
    (proj / f"{late}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in own[:3]))
    ingest(db, [str(proj.parent)])
    assert views_differ(db.conn, "session_forks", "session_forks_definition") == ([], [])
    assert rows(db, "SELECT * FROM session_forks WHERE session_id = ?", [late]) == []


def test_the_listing(world):
    result = CliRunner().invoke(cli, ["forks", "--db", str(world["path"]), "--json"])
    assert result.exit_code == 1
    listed = json.loads(result.output)
    assert {r["session_id"]: (r["kind"], r["parent_session_id"], r["link"]) for r in listed} \
        == EXPECTED
    assert listed[0]["session_id"] == EMPTY   # the empty fork first
    result = CliRunner().invoke(cli, ["forks", "--help"])
    assert "session-index forks --json" in result.output


def test_check_answers_for_each(world):
    empty = check(world["db"], EMPTY, config_dir=world["config"])
    assert (empty.verdict, empty.exit_code, empty.details["cause"]) == ("missing", 4,
                                                                         "no_messages")
    for session_id in (FORK1, FORK2, FORK_OF_FORK, BRANCH, DESKTOP, PARENT, BRANCHED):
        assert check(world["db"], session_id, config_dir=world["config"]).verdict == "resumable"


def test_records_belong_to_the_file_they_are_in(world):
    """#95234: the desktop fork's copies carry the parent's sessionId; the
    index keeps them with the fork: export, the session page and search."""
    db = world["db"]
    assert rows(db, "SELECT count(DISTINCT r.session_id) AS n FROM records r JOIN files f "
                    "ON f.id = r.file_id WHERE f.session_id = ?", [DESKTOP])[0]["n"] == 2
    result = CliRunner().invoke(cli, ["export", DESKTOP, "--db", str(world["path"]),
                                      "--out", "-"])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == (world["proj"] / f"{DESKTOP}.jsonl").read_bytes()
    search.enable(db)
    copied_prompt = "first prompt"   # the parent's prompt, copied into every fork
    hits = search.search(db, f'"{copied_prompt}"', session=DESKTOP)
    assert hits and {h["session_id"] for h in hits} == {DESKTOP}
    parent_hits = search.search(db, f'"{copied_prompt}"', session=PARENT)
    assert {h["record_id"] for h in parent_hits}.isdisjoint({h["record_id"] for h in hits})


def site_get(db_path: Path, path: str, status: int = 200):
    ds = web.make_datasette(str(db_path))
    asyncio.run(ds.invoke_startup())
    response = asyncio.run(ds.client.get(path))
    assert response.status_code == status, (path, response.text[:1000])
    return response.text


def test_the_health_page_counts_them(world):
    import re

    html = site_get(world["path"], "/-/session-health")
    counts = {}
    for label in ("Empty forks: only title rows, no conversation",
                  "Forks: records copied from another session"):
        m = re.search(re.escape(label) + r'</a><div class="si-fix">[^<]+</div></td>\s*'
                      r'<td class="si-count">(\d+)</td>', html)
        assert m, label
        counts[label] = int(m.group(1))
    assert list(counts.values()) == [1, len(EXPECTED) - 1]


@pytest.mark.parametrize("session_id", sorted(EXPECTED))
def test_the_session_page_names_it(world, session_id):
    kind, parent, link = EXPECTED[session_id]
    html = site_get(world["path"], f"/-/sessions/{session_id}")
    assert f'data-fork="{kind}" data-link="{link or ""}"' in html
    if parent:
        assert f'href="/-/sessions/{parent}"' in html
        assert f'data-child="{session_id}"' in site_get(world["path"], f"/-/sessions/{parent}")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_no_fork_in_the_corpus_that_is_not_one(tmp_path):
    """The corpus's transcripts: any fork listed names a parent its records
    carry, and no stub without title rows is an empty fork."""
    db = open_db(tmp_path / "i.db")
    ingest(db, [str(CORPUS)])
    for row in rows(db, "SELECT * FROM session_forks"):
        if row["kind"] == "empty":
            assert rows(db, "SELECT count(*) AS n FROM records WHERE file_id = ? AND type IN "
                            "('user', 'assistant')", [row["file_id"]])[0]["n"] == 0
        else:
            assert rows(db, "SELECT count(*) AS n FROM records WHERE file_id = ? AND "
                            "instr(raw, ?) > 0", [row["file_id"], row["parent_session_id"]]
                        )[0]["n"] > 0


@pytest.mark.oracle
@pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")
def test_the_real_cli_reads_a_fork_whole_and_an_empty_one_not_at_all(world, tmp_path):
    """Claude Code 2.1.332 resumes the desktop fork from its own file, copies
    (under the parent's sessionId) and new records alike, as the index keeps
    them; the empty fork loads nothing ("No conversation found", check's
    missing)."""
    config = tmp_path / "cli" / "config"
    shutil.copytree(world["config"], config)
    cwd = tmp_path / "cli" / "work"
    cwd.mkdir()
    code, out, sent = resume_in(config, DESKTOP, cwd)
    assert code == 0 and sent, out
    said = json.dumps(sent[-1]["messages"])
    own = [json.loads(line) for line in (world["proj"] / f"{DESKTOP}.jsonl").read_text()
           .splitlines()]
    prompts = [r["message"]["content"] for r in own if r.get("type") == "user"
               and isinstance(r.get("message", {}).get("content"), str)]
    assert prompts and all(p in said for p in prompts)   # the copied and the fork's own
    assert {r["sessionId"] for r in own if r.get("type") == "user"} == {PARENT, DESKTOP}
    code, out, sent = resume_in(config, EMPTY, cwd)
    assert code != 0 and "No conversation found" in out and not sent, out
