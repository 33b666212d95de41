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
