"""Crash safety: SIGKILL the ingester at random points while transcripts grow.

A real appender process keeps adding lines to a projects/ tree (some lines
tens of KB, some not JSON, some written in two parts with a pause between,
some, as Claude Code does, without their newline, which then opens the next
write to the file; now and then such a line goes on first, into a bad line
or a record with a CR or more spaces; two files created part-way through).
Meanwhile the real ``session-index ingest`` command is started again and
again and SIGKILLed after a random delay: before it opens the index, while it creates the schema, between and
inside its transactions, during the derive step; some runs are left to finish.
Nothing touches the index between rounds except a read-only connection (which
never checkpoints the WAL into the database file), so every run starts from
exactly what the killed one left behind. That connection checks, after every
round, ``PRAGMA quick_check`` and that each file's lines and its offset were
committed together: as many rows as ``line_count``, numbered 1..line_count,
and the offset at a line boundary (or at the end of a last record without
its newline, ``unterminated_tail`` long).

After the appender stops and one last ingest completes, every complete line
of every file must be in ``records`` or ``bad_lines`` exactly once, with line
numbers 1..N and byte offsets where the lines really start (a last record
without its newline counts as a line), the trailing partial line must not be
stored, ``PRAGMA integrity_check`` must say ok, and
the caches must equal their recursive definitions.

``CRASH_SAFETY_SEED`` replays one schedule of delays and appended lines
(where a kill lands still depends on timing); each round's outcome is
printed (``pytest -n 0 -s``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from conftest import views_differ
from indexer.index.db import open_db

# Kills timed from the runs that finish: in the serial xdist group (conftest.py).
pytestmark = pytest.mark.xdist_group("timing")

SEED = int(os.environ.get("CRASH_SAFETY_SEED", "20240917"))
ROUNDS = 50
# Rounds left to finish rather than killed (besides those that end before their delay).
FINISH_SHARE = 0.15
# Of the rounds killed, some get a delay drawn from anywhere up to this many
# times the duration of a whole run (measured from the runs that finish), so
# kills land while it starts, creates the schema, ingests, derives, exits...
DELAY_SPAN = 1.15
# ... and the rest (random() above this) a delay aimed at the window where
# it writes lines and caches: start-up takes most of a run.
AIMED_FROM = 0.5

_SCRIPT = Path(sys.executable).with_name("session-index")
INGEST_CMD = (
    [str(_SCRIPT)] if _SCRIPT.exists()
    else [sys.executable, "-c", "from indexer.cli.commands import cli; cli()"]
)

# The appender: phase 1 writes the initial content of the first files, then
# creates READY; phase 2 appends to every file (creating the late ones after
# a number of lines) until STOP exists, which it checks between whole lines
# only. Every write is flushed; 15% of lines go out in two writes with a pause
# between, so the ingester often sees a partial last line (cut anywhere, also
# inside a multi-byte UTF-8 character).
APPENDER = r'''
import json, os, random, sys, time, uuid

cfg = json.load(open(sys.argv[1]))
rng = random.Random(cfg["seed"])
files = cfg["files"]
stats = {"lines": 0, "bad": 0, "split": 0, "big": 0, "bytes": 0, "bursts": 0,
         "unterminated": 0, "went_on": 0}
burst = [0]
clock = [1_700_000_000.0]
WORDS = ["tool", "résumé", "naïve", "日本語", "emoji 🎉", "path/to/file.py", "\\n", "quote \"x\"",
         "def f(x):\n    return x", "lorem", "ipsum", "λ", "tab\there"]


def new_uuid():
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def text(n):
    out, size = [], 0
    while size < n:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def record_line(f):
    u = new_uuid()
    r = 0.0 if burst[0] else rng.random()
    if r < 0.08:
        n = rng.randint(20_000, 90_000)
        stats["big"] += 1
    elif r < 0.25:
        n = rng.randint(1_000, 8_000)
    else:
        n = rng.randint(10, 600)
    clock[0] += rng.uniform(0.001, 5)
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(clock[0])) + ".%03dZ" % rng.randrange(1000)
    if rng.random() < 0.5:
        rec = {"type": "user", "message": {"role": "user", "content": text(n)}}
    else:
        rec = {"type": "assistant", "message": {
            "role": "assistant", "id": "msg_" + u[:8], "model": "claude-test",
            "content": [{"type": "text", "text": text(n)}]}}
    rec.update({"uuid": u, "parentUuid": f.get("parent"), "sessionId": f["session_id"],
                "timestamp": ts})
    if f["agent_id"]:
        rec.update({"isSidechain": True, "agentId": f["agent_id"]})
    f["parent"] = u
    return json.dumps(rec, ensure_ascii=rng.random() < 0.5).encode()


def bad_line():
    stats["bad"] += 1
    tag = new_uuid()
    return rng.choice([
        b'{"type": "user", "uuid": "%s", "message": {"content": "unterminated' % tag.encode(),
        b"not json at all " + tag.encode(),
        b'{"type": "user", "uuid": "' + tag.encode() + b'",}',
        b'["an array", "' + tag.encode() + b'"]',
        b"\xff\xfe invalid utf-8 " + tag.encode(),
        b"",
    ])


def next_line(f):
    if rng.random() < 0.04:
        return bad_line(), False
    return record_line(f), True


handles = {}


def handle(f):
    h = handles.get(f["path"])
    if h is None:
        os.makedirs(os.path.dirname(f["path"]), exist_ok=True)
        h = handles[f["path"]] = open(f["path"], "ab")
    return h


def write(f, line, is_record, split, newline=True):
    """Write a line; without its newline when not ``newline``: then the next
    write to the file starts with it (sometimes after the line went on)."""
    h = handle(f)
    lead = b""
    if f.get("open"):
        if rng.random() < 0.25:
            more = rng.choice([b"\r", b"  ", b" and then some"])
            stats["went_on"] += 1
            if more.strip():
                stats["bad"] += 1  # a record no more
            h.write(more)
            h.flush()
            time.sleep(rng.uniform(0.005, 0.03))
        lead, f["open"] = b"\n", None
    stats["lines"] += 1
    stats["bytes"] += len(line) + 1
    end = b"\n" if newline else b""
    if not newline:
        stats["unterminated"] += 1
        f["open"] = True
    if split and len(line) > 1:
        stats["split"] += 1
        cut = rng.randrange(1, len(line))
        h.write(lead + line[:cut])
        h.flush()
        time.sleep(rng.uniform(0.005, 0.06))
        h.write(line[cut:] + end)
    else:
        h.write(lead + line + end)
    h.flush()


for f in files:
    target = f["initial_bytes"]
    if target:
        size = 0
        while size < target:
            line, is_record = next_line(f)
            write(f, line, is_record, False)
            size += len(line) + 1
open(cfg["ready"], "w").close()

appended = 0
while not os.path.exists(cfg["stop"]):
    live = [f for f in files if appended >= f["start_after"]]
    # A file that just became due is created with its first line at once.
    f = next((f for f in live if f["path"] not in handles), None) or rng.choice(live)
    # Now and then a burst (a big tool output): a megabyte or two at once.
    n = 1
    if rng.random() < 0.01:
        n, burst[0] = rng.randint(15, 40), 1
        stats["bursts"] += 1
    for _ in range(n):
        line, is_record = next_line(f)
        # Records only, as Claude Code: a line that is not one would just wait.
        write(f, line, is_record, rng.random() < 0.15,
              newline=not is_record or rng.random() >= 0.12)
        appended += 1
    burst[0] = 0
    if rng.random() < 0.3:
        time.sleep(rng.uniform(0, 0.004))
for h in handles.values():
    h.close()
print(json.dumps(stats))
'''


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _files(rng: random.Random, projects: Path) -> list[dict]:
    """Three main transcripts and a subagent from the start; a main file in a
    second project and a second subagent appear while the ingester runs."""
    a, b, c, late = (_uuid(rng) for _ in range(4))
    proj, other = projects / "-home-user-proj", projects / "-home-user-other"

    def f(path, session_id, agent_id=None, initial_bytes=0, start_after=0):
        return {"path": str(path), "session_id": session_id, "agent_id": agent_id,
                "initial_bytes": initial_bytes, "start_after": start_after}

    return [
        f(proj / f"{a}.jsonl", a, initial_bytes=3_000_000),
        f(proj / f"{b}.jsonl", b, initial_bytes=1_200_000),
        f(proj / f"{c}.jsonl", c, initial_bytes=200_000),
        f(proj / a / "subagents" / "agent-x.jsonl", a, "x", initial_bytes=1_000_000),
        f(other / f"{late}.jsonl", late, start_after=100),
        f(proj / b / "subagents" / "agent-y.jsonl", b, "y", start_after=250),
    ]


def _state(db: Path) -> dict:
    """What the last run left behind, read without changing it (read-only: no
    WAL checkpoint), with the invariants that must hold after any kill."""
    state = {"lines": 0, "offsets": 0, "pending_derive": 0, "partial_tails": 0,
             "unterminated": 0}
    if not db.exists():
        return state
    journal = Path(f"{db}-journal")
    if journal.exists() and journal.stat().st_size:
        # Killed while turning a new index to WAL mode, before any table: a hot
        # rollback journal, which a read-only connection cannot roll back.
        return state
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        check = [r[0] for r in conn.execute("PRAGMA quick_check")]
        assert check == ["ok"], check
        try:
            files = conn.execute(
                "SELECT f.path, f.ingested_offset, f.line_count, f.size, f.needs_derive, "
                "f.unterminated_tail, "
                "count(l.line_no), coalesce(max(l.line_no), 0), coalesce(max(l.byte_offset), -1) "
                "FROM files f LEFT JOIN (SELECT file_id, line_no, byte_offset FROM records "
                "UNION ALL SELECT file_id, line_no, byte_offset FROM bad_lines) l "
                "ON l.file_id = f.id GROUP BY f.id").fetchall()
        except sqlite3.OperationalError as exc:  # killed before the schema was committed
            assert "no such table" in str(exc), exc
            return state
    finally:
        conn.close()
    for (path, offset, line_count, size, needs_derive, unterminated, rows, last_no,
         last_offset) in files:
        # A file's lines and its offset commit together: never one without the other.
        assert rows == line_count == last_no, (path, rows, line_count, last_no)
        assert last_offset < offset, (path, last_offset, offset)
        if unterminated:  # the offset is at the end of a last record without its newline
            assert last_offset == offset - unterminated, (path, last_offset, offset)
            with open(path, "rb") as fh:
                fh.seek(last_offset - 1 if last_offset else 0)
                head = fh.read(1 if last_offset else 0)
                assert head in (b"", b"\n") and _is_record(fh.read(unterminated)), path
            state["unterminated"] += 1
        elif offset:  # the offset never passes a partial line
            with open(path, "rb") as fh:
                fh.seek(offset - 1)
                assert fh.read(1) == b"\n", (path, offset)
        state["lines"] += rows
        state["offsets"] += offset
        state["pending_derive"] += needs_derive
        # The ingester's last stat saw bytes past its offset: a partial last line.
        state["partial_tails"] += size is not None and size > offset
    return state


def _run_ingest(projects: Path, db: Path, delay: float | None):
    """Start the ingester; SIGKILL it after ``delay`` seconds unless it ends first.
    Returns (killed, seconds, summary or None)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        INGEST_CMD + ["ingest", str(projects), "--db", str(db), "--silent", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.wait(timeout=60 if delay is None else delay)
    except subprocess.TimeoutExpired:
        assert delay is not None, "an ingest left to finish ran for over 60 s"
        os.kill(proc.pid, signal.SIGKILL)
    out, err = proc.communicate()
    seconds = time.monotonic() - started
    if proc.returncode == -signal.SIGKILL:
        return True, seconds, None
    assert proc.returncode == 0, (proc.returncode, err.decode(errors="replace"))
    summary = json.loads(out)
    assert summary["errors"] == [], summary
    return False, seconds, summary


def _disk_lines(path: Path) -> tuple[list[bytes], list[int], int]:
    """The file's complete lines (a last one without its newline too when it
    is a JSON object), where each starts, and where the last ends."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    if not _is_record(lines[-1]):
        lines.pop()
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1
    return lines, offsets, min(pos, len(data))


def _is_record(line: bytes) -> bool:
    """A JSON object in UTF-8 (decided here independently of indexer.transcripts.lines)."""
    try:
        return isinstance(json.loads(line.decode("utf-8")), dict)
    except ValueError:
        return False


def test_sigkilled_ingester_stores_every_complete_line_exactly_once(tmp_path):
    rng = random.Random(SEED)
    projects = tmp_path / "projects"
    db = tmp_path / "index.db"
    stop, ready = tmp_path / "stop", tmp_path / "ready"
    files = _files(rng, projects)
    config = tmp_path / "appender.json"
    config.write_text(json.dumps({"seed": rng.getrandbits(32), "files": files,
                                  "stop": str(stop), "ready": str(ready)}))
    script = tmp_path / "appender.py"
    script.write_text(APPENDER, encoding="utf-8")

    test_started = time.monotonic()
    appender = subprocess.Popen([sys.executable, str(script), str(config)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    rounds = []
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert appender.poll() is None, appender.communicate()[1].decode()
            assert time.monotonic() < deadline, "appender did not write the initial files"
            time.sleep(0.01)

        # Seconds for a whole run and for its ingest() call (the part after
        # start-up and opening the index), refined by the runs that finish.
        full_run, work = 0.5, 0.1
        before = _state(db)
        for i in range(ROUNDS):
            r = rng.random()
            if r < FINISH_SHARE:
                delay = None
            elif r < AIMED_FROM:  # anywhere: while starting, migrating, ingesting, exiting
                delay = rng.uniform(0, DELAY_SPAN * full_run)
            else:  # aimed at ingest() and its transactions, before the ~30-70 ms of exit
                delay = rng.uniform(max(0.0, full_run - 1.5 * work - 0.07), full_run - 0.02)
            killed, seconds, summary = _run_ingest(projects, db, delay)
            after = _state(db)
            assert after["lines"] >= before["lines"] and after["offsets"] >= before["offsets"], (
                f"round {i}: stored lines went from {before} to {after}")
            if not killed:
                assert summary["rewritten_files"] == 0, (i, summary)
                full_run = 0.6 * full_run + 0.4 * seconds
                work = 0.6 * work + 0.4 * summary["seconds"]
            progressed = (after["lines"], after["offsets"]) != (before["lines"], before["offsets"])
            rounds.append({
                "round": i, "delay": None if delay is None else round(delay, 3),
                "seconds": round(seconds, 3), "killed": killed,
                "work": summary and summary["seconds"],
                "new_lines": after["lines"] - before["lines"], "progressed": progressed,
                "pending_derive": after["pending_derive"],
                "partial_tails": 0 if killed else after["partial_tails"],
                "unterminated": after["unterminated"],
            })
            before = after
            assert appender.poll() is None, appender.communicate()[1].decode()
    finally:
        stop.touch()
        try:
            out, err = appender.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            appender.kill()
            appender.communicate()
            raise
    assert appender.returncode == 0, err.decode()
    written = json.loads(out)

    # A partial last line the appender never finished: it must wait, unstored
    # (after the newline of a last record without one, as Claude Code writes).
    partial = b'{"type": "user", "uuid": "never-finished", "message": {"content": "cut'
    with open(files[0]["path"], "ab") as fh:
        if not Path(files[0]["path"]).read_bytes().endswith(b"\n"):
            fh.write(b"\n")
        fh.write(partial)

    killed, _, summary = _run_ingest(projects, db, None)
    assert not killed
    killed, _, again = _run_ingest(projects, db, None)
    assert not killed
    assert (again["new_lines"], again["changed_files"], again["rewritten_files"]) == (0, 0, 0), again

    index = open_db(db)
    conn = index.conn
    try:
        assert [r[0] for r in conn.execute("PRAGMA integrity_check")] == ["ok"]

        on_disk = sorted(os.path.abspath(p) for p in projects.rglob("*.jsonl"))
        assert on_disk == sorted(f["path"] for f in files), "the late files were not all created"
        tracked = {path: dict(zip(("id", "offset", "line_count", "rewrites", "deleted",
                                   "needs_derive"), rest))
                   for path, *rest in conn.execute(
                       "SELECT path, id, ingested_offset, line_count, rewrites, deleted_at, "
                       "needs_derive FROM files")}
        assert sorted(tracked) == on_disk

        total_lines = total_bad = 0
        for path in on_disk:
            row = tracked[path]
            lines, offsets, end = _disk_lines(Path(path))
            assert lines, path
            stored = conn.execute(
                "SELECT line_no, byte_offset, CAST(raw AS BLOB), 'record' FROM records "
                "WHERE file_id = :f UNION ALL "
                "SELECT line_no, byte_offset, raw, 'bad' FROM bad_lines WHERE file_id = :f "
                "ORDER BY line_no", {"f": row["id"]}).fetchall()

            # Each complete line exactly once: records as text, bad lines as bytes.
            records_text = Counter(raw.decode("utf-8") for _, _, raw, kind in stored
                                   if kind == "record")
            bad_bytes = Counter(bytes(raw) for _, _, raw, kind in stored if kind == "bad")
            expected = Counter(line for line in lines if _is_record(line))
            assert records_text == Counter({k.decode("utf-8"): n for k, n in expected.items()}), path
            assert bad_bytes == Counter(line for line in lines if not _is_record(line)), path

            # Line numbers 1..N without a gap, each at its real byte offset.
            assert [r[0] for r in stored] == list(range(1, len(lines) + 1)), path
            assert [r[1] for r in stored] == offsets, path
            assert [bytes(r[2]) for r in stored] == lines, path

            assert (row["offset"], row["line_count"]) == (end, len(lines)), path
            assert (row["rewrites"], row["deleted"], row["needs_derive"]) == (0, None, 0), path
            total_lines += len(lines)
            total_bad += sum(bad_bytes.values())
        assert Path(files[0]["path"]).read_bytes().endswith(partial)
        assert conn.execute(
            "SELECT count(*) FROM records WHERE raw LIKE '%never-finished%'").fetchone()[0] == 0

        # The second guard: one row per (file, byte offset), uuids never doubled.
        for table in ("records", "bad_lines"):
            unique = [idx[1] for idx in conn.execute(f"PRAGMA index_list({table})") if idx[2]]
            assert any([c[2] for c in conn.execute(f"PRAGMA index_info({name})")]
                       == ["file_id", "byte_offset"] for name in unique), table
        assert conn.execute(
            "SELECT file_id, byte_offset, count(*) FROM (SELECT file_id, byte_offset FROM records "
            "UNION ALL SELECT file_id, byte_offset FROM bad_lines) "
            "GROUP BY 1, 2 HAVING count(*) > 1").fetchall() == []
        assert conn.execute(
            "SELECT uuid, count(*) FROM records GROUP BY uuid HAVING count(*) > 1").fetchall() == []
        assert written["lines"] == total_lines
        assert written["bad"] == total_bad

        # The caches finished by the runs that survived equal their definitions.
        for view in ("leaves", "leaf_ancestry", "orphans"):
            extra, missing = views_differ(conn, view, f"{view}_definition")
            assert (extra, missing) == ([], []), view
    finally:
        conn.close()

    killed_rounds = [r for r in rounds if r["killed"]]
    mid_run = [r for r in killed_rounds if r["progressed"]]
    mid_write = [r for r in mid_run if r["pending_derive"]]
    print(f"\ncrash safety (seed {SEED}): {len(rounds)} rounds in "
          f"{time.monotonic() - test_started:.1f}s; {len(rounds) - len(killed_rounds)} finished, "
          f"{len(killed_rounds)} killed: {len(killed_rounds) - len(mid_run)} before storing "
          f"anything, {len(mid_write)} mid-write (lines committed, caches not yet), "
          f"{len(mid_run) - len(mid_write)} after their derive commit; finished runs saw {sum(r['partial_tails'] for r in rounds)} "
          f"partial last lines and {sum(r['unterminated'] for r in rounds)} last records without "
          f"a newline; appender wrote {written['lines']} lines ({written['bad']} bad, "
          f"{written['unterminated']} without a newline at first, {written['went_on']} went on, "
          f"{written['split']} in two parts, {written['big']} over 20 KB, {written['bursts']} "
          f"bursts, {written['bytes']:,} bytes); final ingest stored {summary['new_lines']} lines")
    for r in rounds:
        print("  ", r)
    assert mid_write, "no kill landed while the ingester was writing: timing is off"
    assert sum(r["unterminated"] for r in rounds), "no run stored a last record without newline"
