"""The benchmarks that run ingest in a child process still run against this
checkout's code (their children's code is a string no import check sees:
ingest_floor.py and usage_speed.py --ingest imported modules gone since the
package was laid out by idea). Figures are not checked: a benchmark is not a
timed test."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_bench(*args) -> str:
    out = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.slow
def test_ingest_floor_runs_every_row(tmp_path):
    out = run_bench(BENCH / "ingest_floor.py", "--workdir", tmp_path, "--size-mb", 1,
                    "--repeat", 1)
    rows = {line[:28].strip() for line in out.splitlines()}
    assert {"sqlite-utils", "ingest", "in one process", "SQLite writes alone",
            "records, every index", "records, unique key only", "cache rows"} <= rows


@pytest.mark.slow
def test_usage_speed_ingest_compares_two_checkouts(tmp_path):
    corpus = tmp_path / "corpus"
    run_bench(BENCH / "make_corpus.py", corpus, "--size-mb", 1)
    out = run_bench(BENCH / "usage_speed.py", "--ingest", corpus, "--against", BENCH.parent,
                    "--repeat", 1)
    assert "CPU  median" in out and "this checkout" in out
