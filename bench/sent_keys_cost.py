"""What sent_keys (definitions.SENT_KEYS_CTES_TEMPLATE) costs in one main file
of N lines, every other one a prompt stored anew for the uuid of the prompt
before it: every prompt keyed by its sentAsUuid, the state growing at each
step (the worst case). Times SENT_NAMES_DEFINITION_SQL (the recursion as
derive runs it) and resume.loader_keys on the same lines.

    flock /tmp/bench.lock python bench/sent_keys_cost.py 200 1000 2000
"""
from __future__ import annotations

import os
import resource
import sys
import tempfile
import time

from indexer.chain import definitions, resume
from indexer.chain.walk import Rec
from indexer.index.db import open_db

INSERT_SQL = ("INSERT INTO records (id, file_id, line_no, byte_offset, uuid, type, sent_as_uuid, raw) "
              "VALUES (?, 1, ?, ?, ?, ?, ?, '{}')")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def lines(n: int) -> list[tuple]:
    rows, prev = [], "p0"
    for i in range(1, n + 1):
        if i % 2:
            rows.append((i, i, i, f"p{i}", "user", prev))
            prev = f"p{i}"
        else:
            rows.append((i, i, i, f"a{i}", "assistant", None))
    return rows


def main(sizes: list[int]) -> None:
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            conn = open_db(os.path.join(tmp, "index.db")).conn
            conn.execute("INSERT INTO files (id, path, kind) VALUES (1, '/x.jsonl', 'main')")
            rows = lines(n)
            conn.executemany(INSERT_SQL, rows)
            conn.commit()
            wall, used = time.perf_counter(), cpu()
            named = conn.execute(
                f"SELECT count(*) FROM ({definitions.SENT_NAMES_DEFINITION_SQL})").fetchone()[0]
            wall, used = time.perf_counter() - wall, cpu() - used
            occ = [Rec(i, 1, ln, u, None, None, t, None, None, 0, 0, None, None, 0, sent_as_uuid=s)
                   for (i, ln, _, u, t, s) in rows]
            py = time.perf_counter()
            keyed = len(resume.loader_keys(occ))
            py = time.perf_counter() - py
            conn.close()
        print(f"N={n} lines, {n // 2} prompts stored anew: sent_names {wall * 1000:.1f} ms wall "
              f"{used * 1000:.1f} ms CPU ({named} named); loader_keys {py * 1000:.2f} ms ({keyed} keyed)")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [200, 1000, 2000])
