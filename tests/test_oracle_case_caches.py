"""Every loader case of tests/test_oracle_cases.py (where the real CLI decides
what each shape resumes to) in one index: the caches ingest derives equal
the SQL definitions on all of them, so the two statements of the resume
rules (walk.py and definitions.py) cannot drift apart on a shape the CLI
was asked about. Runs without the CLI."""

from __future__ import annotations

import pytest

from conftest import write_jsonl
from test_oracle_cases import SHAPES

pytestmark = pytest.mark.slow   # (about 20-50 s: the definitions over 48 files)


def test_every_loader_case_derives_what_the_definitions_say(index):
    for n, name in enumerate(sorted(SHAPES)):
        sid = f"0c0c0c0c-5555-3333-4444-{n:012d}"
        records = SHAPES[name]()
        for r in records:
            if "sessionId" in r:
                r["sessionId"] = sid
        write_jsonl(index.projects / "-tmp-demo" / f"{sid}.jsonl", records)
    index.ingest()
    assert len(index.rows("SELECT 1 FROM files WHERE kind = 'main'")) == len(SHAPES)
    index.assert_caches_match_definitions()
