"""sentAsUuid (issue 26): Claude Code stores a prompt anew under a new uuid
and keeps the uuid it was sent under as ``sentAsUuid``; its loader loads
the record under that uuid when no earlier record has it, so the answer
that names the sentAsUuid continues from the prompt (checked against the
real CLI in tests/test_oracle_cases.py: sent_as_uuid and
sent_as_uuid_already_loaded). These hold the index's answer, in the caches
and in the SQL definitions, on the shapes around that rule."""

from __future__ import annotations

from conftest import Transcript, write_jsonl

SID = "5e575e57-2222-3333-4444-555555555555"


def u(n: int) -> str:
    return f"cccccccc-0000-0000-0000-{n:012d}"


def at(s: int) -> str:
    return f"2026-11-01T10:{s // 60:02d}:{s % 60:02d}.000Z"


def text(mid, words):
    return {"id": mid, "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": words}]}


def prompt(words):
    return {"role": "user", "content": words}


def stored_anew(t, sent_as, later=None):
    """u1 prompt, u2 answer, u9 the prompt stored anew (sentAsUuid sent_as),
    u4 the answer naming sent_as a minute later (no timestamp fallback)."""
    t.add(u(1), None, "user", ts=at(0), message=prompt("first"))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "first answer"), ts=at(1))
    t.add(u(9), u(2), "user", sentAsUuid=sent_as, ts=at(2), message=prompt("stored anew"))
    if later:
        later(t)
    t.add(u(4), sent_as, "assistant", message=text("msg_4", "the answer"), ts=at(60))
    return t


def sid(n: int) -> str:
    return f"5e575e57-2222-3333-4444-{n:012d}"


def write(index, n, records):
    """Shape n under its own session (each test's shapes share one index,
    whose caches are then held to the definitions once: preparing them
    costs seconds)."""
    for r in records:
        if "sessionId" in r:
            r["sessionId"] = sid(n)
    return write_jsonl(index.projects / "-tmp-demo" / f"{sid(n)}.jsonl", records)


def chains(index, paths):
    index.ingest()
    index.assert_caches_match_definitions()
    out = {}
    for n, path in paths.items():
        fid = index.file_id(path)
        out[n] = (index.ancestry(fid)[::-1], causes(index, fid))
    return out


def causes(index, fid):
    return {r["uuid"]: r["cause"] for r in index.rows(
        "SELECT uuid, cause FROM orphans WHERE file_id = ?", [fid])}


def test_a_prompt_stored_anew_is_loaded_under_its_sent_as_uuid(index):
    paths = {}
    # 1: the answer names the sentAsUuid, which no earlier line has.
    paths[1] = write(index, 1, stored_anew(Transcript(SID), u(3)).records)
    # 2: u3 is on an earlier line: the answer naming u3 hangs from it, and
    # the copy stored anew (u9) is a branch the resume does not take.
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0), message=prompt("first"))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "first answer"), ts=at(1))
    t.add(u(3), u(2), "user", ts=at(2), message=prompt("the original"))
    t.add(u(9), u(2), "user", sentAsUuid=u(3), ts=at(3), message=prompt("stored anew"))
    t.add(u(4), u(3), "assistant", message=text("msg_4", "the answer"), ts=at(60))
    paths[2] = write(index, 2, t.records)

    # 3: only the first record stored anew for a uuid is renamed.
    def second_copy(t):
        t.add(u(8), u(2), "user", sentAsUuid=u(3), ts=at(3), message=prompt("again"))
    paths[3] = write(index, 3, stored_anew(Transcript(SID), u(3), second_copy).records)

    # 4: a line with uuid u3 after the record stored anew replaces it in the
    # loader: the answer hangs from that line, the copy is no record at all.
    def the_original_late(t):
        t.add(u(3), u(2), "user", ts=at(4), message=prompt("written late"))
    paths[4] = write(index, 4, stored_anew(Transcript(SID), u(3), the_original_late).records)

    # 5, 6: a checkpoint naming the sentAsUuid is the record: not explicit,
    # and the last row descends from it, the last row is the leaf (5);
    # explicit, the checkpoint is (6).
    for n, explicit in ((5, False), (6, True)):
        t = stored_anew(Transcript(SID), u(3))
        t.add(u(5), u(4), "user", ts=at(61), message=prompt("a newer prompt"))
        t.add(u(6), u(5), "assistant", message=text("msg_6", "on another branch"), ts=at(62))
        t.records.append({"type": "last-prompt", "sessionId": SID, "lastPrompt": "stored anew",
                          "leafUuid": u(3), "explicit": explicit})
        paths[n] = write(index, n, t.records)

    got = chains(index, paths)
    assert got[1] == ([u(1), u(2), u(9), u(4)], {})
    assert index.rows("SELECT sent_as_uuid FROM records WHERE uuid = ? AND file_id = ?",
                      [u(9), index.file_id(paths[1])]) == [{"sent_as_uuid": u(3)}]
    assert got[2][0] == [u(1), u(2), u(3), u(4)] and u(9) in got[2][1]
    assert got[3][0] == [u(1), u(2), u(9), u(4)] and u(8) in got[3][1]
    assert got[4][0] == [u(1), u(2), u(3), u(4)]
    assert got[5][0] == [u(1), u(2), u(9), u(4), u(5), u(6)]
    assert got[6][0] == [u(1), u(2), u(9)]


def test_an_appended_answer_to_a_prompt_stored_anew(index):
    # Appended lines: the file is recomputed (derive_append bails), and the
    # caches equal the definitions after the appends.
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0), message=prompt("first"))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "first answer"), ts=at(1))
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    fid = index.file_id(path)
    for uuid, parent, kind, extra in (
            (u(9), u(2), "user", {"sentAsUuid": u(3), "message": prompt("stored anew")}),
            (u(4), u(3), "assistant", {"message": text("msg_4", "the answer")})):
        t.add(uuid, parent, kind, ts=at(60), **extra)
        write_jsonl(path, t.records)
        index.ingest()
    index.assert_caches_match_definitions()
    assert index.ancestry(fid)[::-1] == [u(1), u(2), u(9), u(4)]


def test_a_record_stored_anew_beside_another_line_of_its_uuid(index):
    # The loader keys a line by its key (the sentAsUuid of a record stored
    # anew that trn() renames, else its uuid), a later line of the key
    # replacing an earlier one: another line of the copy's own uuid is a
    # record of its own, and the copy is named by its sentAsUuid (checked
    # against the real CLI in tests/test_oracle_cases.py:
    # sent_as_uuid_over_an_earlier_line_of_its_uuid and the three around it).
    paths = {}

    def hook(t, uuid, parent, s):
        t.add(uuid, parent, "attachment", ts=at(s), attachment={
            "type": "hook_additional_context", "content": ["hook"], "hookName": "Stop"})

    # 1: an earlier line of u9 (a hook under the leaf answer), then the copy
    # on the side: the hook is the last row and is put back with the leaf.
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0), message=prompt("first"))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the leaf answer"), ts=at(10))
    hook(t, u(9), u(2), 20)
    t.add(u(9), u(1), "user", sentAsUuid=u(3), isSidechain=True, ts=at(30),
          message=prompt("stored anew on the side"))
    paths[1] = write(index, 1, t.records)
    # 2: the copy first, answered under its sentAsUuid, then a later line of
    # its own uuid (a hook under the answer): both are records.
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0), message=prompt("first"))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "first answer"), ts=at(10))
    t.add(u(9), u(2), "user", sentAsUuid=u(3), ts=at(20), message=prompt("stored anew"))
    t.add(u(4), u(3), "assistant", message=text("msg_4", "the answer"), ts=at(30))
    hook(t, u(9), u(4), 40)
    paths[2] = write(index, 2, t.records)
    # 3: both lines of u9 have children: u1 u2 u9 u5 u3 u6.
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0), message=prompt("first"))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "first answer"), ts=at(10))
    t.add(u(9), u(2), "user", ts=at(20), message=prompt("the earlier prompt"))
    t.add(u(5), u(9), "assistant", message=text("msg_5", "its answer"), ts=at(30))
    t.add(u(9), u(5), "user", sentAsUuid=u(3), ts=at(40), message=prompt("the copy"))
    t.add(u(6), u(3), "assistant", message=text("msg_6", "answers the copy"), ts=at(50))
    paths[3] = write(index, 3, t.records)
    # 4: as 1, and a line of u3 that replaces the copy (on the side too).
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0), message=prompt("first"))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "the leaf answer"), ts=at(10))
    hook(t, u(9), u(2), 20)
    t.add(u(9), u(1), "user", sentAsUuid=u(3), isSidechain=True, ts=at(30),
          message=prompt("stored anew on the side"))
    t.add(u(3), u(1), "user", isSidechain=True, ts=at(40), message=prompt("rewritten"))
    paths[4] = write(index, 4, t.records)

    got = chains(index, paths)
    # (uuid, line) of each record on the resume chain, leaf last: the copy
    # named by its sentAsUuid (u3), the other line of its uuid as u9.
    on_chain = {n: [(r["uuid"], r["line_no"]) for r in index.rows(
        "SELECT a.uuid, r.line_no FROM leaf_ancestry a JOIN records r ON r.id = a.record_id "
        "WHERE a.file_id = ? AND a.rule = 'resume' ORDER BY a.depth DESC",
        [index.file_id(p)])] for n, p in paths.items()}
    assert on_chain == {
        1: [(u(1), 1), (u(2), 2), (u(9), 3)],
        2: [(u(1), 1), (u(2), 2), (u(3), 3), (u(4), 4), (u(9), 5)],
        3: [(u(1), 1), (u(2), 2), (u(9), 3), (u(5), 4), (u(3), 5), (u(6), 6)],
        4: [(u(1), 1), (u(2), 2), (u(9), 3)],
    }
    assert all(orphans == {} for _, orphans in got.values())
    assert index.rows("SELECT name, line_no FROM sent_names ORDER BY file_id") == [
        {"name": u(3), "line_no": 4}, {"name": u(3), "line_no": 3},
        {"name": u(3), "line_no": 5}, {"name": u(3), "line_no": 4}]


def test_a_line_appended_with_the_uuid_of_a_prompt_stored_anew(index):
    # Appended after the copy, a line of its own uuid makes it a record named
    # by its sentAsUuid (sent_names is picked again for the file), and
    # appended after that line, an answer hangs from the copy's sentAsUuid.
    t = Transcript(SID)
    t.add(u(1), None, "user", ts=at(0), message=prompt("first"))
    t.add(u(2), u(1), "assistant", message=text("msg_2", "first answer"), ts=at(10))
    t.add(u(9), u(2), "user", sentAsUuid=u(3), ts=at(20), message=prompt("stored anew"))
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", t.records)
    index.ingest()
    fid = index.file_id(path)
    assert index.ancestry(fid)[::-1] == [u(1), u(2), u(9)]
    assert index.rows("SELECT name FROM sent_names WHERE file_id = ?", [fid]) == []
    t.add(u(9), u(2), "attachment", ts=at(30), attachment={
        "type": "hook_additional_context", "content": ["hook"], "hookName": "Stop"})
    write_jsonl(path, t.records)
    index.ingest()
    assert index.ancestry(fid)[::-1] == [u(1), u(2), u(9)]
    assert index.rows("SELECT name, line_no FROM sent_names WHERE file_id = ?", [fid]) == [
        {"name": u(3), "line_no": 3}]
    t.add(u(4), u(3), "assistant", message=text("msg_4", "the answer"), ts=at(40))
    write_jsonl(path, t.records)
    index.ingest()
    index.assert_caches_match_definitions()
    assert index.ancestry(fid)[::-1] == [u(1), u(2), u(3), u(4)]
    assert causes(index, fid) == {u(9): "abandoned_branch"}
