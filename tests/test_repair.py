"""repair and show: spliced and poisoned transcripts, live-file safety, and
the recovered conversation held to the Agent SDK's reader."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Index, Transcript, write_jsonl
from indexer.cli.commands import cli

SID = "11111111-2222-3333-4444-555555555555"
FIXTURES = Path(__file__).parent / "fixtures"
OTTER = "The otter. It eats shellfish and small fish."


def sdk_messages(path) -> list:
    """What claude_agent_sdk's get_session_messages returns for this file."""
    from claude_agent_sdk._internal import sessions as sdk

    entries = sdk._parse_transcript_entries(Path(path).read_text(encoding="utf-8"))
    return sdk._entries_to_session_messages(entries, None, 0)


def texts(messages) -> list[str]:
    out = []
    for m in messages:
        content = (m.message or {}).get("content")
        if isinstance(content, str):
            out.append(content)
        else:
            out += [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
    return out


def age(path, seconds=600):
    """Make the file look untouched for a while (repair refuses live files)."""
    t = time.time() - seconds
    os.utime(path, (t, t))


def invoke(index, *args):
    return CliRunner().invoke(cli, [*args, "--db", str(index.path)], catch_exceptions=False)


def repair(index, *extra):
    result = invoke(index, "repair", SID, *extra)
    return result.exit_code, result.output


def seed000(index, next_prompt=False) -> Path:
    lines = (FIXTURES / "seed000_splice.jsonl").read_text().splitlines()
    if next_prompt:  # the next user record parents on the stop hook, as in the seed's prose
        lines.append(json.dumps({
            "parentUuid": "aaaaaaaa-0000-0000-0000-000000000004", "isSidechain": False,
            "type": "user", "sessionId": SID, "uuid": "aaaaaaaa-0000-0000-0000-000000000005",
            "timestamp": "2026-09-01T00:01:00.000Z",
            "message": {"role": "user", "content": "What animal did you pick?"}}))
    path = write_jsonl(index.projects / "-tmp-demo" / f"{SID}.jsonl", lines)
    age(path)
    index.ingest()
    return path


def backups(path: Path):
    return sorted(path.parent.glob(path.name + ".session-index-backup-*"))


def assert_written_with_backup(path, original: bytes):
    [backup] = backups(path)
    assert backup.read_bytes() == original
    assert path.read_bytes() != original


@pytest.mark.parametrize("next_prompt", [False, True])
def test_seed000_repair_brings_the_otter_back(index, next_prompt):
    path = seed000(index, next_prompt)
    original = path.read_bytes()
    assert (OTTER in texts(sdk_messages(path))) is (not next_prompt)
    code, out = repair(index)  # dry run
    assert code == 0 and "re-parent line 4" in out and "nothing changed" in out
    assert path.read_bytes() == original and not backups(path)
    code, out = repair(index, "--write")
    assert code == 0, out
    assert_written_with_backup(path, original)
    assert OTTER in texts(sdk_messages(path))
    fid = index.file_id(path)
    chain = index.ancestry(fid)
    assert "aaaaaaaa-0000-0000-0000-000000000002" in chain
    assert index.causes(fid) == {"aaaaaaaa-0000-0000-0000-000000000003": "api_error_record"}
    # Only the parentUuid of the stop hook changed.
    before, after = original.splitlines(), path.read_bytes().splitlines()
    assert [i for i, (a, b) in enumerate(zip(before, after)) if a != b] == [3]
    [row] = index.rows("SELECT status, reparented, dropped, recovered, original FROM repairs")
    assert row == {"status": "applied", "reparented": 1, "dropped": 0, "recovered": 1,
                   "original": original}
    assert json.loads(invoke(index, "check", SID, "--json").output)["verdict"] == "resumable"


def test_repair_keeps_a_last_record_without_newline_as_it_is(index):
    path = seed000(index, next_prompt=True)
    path.write_bytes(path.read_bytes()[:-1])  # the last record has no newline yet
    age(path)
    index.ingest()
    original = path.read_bytes()
    code, out = repair(index, "--write")
    assert code == 0, out
    repaired = path.read_bytes()
    assert not repaired.endswith(b"\n")
    before, after = original.split(b"\n"), repaired.split(b"\n")
    assert len(before) == len(after) and [
        i for i, (a, b) in enumerate(zip(before, after)) if a != b] == [3]
    # The file's generations before (with its newline; without) are kept.
    fid = index.file_id(path)
    assert index.rows("SELECT generation, reason, bytes FROM superseded_generations "
                      "WHERE file_id = ?", [fid]) == [
        {"generation": 1, "reason": "shrunk", "bytes": len(original) + 1},
        {"generation": 2, "reason": "changed", "bytes": len(original)}]


def spliced_turn(t: Transcript, prompt, prev, n_errors=1, parallel=False, tag=""):
    """One turn that recovered from errors, flushed late (seed 000)."""
    t.add(prompt, prev, "user")
    if parallel:
        for k in ("a", "b"):
            t.add(f"call-{k}{tag}", prompt if k == "a" else f"call-a{tag}", "assistant", message={
                "id": f"msg_P{tag}", "role": "assistant", "model": "m",
                "content": [{"type": "tool_use", "id": f"t{k}{tag}", "name": "Read", "input": {}}]})
        for k in ("a", "b"):
            t.add(f"result-{k}{tag}", f"call-{k}{tag}", "user", message={"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{k}{tag}", "content": "ok"}]})
        last = f"result-b{tag}"
    else:
        last = prompt
    t.add(f"reply{tag}", last, "assistant")
    t.add(f"done{tag}", f"reply{tag}", "system", subtype="turn_duration")
    err = prompt
    for k in range(n_errors):
        t.add(f"err{k}{tag}", err, "system", subtype="api_error", ts=f"2025-01-01T00:00:0{k}.000Z")
        err = f"err{k}{tag}"
    t.add(f"hook{tag}", err, "system", subtype="stop_hook_summary")
    return f"hook{tag}"


def write_session(index, t):
    path = t.write(index.projects / "-tmp-demo")
    age(path)
    index.ingest()
    return path


def test_multi_error_episode(index):
    t = Transcript(SID)
    leaf = spliced_turn(t, "p1", None, n_errors=3)
    t.add("p2", leaf, "user")
    path = write_session(index, t)
    original = path.read_bytes()
    assert "reply" not in texts(sdk_messages(path)) and index.value("SELECT count(*) FROM api_error_splices") == 1
    code, out = repair(index, "--write")
    assert code == 0, out
    assert_written_with_backup(path, original)
    assert index.ancestry(index.file_id(path)) == ["p2", "hook", "done", "reply", "p1"]
    assert texts(sdk_messages(path)) == ["prompt p1", "reply reply", "prompt p2"]
    assert index.value("SELECT count(*) FROM api_error_splices") == 0


def test_several_episodes_in_one_file(index):
    t = Transcript(SID)
    leaf = spliced_turn(t, "p1", None, tag="1")
    leaf = spliced_turn(t, "p2", leaf, n_errors=2, tag="2")
    t.add("p3", leaf, "user")
    path = write_session(index, t)
    original = path.read_bytes()
    assert index.value("SELECT count(*) FROM api_error_splices") == 2
    code, out = repair(index, "--write", "--json")
    assert code == 0 and json.loads(out)["reparented"] == 2
    assert_written_with_backup(path, original)
    assert texts(sdk_messages(path)) == ["prompt p1", "reply reply1", "prompt p2", "reply reply2", "prompt p3"]
    assert index.value("SELECT count(*) FROM orphans WHERE cause = 'api_error_splice'") == 0


def test_episode_inside_a_parallel_tool_turn(index):
    t = Transcript(SID)
    leaf = spliced_turn(t, "p1", None, parallel=True)
    t.add("p2", leaf, "user")
    path = write_session(index, t)
    original = path.read_bytes()
    code, out = repair(index, "--write")
    assert code == 0, out
    assert_written_with_backup(path, original)
    uuids = [m.uuid for m in sdk_messages(path)]
    assert uuids == ["p1", "call-a", "call-b", "result-a", "result-b", "reply", "p2"]


SYNTHETIC = {"id": "5f0c1a52-3a49-4a4e-9f0e-2f1c6e3b7d11", "role": "assistant",
             "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: Request rejected"}]}


def test_poisoned_tail_is_cut_back_to_the_last_real_message(index):
    t = Transcript(SID)
    t.add("u1", None, "user")
    t.add("a1", "u1", "assistant")
    t.add("u2", "a1", "user")
    # a placeholder a resume names as previous_message_id (no API error, a requestId)
    t.add("s1", "u2", "assistant", requestId="req_s1", message=dict(
        SYNTHETIC, content=[{"type": "text", "text": "No response requested."}]))
    t.add("pr", "s1", "progress", data={})
    t.add("h1", "s1", "system", subtype="stop_hook_summary")
    path = write_session(index, t)
    original = path.read_bytes()
    assert json.loads(invoke(index, "check", SID, "--json").output)["verdict"] == "poisoned"
    code, out = repair(index)
    assert code == 0 and out.count("drop line") == 4
    code, out = repair(index, "--write")
    assert code == 0, out
    assert_written_with_backup(path, original)
    assert [json.loads(l)["uuid"] for l in path.read_bytes().splitlines()] == ["u1", "a1"]
    assert json.loads(invoke(index, "check", SID, "--json").output)["verdict"] == "resumable"
    [row] = index.rows("SELECT dropped, original FROM repairs")
    assert row == {"dropped": 4, "original": original}


def test_nothing_to_repair_changes_nothing(index):
    t = Transcript(SID)
    t.add("u1", None, "user")
    t.add("a1", "u1", "assistant")
    path = write_session(index, t)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    code, out = repair(index, "--write")
    assert (code, out.strip()) == (0, "nothing to repair")
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before and not backups(path)
    assert index.value("SELECT count(*) FROM repairs") == 0


def test_recently_modified_file_is_refused(index):
    path = seed000(index)
    os.utime(path)  # just written
    original = path.read_bytes()
    code, out = repair(index, "--write")
    assert code == 7 and "modified" in out
    assert path.read_bytes() == original and not backups(path)


APPENDER = """
import json, sys, time
path, stop = sys.argv[1], sys.argv[2]
n = 0
import os
while not os.path.exists(stop):
    with open(path, "ab") as f:
        f.write(json.dumps({"type": "progress", "uuid": f"live-{n}", "parentUuid": None,
                            "data": {}}).encode() + b"\\n")
    n += 1
print(n)
"""


@pytest.mark.xdist_group("timing")
def test_appending_during_repair_write_is_refused_and_nothing_lost(index, tmp_path):
    path = seed000(index, next_prompt=True)
    original = path.read_bytes()
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(stop)],
                            stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.2)
        code, out = repair(index, "--write", "--force")
    finally:
        stop.touch()
        appended = int(proc.communicate(timeout=30)[0])
    assert code == 7 and "refused" in out, out
    data = path.read_bytes()
    assert data.startswith(original)
    assert [json.loads(l)["uuid"] for l in data[len(original):].splitlines()] == [
        f"live-{n}" for n in range(appended)]
    assert not backups(path)


# --- show ------------------------------------------------------------------

def test_show_puts_the_spliced_output_back_and_marks_it(index):
    seed000(index, next_prompt=True)
    out = json.loads(invoke(index, "show", SID, "--format", "json").output)
    assert [(m["uuid"][-1], m["recovered"]) for m in out] == [
        ("1", None), ("2", "api_error_splice"), ("5", None)]
    text = invoke(index, "show", SID).output
    assert "recovered: api_error_splice" in text and OTTER in text
    md = invoke(index, "show", SID, "--format", "markdown").output
    # The verdict first (as check states it), then the conversation.
    head, conversation = md.split("\n\n### ", 1)
    assert head.startswith("**spliced**: 1 api_error splice(s)") and "Fix: `session-index " \
        f"repair {SID} --write`" in head
    assert conversation.startswith("user") and OTTER in conversation


def test_show_equals_the_sdk_on_transcripts_without_a_splice(index):
    rng = random.Random(5)
    t = Transcript(SID)
    prev = None
    for i in range(40):
        kind = rng.choice(["user", "assistant", "assistant", "progress", "system"])
        parent = prev if rng.random() < 0.8 or prev is None else rng.choice([r["uuid"] for r in t.records])
        t.add(f"r{i}", parent, kind, isMeta=rng.random() < 0.05)
        prev = f"r{i}"
    path = write_session(index, t)
    out = json.loads(invoke(index, "show", SID, "--format", "json").output)
    assert [m["uuid"] for m in out] == [m.uuid for m in sdk_messages(path)]


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_show_equals_the_sdk_on_every_corpus_transcript(tmp_path):
    from indexer.repair import show

    index = Index(tmp_path)
    index.ingest(CORPUS)
    rows = index.rows("SELECT f.session_id, f.path FROM sessions s JOIN files f ON f.id = s.main_file_id")
    assert len(rows) > 20
    for row in rows:
        ours = [m["uuid"] for m in show.recovered_conversation(index.db, row["session_id"])]
        data = Path(row["path"]).read_bytes()
        from claude_agent_sdk._internal import sessions as sdk
        theirs = [m.uuid for m in sdk._entries_to_session_messages(
            sdk._parse_transcript_entries(data.decode("utf-8", "replace")), None, 0)]
        assert ours == theirs, row["path"]


# A writer that holds the transcript open (one fd, O_APPEND), as a process
# that keeps its log file open does: it appends N lines once GO exists,
# then keeps the file open until STOP exists.
HOLDER = """
import json, os, sys, time
path, go, stop, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
open(go + ".ready", "w").close()
while not os.path.exists(go):
    time.sleep(0.005)
for i in range(n):
    os.write(fd, json.dumps({"type": "progress", "uuid": f"held-{i}", "parentUuid": None,
                             "data": {}}).encode() + b"\\n")
    time.sleep(0.01)
while not os.path.exists(stop):
    time.sleep(0.01)
os.close(fd)
"""


def held_lines(data: bytes) -> list[str]:
    return [json.loads(l)["uuid"] for l in data.splitlines()
            if l.startswith(b'{"type": "progress"')]


@pytest.mark.xdist_group("timing")
@pytest.mark.parametrize("closes", [False, True])
def test_a_writer_holding_the_file_open_loses_no_line_to_a_forced_repair(index, tmp_path,
                                                                         monkeypatch, closes):
    from indexer.repair import repair as repairmod

    path = seed000(index, next_prompt=True)
    original = path.read_bytes()
    go, stop = tmp_path / "go", tmp_path / "stop"
    if closes:
        stop.touch()   # the writer closes the file once its 40 lines are written
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(go), str(stop), "40"])
    while not (tmp_path / "go.ready").exists():
        time.sleep(0.01)
    real = repairmod.temp_beside

    def start_writing_now(*args):   # after the read-and-compare, just before the swap
        go.touch()
        return real(*args)

    monkeypatch.setattr(repairmod, "temp_beside", start_writing_now)
    try:
        code, out = repair(index, "--write", "--force")
    finally:
        stop.touch()
        proc.wait(timeout=30)
    data = path.read_bytes()
    assert held_lines(data) == [f"held-{i}" for i in range(40)]   # every line, in order
    if closes:   # applied, the lines written to the old file meanwhile folded in
        assert code == 0 and not data.startswith(original), out
        assert OTTER in texts(sdk_messages(path))
    else:   # still held open for writing at the end: the original is back
        assert code == 7 and "held open for writing" in out, out
        assert data.startswith(original)


@pytest.mark.xdist_group("timing")
def test_lines_appended_to_the_old_file_during_the_swap_are_folded_in(tmp_path):
    import threading

    from indexer.repair import repair as repairmod

    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"type": "user", "uuid": "u"}\n')
    old = open(path, "rb")
    old.read()
    repaired = b'{"type": "user", "uuid": "u", "repaired": true}\n'
    tmp = tmp_path / ".t.tmp"
    tmp.write_bytes(repaired)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)   # this process's: not "another" holder

    def write():
        for i in range(30):
            os.write(fd, json.dumps({"type": "progress", "uuid": f"held-{i}"}).encode() + b"\n")
            time.sleep(0.01)
        os.close(fd)

    writer = threading.Thread(target=write)
    writer.start()
    folded = repairmod._swap(str(path), old, len(b'{"type": "user", "uuid": "u"}\n'),
                             repaired, str(tmp), str(tmp_path / "t.backup"), 0.3)
    writer.join()
    data = path.read_bytes()
    assert data.startswith(repaired) and folded == len(data) - len(repaired)
    assert held_lines(data) == [f"held-{i}" for i in range(30)]
