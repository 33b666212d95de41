"""Write-to-visible latency under ``session-index ingest --watch``.

    python bench/watch_latency.py [--n 100] [--size-mb 40] [--polling] [--seed 1]
                                  [--big-session RECORDS] [--json]

Makes a ``projects/`` tree with bench/make_corpus.py in a temp dir, starts a
real ``session-index ingest --watch`` subprocess on it (after its first
ingest), then appends N lines one at a time, ``interval`` apart (50-100 ms,
random), round-robin to the corpus' largest main sessions and to sessions of
its median size, each line a realistic record (an assistant reply chained on
the file's last record, 0.3-3 KB; with --big-session, to one session of that
many records too). For each, the latency is the time from the
write's return to the row being readable by a separate sqlite3 connection
(polled every ``poll_ms``). Prints p50 / p99 / max, overall and by session
size; the watcher is stopped with SIGTERM and must exit 0.

``measure(n=100, ...)`` returns the figures as a dict, for other bench scripts.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
SESSION_INDEX = str(BIN / "session-index")
START_TIMEOUT = 300.0
VISIBLE_TIMEOUT = 30.0

# The appended record, by uuid, in the file being appended to.
SEEN_SQL = "SELECT 1 FROM records WHERE file_id = ? AND uuid = ?"
FILE_ID_SQL = "SELECT id FROM files WHERE path = ?"


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return None
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def _last_uuid(path: Path):
    for line in reversed(path.read_bytes().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("uuid"):
            return value["uuid"], value.get("sessionId")
    return None, path.stem


def _record(rng, uuid, parent, session_id) -> bytes:
    words = ("the index follows each transcript as it is written and commits new lines "
             "within a second of their write so check and the web pages see them").split()
    text = " ".join(rng.choice(words) for _ in range(rng.randint(40, 450)))
    return json.dumps({
        "parentUuid": parent, "isSidechain": False, "userType": "external",
        "cwd": "/home/user/proj", "sessionId": session_id, "version": "2.1.332",
        "gitBranch": "main", "type": "assistant", "uuid": uuid,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        "message": {"id": f"msg_{uuid[:24]}", "type": "message", "role": "assistant",
                    "model": "claude-opus-4-7", "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 12, "output_tokens": len(text) // 4}},
        "requestId": f"req_{uuid[:24]}",
    }, separators=(",", ":")).encode() + b"\n"


def _targets(projects: Path, per_class: int):
    """The largest main sessions and some of the median size: [(path, lines, class)]."""
    mains = [p for p in projects.rglob("*.jsonl") if "subagents" not in p.parts]
    sized = sorted((p.read_bytes().count(b"\n"), str(p)) for p in mains)
    median = len(sized) // 2
    large = [(Path(p), n, "largest") for n, p in sized[-per_class:]]
    middle = [(Path(p), n, "median") for n, p in
              sized[max(0, median - per_class // 2):median - per_class // 2 + per_class]]
    return large + middle


def _big_session(projects: Path, records: int, rng) -> Path:
    """One main transcript of ``records`` chained records."""
    session_id = "b16b16b1-0000-4000-8000-%012x" % rng.getrandbits(48)
    path = projects / "-home-user-big" / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True)
    parent = None
    with open(path, "wb") as f:
        for i in range(records):
            uuid = f"b16{i:05x}-0000-4000-8000-{rng.getrandbits(48):012x}"
            f.write(_record(rng, uuid, parent, session_id))
            parent = uuid
    return path


def measure(n: int = 100, *, size_mb: float = 40, seed: int = 1, interval=(0.05, 0.1),
            poll_ms: float = 2.0, per_class: int = 4, polling: bool = False,
            big_session: int = 0, workdir: str | None = None) -> dict:
    """Run the watcher over a fresh corpus and time N appends. With
    ``big_session``, one more session of that many records is made and
    appended to in turn. Returns {n, p50, p99, max, mean (seconds),
    by_class: {class: {n, lines, p50, p99, max}}, mode, corpus_mb,
    initial_ingest_s, exit_code, traceback_in_log}."""
    sys.path.insert(0, str(HERE))
    from make_corpus import Gen

    temp = workdir is None
    base = Path(workdir or tempfile.mkdtemp(prefix="watch-latency-"))
    rng = random.Random(seed)
    proc = None
    try:
        config = base / "claude"
        projects = config / "projects"
        if projects.exists():
            shutil.rmtree(projects)
        projects.mkdir(parents=True)
        gen = Gen(str(projects), seed, int(size_mb * 1024 * 1024), 0, 2)
        gen.run()
        targets = _targets(projects, per_class)
        if big_session:
            targets.append((_big_session(projects, big_session, rng), big_session, "big"))
        db = base / "index.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        env = dict(os.environ, CLAUDE_CONFIG_DIR=str(config),
                   SESSION_INDEX_MANAGED_SETTINGS=str(base / "managed.json"))
        env.pop("WATCHFILES_FORCE_POLLING", None)
        if polling:
            env["WATCHFILES_FORCE_POLLING"] = "1"
        log_path = base / "watch.log"
        started = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([SESSION_INDEX, "ingest", "--watch", "--db", str(db)],
                                    stdout=subprocess.DEVNULL, stderr=log, env=env)
        while " watching " not in log_path.read_text():
            if proc.poll() is not None or time.monotonic() - started > START_TIMEOUT:
                raise RuntimeError(f"the watcher did not start:\n{log_path.read_text()}")
            time.sleep(0.01)
        initial = time.monotonic() - started
        reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
        ids, last = {}, {}
        for path, _, _ in targets:
            ids[path] = reader.execute(FILE_ID_SQL, [str(path)]).fetchone()[0]
            last[path] = _last_uuid(path)
        samples = []
        for i in range(n):
            path, lines, klass = targets[i % len(targets)]
            parent, session_id = last[path]
            uuid = f"{seed:04x}{i:04x}-0000-4000-8000-{rng.getrandbits(48):012x}"
            data = _record(rng, uuid, parent, session_id)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            written = time.perf_counter()
            while reader.execute(SEEN_SQL, [ids[path], uuid]).fetchone() is None:
                if time.perf_counter() - written > VISIBLE_TIMEOUT:
                    raise RuntimeError(f"line {i} not visible after {VISIBLE_TIMEOUT}s")
                time.sleep(poll_ms / 1000)
            samples.append((time.perf_counter() - written, klass, lines))
            last[path] = (uuid, session_id)
            time.sleep(rng.uniform(*interval))     # pacing between appends
        reader.close()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        proc = None
        log_text = log_path.read_text()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if temp:
            shutil.rmtree(base, ignore_errors=True)
    values = [s for s, _, _ in samples]
    by_class = {}
    for klass in ("largest", "median", "big"):
        vs = [s for s, k, _ in samples if k == klass]
        sizes = sorted({lines for _, k, lines in samples if k == klass})
        by_class[klass] = {"n": len(vs), "lines": sizes, "p50": percentile(vs, 50),
                           "p99": percentile(vs, 99), "max": max(vs, default=None)}
    return {"n": n, "p50": percentile(values, 50), "p99": percentile(values, 99),
            "max": max(values), "mean": statistics.fmean(values), "by_class": by_class,
            "mode": "polling" if polling else "inotify", "corpus_mb": round(gen.bytes / 2**20, 1),
            "initial_ingest_s": round(initial, 2), "exit_code": code,
            "traceback_in_log": "Traceback" in log_text}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--size-mb", type=float, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--polling", action="store_true", help="watchfiles' polling fallback")
    ap.add_argument("--big-session", type=int, default=0, metavar="RECORDS",
                    help="also append to one session of this many records")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = measure(a.n, size_mb=a.size_mb, seed=a.seed, polling=a.polling,
                big_session=a.big_session)
    if a.json:
        print(json.dumps(r, indent=2))
        return
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    print(f"`session-index ingest --watch` ({r['mode']}), a {r['corpus_mb']} MB corpus "
          f"(first ingest {r['initial_ingest_s']} s), {r['n']} appends 50-100 ms apart\n")
    print("| appended to | n | p50 | p99 | max |")
    print("|---|---|---|---|---|")
    print(f"| all | {r['n']} | {ms(r['p50'])} | {ms(r['p99'])} | {ms(r['max'])} |")
    for klass, c in r["by_class"].items():
        if c["n"]:
            lines = f"{c['lines'][0]:,}-{c['lines'][-1]:,} lines"
            print(f"| {klass} sessions ({lines}) | {c['n']} | {ms(c['p50'])} | "
                  f"{ms(c['p99'])} | {ms(c['max'])} |")
    print(f"\nwatcher exit code on SIGTERM: {r['exit_code']}"
          f"{'; TRACEBACK in its log' if r['traceback_in_log'] else ''}")
    target = "met" if r["p99"] < 1.0 else "NOT met"
    print(f"target p99 < 1 s: {target}")


if __name__ == "__main__":
    main()
