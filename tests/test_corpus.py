"""Every real transcript in ../shared/corpus: ingested, read as the SDK reads it."""

from __future__ import annotations

import json

import pytest

from conftest import CORPUS, Index, sdk_chain
from indexer.ingest.files import stored_bytes

# One xdist worker for the module: its corpus index is built once.
pytestmark = [pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here"),
              pytest.mark.xdist_group("corpus")]

CAUSES = {"compacted", "progress", "parallel_tool_branch", "put_back_with_result", "api_error_splice",
          "api_error_record", "dangling_parent", "unlinked", "abandoned_branch", "other"}


@pytest.fixture(scope="module")
def corpus_index(tmp_path_factory):
    index = Index(tmp_path_factory.mktemp("corpus"))
    summary = index.ingest(CORPUS)
    return index, summary


def test_every_file_ingests(corpus_index):
    index, summary = corpus_index
    on_disk = sorted(str(p) for p in CORPUS.rglob("*.jsonl"))
    indexed = sorted(r["path"] for r in index.rows("SELECT path FROM files"))
    assert indexed == on_disk and summary.skipped_files == 0
    assert summary.errors == []
    # Every .jsonl is a transcript except the captured `claude -p` output.
    logs = index.rows("SELECT path FROM files WHERE kind = 'execution_log'")
    assert [r["path"] for r in logs] == [p for p in on_disk if "ContainAI" in p]
    # Every line, and a last one without its newline when it is a JSON object.
    unterminated = [p for p in indexed if is_object(tail(open(p, "rb").read()))]
    assert len(unterminated) == 4
    assert summary.new_lines == len(unterminated) + sum(
        open(p, "rb").read().count(b"\n") for p in indexed)


def tail(data: bytes) -> bytes:
    return data[data.rfind(b"\n") + 1:]


def is_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def test_index_rebuilds_every_file_byte_for_byte(corpus_index):
    index, _ = corpus_index
    for row in index.rows("SELECT id, path, unterminated_tail, pending_tail FROM files"):
        data = open(row["path"], "rb").read()
        lines = data if is_object(tail(data)) else data[: data.rfind(b"\n") + 1]
        assert b"".join(stored_bytes(index.db.conn, row["id"])) == lines, row["path"]
        assert b"".join(stored_bytes(index.db.conn, row["id"], with_pending=True)) == data
        assert row["unterminated_tail"] == (len(tail(data)) if is_object(tail(data)) else 0)
        assert row["pending_tail"] == (None if is_object(tail(data)) else tail(data) or None)


def test_sdk_ancestry_equals_the_sdk_walk(corpus_index):
    index, _ = corpus_index
    files = index.rows("SELECT id, path, kind FROM files WHERE kind <> 'execution_log'")
    assert len(files) > 100
    for f in files:
        ours = list(reversed(index.ancestry(f["id"], "sdk")))
        assert ours == sdk_chain(f["path"], f["kind"]), f["path"]


def test_orphans_are_classified_and_none_are_splices(corpus_index):
    index, _ = corpus_index
    by_cause = {r["cause"]: r["n"] for r in index.rows(
        "SELECT cause, count(*) AS n FROM orphans GROUP BY cause")}
    assert set(by_cause) <= CAUSES
    assert "api_error_splice" not in by_cause  # the corpus has no api_error records
    assert "other" not in by_cause
    # Every progress record off the chain is classed as progress.
    assert index.value(
        "SELECT count(*) FROM orphans WHERE type = 'progress' AND cause <> 'progress'") == 0
    assert by_cause.get("progress", 0) > 0 and by_cause.get("parallel_tool_branch", 0) > 0


def test_caches_equal_the_recursive_definitions(corpus_index):
    corpus_index[0].assert_caches_match_definitions()
