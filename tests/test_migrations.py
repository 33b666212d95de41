"""The data migrations carry what they run (a copy of the code as it was when
each was written): on an index ingested before them, each writes what ingest
stores today. (m022's usage columns: tests/test_ingest.py; m023's counts:
tests/test_record_types.py.)"""

from __future__ import annotations

import json

from conftest import write_jsonl
from indexer.index import migrations, prices

SID = "11111111-2222-3333-4444-555555555555"


def rec(n: int, type_: str, message, **extra) -> dict:
    return {"type": type_, "uuid": f"u-{n}", "parentUuid": f"u-{n - 1}" if n > 1 else None,
            "sessionId": SID, "timestamp": f"2026-01-01T00:00:{n:02d}.000Z",
            "message": message, **extra}


# Every shape the loader's unreadable rule tells apart, each readable or not.
SHAPES = [
    rec(1, "user", {"role": "user", "content": "hello"}),
    rec(2, "assistant", {"role": "assistant", "content": "   "}),          # blank: unreadable
    rec(3, "user", {"role": "user", "content": "   "}),                     # a user's: readable
    rec(4, "assistant", "not an object"),                                   # unreadable
    rec(5, "user", {"role": "user", "content": 7}),                         # unreadable
    rec(6, "assistant", {"role": "assistant", "content": []}),              # empty list: readable
    rec(7, "assistant", {"role": "assistant", "content": ["no block"]}),    # unreadable
    rec(8, "user", {"role": "user", "content": [{"type": 1}]}),             # unreadable
    rec(9, "user", {"role": "user", "content": [{"type": "text", "text": "x"}, 3]}),
    rec(10, "assistant", None),                                             # unreadable
    rec(11, "system", "anything"),                                          # not a message
]


def test_m018_flags_the_records_ingest_flags(index):
    path = index.projects / "p" / f"{SID}.jsonl"
    lines = [json.dumps(r) for r in SHAPES]
    lines.append('{"type": "assistant", "uuid": "u-12", "message": {"content": NaN}}')
    lines.append('\ufeff' + json.dumps(rec(13, "assistant", {"content": ""})))
    write_jsonl(path, lines)
    index.ingest()
    stored = index.rows("SELECT raw, is_unreadable FROM records ORDER BY line_no")
    assert [r["is_unreadable"] for r in stored] == [0, 1, 0, 1, 1, 0, 1, 1, 0, 1, 0, 1, 1]
    for r in stored:
        record = migrations._stored_record(r["raw"])
        assert migrations._m018_unreadable(record) == r["is_unreadable"], r["raw"]


def test_m022_loads_the_packaged_prices_as_prices_py_does(index):
    conn = index.db.conn
    conn.execute("DELETE FROM prices")
    migrations._m022_load_packaged_prices(conn)
    frozen = [dict(r, loaded_at=None) for r in index.rows(prices.PRICES_SQL)]
    conn.execute("DELETE FROM prices")
    prices.store(conn, prices.read(prices.PACKAGED))
    current = [dict(r, loaded_at=None) for r in index.rows(prices.PRICES_SQL)]
    assert len(frozen) > 1
    assert frozen == current
