"""Export and restore: byte for byte, from the index alone."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from click.testing import CliRunner

from conftest import CORPUS, Index, Transcript
from indexer.cli.commands import cli

SID = "11111111-2222-3333-4444-555555555555"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def invoke(index, *args):
    return CliRunner().invoke(cli, [*args, "--db", str(index.path)], catch_exceptions=False)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_every_corpus_file_exports_byte_for_byte_and_restores(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    originals = {p: p.read_bytes() for p in corpus.rglob("*.jsonl")}
    index = Index(tmp_path)
    index.ingest(corpus)
    sessions = [r["session_id"] for r in index.rows(
        "SELECT DISTINCT session_id FROM files WHERE kind <> 'execution_log'")]
    assert any(not d.endswith(b"\n") for d in originals.values())  # unterminated tails too

    def exported_hashes(out):
        for sid in sessions:
            assert invoke(index, "export", sid, "--out", str(out)).exit_code == 0
        return sorted(sha(p.read_bytes()) for p in out.rglob("*.jsonl"))

    transcripts = {p: d for p, d in originals.items()
                   if index.value("SELECT kind FROM files WHERE path = ?", [str(p)]) != "execution_log"}
    before = exported_hashes(tmp_path / "out1")
    assert before == sorted(sha(d) for d in transcripts.values())
    for p in transcripts:
        p.unlink()
    assert index.ingest(corpus).deleted_files == len(transcripts)
    assert exported_hashes(tmp_path / "out2") == before  # from the index alone
    for sid in sessions:
        assert invoke(index, "restore", sid).exit_code == 0
    assert {p: p.read_bytes() for p in transcripts} == transcripts
    again = index.ingest(corpus)
    assert (again.new_lines, again.rewritten_files, again.bad_lines) == (0, 0, 0)
    assert index.value("SELECT count(*) FROM files WHERE deleted_at IS NOT NULL") == 0


def test_fixture_with_every_odd_line_exports_exactly(index):
    path = index.projects / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    data = (b"\xef\xbb\xbf" + json.dumps({"type": "user", "uuid": "a"}).encode() + b"\r\n"
            + b"{bad json\n" + b"\xff\xfe not utf-8\n" + b"\n"
            + json.dumps({"type": "assistant", "uuid": "b", "parentUuid": "a", "n": 1e400}).encode()
            + b"\n" + b'{"type": "user", "uuid": "c", "x": NaN}\n' + b'{"partial": ')
    path.write_bytes(data)
    index.ingest()
    out = index.path.parent / "out"
    assert invoke(index, "export", SID, "--out", str(out)).exit_code == 0
    assert (out / "p" / f"{SID}.jsonl").read_bytes() == data
    stdout = CliRunner().invoke(cli, ["export", SID, "--out", "-", "--db", str(index.path)])
    assert stdout.stdout_bytes == data


def test_subagents_export_at_their_places(index):
    main = Transcript(SID)
    main.add("m1", None, "user")
    main.write(index.projects / "-proj")
    sub = Transcript(SID)
    sub.add("s1", None, "user", isSidechain=True, agentId="a1")
    sub.write(index.projects / "-proj" / SID / "subagents", "agent-a1.jsonl")
    index.ingest()
    out = index.path.parent / "out"
    result = invoke(index, "export", SID, "--out", str(out))
    assert result.exit_code == 0
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.jsonl")) == [
        f"-proj/{SID}.jsonl", f"-proj/{SID}/subagents/agent-a1.jsonl"]


def test_restore_into_a_config_dir_sets_mtime_and_refuses_a_different_file(index, tmp_path):
    t = Transcript(SID)
    t.add("m1", None, "user")
    path = t.write(index.projects / "-proj")
    index.ingest()
    data = path.read_bytes()
    config = tmp_path / "other-config"
    result = invoke(index, "restore", SID, "--config-dir", str(config))
    assert result.exit_code == 0 and "mtime set to now" in result.output
    restored = config / "projects" / "-proj" / f"{SID}.jsonl"
    assert restored.read_bytes() == data
    assert abs(restored.stat().st_mtime - __import__("time").time()) < 60
    again = invoke(index, "restore", SID, "--config-dir", str(config))
    assert again.exit_code == 0 and "already there" in again.output
    restored.write_bytes(b"something else\n")
    refused = CliRunner().invoke(cli, ["restore", SID, "--config-dir", str(config),
                                       "--db", str(index.path)])
    assert refused.exit_code == 3 and "differs" in refused.output
    assert restored.read_bytes() == b"something else\n"


def test_export_of_an_unknown_session_is_a_clear_error(index):
    index.ingest()
    result = CliRunner().invoke(cli, ["export", "nope", "--out", "-", "--db", str(index.path)])
    assert result.exit_code == 9 and "session nope is not in the index" in result.output


def test_an_empty_out_or_config_dir_is_a_usage_error_and_writes_nothing(index, tmp_path,
                                                                        monkeypatch):
    # '' was the current directory for export --out (which never writes there
    # unasked) and no --config-dir at all for restore.
    t = Transcript(SID)
    t.add("m1", None, "user")
    path = t.write(index.projects / "-proj")
    index.ingest()
    path.unlink()
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    for args in (["export", SID, "--out", ""], ["restore", SID, "--config-dir", ""]):
        result = CliRunner().invoke(cli, [*args, "--db", str(index.path)])
        assert result.exit_code == 2, (args, result.output)
        assert "an empty path names no file or folder" in result.output
    assert list(here.iterdir()) == [] and not path.exists()
