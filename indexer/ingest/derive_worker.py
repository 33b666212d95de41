"""Deriving new files' caches on the second core while ingest goes on.

A big ingest (a first one, or many new files) spends about a third of its
time in derive.py computing the caches of files it has just stored. Those
files are finished, their lines committed, so another process can read them
and compute their rows (derive.compute_file, reading through its own
read-only connection, in one read transaction) while this one parses and
inserts the next files. When the ingest's lines are all stored, ``apply``
writes the rows each file got, under the write lock, for every file that is
still exactly as the worker read it (same lines, bytes and generation, still
marked needs_derive); anything else is left to derive.derive_pending, which
runs after it as always. The result is what derive_pending alone would
write (tests/test_ingest.py compares both).

The preload workers (preload.py) derive most new files of a big ingest
themselves, from the lines they parsed; this worker gets the rest (files
over preload.MAX_FILE_BYTES, and those that had more lines by the time
ingest stored them), and starts only once one comes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys

from indexer.index.db import readonly_uri
from indexer.sql import write_lock

# chain and derive are imported where they are used: ingest imports this
# module on every run, and a run with nothing new needs neither.

# Bytes an ingest must plan to read from files it has not stored before
# (or re-reads whole) for the worker to be worth its start-up (~0.3 s).
MIN_BYTES = 32 << 20
# Files per request to the worker.
BATCH = 50
# What the worker runs (python -m WORKER_MODULE DB DIR).
WORKER_MODULE = "indexer.ingest.derive_worker"

FILE_IDS_SQL = "SELECT id FROM files WHERE path IN (SELECT value FROM json_each(?))"
# Where files stand: the worker's rows for one are applied only if it still
# stands where the worker read it, still marked needs_derive.
POSITIONS_SQL = """
SELECT id, line_count, ingested_offset, generation, needs_derive FROM files
WHERE id IN (SELECT value FROM json_each(?))
""".strip()


def compute(db_path: str, paths: list[str]) -> dict:
    """In the worker: {file_id: (position, rows by cache)} for these files."""
    from indexer.chain import walk as chain   # (the worker's, or a big ingest's: a no-op ingest never loads the walk)
    from indexer.ingest import derive   # (the worker's, or a big ingest's: a no-op ingest never loads it)

    conn = sqlite3.connect(readonly_uri(db_path), uri=True, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN")
        ids = [i for (i,) in conn.execute(FILE_IDS_SQL, [json.dumps(paths)])]
        params = {"file_ids": json.dumps(ids)}
        positions = {i: tuple(p) for i, *p, _ in conn.execute(POSITIONS_SQL, [json.dumps(ids)])}
        read = chain.read_rows(conn.execute(derive.UUID_RECORDS_SQL, params), ids)
        out = {}
        for file_id, kind, session_id, *covers in conn.execute(derive.FILES_SQL, params):
            recs, prompts = read[file_id]
            out[file_id] = (positions[file_id], derive.compute_file(
                file_id, kind, session_id, recs, prompts, covers, derive.calls_in(conn)))
        conn.execute("COMMIT")
        return out
    finally:
        conn.close()


class Background:
    """One worker process (``python -m indexer.ingest.derive_worker DB DIR``)
    computing caches for batches of finished files: each batch a line of
    JSON paths on its stdin, each result a pickle file in DIR (a private
    temporary folder), so neither side ever waits on the other's pipe."""

    def __init__(self, db_path: str):
        self.db_path, self.pending, self.sent = db_path, [], 0
        self.dir = self.proc = None   # started with the first batch (preload.py may leave none)

    def _start(self) -> None:
        import subprocess  # only for a big ingest: it costs start-up time
        import tempfile   # (only for a big ingest: start-up time)

        self.dir = tempfile.mkdtemp(prefix="session-index-derive-")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE, self.db_path, self.dir],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def finished(self, path: str) -> None:
        """A file read to its end (committed at the next commit)."""
        self.pending.append(path)

    def committed(self, final: bool = False) -> None:
        """After a commit: send what it covered, a batch at a time."""
        if self.pending and (final or len(self.pending) >= BATCH):
            if self.proc is None:
                self._start()
            try:
                self.proc.stdin.write(json.dumps(self.pending).encode() + b"\n")
                self.proc.stdin.flush()
                self.sent += 1
            except OSError:
                pass  # the worker is gone: derive_pending does these
            self.pending = []

    def results(self):
        """Each batch's {file_id: (position, rows)}, once the worker is done."""
        import pickle   # (only for a big ingest: start-up time)

        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait()
        for n in range(self.sent):
            try:
                with open(f"{self.dir}/{n}.pickle", "rb") as f:
                    yield pickle.load(f)
            except (OSError, EOFError, pickle.UnpicklingError):
                continue

    def close(self) -> None:
        import shutil   # (only for a big ingest: start-up time)

        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def start(db) -> Background | None:
    """A worker for ``db``'s file (None for an in-memory or temporary one)."""
    path = next((row[2] for row in db.conn.execute("PRAGMA database_list")
                 if row[1] == "main"), "")
    return Background(path) if path else None


def apply(db, background: Background) -> int:
    """Write the worker's rows for the files still as it read them; the
    rest stays marked needs_derive. Returns the files written."""
    from indexer.chain import walk as chain   # (the worker's, or a big ingest's: a no-op ingest never loads the walk)
    from indexer.ingest import derive   # (the worker's, or a big ingest's: a no-op ingest never loads it)

    background.committed(final=True)
    derive.mark_all_if_definitions_changed(db)
    written = 0
    try:
        for computed in background.results():
            with write_lock(db) as conn:
                now = {i: (tuple(p), marked) for i, *p, marked in conn.execute(
                    POSITIONS_SQL, [json.dumps(list(computed))])}
                ids = [i for i, (position, _) in computed.items()
                       if now.get(i) == (position, 1)]
                if not ids:
                    continue
                derive.forget_files(conn, ids)
                rows = {name: [] for name in chain.CACHE_COLUMNS}
                for file_id in ids:
                    for name, file_rows in computed[file_id][1].items():
                        rows[name] += file_rows
                for name, table_rows in rows.items():
                    chain.insert_rows(conn, name, table_rows)
                derive.finish_files(conn, ids)
                derive.STATS["recomputed"] += len(ids)
                written += len(ids)
    finally:
        background.close()
    return written


def main(argv: list[str]) -> int:
    """The worker: batches of paths on stdin, one pickle per batch in DIR."""
    import pickle   # (only for a big ingest: start-up time)

    db_path, out = argv
    for n, line in enumerate(sys.stdin.buffer):
        result = compute(db_path, json.loads(line))
        tmp = os.path.join(out, f".{n}.pickle")
        with open(tmp, "xb") as f:
            pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.rename(tmp, os.path.join(out, f"{n}.pickle"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
