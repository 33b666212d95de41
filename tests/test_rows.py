"""rows.bindable: rows bound in bulk with NaN for None store what None would."""
import sqlite3

from indexer.transcripts.rows import NULL, bindable


def test_sqlite_stores_a_bound_nan_as_null():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a TEXT, b INTEGER, c REAL, d, e TEXT NOT NULL DEFAULT 'x')")
    conn.execute("INSERT INTO t (a, b, c, d) VALUES (?, ?, CAST(? AS REAL), coalesce(?, 'none'))",
                 [NULL] * 4)
    assert conn.execute("SELECT a, b, c, d, typeof(a), typeof(b), typeof(c) FROM t").fetchone() == (
        None, None, None, "none", "null", "null", "null")
    try:
        conn.execute("INSERT INTO t (e) VALUES (?)", [NULL])
    except sqlite3.IntegrityError:
        pass   # NOT NULL holds for it as for None
    else:
        raise AssertionError("a NaN got into a NOT NULL column")


def test_bindable_rows_store_the_same_as_rows(tmp_path):
    rows = [(1, None, "a", 0, None, 2.5, b"raw"), (2, "b", None, None, 7, None, b"")]
    tables = []
    for convert in (list, bindable):
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE TABLE t (a INTEGER, b TEXT, c TEXT, d INTEGER, e, f REAL, g BLOB)")
        conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?)", convert(rows))
        tables.append(conn.execute(
            "SELECT a, b, c, d, e, f, g, typeof(b), typeof(d), typeof(e) FROM t").fetchall())
    assert tables[0] == tables[1]
    assert tables[0][0][1] is None and tables[0][1][3] is None

