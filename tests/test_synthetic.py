"""Long sessions shaped like real ones (bench/make_corpus.py): what the
classifier says about them, checked against an independent detection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Index

MAKE_CORPUS = Path(__file__).resolve().parent.parent / "bench" / "make_corpus.py"
# One xdist worker for the module: its 60 MB corpus is made and ingested once.
pytestmark = pytest.mark.xdist_group("synthetic")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    subprocess.run([sys.executable, str(MAKE_CORPUS), str(root / "projects"),
                    "--size-mb", "60", "--seed", "4"], check=True, capture_output=True)
    index = Index(root)
    index.ingest()
    return index


def test_long_sessions_are_mostly_compacted_and_progress(synthetic):
    by_cause = {r["cause"]: r["n"] for r in synthetic.rows(
        "SELECT cause, count(*) AS n FROM orphans o JOIN files f ON f.id = o.file_id "
        "WHERE f.id IN (SELECT id FROM files WHERE kind = 'main' "
        "ORDER BY line_count DESC LIMIT 5) GROUP BY cause")}
    assert by_cause, "the generator made no long session"
    assert "other" not in by_cause
    assert (by_cause.get("compacted", 0) + by_cause.get("progress", 0)) / sum(by_cause.values()) > 0.8


def test_every_spliced_error_chain_is_an_episode(synthetic):
    # The seed's detection one-liner: an api_error uuid that is another
    # record's parentUuid; the first of each chain is the episode's error.
    spliced = {(r["file_id"], r["uuid"]) for r in synthetic.rows("""
        SELECT e.file_id, e.uuid FROM records e
        WHERE e.subtype = 'api_error'
          AND EXISTS (SELECT 1 FROM records c WHERE c.file_id = e.file_id AND c.parent_uuid = e.uuid)
          AND NOT EXISTS (SELECT 1 FROM records p WHERE p.file_id = e.file_id
                          AND p.uuid = e.parent_uuid AND p.subtype = 'api_error')""")}
    episodes = {(r["file_id"], r["api_error_uuid"]) for r in synthetic.rows(
        "SELECT file_id, api_error_uuid FROM api_error_splices")}
    assert episodes and episodes <= spliced
    # Those not listed lie wholly before a later compaction: history.
    for file_id, uuid in spliced - episodes:
        line = synthetic.value("SELECT line_no FROM records WHERE file_id = ? AND uuid = ?", [file_id, uuid])
        assert synthetic.value(
            "SELECT count(*) FROM leaf_ancestry a JOIN records r ON r.id = a.record_id "
            "WHERE a.file_id = ? AND a.rule = 'resume' AND r.subtype = 'compact_boundary' "
            "AND r.line_no > ?", [file_id, line]) == 1
    assert synthetic.value("SELECT min(orphaned_records) FROM api_error_splices") >= 1


def test_caches_equal_definitions(synthetic):
    synthetic.assert_caches_match_definitions()
