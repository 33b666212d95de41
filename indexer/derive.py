"""Keeping the caches behind ``leaves``, ``leaf_ancestry`` and ``orphans``
(and the ``sessions`` table) equal to their definitions.

Ingest marks a file ``needs_derive`` in the same transaction as its new
lines; here each such file is recomputed from the one-file form of each
definition (views.py) and unmarked in one transaction, so a crash between
the two leaves the file marked and the next run finishes the job.
"""

from __future__ import annotations

from .db import write_lock
from . import views

# sessions: one row per session id, from its files and their records.
# main_file_id prefers a main file that is still on disk, then the newest.
REFRESH_SESSION_SQL = """
INSERT OR REPLACE INTO sessions (
  session_id, main_file_id, project_dir, cwd, main_files, subagent_files,
  records, first_timestamp, last_timestamp, version, git_branch, deleted_at)
SELECT :session_id,
  (SELECT id FROM files WHERE session_id = :session_id AND kind = 'main'
   ORDER BY deleted_at IS NOT NULL, mtime DESC, id DESC LIMIT 1),
  (SELECT project_dir FROM files WHERE session_id = :session_id
   ORDER BY kind = 'main' DESC, id LIMIT 1),
  (SELECT cwd FROM records WHERE file_id IN (SELECT id FROM files WHERE session_id = :session_id)
     AND cwd IS NOT NULL LIMIT 1),
  (SELECT count(*) FROM files WHERE session_id = :session_id AND kind = 'main'),
  (SELECT count(*) FROM files WHERE session_id = :session_id AND kind <> 'main'),
  r.n, r.first_ts, r.last_ts,
  (SELECT version FROM records WHERE file_id IN (SELECT id FROM files WHERE session_id = :session_id)
     AND version IS NOT NULL ORDER BY timestamp DESC LIMIT 1),
  (SELECT git_branch FROM records WHERE file_id IN (SELECT id FROM files WHERE session_id = :session_id)
     AND git_branch IS NOT NULL ORDER BY timestamp DESC LIMIT 1),
  (SELECT CASE WHEN count(*) = count(deleted_at) THEN max(deleted_at) END
   FROM files WHERE session_id = :session_id AND kind = 'main')
FROM (SELECT count(*) AS n, min(timestamp) AS first_ts, max(timestamp) AS last_ts
      FROM records WHERE file_id IN (SELECT id FROM files WHERE session_id = :session_id)) r
""".strip()

CACHES = ("leaves_cache", "leaf_ancestry_cache", "orphans_cache")


def forget_file(conn, file_id: int) -> None:
    """Drop a file's cached rows (inside the caller's transaction)."""
    for table in CACHES:
        conn.execute(f"DELETE FROM {table} WHERE file_id = ?", [file_id])


def derive_file(conn, file_id: int) -> None:
    """Recompute one file's cached rows (inside the caller's transaction)."""
    params = {"file_id": file_id}
    forget_file(conn, file_id)
    conn.execute(
        f"INSERT INTO leaves_cache ({views.LEAVES_COLUMNS}) {views.LEAVES_ONE_FILE_SQL}", params)
    conn.execute(
        f"INSERT INTO leaf_ancestry_cache ({views.LEAF_ANCESTRY_COLUMNS}) "
        f"{views.LEAF_ANCESTRY_ONE_FILE_SQL}", params)
    conn.execute(
        f"INSERT INTO orphans_cache ({views.ORPHANS_COLUMNS}) {views.ORPHANS_ONE_FILE_SQL}",
        params)


def derive_pending(db) -> int:
    """Recompute every file marked ``needs_derive`` (all of them when the
    view definitions changed since the caches were built). Returns the count."""
    conn = db.conn
    stored = conn.execute(
        "SELECT value FROM index_meta WHERE key = 'definitions_hash'").fetchone()
    if stored is None or stored[0] != views.DEFINITIONS_HASH:
        with write_lock(db):
            conn.execute("UPDATE files SET needs_derive = 1")
            conn.execute("INSERT OR REPLACE INTO index_meta VALUES ('definitions_hash', ?)",
                         [views.DEFINITIONS_HASH])
    pending = conn.execute(
        "SELECT id, session_id FROM files WHERE needs_derive ORDER BY id").fetchall()
    for file_id, session_id in pending:
        with write_lock(db):
            derive_file(conn, file_id)
            if session_id is not None:
                conn.execute(REFRESH_SESSION_SQL, {"session_id": session_id})
            conn.execute("UPDATE files SET needs_derive = 0 WHERE id = ?", [file_id])
    return len(pending)
