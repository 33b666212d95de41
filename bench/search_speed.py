"""Search latency on a 1M-record index, and what search costs a cold ingest.

    python bench/search_speed.py [--workdir DIR] [--index PATH] [--records 1000000]
                                 [--runs 5] [--repeat 3] [--size-mb 200] [--seed 1]
                                 [--skip-latency] [--skip-ingest]

Latency: the index is ``--index PATH`` (e.g. the one ``bench/query_speed.py --workdir
/work/bench-1m`` makes), copied to the work dir first (the original is never written),
or, without it, one ``bench/query_speed.py`` builds (``--records``). ``session-index search
--enable`` runs on the copy (timed: records indexed, seconds, MB it adds); with --workdir the
searchable copy is kept and reused when its source is unchanged. Then 20 varied queries
(words common and rare, phrases, prefixes, two-letter terms, code identifiers and paths for
the trigram index, both indexes at once, --session / --project / --since filters), each
``--runs`` times after one warm-up, through ``indexer.index.search.search`` (limit 20, snippets
included): each query's median, and the p50 and p99 of all the runs (target: p99 < 100 ms).

Ingest cost: a ``bench/make_corpus.py`` corpus (``--size-mb``; bench/ingest_speed.py's), cold
``session-index ingest CORPUS --db X --silent --json`` as a subprocess into a new index, without
search and with it (the index made by ingesting an empty folder, then ``search --enable``, then
the timed ingest), alternated ``--repeat`` times: median MB/s of each and their ratio. Then
``search --enable`` on one of the indexes made without it (building search afterwards).

Targets never set the exit status. MB = 2**20 bytes.
"""
import argparse, json, os, sqlite3, statistics, sys, time
from pathlib import Path

from ingest_speed import MB, SESSION_INDEX, ensure_corpus, finish, run, setup_workdir

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def queries(conn):
    """20 varied queries: (label, query, options for search.search)."""
    sessions = conn.execute("SELECT session_id, records, project_dir FROM sessions "
                            "ORDER BY records DESC, session_id").fetchall()
    largest, median = sessions[0], sessions[len(sessions) // 2]
    last = conn.execute("SELECT max(timestamp) FROM records").fetchone()[0]
    recent = last[:8] + "01T00:00:00Z" if last else None
    return [
        ("common word", "cache", {}),
        ("two common words", "retry timeout", {}),
        ("phrase", '"return self"', {}),
        ("three-word phrase", '"schema field key"', {}),
        ("prefix", "flush*", {}),
        ("short prefix", "sy*", {}),
        ("two-letter term", "py", {}),
        ("stemmed word", "parsing", {}),
        ("no hit, word", "zebrafish", {}),
        ("no hit, phrase of common words", '"the the the"', {}),
        ("identifier (trigram)", "parse_token", {}),
        ("path (trigram)", "src/cache/", {}),
        ("code line (trigram)", "def build_", {}),
        ("no hit, identifier", "_recover_orphaned_parallel_tool_results", {}),
        ("word + identifier", "retry cache_write", {}),
        ("hyphen and apostrophe", "multi-agent don't", {}),
        (f"word, --session largest ({largest[1]:,} records)", "error", {"session": largest[0]}),
        (f"word, --session median ({median[1]:,} records)", "error", {"session": median[0]}),
        ("word, --project", "commit", {"project": largest[2]}),
        (f"word, --since {recent}", "merge", {"since": recent}),
    ]


def latency(workdir, args):
    from indexer.index import db as dbmod, search

    if args.index:
        source = Path(args.index)
    else:
        from query_speed import build
        source, _, _ = build(workdir, args.records, args.seed)
    copy, marker = workdir / "search.db", workdir / "search.json"
    st = source.stat()
    stamp = {"source": str(source.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if copy.exists() and marker.exists() and json.loads(marker.read_text())["source"] == stamp:
        built = json.loads(marker.read_text())
        print(f"reused searchable copy {copy} (of {source})")
    else:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(f"{copy}{suffix}"):
                os.remove(f"{copy}{suffix}")
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)   # a consistent copy
        dst = sqlite3.connect(copy)
        t0 = time.perf_counter()
        src.backup(dst)
        src.close(), dst.close()
        print(f"copied {source} to {copy} in {time.perf_counter() - t0:.0f} s")
        before = os.path.getsize(copy)
        wall, rss, out = run([SESSION_INDEX, "search", "--enable", "--db", copy])
        size = os.path.getsize(copy)
        built = {"source": stamp, "seconds": wall, "rss_mb": rss, "out": out.strip(),
                 "added_mb": (size - before) / MB, "size_mb": size / MB}
        marker.write_text(json.dumps(built))
    conn = sqlite3.connect(copy)
    n_records, n_text = conn.execute(
        "SELECT (SELECT count(*) FROM records), (SELECT count(*) FROM search_text)").fetchone()
    print(f"\nsearch_speed: {n_records:,} records, {n_text:,} of them with text; "
          f"index {built['size_mb']:,.0f} MB")
    print(f"search --enable on it: {built['seconds']:.0f} s, peak RSS {built['rss_mb']:.0f} MB, "
          f"+{built['added_mb']:,.0f} MB ({built['out']})")
    index = dbmod.open_db(copy, create=False)
    cases = queries(conn)
    print(f"\n{'query':<44}{'median ms':>10}{'hits':>6}  query text")
    print("-" * 90)
    every = []
    for label, q, options in cases:
        search.search(index, q, **options)   # warm-up
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            rows = search.search(index, q, **options)
            times.append(time.perf_counter() - t0)
        every += times
        print(f"{label:<44}{statistics.median(times) * 1000:>10.1f}{len(rows):>6}  {q}")
    every.sort()
    p50 = statistics.median(every)
    p99 = every[min(len(every) - 1, int(round(0.99 * (len(every) - 1))))]
    print(f"\nall {len(every)} runs ({len(cases)} queries x {args.runs}): p50 {p50 * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms, max {every[-1] * 1000:.1f} ms")
    print(f"  {'PASS' if p99 < 0.1 else 'FAIL'}  p99 under 100 ms")
    conn.close()
    index.conn.close()


def fresh(path):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{path}{suffix}"):
            os.remove(f"{path}{suffix}")


def ingest_cost(workdir, args):
    corpus, info = ensure_corpus(workdir, ["--size-mb", args.size_mb, "--seed", args.seed])
    empty = workdir / "empty"
    empty.mkdir(exist_ok=True)
    print(f"\ncorpus: make_corpus --size-mb {args.size_mb} --seed {args.seed}: {info['make_corpus']}")
    plain, searched, summary = [], [], None
    for i in range(args.repeat):
        db = workdir / "plain.db"
        fresh(db)
        wall, _, out = run([SESSION_INDEX, "ingest", corpus, "--db", db, "--silent", "--json"])
        summary = json.loads(out)
        plain.append(wall)
        db2 = workdir / "searched.db"
        fresh(db2)
        run([SESSION_INDEX, "ingest", empty, "--db", db2, "--silent"])
        run([SESSION_INDEX, "search", "--enable", "--db", db2])
        wall2, _, _ = run([SESSION_INDEX, "ingest", corpus, "--db", db2, "--silent", "--json"])
        searched.append(wall2)
        print(f"run {i + 1}: without search {wall:.2f} s, with search {wall2:.2f} s")
    mb = summary["bytes_read"] / MB
    a, b = statistics.median(plain), statistics.median(searched)
    sizes = os.path.getsize(workdir / "plain.db") / MB, os.path.getsize(workdir / "searched.db") / MB
    print(f"\ncold ingest of {mb:.0f} MB ({summary['new_records']:,} records), median of {args.repeat}:")
    print(f"  without search: {a:.2f} s, {mb / a:.1f} MB/s; index {sizes[0]:.0f} MB")
    print(f"  with search:    {b:.2f} s, {mb / b:.1f} MB/s; index {sizes[1]:.0f} MB")
    print(f"  with / without: {b / a:.2f}x the time")
    n = sqlite3.connect(workdir / "searched.db").execute(
        "SELECT count(*) FROM search_text").fetchone()[0]
    wall, _, out = run([SESSION_INDEX, "search", "--enable", "--db", workdir / "plain.db"])
    print(f"  search --enable afterwards on the index made without it: {wall:.2f} s "
          f"({n:,} records with text)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", help="keep the corpus and the indexes here and reuse them")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (no --workdir)")
    ap.add_argument("--index", help="an existing index of >= 1M records, copied first")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-ingest", action="store_true")
    args = ap.parse_args()
    started = time.perf_counter()
    workdir, temp = setup_workdir(args, "bench-search-")
    if not args.skip_latency:
        latency(workdir, args)
    if not args.skip_ingest:
        ingest_cost(workdir, args)
    finish(workdir, temp, args.keep, started)


if __name__ == "__main__":
    sys.exit(main())
