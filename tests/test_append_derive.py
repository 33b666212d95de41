"""Appending to a transcript extends its caches (derive_append.py) instead of
recomputing them, and after every append they still equal the recursive
definitions: on live-shaped sessions appended in random slices (turns split
anywhere, parallel tool calls, progress, hooks, last-prompt checkpoints,
rewinds, api_error retries, compactions, subagents), on the chaotic random
trees of test_definitions.py appended a slice at a time, and through the
session store."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from conftest import sdk_chain
from test_definitions import random_transcript

from indexer.ingest import derive


def live_session(rng: random.Random, turns: int, session_id: str, sidechain=False):
    """Records shaped like a Claude Code session as it is written."""
    out, n, clock = [], [0], [0]
    last = [None]
    messages = []  # uuids of user/assistant records, for rewinds and checkpoints

    def ts(step=1000):
        clock[0] += rng.randrange(1, step)
        t = clock[0]
        return f"2026-10-01T{t // 3600000 % 24:02d}:{t // 60000 % 60:02d}:{t // 1000 % 60:02d}.{t % 1000:03d}Z"

    def rec(type_, parent="last", **fields):
        n[0] += 1
        uuid = f"{session_id[:8]}-{n[0]:05d}"
        r = {"parentUuid": last[0] if parent == "last" else parent, "isSidechain": sidechain,
             "sessionId": session_id, "type": type_, "uuid": uuid, "timestamp": ts(),
             **fields}
        out.append(r)
        if type_ in ("user", "assistant"):
            messages.append(uuid)
        return r

    for turn in range(turns):
        roll = rng.random()
        parent = "last"
        if roll < 0.06 and len(messages) > 4:
            parent = rng.choice(messages[:-2])  # a rewind: a new prompt on an older message
        u = rec("user", parent, message={"role": "user", "content": f"prompt {turn}"})
        last[0] = u["uuid"]
        if rng.random() < 0.3:
            a = rec("attachment", attachment={"type": "hook_additional_context"})
            last[0] = a["uuid"]
        for step in range(rng.randrange(1, 4)):
            mid = f"msg_{session_id[:4]}_{turn}_{step}"
            parts = rng.randrange(1, 3)
            for k in range(parts):  # one API message split over lines
                a = rec("assistant", message={"id": mid, "role": "assistant", "content": [
                    {"type": "text", "text": f"part {k}"}]}, requestId=f"req_{mid}")
                last[0] = a["uuid"]
            calls = rng.choice([0, 1, 1, 2, 3])
            uses = []
            for c in range(calls):  # parallel tool calls: siblings of one message
                a = rec("assistant", message={"id": mid, "role": "assistant", "content": [
                    {"type": "tool_use", "id": f"t{turn}{step}{c}", "name": "Bash", "input": {}}]})
                uses.append(a["uuid"])
                last[0] = a["uuid"]
            for c, use in enumerate(uses):
                if rng.random() < 0.4:
                    rec("progress", use, data={"type": "hook_progress"})
                r = rec("user", use if c < len(uses) - 1 else "last", message={
                    "role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": f"t{turn}{step}{c}", "content": "ok"}]})
                if c == len(uses) - 1:
                    last[0] = r["uuid"]
            if rng.random() < 0.05:
                # a retried request: api_error records flushed late, parented on the leaf
                e = rec("system", subtype="api_error", level="error")
                last[0] = e["uuid"]
        if rng.random() < 0.5:
            s = rec("system", subtype="stop_hook_summary")
            if rng.random() < 0.5:
                last[0] = s["uuid"]
        if rng.random() < 0.6 and messages:
            roll = rng.random()
            leaf = messages[-1] if roll < 0.8 else rng.choice(messages)
            lp = {"type": "last-prompt", "lastPrompt": f"prompt {turn}", "leafUuid": leaf,
                  "sessionId": session_id}
            if roll > 0.97:
                lp.update(leafUuid=None, explicit=True)
            elif roll > 0.9:
                lp["explicit"] = True
            out.append(lp)
        if rng.random() < 0.02:
            c = rec("system", None, subtype="compact_boundary", logicalParentUuid=last[0])
            last[0] = c["uuid"]
        if rng.random() < 0.03:
            out.append({"type": "summary", "summary": "s", "leafUuid": last[0]})
    return out


def append_in_slices(path, records, rng, after_each):
    """Append the records' lines to ``path`` in random slices, sometimes
    stopping inside a line, calling after_each() after every write."""
    data = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = 0
    with open(path, "ab") as f:
        while done < len(data):
            step = rng.choice([40, 300, 1500, 4000, 12000])
            chunk = data[done:done + rng.randrange(1, step)]
            f.write(chunk)
            f.flush()
            done += len(chunk)
            after_each()


@pytest.mark.parametrize("seed", range(3))
def test_live_sessions_appended_in_slices(index, seed):
    rng = random.Random(seed)
    sid = f"{seed:08d}-1111-4000-8000-000000000000"
    main = index.projects / "p" / f"{sid}.jsonl"
    records = live_session(rng, 40, sid)
    before = dict(derive.STATS)

    def check():
        index.ingest()
        index.assert_caches_match_definitions()

    append_in_slices(main, records, rng, check)
    assert list(reversed(index.ancestry(index.file_id(main), "sdk"))) == sdk_chain(main)
    extended = derive.STATS["appended"] - before.get("appended", 0)
    recomputed = derive.STATS["recomputed"] - before.get("recomputed", 0)
    # Most appends to a live session are at its leaf: extended, not recomputed.
    assert extended > 3 * recomputed, (extended, recomputed)


def test_subagent_and_main_grow_together(index):
    rng = random.Random(7)
    sid = "77777777-1111-4000-8000-000000000000"
    main = index.projects / "p" / f"{sid}.jsonl"
    sub = index.projects / "p" / sid / "subagents" / "agent-a1.jsonl"
    main_records = live_session(rng, 15, sid)
    sub_records = live_session(rng, 15, sid, sidechain=True)
    before = derive.STATS["appended"]
    for i in range(0, max(len(main_records), len(sub_records)), 7):
        for path, recs in ((main, main_records), (sub, sub_records)):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in recs[i:i + 7])
        index.ingest()
        index.assert_caches_match_definitions()
    assert list(reversed(index.ancestry(index.file_id(sub), "sdk"))) == sdk_chain(sub, "subagent")
    assert derive.STATS["appended"] - before > 10


@pytest.mark.parametrize("seed", range(3))
def test_random_trees_appended_in_slices(index, seed):
    """Chaotic trees (cycles, duplicates, forks, missing parents) appended a
    few lines at a time: mostly recomputed, always equal."""
    rng = random.Random(100 + seed)
    paths = []
    for k in range(4):
        sid = f"{seed:08d}-2222-4000-8000-{k:012d}"
        records = random_transcript(rng, rng.randrange(20, 70), sid)
        path = (index.projects / "p" / sid / "subagents" / f"agent-a{k}.jsonl" if k == 3
                else index.projects / "p" / f"{sid}.jsonl")
        paths.append((path, records))
    cursor = [0] * len(paths)
    while any(c < len(r) for c, (_, r) in zip(cursor, paths)):
        for i, (path, records) in enumerate(paths):
            take = rng.randrange(1, 8)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in records[cursor[i]:cursor[i] + take])
            cursor[i] += take
        index.ingest()
        index.assert_caches_match_definitions()


def test_store_appends_extend_and_match(index):
    pytest.importorskip("claude_agent_sdk")
    from indexer.ingest.store import IndexSessionStore

    rng = random.Random(3)
    sid = "33333333-1111-4000-8000-000000000000"
    records = live_session(rng, 30, sid)
    before = derive.STATS["appended"]

    async def run():
        store = IndexSessionStore(index.path)
        try:
            i = 0
            while i < len(records):
                n = rng.randrange(1, 12)
                await store.append({"project_key": "p", "session_id": sid}, records[i:i + n])
                i += n
                index.assert_caches_match_definitions()
        finally:
            store.close()

    asyncio.run(run())
    assert derive.STATS["appended"] - before > 5


@pytest.mark.parametrize("length, extended", [(10, True), (100, False)])
def test_a_rewind_near_the_leaf_extends_a_far_one_recomputes(index, length, extended):
    """A rewind (a new prompt on an older message) moves the leaf: when it
    leaves a few stored chain rows behind (up to CUT_BOUND) the caches are
    extended, further back the file is recomputed; either way the old tail
    becomes orphans."""
    from indexer.ingest.derive_append import CUT_BOUND

    assert 10 < CUT_BOUND < 100
    sid = "44444444-1111-4000-8000-000000000000"
    path = index.projects / "p" / f"{sid}.jsonl"
    chain = [{"type": "user" if i % 2 == 0 else "assistant", "uuid": f"m{i}",
              "parentUuid": f"m{i - 1}" if i else None, "sessionId": sid,
              "timestamp": f"2026-10-01T00:{i // 60:02d}:{i % 60:02d}.000Z",
              "message": {"role": "user", "content": "x"} if i % 2 == 0 else
              {"id": f"msg{i}", "role": "assistant", "content": [{"type": "text", "text": "y"}]}}
             for i in range(length)]
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in chain))
    index.ingest()
    before = dict(derive.STATS)
    with open(path, "a") as f:
        f.write(json.dumps({"type": "user", "uuid": "r1", "parentUuid": "m3", "sessionId": sid,
                            "timestamp": "2026-10-01T01:00:00.000Z",
                            "message": {"role": "user", "content": "again"}}) + "\n")
    index.ingest()
    assert derive.STATS["appended"] - before["appended"] == int(extended)
    assert derive.STATS["recomputed"] - before["recomputed"] == int(not extended)
    index.assert_caches_match_definitions()
    fid = index.file_id(path)
    assert index.ancestry(fid) == ["r1", "m3", "m2", "m1", "m0"]
    assert {u for u, c in index.causes(fid).items() if c == "abandoned_branch"} == {
        f"m{i}" for i in range(4, length)}


def sqlite_steps(index, work) -> int:
    """The SQLite virtual-machine instructions (in hundreds) ``work`` runs
    on the index's connection: a measure of its cost that no load on the
    machine changes."""
    steps = [0]

    def count():
        steps[0] += 1

    index.db.conn.set_progress_handler(count, 100)
    try:
        work()
    finally:
        index.db.conn.set_progress_handler(None, 0)
    return steps[0]


def linear_session(session_id: str, n: int) -> list[dict]:
    """``n`` records of one unbranched conversation: prompts, tool calls and
    their results, replies."""
    out = []
    for i in range(n):
        kind = ("user", "assistant", "user", "assistant")[i % 4]
        content = ({"role": "user", "content": f"prompt {i}"} if i % 4 == 0 else
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i - 1}",
                                                 "content": "ok"}]} if i % 4 == 2 else
                   {"id": f"msg{i}", "role": "assistant", "content": [
                       {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {}}
                       if i % 4 == 1 else {"type": "text", "text": f"reply {i}"}]})
        out.append({"parentUuid": out[-1]["uuid"] if out else None, "type": kind,
                    "sessionId": session_id, "uuid": f"{session_id[:8]}-{i:06d}",
                    "timestamp": f"2026-10-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
                    "message": content})
    return out


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")], ids=["compact", "spaced"])
def test_a_one_line_append_costs_the_same_at_any_session_size(index, separators):
    """Issue 29: a one-line append to a session written with spaces after its
    colons (not Claude Code's compact JSON) cost O(session): the session
    refresh looked for the compact text '"type":"user"' in every line. The
    append's SQL work at 4,000 records is at most 2x that at 200 (as bench/live_speed.py
    asks of its time at 20,000 and 200), for
    either spacing."""
    costs = {}
    for n in (200, 4000):
        sid = f"{n:08d}-2929-4000-8000-000000000000"
        path = index.projects / "p" / f"{sid}.jsonl"
        records = linear_session(sid, n + 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, separators=separators) + "\n"
                                for r in records[:-1]))
        index.ingest()
        with open(path, "a") as f:
            f.write(json.dumps(records[-1], separators=separators) + "\n")
        before = derive.STATS["appended"]
        costs[n] = sqlite_steps(index, index.ingest)
        assert derive.STATS["appended"] == before + 1
        assert index.ancestry(index.file_id(path))[0] == records[-1]["uuid"]
    index.assert_caches_match_definitions()
    assert costs[4000] <= 2 * costs[200], costs


def test_an_extension_reads_no_older_children_of_appended_records(index):
    """No older record names an appended one as its parent (the extension
    gives up first), so the extension reads the children of appended
    records from the append alone: no query of the index for them."""
    sid = "00000208-2929-4000-8000-000000000000"
    path = index.projects / "p" / f"{sid}.jsonl"
    records = linear_session(sid, 208)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records[:200]))
    index.ingest()
    with open(path, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records[200:]))
    before = derive.STATS["appended"]
    seen = []
    index.db.conn.set_trace_callback(seen.append)
    try:
        index.ingest()
    finally:
        index.db.conn.set_trace_callback(None)
    assert derive.STATS["appended"] == before + 1
    appended = {r["uuid"] for r in records[200:]}
    asked = [s for s in seen for u in appended
             if f"r.parent_uuid = '{u}'" in s or f"r.logical_parent_uuid = '{u}'" in s]
    assert asked == []
    assert any("r.parent_uuid = '" in s for s in seen)   # (older records' children: asked)
    index.assert_caches_match_definitions()


def test_a_child_of_a_progress_uuid_written_again_is_recomputed(index):
    """The loader reads a child of a progress record's uuid under the
    progress record's parent whatever line of that uuid comes later
    (resume.progress_lines): an appended child of a uuid whose last line is
    a user line but whose earlier line is a progress record is read under
    that progress record's parent, so the file is recomputed (the extension
    reads the last line of a uuid) and equals the definitions."""
    sid = "55555555-1111-4000-8000-000000000000"
    path = index.projects / "p" / f"{sid}.jsonl"

    def line(uuid, parent, type_, second, **fields):
        return json.dumps({"type": type_, "uuid": uuid, "parentUuid": parent, "sessionId": sid,
                           "timestamp": f"2026-10-01T00:00:{second:02d}.000Z", **fields}) + "\n"

    path.parent.mkdir(parents=True)
    path.write_text(
        line("m1", None, "user", 0, message={"role": "user", "content": "x"})
        + line("m2", "m1", "assistant", 10, message={
            "id": "msg2", "role": "assistant", "content": [{"type": "text", "text": "y"}]})
        + line("p9", "m2", "progress", 20, data={"type": "hook_progress"})
        + line("p9", "m1", "user", 30, isSidechain=True,
               message={"role": "user", "content": "a later line of the uuid"}))
    index.ingest()
    before = dict(derive.STATS)
    with open(path, "a") as f:
        f.write(line("m4", "p9", "assistant", 40, message={
            "id": "msg4", "role": "assistant", "content": [{"type": "text", "text": "z"}]}))
    index.ingest()
    assert derive.STATS["appended"] - before["appended"] == 0
    assert derive.STATS["recomputed"] - before["recomputed"] == 1
    index.assert_caches_match_definitions()
    assert index.ancestry(index.file_id(path)) == ["m4", "m2", "m1"]


def test_a_progress_line_after_a_loaded_line_of_its_uuid_is_recomputed(index):
    """A progress line never replaces a line the loader loaded before it
    (resume.loader_nodes): the record of m3 stays the prompt, not the last
    line of m3, which is what the extension reads; so an append to such a
    file is recomputed, and the chain goes on through the prompt."""
    sid = "55555555-2222-4000-8000-000000000000"
    path = index.projects / "p" / f"{sid}.jsonl"

    def line(uuid, parent, type_, second, **fields):
        return json.dumps({"type": type_, "uuid": uuid, "parentUuid": parent, "sessionId": sid,
                           "timestamp": f"2026-10-01T00:00:{second:02d}.000Z", **fields}) + "\n"

    def answer(n):
        return {"id": f"msg{n}", "role": "assistant", "content": [{"type": "text", "text": "y"}]}

    path.parent.mkdir(parents=True)
    path.write_text(
        line("m1", None, "user", 0, message={"role": "user", "content": "x"})
        + line("m2", "m1", "assistant", 10, message=answer(2))
        + line("m3", "m2", "user", 20, message={"role": "user", "content": "the prompt"})
        + line("m4", "m3", "assistant", 30, message=answer(4))
        + line("m3", "m2", "progress", 40, data={"type": "hook_progress"}))
    index.ingest()
    assert index.ancestry(index.file_id(path)) == ["m4", "m3", "m2", "m1"]
    before = dict(derive.STATS)
    with open(path, "a") as f:
        f.write(line("m5", "m4", "user", 50, message={"role": "user", "content": "z"}))
    index.ingest()
    assert derive.STATS["appended"] - before["appended"] == 0
    assert derive.STATS["recomputed"] - before["recomputed"] == 1
    index.assert_caches_match_definitions()
    assert index.ancestry(index.file_id(path)) == ["m5", "m4", "m3", "m2", "m1"]
