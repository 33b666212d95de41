"""What a no-op ingest process costs above the floor of any Python process that records a run.

    python bench/noop_floor.py [--workdir DIR] [--runs 31] [--install VENV]

Uses the corpus of bench/ingest_speed.py in --workdir (made there if missing) and an index
of it (a cold ``session-index ingest`` into DIR/noop-floor.db, made once, then only read
and written by this script). Then, alternated --runs times, each a fresh process timed by
wall clock:
- ``python -c pass``: the interpreter alone;
- the floor without a write: a process that imports ``re``, ``json`` and ``sqlite3`` (what
  the console script and the --json output need), opens the index as every command does
  (WAL, the schema read) and reads one row;
- the floor: the same, committing one ``index_meta`` row (key ``noop_floor``) as a no-op
  run commits its end (``ingest_runs``, ``last_ingest_at``), then closing it (the WAL made,
  synced and removed);
- ``session-index ingest CORPUS --db INDEX --silent --json`` with nothing new.
Prints each median and p90, and the no-op above the floor. The command is the one beside
this interpreter, or with --install VENV that of a venv the README's set-up command makes
(ingest_speed.install). Figures only: the exit status is 0 unless a run fails.
"""
import argparse, statistics, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ingest_speed  # noqa: E402

FLOOR = r"""
import json, re, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("PRAGMA synchronous = NORMAL")
conn.execute("SELECT value FROM index_meta LIMIT 1").fetchall()
if sys.argv[2] == "write":
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT OR REPLACE INTO index_meta VALUES ('noop_floor', '1')")
    conn.execute("COMMIT")
conn.close()
print(json.dumps({"files": 0}))
"""


def wall(cmd) -> float:
    t0 = time.perf_counter()
    subprocess.run([str(c) for c in cmd], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="/tmp/session-index-bench-ingest")
    ap.add_argument("--runs", type=int, default=31)
    ap.add_argument("--install", help="a venv to install this checkout into and run from")
    args = ap.parse_args()
    command = ingest_speed.install(args.install) if args.install else ingest_speed.SESSION_INDEX
    python = str(Path(command).parent / "python")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    corpus, _ = ingest_speed.ensure_corpus(workdir, ["--size-mb", 200, "--seed", 1])
    index = workdir / "noop-floor.db"
    subprocess.run([command, "ingest", corpus, "--db", index, "--silent"], check=True)
    cases = {
        "python -c pass": [python, "-c", "pass"],
        "floor without the write (imports, open, one read)": [python, "-c", FLOOR, index, "read"],
        "floor (imports, open, one commit, close)": [python, "-c", FLOOR, index, "write"],
        "no-op session-index ingest": [command, "ingest", corpus, "--db", index, "--silent",
                                       "--json"],
    }
    for cmd in cases.values():   # warm the page cache and the bytecode
        wall(cmd)
    times = {name: [] for name in cases}
    for i in range(args.runs):
        for name in (list(cases) if i % 2 == 0 else list(reversed(cases))):
            times[name].append(wall(cases[name]))
    print(f"noop_floor: {args.runs} fresh processes each, alternated; index {index}; "
          f"command {command}\n")
    print(f"{'process':55s} {'median ms':>10s} {'p90 ms':>8s}")
    med = {}
    for name, ts in times.items():
        med[name] = statistics.median(ts)
        p90 = sorted(ts)[int(0.9 * (len(ts) - 1))]
        print(f"{name:55s} {1000 * med[name]:10.1f} {1000 * p90:8.1f}")
    floor = med["floor (imports, open, one commit, close)"]
    noop = med["no-op session-index ingest"]
    print(f"\nthe no-op above the floor: {1000 * (noop - floor):.1f} ms "
          f"({noop / floor:.2f}x the floor); 2% of a cold ingest reaches the floor at "
          f"{floor / 0.02:.2f} s")


if __name__ == "__main__":
    main()
