"""Nothing lost on a rewrite: every rewrite of a file starts a generation, the
earlier ones kept and rebuilt byte for byte by export and restore."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from click.testing import CliRunner

from conftest import Transcript
from indexer.cli.commands import cli

SID = "11111111-2222-3333-4444-555555555555"


def line(i, parent=None) -> bytes:
    return json.dumps({"type": "user", "uuid": f"u-{i}", "parentUuid": parent, "sessionId": SID,
                       "timestamp": f"2026-09-01T00:00:{i:02d}.000Z",
                       "message": {"role": "user", "content": f"line {i}"}}).encode() + b"\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def invoke(index, *args):
    return CliRunner().invoke(cli, [*args, "--db", str(index.path)])


def export(index, *args) -> bytes:
    result = invoke(index, "export", SID, "--out", "-", *args)
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


def touched(path, data: bytes):
    """Rewrite the file in place at the same size; its mtime moves on."""
    before = path.stat()
    assert len(data) == before.st_size
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))


def disk_lines(data: bytes) -> list[dict]:
    out, pos = [], 0
    for n, piece in enumerate(data.split(b"\n")[:-1], 1):
        out.append({"line_no": n, "byte_offset": pos, "raw": piece})
        pos += len(piece) + 1
    return out


@pytest.fixture
def path(index):
    p = index.projects / "-tmp-p" / f"{SID}.jsonl"
    p.parent.mkdir(parents=True)
    return p


def test_a_shrunk_file_keeps_its_first_generation(index, path):
    original = b"".join(line(i, f"u-{i - 1}" if i > 1 else None) for i in range(1, 6))
    original += b"not json\n" + b'{"partial": '
    path.write_bytes(original)
    index.ingest()
    first_ingested = index.value("SELECT first_ingested_at FROM files")
    shrunk = line(1) + line(9, "u-1")
    path.write_bytes(shrunk)
    s = index.ingest()
    assert (s.rewritten_files, s.new_records) == (1, 2)
    fid = index.file_id(path)

    # The current generation is in records/bad_lines as before ...
    assert index.rows("SELECT generation, rewrites, line_count FROM files") == [
        {"generation": 2, "rewrites": 1, "line_count": 2}]
    assert [r["uuid"] for r in index.rows("SELECT uuid FROM records ORDER BY line_no")] == [
        "u-1", "u-9"]
    assert index.value("SELECT count(*) FROM bad_lines") == 0
    # ... the first is kept whole.
    [gen] = index.rows("SELECT * FROM superseded_generations")
    superseded_at = gen.pop("superseded_at")
    assert superseded_at >= first_ingested
    assert gen == {"file_id": fid, "generation": 1, "started_at": first_ingested,
                   "reason": "shrunk", "lines": 6, "bytes": len(original),
                   "sha256": sha(original), "mtime": gen["mtime"], "unterminated_tail": 0,
                   "pending_tail": b'{"partial": '}
    kept = index.rows("SELECT line_no, byte_offset, CAST(raw AS BLOB) AS raw, error IS NULL AS "
                      "is_record FROM superseded_lines ORDER BY line_no")
    assert [{k: r[k] for k in ("line_no", "byte_offset", "raw")} for r in kept] == \
        disk_lines(original)
    assert [r["is_record"] for r in kept] == [1, 1, 1, 1, 1, 0]
    assert index.value("SELECT raw ->> '$.uuid' FROM superseded_lines WHERE line_no = 3") == "u-3"

    assert export(index, "--generation", "1") == original
    assert export(index, "--generation", "2") == export(index) == shrunk
    assert index.rows("SELECT generation, current, started_at IS NOT NULL AS started, reason, "
                      "lines, bytes, sha256 FROM file_generations ORDER BY generation") == [
        {"generation": 1, "current": 0, "started": 1, "reason": "shrunk", "lines": 6,
         "bytes": len(original), "sha256": sha(original)},
        {"generation": 2, "current": 1, "started": 1, "reason": None, "lines": 2,
         "bytes": len(shrunk), "sha256": None}]
    index.assert_caches_match_definitions()


def test_a_file_emptied_by_its_rewrite_is_derived_again(index, path):
    """A rewrite that leaves no line is still a new generation: its caches
    go and are derived again (before, nothing marked the file, so its leaves
    row was missing where the definition has one, 'no_leaf')."""
    path.write_bytes(line(1) + line(2, "u-1"))
    index.ingest()
    path.write_bytes(b"")
    s = index.ingest()
    assert (s.rewritten_files, s.new_records) == (1, 0)
    assert index.rows("SELECT resume_leaf_uuid, resume_rule FROM leaves") == [
        {"resume_leaf_uuid": None, "resume_rule": "no_leaf"}]
    assert index.value("SELECT count(*) FROM files WHERE needs_derive") == 0
    index.assert_caches_match_definitions()


def test_same_size_changes_are_generations_each_rebuilt_byte_for_byte(index, path):
    # The first generation ends in a record without its newline, with a CRLF
    # line and a bad line before it.
    one = line(1) + line(2, "u-1")[:-1] + b"\r\n" + b"\xff\xfe not utf-8\n" + line(3, "u-2")[:-1]
    path.write_bytes(one)
    index.ingest()
    two = one.replace(b'"line 2"', b'"line X"')
    touched(path, two)
    assert index.ingest().rewritten_files == 1
    three = two.replace(b'"line 1"', b'"line Y"') + b"\n" + line(4, "u-3")
    path.write_bytes(three)
    assert index.ingest().rewritten_files == 1

    assert index.rows("SELECT generation, reason, lines, bytes, sha256, unterminated_tail "
                      "FROM superseded_generations ORDER BY generation") == [
        {"generation": 1, "reason": "changed", "lines": 4, "bytes": len(one),
         "sha256": sha(one), "unterminated_tail": len(line(3, "u-2")) - 1},
        {"generation": 2, "reason": "changed", "lines": 4, "bytes": len(two),
         "sha256": sha(two), "unterminated_tail": len(line(3, "u-2")) - 1}]
    assert [export(index, "--generation", str(n)) for n in (1, 2, 3)] == [one, two, three]
    assert export(index) == three == path.read_bytes()
    assert index.value("SELECT count(*) FROM superseded_lines") == 8
    out = index.path.parent / "out"
    result = invoke(index, "export", SID, "--generation", "2", "--out", str(out))
    assert result.exit_code == 0 and "generation 2" in result.output
    assert (out / "-tmp-p" / f"{SID}.jsonl").read_bytes() == two


def test_appends_and_touches_start_no_generation(index, path):
    path.write_bytes(line(1))
    index.ingest()
    with open(path, "ab") as f:
        f.write(line(2, "u-1"))
    index.ingest()
    before = path.stat()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert index.ingest().rewritten_files == 0
    assert index.rows("SELECT generation FROM files") == [{"generation": 1}]
    assert index.value("SELECT count(*) FROM superseded_generations") == 0


def test_an_unknown_generation_is_a_clear_error(index, path):
    path.write_bytes(line(1) + line(2, "u-1"))
    index.ingest()
    path.write_bytes(line(7))
    index.ingest()
    for args in (["--out", "-"], ["--out", str(index.path.parent / "x")]):
        result = invoke(index, "export", SID, "--generation", "3", *args)
        assert result.exit_code == 3, result.output
        assert result.output.count("\n") == 1 and "generation 3" in result.output
        assert "1-2" in result.output  # what it holds
        assert isinstance(result.exception, SystemExit)
    result = invoke(index, "restore", SID, "--generation", "3")
    assert result.exit_code == 3 and "generation 3" in result.output
    assert invoke(index, "export", SID, "--generation", "0").exit_code == 2
    assert invoke(index, "export", "nope", "--generation", "1", "--out", "-").exit_code == 9  # unknown session


def test_restore_puts_an_earlier_generation_back(index, path, tmp_path):
    one = line(1) + line(2, "u-1") + line(3, "u-2")
    path.write_bytes(one)
    index.ingest()
    two = line(1) + line(8, "u-1")
    path.write_bytes(two)
    index.ingest()

    # Not over the current file, which differs: refused, nothing written.
    result = invoke(index, "restore", SID, "--generation", "1")
    assert result.exit_code == 3 and "generation 1" in result.output
    assert path.read_bytes() == two
    # Elsewhere, or where the file is gone.
    elsewhere = tmp_path / "cfg"
    result = invoke(index, "restore", SID, "--generation", "1", "--config-dir", str(elsewhere))
    assert result.exit_code == 0, result.output
    assert (elsewhere / "projects" / "-tmp-p" / f"{SID}.jsonl").read_bytes() == one
    path.unlink()
    index.ingest()
    assert invoke(index, "restore", SID, "--generation", "1").exit_code == 0
    assert path.read_bytes() == one
    # Ingesting it again is a rewrite: generation 2 is kept in its turn.
    assert index.ingest().rewritten_files == 1
    assert [export(index, "--generation", str(n)) for n in (1, 2, 3)] == [one, two, one]


def test_files_without_the_generation_are_left_out(index, path):
    path.write_bytes(line(1))
    sub = Transcript(SID)
    sub.add("s1", None, "user", isSidechain=True, agentId="a1")
    sub_path = sub.write(path.parent / SID / "subagents", "agent-a1.jsonl")
    index.ingest()
    path.write_bytes(line(5))
    index.ingest()
    out = index.path.parent / "out"
    result = CliRunner().invoke(cli, ["export", SID, "--generation", "2", "--out", str(out),
                                      "--db", str(index.path)])
    assert result.exit_code == 0, result.output
    assert f"left out: {sub_path} has no generation 2" in result.stderr
    assert sorted(p.name for p in out.rglob("*.jsonl")) == [f"{SID}.jsonl"]
    # Generation 1 differs from the generation 2 now in out/: replaced only with --force.
    result = invoke(index, "export", SID, "--generation", "1", "--out", str(out))
    assert result.exit_code == 3 and "exists and differs" in result.output
    assert (out / "-tmp-p" / f"{SID}.jsonl").read_bytes() == line(5)
    result = invoke(index, "export", SID, "--generation", "1", "--out", str(out), "--force")
    assert result.exit_code == 0 and "left out" not in result.output
    assert (out / "-tmp-p" / f"{SID}.jsonl").read_bytes() == line(1)
    assert (out / "-tmp-p" / SID / "subagents" / "agent-a1.jsonl").read_bytes() == \
        sub_path.read_bytes()


def test_status_counts_generations(index, path):
    path.write_bytes(line(1) + line(2, "u-1") + b"bad\n")
    other = path.with_name("22222222-2222-3333-4444-555555555555.jsonl")
    other.write_bytes(line(1))
    index.ingest()
    path.write_bytes(line(3))
    index.ingest()
    path.write_bytes(line(4))
    index.ingest()
    result = invoke(index, "status", "--json")
    s = json.loads(result.output)
    assert (s["multi_generation_files"], s["superseded_generations"], s["superseded_lines"]) == (
        1, 2, 4)
    text = invoke(index, "status").output
    assert ("rewritten files (more than one generation): 1; superseded generations kept: 2, "
            "4 lines") in text


def test_a_rewrite_before_generations_were_kept_is_numbered(tmp_path):
    """The migration numbers a file rewritten before it as if generations had
    been kept: its current generation is rewrites + 1, the earlier ones gone."""
    import sqlite3

    import sqlite_utils

    from indexer.index.migrations import upgrade
    from indexer.index.migrations import migrations

    db = sqlite_utils.Database(sqlite3.connect(tmp_path / "old.db", isolation_level=None))
    migrations.apply(db, stop_before="m014_generations")
    db.execute("INSERT INTO files (path, kind, rewrites, first_ingested_at) VALUES "
               "('/a.jsonl', 'main', 0, 'T0'), ('/b.jsonl', 'main', 2, 'T0')")
    upgrade(db)
    assert [dict(r) for r in db.query(
        "SELECT path, generation, current, started_at FROM file_generations ORDER BY path")] == [
        {"path": "/a.jsonl", "generation": 1, "current": 1, "started_at": "T0"},
        {"path": "/b.jsonl", "generation": 3, "current": 1, "started_at": None}]
