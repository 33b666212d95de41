"""Start-up cost of ``session-index check`` as a fresh process, on the 1M-record index.

    python bench/startup_speed.py [--workdir DIR] [--runs 30] [--records 1000000] [--seed 1]
                                  [--install VENV] [--compare SRC]

Builds (or reuses, with --workdir) the index of bench/query_speed.py (make_corpus
``--records N``; a cold ``session-index ingest``). Then, alternated ``--runs`` times,
each a fresh subprocess timed by wall clock:
- ``session-index check SESSION_ID --db INDEX`` for the largest session (the answer as
  an agent server would ask it; CLAUDE_CONFIG_DIR is an empty temp dir, so no
  settings file or projects/ folder of this machine takes part). The command is the
  one beside this interpreter, or with --install VENV the one of a venv the README's
  set-up command makes (ingest_speed.install: a wheel install, as users have it). An editable
  install (``pip install -e``) adds its import finder, about 25 ms, to every start;
- ``python -c pass``: the interpreter alone, the floor under any command;
- with --compare SRC (a folder holding another version's ``indexer`` package, e.g.
  ``git archive main indexer | tar -x -C SRC``): ``python -m indexer check ...`` with
  PYTHONPATH=SRC, beside the same command run from this checkout.
The package's bytecode is compiled first (``compileall``, as ``pip install`` of a wheel
does; an editable checkout under PYTHONDONTWRITEBYTECODE would otherwise compile every
module at every start). Prints median and p90 of each, the check minus the floor, the
verdict, the modules a check process loaded that it should not need (click, sqlite_utils,
msgspec, datasette, markupsafe, yaml, dataclasses, pathlib: beyond what the interpreter's
own start-up loaded), and the ``python -X importtime`` top entries of
one check run. Target: check median < 100 ms. Targets never set the exit status.
"""
import argparse, compileall, os, statistics, subprocess, sys, tempfile, time
from pathlib import Path

from ingest_speed import SESSION_INDEX, install, setup_workdir
from query_speed import build

TARGET_S = 0.100
# Modules a check of a current index has no use for.
HEAVY = ("click", "sqlite_utils", "msgspec", "datasette", "markupsafe", "yaml", "dataclasses",
         "pathlib")
# Runs the CLI's check in this interpreter and prints which HEAVY modules it loaded.
LOADED = """
import sys
before = set(sys.modules)  # what the interpreter's start-up (site, .pth finders) loaded
from indexer.cli.entry import main
try:
    main()
except SystemExit:
    pass
print(" ".join(m for m in {heavy!r} if m in sys.modules and m not in before), file=sys.stderr)
"""


def _timed(cmd, env):
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, out


def p90(values):
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def measure(db, session_id, runs=30, compare=None, command=SESSION_INDEX):
    """Fresh-process check and interpreter times (seconds), as a dict; with
    ``compare`` (a folder holding another ``indexer`` package) both versions'
    ``python -m indexer check``; ``command`` the session-index to run."""
    import indexer

    compileall.compile_dir(list(indexer.__path__)[0], quiet=1)
    if compare:
        compileall.compile_dir(Path(compare) / "indexer", quiet=1)
    with tempfile.TemporaryDirectory() as config:
        env = dict(os.environ, CLAUDE_CONFIG_DIR=config)
        check_cmd = [command, "check", session_id, "--db", str(db)]
        module_cmd = [sys.executable, "-m", "indexer", "check", session_id, "--db", str(db)]
        python = str(Path(command).parent / "python")  # the command's own interpreter
        floor_cmd = [python, "-c", "pass"]
        other_env = dict(env, PYTHONPATH=str(Path(compare).resolve())) if compare else None
        _timed(check_cmd, env)  # warm the page cache once
        checks, floors, verdict = [], [], None
        pair = {"this": [], "compare": []}
        for _ in range(runs):
            wall, out = _timed(check_cmd, env)
            checks.append(wall)
            verdict = out.stdout.split(":")[0]
            floors.append(_timed(floor_cmd, env)[0])
            if compare:
                pair["this"].append(_timed(module_cmd, env)[0])
                wall, out = _timed(module_cmd, other_env)
                if out.stdout.split(":")[0] != verdict:
                    sys.exit(f"--compare answered {out.stdout!r}{out.stderr[-2000:]}")
                pair["compare"].append(wall)
        loaded = subprocess.run(
            [python, "-c", LOADED.format(heavy=HEAVY), "check", session_id,
             "--db", str(db)], env=env, capture_output=True, text=True).stderr.split()
        importtime = subprocess.run(
            [python, "-X", "importtime", "-c", LOADED.format(heavy=HEAVY), "check",
             session_id, "--db", str(db)], env=env, capture_output=True, text=True).stderr
    top = sorted((line for line in importtime.splitlines() if line.startswith("import time:")
                  and "|" in line and line.split("|")[1].strip().isdigit()),
                 key=lambda line: -int(line.split("|")[1]))[:12]
    return {
        "runs": runs, "session_id": session_id, "verdict": verdict, "command": command,
        "check_median_s": statistics.median(checks), "check_p90_s": p90(checks),
        "python_median_s": statistics.median(floors), "python_p90_s": p90(floors),
        "heavy_modules_loaded": loaded, "importtime_top": top,
        **({"module_median_s": statistics.median(pair["this"]),
            "compare_median_s": statistics.median(pair["compare"]),
            "compare_p90_s": p90(pair["compare"]), "compare": str(compare)} if compare else {}),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", help="keep the corpus and index here and reuse them")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compare", metavar="SRC", help="a folder holding another indexer package")
    ap.add_argument("--install", metavar="VENV",
                    help="measure the session-index of this venv, made by the README's "
                         "set-up command if it has none")
    args = ap.parse_args()
    workdir, _ = setup_workdir(args, "bench-startup-")
    db, _, _ = build(workdir, args.records, args.seed)
    import sqlite3
    conn = sqlite3.connect(db)
    session_id, records = conn.execute(
        "SELECT session_id, records FROM sessions ORDER BY records DESC, session_id").fetchone()
    conn.close()
    command = install(args.install) if args.install else SESSION_INDEX
    r = measure(db, session_id, args.runs, args.compare, command)
    print(f"\nstartup_speed: {args.runs} fresh processes each, alternated; index {db}; "
          f"session {session_id} ({records:,} records): {r['verdict']}; command {command}")
    print(f"\n{'process':<44}{'median ms':>11}{'p90 ms':>9}")
    print("-" * 64)
    print(f"{'session-index check SESSION_ID --db INDEX':<44}{r['check_median_s'] * 1000:>11.1f}"
          f"{r['check_p90_s'] * 1000:>9.1f}")
    print(f"{'python -c pass (the interpreter alone)':<44}{r['python_median_s'] * 1000:>11.1f}"
          f"{r['python_p90_s'] * 1000:>9.1f}")
    print(f"{'check minus the interpreter':<44}"
          f"{(r['check_median_s'] - r['python_median_s']) * 1000:>11.1f}")
    if args.compare:
        print(f"{'python -m indexer check ... (this checkout)':<44}"
              f"{r['module_median_s'] * 1000:>11.1f}")
        print(f"{'the same, PYTHONPATH=' + args.compare:<44}{r['compare_median_s'] * 1000:>11.1f}"
              f"{r['compare_p90_s'] * 1000:>9.1f}")
        print(f"{'this / compare':<44}{r['module_median_s'] / r['compare_median_s']:>11.2f}")
    print(f"\nheavy modules a check loaded: {' '.join(r['heavy_modules_loaded']) or 'none'}")
    print("python -X importtime, one check (cumulative us, the largest):")
    for line in r["importtime_top"]:
        print("  " + line[len("import time:"):].strip())
    ok = r["check_median_s"] < TARGET_S
    print(f"\ntargets\n  {'PASS' if ok else 'FAIL'}  check process median < {TARGET_S * 1000:.0f} ms: "
          f"{r['check_median_s'] * 1000:.1f} ms (p90 {r['check_p90_s'] * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
