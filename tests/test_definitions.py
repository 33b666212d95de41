"""The caches (derive.py) equal the recursive SQL definitions (views.py), and
the sdk walk equals the Agent SDK's, on randomly generated trees full of the
shapes that break readers: forks, cycles, self-parents, missing parents,
duplicate uuids, compactions, progress, api_error chains, sidechain/meta/team
records, unreadable records, timestamp ties and gaps."""

from __future__ import annotations

import random

import pytest

from conftest import sdk_chain, write_jsonl

TYPES = ["user", "assistant", "assistant", "progress", "system", "attachment"]
# Tool call ids the parallel batches share (resume.kin): tool_use blocks,
# tool_result blocks and attachments' toolUseID name them.
CALL_IDS = ["toolu_a", "toolu_b", "toolu_c"]


def tool_blocks(rng: random.Random, kind: str, key: str) -> list:
    return [{"type": kind, key: rng.choice(CALL_IDS)} for _ in range(rng.choice([1, 1, 2]))]


def batch_episode(rng: random.Random, records: list, parent: str, i: int, session_id: str):
    """A parallel batch (resume.kin): one API message written as two
    assistant records (or one with two tool_use blocks), a result for each
    call (the second maybe under the first), maybe a hook attachment naming
    a call, the conversation going on from one of them, and often a
    last-prompt checkpoint on one of them. Returns the last record's uuid."""
    def add(uuid, parent, type_, **fields):
        records.append({"type": type_, "uuid": uuid, "parentUuid": parent,
                        "sessionId": session_id, "timestamp":
                        f"2026-09-01T00:{rng.randrange(60):02d}:{rng.randrange(60):02d}.000Z",
                        **fields})
        return uuid

    def calls(*ids):
        return {"id": f"msg_b{i}", "role": "assistant",
                "content": [{"type": "tool_use", "id": c, "name": "Bash", "input": {}} for c in ids]}

    def result(c):
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c}]}

    if rng.random() < 0.3:
        first = second = add(f"b{i}-1", parent, "assistant", message=calls("toolu_a", "toolu_b"))
    else:
        first = add(f"b{i}-1", parent, "assistant", message=calls("toolu_a"))
        second = add(f"b{i}-2", first, "assistant", message=calls("toolu_b"))
    r1 = add(f"b{i}-3", first, "user", message=result("toolu_a"))
    r2 = add(f"b{i}-4", second if rng.random() < 0.8 else r1, "user", message=result("toolu_b"))
    tips = [r1, r2]
    if rng.random() < 0.5:
        tips.append(add(f"b{i}-5", rng.choice(tips), "attachment", attachment={
            "type": "hook_success", "toolUseID": rng.choice(["toolu_a", "toolu_b"])}))
    after = add(f"b{i}-6", rng.choice(tips), "assistant", message={
        "id": f"msg_c{i}", "role": "assistant", "content": [{"type": "text", "text": "x"}]})
    if rng.random() < 0.6:
        records.append({"type": "last-prompt", "sessionId": session_id,
                        "leafUuid": rng.choice(tips),
                        **({"explicit": True} if rng.random() < 0.2 else {})})
    return after


def random_transcript(rng: random.Random, n: int, session_id: str):
    # Tool calls and companion records come from a stream of their own, so
    # that the trees of the other draws stay what they were.
    extra = random.Random(f"{session_id}/{n}")
    uuids = [f"u{rng.randrange(10**6):06d}-{i}" for i in range(n)]
    records = []
    last = None
    message_id = "msg_0"
    for i, uuid in enumerate(uuids):
        if rng.random() < 0.04 and i:
            uuid = rng.choice(uuids[:i])  # a duplicated uuid
        roll = rng.random()
        if i == 0 or roll < 0.05:
            parent = None
        elif roll < 0.70:
            parent = last
        elif roll < 0.85:
            parent = rng.choice(uuids[:i])  # a fork
        elif roll < 0.90:
            parent = rng.choice(uuids)  # maybe later in the file: cycles
        elif roll < 0.95:
            parent = f"missing-{rng.randrange(100)}"
        else:
            parent = uuid  # self-parent
        type_ = rng.choice(TYPES)
        r = {"type": type_, "uuid": uuid, "parentUuid": parent, "sessionId": session_id}
        ts_roll = rng.random()
        if ts_roll < 0.9:
            r["timestamp"] = f"2026-09-01T00:{rng.randrange(60):02d}:{rng.randrange(60):02d}.000Z"
        elif ts_roll < 0.95:
            r["timestamp"] = "2026-09-01T00:30:00.000Z"  # ties
        if type_ == "assistant":
            if rng.random() < 0.5:
                message_id = f"msg_{i}"
            content = ([{"type": "text", "text": "x"}] if rng.random() < 0.5
                       else tool_blocks(rng, "tool_use", "id"))
            r["message"] = {"id": message_id, "role": "assistant", "content": content}
        elif type_ == "user":
            content = (tool_blocks(rng, "tool_result", "tool_use_id") if rng.random() < 0.5
                       else "hi")
            if rng.random() < 0.06:
                content = ["an unreadable record: no block"]
            r["message"] = {"role": "user", "content": content}
        elif type_ == "system":
            sub = rng.choice(["api_error", "api_error", "stop_hook_summary", "compact_boundary", "turn_duration"])
            r["subtype"] = sub
            if sub == "compact_boundary" and rng.random() < 0.8:
                r["parentUuid"] = None
                r["logicalParentUuid"] = rng.choice(uuids[: i + 1])
            if sub == "compact_boundary" and rng.random() < 0.6:
                # what the compaction kept (resume.relink): a segment, a
                # list, or both; the anchor a later record (the summary)
                head, tail = sorted(rng.sample(range(i + 1), 2)) if i else (0, 0)
                anchor = uuids[min(i + 1, n - 1)] if rng.random() < 0.8 else rng.choice(uuids)
                kept = {"trigger": "manual"}
                if rng.random() < 0.7:
                    kept["preservedSegment"] = {"headUuid": uuids[head], "anchorUuid": anchor,
                                                "tailUuid": uuids[tail]}
                if rng.random() < 0.4:
                    kept["preservedMessages"] = {
                        "anchorUuid": anchor,
                        "uuids": [uuids[j] for j in range(head, tail + 1)]
                        if rng.random() < 0.7 else rng.sample(uuids, min(3, n))}
                r["compactMetadata"] = kept
        elif type_ == "attachment" and rng.random() < 0.3:
            r["attachment"] = {"type": "fork_briefing", "text": "a fork's briefing"}
        elif type_ == "attachment" and rng.random() < 0.6:
            r["attachment"] = {"type": "hook_success", "toolUseID": rng.choice(CALL_IDS)}
        if type_ in ("user", "assistant") and rng.random() < 0.03:
            r["isVirtual"] = True
        for flag in ("isSidechain", "isMeta"):
            if rng.random() < 0.05:
                r[flag] = True
        if rng.random() < 0.03:
            r["teamName"] = "team"
        records.append(r)
        if extra.random() < 0.15 and type_ in ("user", "assistant"):
            # companion records beside the chain (a Skill body written as an
            # isMeta user record, an attachment, a system record): a line of
            # them, or a fork, or a line that runs into a prompt
            above = uuid
            for k in range(extra.choice([1, 1, 2, 3])):
                kind = extra.choice(["meta", "meta", "attachment", "system", "prompt"])
                side = {"type": "user" if kind in ("meta", "prompt") else kind,
                        "uuid": f"c{i}-{k}", "parentUuid": above, "sessionId": session_id,
                        "timestamp": r.get("timestamp", "2026-09-01T00:30:00.000Z")}
                if kind in ("meta", "prompt"):
                    side["message"] = {"role": "user", "content": [
                        {"type": "text", "text": "Base directory for this skill: /s"}]}
                    side["isMeta"] = kind == "meta"
                elif kind == "system":
                    side["subtype"] = "stop_hook_summary"
                else:
                    side["attachment"] = {"type": "hook_additional_context"}
                if extra.random() < 0.05:
                    side["isSidechain"] = True
                records.append(side)
                if extra.random() < 0.8:
                    above = side["uuid"]
        if rng.random() < 0.08 and last is not None:
            # the seed-000 episode: a late api_error parented on the leaf
            # from before this record, and the chain continuing from it
            err = f"e{i}"
            records.append({"type": "system", "subtype": "api_error", "uuid": err,
                            "parentUuid": last, "sessionId": session_id,
                            "timestamp": "2026-09-01T00:00:01.000Z"})
            uuid = err
        if rng.random() < 0.06:
            uuid = batch_episode(rng, records, uuid, i, session_id)
        last = uuid
        if rng.random() < 0.05:
            records.append({"type": "file-history-snapshot", "messageId": uuid})
        if rng.random() < 0.06:
            # a last-prompt checkpoint: a record may name one (often a recent
            # one: a tool result of the batch), or none (null); sometimes twice
            leaf = rng.choice(uuids[max(0, i - 4): i + 1] if rng.random() < 0.5
                              else uuids[: i + 1]) if rng.random() < 0.8 else None
            for _ in range(rng.choice([1, 1, 2])):
                records.append({"type": "last-prompt", "sessionId": session_id, "leafUuid": leaf,
                                **({"explicit": True} if rng.random() < 0.3 else {})})
    if last is not None and rng.random() < 0.3:
        batch_episode(rng, records, last, n, session_id)   # the file ends in a batch
    return records


@pytest.mark.parametrize("seed", range(6))
def test_caches_equal_definitions_on_random_trees(index, seed):
    rng = random.Random(seed)
    files = []
    for k in range(40):
        sid = f"{seed:08d}-0000-4000-8000-{k:012d}"
        records = random_transcript(rng, rng.randrange(1, 60), sid)
        if k % 5 == 4:
            path = index.projects / "p" / sid / "subagents" / f"agent-a{k}.jsonl"
            kind = "subagent"
        else:
            path = index.projects / "p" / f"{sid}.jsonl"
            kind = "main"
        write_jsonl(path, records)
        files.append((path, kind))
    index.ingest()
    index.assert_caches_match_definitions()
    for path, kind in files:
        fid = index.file_id(path)
        assert list(reversed(index.ancestry(fid, "sdk"))) == sdk_chain(path, kind), path


def test_caches_follow_appends(index):
    """Appending to a file re-derives it: the caches stay equal to the views."""
    rng = random.Random(99)
    sid = "99999999-0000-4000-8000-000000000000"
    records = random_transcript(rng, 120, sid)
    path = index.projects / "p" / f"{sid}.jsonl"
    for cut in (10, 50, 90, len(records)):
        write_jsonl(path, records[:cut])
        index.ingest()
        index.assert_caches_match_definitions()
        assert list(reversed(index.ancestry(index.file_id(path), "sdk"))) == sdk_chain(path)


def with_loader_marks(rng: random.Random, records: list, session_id: str) -> list:
    """The random records with what the loader's later rules read, from a
    stream of their own: prompts queued while a tool ran, results naming
    rows ahead (walk.rows_ahead_put_back), results moved under another
    response's record (walk.recovered_by_tool_use_id), records written
    before their parent (walk.loader_chain), rewinds that cut a
    record (resume.rewind_cut), and records written again after them."""
    out = []
    for r in records:
        out.append(r)
        uuids = [x["uuid"] for x in out if "uuid" in x]
        if r.get("type") == "user" and rng.random() < 0.2:
            r["queueTranscriptOnly"] = True
        content = r.get("message", {}).get("content") if isinstance(r.get("message"), dict) \
            else None
        is_result = r.get("type") == "user" and isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
        if is_result and rng.random() < 0.5:
            # the writer's shape: a prompt queued while the tool ran, under
            # the call (or near it), written before the result naming it
            names = []
            for k in range(rng.choice([1, 1, 2])):
                q = {"type": "user", "uuid": f"q-{r['uuid']}-{k}", "sessionId": session_id,
                     "parentUuid": names[-1] if names and rng.random() < 0.5 else
                     (r.get("parentUuid") if rng.random() < 0.7 else rng.choice(uuids)),
                     "queueTranscriptOnly": True, "timestamp": r.get("timestamp"),
                     "message": {"role": "user", "content": [{"type": "text", "text": "q"}]}}
                if rng.random() < 0.3:
                    q.update(isMeta=True, queueTranscriptOnly=False)
                out.insert(len(out) - 1, q)
                names.append(q["uuid"])
            if rng.random() < 0.3:
                names.append(rng.choice(uuids))
            r["rowsAheadOfPutBack"] = names
        if is_result and rng.random() < 0.2:
            calls = [x["uuid"] for x in out if x.get("type") == "assistant" and "uuid" in x]
            if calls:
                r["parentUuid"] = rng.choice(calls)
        if r.get("type") in ("user", "attachment") and rng.random() < 0.15:
            # flushed before its parent (a result 2 ms before its call): the
            # loader's chain and the file's lines disagree on their order
            above = next((k for k, x in enumerate(out) if x.get("uuid") == r.get("parentUuid")),
                         None)
            if above is not None and above < len(out) - 1:
                out.insert(above, out.pop())
        if rng.random() < 0.06 and uuids:
            out.append({"type": "last-prompt", "sessionId": session_id,
                        "leafUuid": rng.choice(uuids), "explicit": True, "rewound": True,
                        "cutUuid": rng.choice(uuids) if rng.random() < 0.9 else "missing"})
        if rng.random() < 0.04 and uuids:
            again = dict(rng.choice([x for x in out if "uuid" in x]))
            if rng.random() < 0.5:
                again["parentUuid"] = rng.choice(uuids)
            out.append(again)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_caches_equal_definitions_with_the_loader_marks(index, seed):
    """Rows ahead, rewind cuts, results under another response's record and
    records written again, on random trees: the caches equal the SQL."""
    rng = random.Random(seed)
    marks = random.Random(f"marks/{seed}")
    for k in range(30):
        sid = f"{seed:08d}-1111-4000-8000-{k:012d}"
        records = with_loader_marks(marks, random_transcript(rng, rng.randrange(1, 60), sid), sid)
        write_jsonl(index.projects / "p" / f"{sid}.jsonl", records)
    index.ingest()
    index.assert_caches_match_definitions()


def with_sources(rng: random.Random, records: list) -> list:
    """Results naming an assistant record in sourceToolAssistantUUID (one
    of their call's response, another of the file's, their parent, or none
    loaded) and agentIds on some records, a result's often its named
    record's: the loader reads a stray result under the record it names
    too (walk.recovered_by_tool_use_id)."""
    def blocks(r, kind):
        content = r.get("message", {}).get("content") if isinstance(r.get("message"), dict) \
            else None
        return [b for b in content if isinstance(b, dict) and b.get("type") == kind] \
            if isinstance(content, list) else []

    # the API's tool ids are its own for each batch (batch_episode's repeat)
    for r in records:
        batch = r.get("uuid", "").split("-")[0] if str(r.get("uuid", "")).startswith("b") \
            else None
        for b in blocks(r, "tool_use") + blocks(r, "tool_result"):
            key = "id" if b["type"] == "tool_use" else "tool_use_id"
            if batch and isinstance(b.get(key), str):
                b[key] = f"{b[key]}_{batch}"
    assistants = [r for r in records if r.get("type") == "assistant" and "uuid" in r]
    response_of = {b.get("id"): r.get("message", {}).get("id")
                   for r in assistants for b in blocks(r, "tool_use")}
    for r in records:
        if r.get("type") in ("user", "assistant") and rng.random() < 0.3:
            r["agentId"] = rng.choice(["a1", "a2"])
    for r in records:
        results = blocks(r, "tool_result") if r.get("type") == "user" else []
        if not results or not assistants or rng.random() < 0.3:
            continue
        call = results[0].get("tool_use_id")
        mid = response_of.get(call)
        kin = [a for a in assistants if mid is not None and a.get("message", {}).get("id") == mid]
        others = [a for a in kin if not any(b.get("id") == call for b in blocks(a, "tool_use"))]
        if others and rng.random() < 0.6:
            # the shape the rule is for: the result and the record it names,
            # of its call's response but not holding the call, share an
            # agentId the holder may lack
            named = rng.choice(others)
            named["agentId"] = r["agentId"] = "a3"
            siblings = [x["uuid"] for x in records if x is not r and blocks(x, "tool_result")
                        and str(x.get("uuid", "")).split("-")[0] == r["uuid"].split("-")[0]]
            if siblings and rng.random() < 0.5:
                r["parentUuid"] = rng.choice(siblings)   # a stray: under another result
        else:
            named = rng.choice(kin if kin and rng.random() < 0.7 else assistants)
            if rng.random() < 0.6:
                r.pop("agentId", None)
                if "agentId" in named:
                    r["agentId"] = named["agentId"]
        r["sourceToolAssistantUUID"] = rng.choice(
            [named["uuid"]] * 6 + [r.get("parentUuid"), "missing"])
    return records


def ingest_with_sources(index, seed: int) -> None:
    rng = random.Random(seed)
    marks = random.Random(f"marks/{seed}")
    sources = random.Random(f"sources/{seed}")
    for k in range(30):
        sid = f"{seed:08d}-2222-4000-8000-{k:012d}"
        records = with_sources(sources, with_loader_marks(
            marks, random_transcript(rng, rng.randrange(1, 60), sid), sid))
        write_jsonl(index.projects / "p" / f"{sid}.jsonl", records)
    index.ingest()


@pytest.mark.parametrize("seed", range(3))
def test_caches_equal_definitions_with_sources(index, seed):
    """Results read under the record their sourceToolAssistantUUID names,
    with the loader's later marks, on random trees: the caches equal the
    SQL. With seed 0 the trees reach the rule: without the field, fewer
    results are recovered."""
    ingest_with_sources(index, seed)
    index.assert_caches_match_definitions()
    if seed == 0:
        restored = ("SELECT file_id, uuid FROM orphans_definition "
                    "WHERE cause = 'parallel_tool_branch' ORDER BY 1, 2")
        with_them = index.rows(restored)
        index.db.conn.execute("UPDATE records SET source_tool_assistant_uuid = NULL")
        pairs = lambda rows: {(r["file_id"], r["uuid"]) for r in rows}  # noqa: E731
        assert pairs(index.rows(restored)) < pairs(with_them)
