"""Counts that say how the index stands (``session-index status``)."""

from __future__ import annotations

from indexer.sql import dict_rows
from indexer.index.record_kinds import NEW_KINDS_SQL

# One row of counts over the whole index. multi_generation_files: files
# rewritten at least once (more than one generation); superseded_generations
# and superseded_lines: the earlier generations the index keeps, and their
# lines; fleet_*: the hosts that ship here (ingest --from), their files, the
# oldest of their last heartbeats, and the sessions with copies on several
# hosts (host_copies), and of those the ones whose copies differ;
# fleet_quarantined: the messages and heartbeats the central could not use
# (fleet_quarantine, listed by QUARANTINED_SQL); fleet_gaps: the byte ranges
# of hosts' files the stream lost and no host sent again (GAPS_SQL);
# fleet_files_waiting: files whose later messages are held for earlier bytes;
# files_to_derive: files with lines stored whose caches (leaves, orphans, the
# sessions rows) are not derived yet (a central behind its hosts derives them
# once per fleet_central.DERIVE_BEHIND_S).
# Files whose stored lines are not derived yet (status, the fleet metrics).
FILES_TO_DERIVE_SQL = "SELECT count(*) FROM files WHERE needs_derive"
STATUS_COUNTS_SQL = f"""
SELECT
  (SELECT count(*) FROM files WHERE deleted_at IS NULL) AS live_files,
  (SELECT count(*) FROM files WHERE deleted_at IS NOT NULL) AS deleted_files,
  (SELECT count(*) FROM files WHERE kind = 'main') AS main_files,
  (SELECT count(*) FROM files WHERE kind = 'subagent') AS subagent_files,
  (SELECT count(*) FROM sessions) AS sessions,
  (SELECT count(*) FROM records) AS records,
  (SELECT count(*) FROM bad_lines) AS bad_lines,
  (SELECT count(*) FROM leaves WHERE NOT leaves_agree) AS leaves_disagree,
  (SELECT count(*) FROM files WHERE kind = 'execution_log') AS execution_logs,
  (SELECT count(*) FROM api_error_splices) AS api_error_splices,
  (SELECT count(*) FROM poisoned_sessions WHERE at_resume_tail) AS poisoned_sessions,
  (SELECT count(*) FROM stale_session_refs) AS stale_session_refs,
  (SELECT count(*) FROM expired_transcripts) AS expired_transcripts,
  (SELECT count(*) FROM failed_executions) AS failed_executions,
  (SELECT count(*) FROM files WHERE generation > 1) AS multi_generation_files,
  (SELECT count(*) FROM superseded_generations) AS superseded_generations,
  (SELECT count(*) FROM superseded_lines) AS superseded_lines,
  (SELECT value FROM index_meta WHERE key = 'last_ingest_at') AS last_ingest_at,
  (SELECT count(*) FROM fleet_hosts) AS fleet_hosts,
  (SELECT count(*) FROM files WHERE origin = 'fleet') AS fleet_files,
  (SELECT min(last_heartbeat_at) FROM fleet_hosts) AS oldest_heartbeat_at,
  (SELECT count(DISTINCT session_id) FROM host_copies) AS sessions_on_several_hosts,
  (SELECT count(DISTINCT session_id) FROM host_copies WHERE diverged)
    AS sessions_diverged_across_hosts,
  (SELECT count(*) FROM fleet_quarantine) AS fleet_quarantined,
  (SELECT count(*) FROM fleet_gaps) AS fleet_gaps,
  (SELECT count(DISTINCT file_id) FROM fleet_held) AS fleet_files_waiting,
    ({FILES_TO_DERIVE_SQL}) AS files_to_derive
""".strip()

# What a fleet's central quarantined (`session-index quarantined`), oldest
# first: when, its subject and stream sequence (a heartbeat: the key's
# revision), the host token of its subject, why, and its size (the bytes:
# the fleet_quarantine table).
QUARANTINED_SQL = """
SELECT id, received_at, subject, stream_seq, host, reason, length(data) AS bytes
FROM fleet_quarantine ORDER BY id
""".strip()

# Orphans per cause, most first.
ORPHANS_BY_CAUSE_SQL = """
SELECT cause, count(*) AS n FROM orphans GROUP BY cause ORDER BY n DESC, cause
""".strip()


def status(db) -> dict:
    [row] = dict_rows(db.conn, STATUS_COUNTS_SQL)
    row["orphans_by_cause"] = {c: n for c, n in db.conn.execute(ORPHANS_BY_CAUSE_SQL)}
    # Record kinds the most recent ingest run brought: {kind: records}.
    row["new_record_types"] = {k: n for k, n in db.conn.execute(NEW_KINDS_SQL)}
    return row


# The bytes of hosts' files that never came (`session-index fleet-gaps`),
# oldest first: the file here and on its host, its generation there, the
# byte range start..end, how many bytes, since when a later message waited,
# when the gap was recorded, and why.
GAPS_SQL = """
SELECT id, file_id, host, remote_path, generation, start, end, end - start AS bytes,
  waited_since, recorded_at, reason
FROM fleet_gaps ORDER BY id
""".strip()


def gaps(db) -> list[dict]:
    return dict_rows(db.conn, GAPS_SQL)


def quarantined(db) -> list[dict]:
    return dict_rows(db.conn, QUARANTINED_SQL)
