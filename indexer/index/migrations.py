"""The schema, stated once. Migrations are never edited once applied: a change
is a new function. Views are not here: views.py recreates them on every open
(``upgrade``).

A migration carries what it runs: a data migration holds its own copy of the
code or SQL it needs, as it was when the migration was written, and imports
nothing of the package that may change later.
"""

from __future__ import annotations

import json
import os
import re
from datetime import date, datetime, timezone

from sqlite_utils import Migrations

from indexer.index import views
from indexer.sql import write_lock

migrations = Migrations("session-index")


def upgrade(db) -> None:
    """Apply pending migrations to ``db`` (a sqlite_utils.Database), then
    (re)create every view."""
    # Under one IMMEDIATE lock, so two processes opening a new index at once
    # do not both try to create it (migrations nest as savepoints).
    with write_lock(db) as conn:
        if migrations.pending(db):
            migrations.apply(db)
        views.create_views(db)
        if conn.execute("SELECT 1 FROM files LIMIT 1").fetchone() is None:
            views.stamp_current(conn)   # nothing indexed yet: nothing to recompute


@migrations()
def m001_create_files(db):
    # One row per transcript file ever seen. ingested_offset never passes a
    # partial last line; head/tail hashes detect a rewrite at the next run.
    db.execute(
        """
        CREATE TABLE files (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL,            -- main | subagent
            session_id TEXT,
            agent_id TEXT,
            project_dir TEXT,              -- the folder under projects/
            size INTEGER,                  -- bytes, at the last stat
            mtime TEXT,                    -- ISO-8601 UTC, at the last stat
            mtime_ns INTEGER,
            dev INTEGER,
            inode INTEGER,
            ingested_offset INTEGER NOT NULL DEFAULT 0,
            line_count INTEGER NOT NULL DEFAULT 0,
            head_len INTEGER NOT NULL DEFAULT 0,
            head_hash TEXT,
            tail_len INTEGER NOT NULL DEFAULT 0,
            tail_hash TEXT,
            rewrites INTEGER NOT NULL DEFAULT 0,
            records INTEGER NOT NULL DEFAULT 0,   -- running facts about its records
            first_timestamp TEXT,
            last_timestamp TEXT,
            cwd TEXT,
            version TEXT,                  -- of its last record that has one
            git_branch TEXT,
            first_ingested_at TEXT,
            last_ingested_at TEXT,
            deleted_at TEXT,
            needs_derive INTEGER NOT NULL DEFAULT 1
        )
        """
    )
    db.execute("CREATE INDEX files_session ON files(session_id)")


@migrations()
def m002_create_records(db):
    # One row per line that is a JSON object, its exact text in raw.
    db.execute(
        """
        CREATE TABLE records (
            id INTEGER PRIMARY KEY,
            file_id INTEGER NOT NULL REFERENCES files(id),
            line_no INTEGER NOT NULL,      -- 1-based
            byte_offset INTEGER NOT NULL,  -- where the line starts
            session_id TEXT,
            uuid TEXT,
            parent_uuid TEXT,
            logical_parent_uuid TEXT,
            type TEXT,
            subtype TEXT,
            timestamp TEXT,
            is_sidechain INTEGER NOT NULL DEFAULT 0,
            is_meta INTEGER NOT NULL DEFAULT 0,
            team_name TEXT,
            agent_id TEXT,
            message_id TEXT,
            model TEXT,
            request_id TEXT,
            is_api_error INTEGER NOT NULL DEFAULT 0,
            is_compact_summary INTEGER NOT NULL DEFAULT 0,
            is_tool_result INTEGER NOT NULL DEFAULT 0,
            cwd TEXT,
            version TEXT,
            git_branch TEXT,
            leaf_uuid TEXT,
            raw TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE UNIQUE INDEX records_file_offset ON records(file_id, byte_offset)")
    db.execute("CREATE INDEX records_file_uuid ON records(file_id, uuid, line_no)")
    db.execute("CREATE INDEX records_file_parent ON records(file_id, parent_uuid)")
    db.execute(
        "CREATE INDEX records_file_logical_parent ON records(file_id, logical_parent_uuid) "
        "WHERE logical_parent_uuid IS NOT NULL")
    db.execute("CREATE INDEX records_session ON records(session_id)")


@migrations()
def m003_create_bad_lines(db):
    # Lines that are not JSON objects (or not UTF-8), as raw bytes, so the
    # index can rebuild the file byte for byte.
    db.execute(
        """
        CREATE TABLE bad_lines (
            id INTEGER PRIMARY KEY,
            file_id INTEGER NOT NULL REFERENCES files(id),
            line_no INTEGER NOT NULL,
            byte_offset INTEGER NOT NULL,
            error TEXT NOT NULL,
            raw BLOB NOT NULL
        )
        """
    )
    db.execute("CREATE UNIQUE INDEX bad_lines_file_offset ON bad_lines(file_id, byte_offset)")


@migrations()
def m004_create_sessions(db):
    # One row per session id, refreshed whenever one of its files changes.
    db.execute(
        """
        CREATE TABLE sessions (
            session_id TEXT PRIMARY KEY,
            main_file_id INTEGER,          -- the newest main transcript
            project_dir TEXT,
            cwd TEXT,
            main_files INTEGER,
            subagent_files INTEGER,
            records INTEGER,
            first_timestamp TEXT,
            last_timestamp TEXT,
            version TEXT,
            git_branch TEXT,
            deleted_at TEXT                -- set when every main file is gone
        )
        """
    )


@migrations()
def m005_create_derived(db):
    # The results of the cache-backed views, recomputed per changed file at
    # ingest and held equal to the *_definition views (views.py, derive.py).
    db.execute(
        """
        CREATE TABLE leaves_cache (
            file_id INTEGER PRIMARY KEY,
            session_id TEXT,
            kind TEXT,
            resume_leaf_id INTEGER,
            resume_leaf_uuid TEXT,
            sdk_leaf_id INTEGER,
            sdk_leaf_uuid TEXT,
            leaves_agree INTEGER,
            branch_count INTEGER
        )
        """
    )
    db.execute("CREATE INDEX leaves_cache_session ON leaves_cache(session_id)")
    db.execute(
        """
        CREATE TABLE leaf_ancestry_cache (
            file_id INTEGER NOT NULL,
            session_id TEXT,
            rule TEXT NOT NULL,
            depth INTEGER NOT NULL,
            uuid TEXT,
            record_id INTEGER,
            PRIMARY KEY (file_id, rule, depth)
        )
        """
    )
    db.execute("CREATE INDEX leaf_ancestry_cache_session ON leaf_ancestry_cache(session_id)")
    db.execute("CREATE INDEX leaf_ancestry_cache_uuid ON leaf_ancestry_cache(file_id, rule, uuid)")
    db.execute(
        """
        CREATE TABLE orphans_cache (
            file_id INTEGER NOT NULL,
            session_id TEXT,
            uuid TEXT NOT NULL,
            record_id INTEGER,
            line_no INTEGER,
            type TEXT,
            subtype TEXT,
            timestamp TEXT,
            message_id TEXT,
            cause TEXT NOT NULL,
            branch_point_uuid TEXT,
            PRIMARY KEY (file_id, uuid)
        )
        """
    )
    db.execute("CREATE INDEX orphans_cache_session ON orphans_cache(session_id)")
    db.execute("CREATE INDEX orphans_cache_cause ON orphans_cache(cause)")
    db.execute("CREATE INDEX orphans_cache_branch ON orphans_cache(file_id, branch_point_uuid)")
    db.execute(
        """
        CREATE TABLE chain_breaks_cache (
            file_id INTEGER NOT NULL,
            session_id TEXT,
            record_id INTEGER PRIMARY KEY,
            line_no INTEGER,
            uuid TEXT,
            type TEXT,
            subtype TEXT,
            timestamp TEXT,
            missing_parent_uuid TEXT
        )
        """
    )
    db.execute("CREATE INDEX chain_breaks_cache_file ON chain_breaks_cache(file_id)")
    db.execute("CREATE INDEX chain_breaks_cache_session ON chain_breaks_cache(session_id)")
    db.execute(
        """
        CREATE TABLE duplicate_uuids_cache (
            file_id INTEGER NOT NULL,
            session_id TEXT,
            uuid TEXT NOT NULL,
            copies INTEGER,
            line_nos TEXT,
            kept_line_no INTEGER,
            PRIMARY KEY (file_id, uuid)
        )
        """
    )
    db.execute("CREATE INDEX duplicate_uuids_cache_session ON duplicate_uuids_cache(session_id)")


@migrations()
def m006_create_index_meta(db):
    # Key/value facts about the index itself: when it was last ingested,
    # which view definitions the caches were computed with.
    db.execute("CREATE TABLE index_meta (key TEXT PRIMARY KEY, value TEXT)")


@migrations()
def m007_create_session_refs(db):
    # Session ids an application holds and intends to resume (refs import).
    # A reference is identified by (source, key, session_id).
    db.execute(
        """
        CREATE TABLE session_refs (
            id INTEGER PRIMARY KEY,
            source TEXT NOT NULL DEFAULT '',
            key TEXT NOT NULL DEFAULT '',
            session_id TEXT NOT NULL,
            cached_at TEXT,                -- when the application cached it, as given
            imported_from TEXT,            -- the file it came from
            imported_at TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE UNIQUE INDEX session_refs_identity ON session_refs(source, key, session_id)")
    db.execute("CREATE INDEX session_refs_session ON session_refs(session_id)")


@migrations()
def m008_add_retention_to_files(db):
    # cleanupPeriodDays in force for the file (retention.py), and which
    # settings file said so ('default' when none did).
    db.execute("ALTER TABLE files ADD COLUMN retention_days INTEGER")
    db.execute("ALTER TABLE files ADD COLUMN retention_source TEXT")


@migrations()
def m009_index_execution_events(db):
    # `claude -p --output-format stream-json` logs are files of kind
    # 'execution_log'; their result and init events are found through these.
    db.execute(
        "CREATE INDEX records_result_events ON records(file_id, line_no) WHERE type = 'result'")
    db.execute(
        "CREATE INDEX records_init_events ON records(file_id, line_no) "
        "WHERE type = 'system' AND subtype = 'init'")
    db.execute("CREATE INDEX sessions_main_file ON sessions(main_file_id)")
    # Synthetic assistant placeholders (views.SYNTHETIC_RECORD), a handful
    # in a million records.
    db.execute(
        "CREATE INDEX records_synthetic ON records(file_id, uuid) "
        "WHERE type = 'assistant' AND (model = '<synthetic>' "
        "OR message_id NOT LIKE 'msg\\_%' ESCAPE '\\')")


@migrations()
def m010_add_pending_tail_to_files(db):
    # The bytes after the last newline as last seen: not a line yet (it is
    # never parsed or counted), kept so export can rebuild the file exactly.
    db.execute("ALTER TABLE files ADD COLUMN pending_tail BLOB")


@migrations()
def m011_create_repairs(db):
    # Every `session-index repair --write`: what it changed, where the backup
    # went, and the file's bytes before (so the index keeps the original).
    db.execute(
        """
        CREATE TABLE repairs (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            file_id INTEGER NOT NULL,
            path TEXT NOT NULL,
            backup_path TEXT,
            created_at TEXT NOT NULL,
            status TEXT NOT NULL,          -- applied | rolled_back
            reparented INTEGER NOT NULL,
            dropped INTEGER NOT NULL,
            chain_before INTEGER,          -- resume chain length before and after
            chain_after INTEGER,
            recovered INTEGER,             -- previously orphaned records now read back
            message TEXT,
            original BLOB,                 -- the file's bytes before the repair
            repaired_sha256 TEXT
        )
        """
    )
    db.execute("CREATE INDEX repairs_session ON repairs(session_id)")


@migrations()
def m012_add_store_copies(db):
    # Transcripts mirrored through indexer.ingest.store (the Agent SDK's
    # SessionStore) are files too: origin 'store' (ingested files are
    # 'file'), path store://<project_key>/<session_id>[/<subpath>], keyed by
    # the SDK's SessionKey: project_key, session_id, subpath (NULL for the
    # main transcript).
    db.execute("ALTER TABLE files ADD COLUMN origin TEXT NOT NULL DEFAULT 'file'")
    db.execute("ALTER TABLE files ADD COLUMN project_key TEXT")
    db.execute("ALTER TABLE files ADD COLUMN subpath TEXT")
    db.execute(
        "CREATE INDEX files_store_key ON files(project_key, session_id) WHERE origin = 'store'")
    # Per store copy: the storage write time of its last append (epoch ms,
    # the clock list_sessions and the summaries share) and, for a main key,
    # the SDK's folded session summary (opaque JSON, kept verbatim).
    db.execute(
        """
        CREATE TABLE store_keys (
            file_id INTEGER PRIMARY KEY REFERENCES files(id),
            mtime_ms INTEGER NOT NULL,
            summary TEXT
        )
        """
    )


@migrations()
def m013_caches_without_rowid(db):
    # The caches are written whole for every changed file: stored in their
    # primary key's b-tree (WITHOUT ROWID), each row is one insert, not two.
    # orphans_cache_branch goes: file_id (the primary key's prefix) narrows
    # as well for the few lookups by branch point. The views that read them
    # are dropped first (db.upgrade recreates every view after migrating).
    for (view,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        db.execute(f"DROP VIEW [{view}]")
    for table in ("leaf_ancestry_cache", "orphans_cache", "duplicate_uuids_cache"):
        sql = db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", [table]
        ).fetchone()[0]
        indexes = [row[0] for row in db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
            "AND sql IS NOT NULL AND name <> 'orphans_cache_branch'", [table])]
        db.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
        db.execute(sql.rstrip() + " WITHOUT ROWID")
        db.execute(f"INSERT INTO {table} SELECT * FROM {table}_old")
        db.execute(f"DROP TABLE {table}_old")
        for index in indexes:
            db.execute(index)


@migrations()
def m014_generations(db):
    # A record after the last newline: when the bytes after a file's last
    # newline parse as a whole JSON object they are stored as its last line
    # (ingested_offset and line_count include it) and unterminated_tail is
    # their length, so the "\n" that later ends it is not a second line and
    # export writes no newline where the file had none. 0 otherwise.
    db.execute("ALTER TABLE files ADD COLUMN unterminated_tail INTEGER NOT NULL DEFAULT 0")
    # Every rewrite of a file starts a new generation (1 is the first); the
    # current one is in records/bad_lines as before. A file rewritten before
    # generations were kept is numbered as if they had been.
    db.execute("ALTER TABLE files ADD COLUMN generation INTEGER NOT NULL DEFAULT 1")
    db.execute("ALTER TABLE files ADD COLUMN generation_started_at TEXT")
    db.execute("UPDATE files SET generation = rewrites + 1")
    # One row per superseded generation, written in the transaction that
    # replaced it: when it began and ended, why (shrunk: the file got
    # shorter than its ingested bytes; changed: those bytes differ), its
    # lines, its bytes as last seen (sha256 over exactly what export writes),
    # the file's mtime then, and its tail as files holds it.
    db.execute(
        """
        CREATE TABLE superseded_generations (
            file_id INTEGER NOT NULL REFERENCES files(id),
            generation INTEGER NOT NULL,
            started_at TEXT,               -- NULL: before generations were kept
            superseded_at TEXT NOT NULL,
            reason TEXT NOT NULL,          -- shrunk | changed
            lines INTEGER NOT NULL,
            bytes INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            mtime TEXT,
            unterminated_tail INTEGER NOT NULL DEFAULT 0,
            pending_tail BLOB,
            PRIMARY KEY (file_id, generation)
        )
        """
    )
    # The lines of superseded generations, moved out of records and
    # bad_lines: raw keeps its storage class (TEXT for a record, so SQLite's
    # JSON functions work on it; the bytes, a BLOB, for a bad line), error is
    # NULL for a record.
    db.execute(
        """
        CREATE TABLE superseded_lines (
            id INTEGER PRIMARY KEY,
            file_id INTEGER NOT NULL REFERENCES files(id),
            generation INTEGER NOT NULL,
            line_no INTEGER NOT NULL,
            byte_offset INTEGER NOT NULL,
            error TEXT,
            raw NOT NULL
        )
        """
    )
    db.execute(
        "CREATE UNIQUE INDEX superseded_lines_offset "
        "ON superseded_lines(file_id, generation, byte_offset)")


@migrations()
def m017_add_resume_rule_and_restored(db):
    # leaves_cache.resume_rule: which of the CLI's rules picked the resume
    # leaf (resume.py); orphans_cache.restored: 1 when the CLI puts the
    # record back after its walk. The caches are recomputed (the definitions
    # changed), so the defaults never show.
    db.execute("ALTER TABLE leaves_cache ADD COLUMN resume_rule TEXT")
    db.execute("ALTER TABLE orphans_cache ADD COLUMN restored INTEGER NOT NULL DEFAULT 0")


@migrations()
def m015_add_main_file_rule_to_sessions(db):
    # Why sessions.main_file_id is the transcript it is (definitions.MAIN_FILE_RULES:
    # only_named, named_in_cwd_project, ...). derive.py fills it for every
    # session at the next ingest (index_meta.sessions_hash).
    db.execute("ALTER TABLE sessions ADD COLUMN main_file_rule TEXT")


@migrations()
def m018_add_is_unreadable_to_records(db):
    # records.is_unreadable: a user/assistant record Claude Code's loader
    # drops as unreadable (lines._unreadable). Existing rows are read again
    # from their raw text by the rule as lines.py had it then (_m018_unreadable).
    db.execute("ALTER TABLE records ADD COLUMN is_unreadable INTEGER NOT NULL DEFAULT 0")
    rows = db.execute("SELECT id, raw FROM records WHERE type IN ('user', 'assistant')")
    flagged = []
    for record_id, raw in rows.fetchall():
        record = _stored_record(raw)
        if record is not None and _m018_unreadable(record):
            flagged.append((record_id,))
    db.conn.executemany("UPDATE records SET is_unreadable = 1 WHERE id = ?", flagged)


# What m018 and m022 read of a stored line, copied from lines.py as it was
# when they were written (parse_line's general path, which its fast path
# agrees with: tests/test_ingest.py), so that a later change to lines.py
# does not change what they write.
def _stored_record(raw) -> dict | None:
    """The JSON object a records.raw holds; None where lines.parse_line
    raised BadLine (not UTF-8, blank, a NUL, not JSON, not an object)."""
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError:
        return None
    if not text.strip() or "\x00" in text:
        return None
    body = text[1:] if text.startswith("\ufeff") else text
    try:
        value = json.loads(body)
    except (RecursionError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _m018_unreadable(d: dict) -> int:
    """1 for a user or assistant record Claude Code's loader drops as
    unreadable (2.1.332): its message is not an object, its content is
    neither a string nor a list, an assistant's string content is blank, or
    a non-empty list holds no block (an object with a string ``type``)."""
    type_, msg = d.get("type"), d.get("message")
    if type_ not in ("user", "assistant"):
        return 0
    if not isinstance(msg, dict):
        return 1
    content = msg.get("content")
    if isinstance(content, str):
        return int(type_ == "assistant" and not content.strip())
    if not isinstance(content, list):
        return 1
    return int(bool(content) and not any(
        isinstance(b, dict) and isinstance(b.get("type"), str) for b in content))


@migrations()
def m019_heights_and_append_state(db):
    # Appending at a file's leaf extends its caches instead of recomputing
    # them (derive_append.py). leaf_ancestry_cache keeps each record's
    # height (0 at the end of the walk), which appending does not change;
    # the view computes depth from the chain's length, now kept in
    # leaves_cache. leaves_cache also keeps what the next append carries on
    # from; sdk_terminals holds the Agent SDK's leaf candidates (a terminal
    # record and the message line it walks up to; message_line is the line
    # of that message's uuid that wins, which orders them). Existing rows are converted.
    for (view,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        db.execute(f"DROP VIEW [{view}]")
    for column in ("resume_length", "sdk_length", "derived_lines"):
        db.execute(f"ALTER TABLE leaves_cache ADD COLUMN {column} INTEGER")
    db.execute("ALTER TABLE leaves_cache ADD COLUMN derive_state TEXT")
    db.execute("ALTER TABLE leaf_ancestry_cache RENAME TO leaf_ancestry_cache_old")
    for index in ("leaf_ancestry_cache_session", "leaf_ancestry_cache_uuid"):
        db.execute(f"DROP INDEX IF EXISTS {index}")
    db.execute(
        """
        CREATE TABLE leaf_ancestry_cache (
            file_id INTEGER NOT NULL,
            session_id TEXT,
            rule TEXT NOT NULL,
            height INTEGER NOT NULL,
            uuid TEXT,
            record_id INTEGER,
            PRIMARY KEY (file_id, rule, height)
        ) WITHOUT ROWID
        """
    )
    db.execute(
        """
        INSERT INTO leaf_ancestry_cache (file_id, session_id, rule, height, uuid, record_id)
        SELECT file_id, session_id, rule,
               max(depth) OVER (PARTITION BY file_id, rule) - depth, uuid, record_id
        FROM leaf_ancestry_cache_old
        """
    )
    db.execute(
        """
        UPDATE leaves_cache SET
          resume_length = (SELECT count(*) FROM leaf_ancestry_cache_old a
                           WHERE a.file_id = leaves_cache.file_id AND a.rule = 'resume'),
          sdk_length = (SELECT count(*) FROM leaf_ancestry_cache_old a
                        WHERE a.file_id = leaves_cache.file_id AND a.rule = 'sdk')
        """
    )
    db.execute("DROP TABLE leaf_ancestry_cache_old")
    db.execute("CREATE INDEX leaf_ancestry_cache_session ON leaf_ancestry_cache(session_id)")
    db.execute("CREATE INDEX leaf_ancestry_cache_uuid ON leaf_ancestry_cache(file_id, rule, uuid)")
    db.execute(
        """
        CREATE TABLE sdk_terminals (
            file_id INTEGER NOT NULL,
            uuid TEXT NOT NULL,
            terminal_line INTEGER NOT NULL,
            message_uuid TEXT NOT NULL,
            message_record_id INTEGER NOT NULL,
            is_main INTEGER NOT NULL,
            message_line INTEGER NOT NULL,
            -- the key's columns first: SQLite 3.40's integrity_check reports
            -- NOT NULL columns between them as NULL in a WITHOUT ROWID table
            PRIMARY KEY (file_id, uuid, terminal_line)
        ) WITHOUT ROWID
        """
    )
    db.execute("CREATE INDEX sdk_terminals_best ON sdk_terminals("
               "file_id, is_main DESC, message_line DESC, terminal_line)")
    db.execute("CREATE INDEX sdk_terminals_message ON sdk_terminals(file_id, message_uuid)")
    # The records of one API message (an appended one may make an older
    # off-chain record a parallel tool branch).
    db.execute(
        "CREATE INDEX records_file_message ON records(file_id, message_id) "
        "WHERE message_id IS NOT NULL")


@migrations()
def m020_title_records(db):
    # The records that title a session (session-index sessions): the
    # user's custom-title, Claude Code's ai-title, the older summary.
    db.execute(
        "CREATE INDEX records_titles ON records(file_id, line_no) "
        "WHERE type IN ('custom-title', 'ai-title', 'summary')")


@migrations()
def m021_search(db):
    # Full-text search (search.py): search_state has one row while search is
    # enabled on this index (session-index search --enable), with the
    # high-water mark up to which every record with text is indexed; the
    # text and its two FTS5 indexes stay empty until then.
    db.execute(
        """
        CREATE TABLE search_state (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            high_water INTEGER NOT NULL,   -- records.id: every text record <= it is indexed
            enabled_at TEXT NOT NULL
        )
        """
    )
    # One row per record with text; key orders them by time (search.sort_key).
    db.execute(
        """
        CREATE TABLE search_text (
            key INTEGER PRIMARY KEY,       -- (timestamp ms << 20) | (record_id & 0xFFFFF)
            record_id INTEGER NOT NULL UNIQUE,
            file_id INTEGER NOT NULL,
            session_id TEXT,
            type TEXT,
            timestamp TEXT,
            text TEXT NOT NULL             -- what both indexes hold
        )
        """
    )
    # A session's rows, newest last (search --session of a small session).
    db.execute("CREATE INDEX search_text_session ON search_text(session_id, key)")
    # Words (stemmed), and any substring of 3 characters or more (code, CJK).
    # search_words also indexes session_id (its parts as words), so that
    # search --session is a join of two doclists inside FTS5.
    db.execute("CREATE VIRTUAL TABLE search_words USING fts5(text, session_id, "
               "content='search_text', content_rowid='key', tokenize='porter unicode61')")
    db.execute("CREATE VIRTUAL TABLE search_code USING fts5(text, content='search_text', "
               "content_rowid='key', tokenize='trigram')")


@migrations()
def m022_prices(db):
    # Per-model rates, USD per million tokens (prices.py; loaded from the
    # packaged indexer/prices.json below and by `session-index prices load`):
    # the 5-minute and 1-hour cache writes apart, the tier a request pays on
    # every token when its prompt is above long_context_above input tokens
    # (NULL: no tier), and the usage.speed = 'fast' multiplier (NULL: none).
    db.execute(
        """
        CREATE TABLE prices (
            model TEXT PRIMARY KEY,        -- message.model; a dated id matches its undated one
            name TEXT,
            input REAL NOT NULL,
            output REAL NOT NULL,
            cache_read REAL NOT NULL,
            cache_write_5m REAL NOT NULL,
            cache_write_1h REAL NOT NULL,
            long_context_above INTEGER,
            long_input REAL,
            long_output REAL,
            long_cache_read REAL,
            long_cache_write_5m REAL,
            long_cache_write_1h REAL,
            fast_multiplier REAL,
            snapshot_date TEXT NOT NULL,   -- the price file's snapshot (YYYY-MM-DD)
            source TEXT NOT NULL,          -- 'package', or the path of the file loaded
            loaded_at TEXT NOT NULL
        )
        """
    )
    # The usage of every assistant record, as columns of records (lines.py
    # reads them from the line as it parses it: records.RECORD_FIELDS), so that
    # nothing parses records.raw for usage. Existing assistant rows are read
    # once here: by SQLite's JSON where raw is JSON it reads, else (NaN, an
    # infinity) by the parser itself; both give what lines.py gives.
    for column, kind in (("has_usage", "INTEGER NOT NULL DEFAULT 0"),
                         ("input_tokens", "INTEGER"), ("output_tokens", "INTEGER"),
                         ("cache_read_tokens", "INTEGER"), ("cache_creation_tokens", "INTEGER"),
                         ("cache_5m_tokens", "INTEGER"), ("cache_1h_tokens", "INTEGER"),
                         ("speed", "TEXT"), ("service_tier", "TEXT")):
        db.execute(f"ALTER TABLE records ADD COLUMN {column} {kind}")

    fill_usage_columns(db)
    # The usage view reads these columns through this index alone (it
    # covers every column the view uses; records.raw, stored before the new
    # columns, is never read). It is led by file_id, so a cold ingest
    # appends to it in order (a table kept by triggers cost a cold ingest
    # about a third more: bench/usage_speed.py --ingest), and a deleted
    # record (a rewrite, a retracted last line) leaves it with its row.
    db.execute(
        "CREATE INDEX records_usage ON records(file_id, timestamp, session_id, message_id, "
        "request_id, model, input_tokens, output_tokens, cache_read_tokens, "
        "cache_creation_tokens, cache_5m_tokens, cache_1h_tokens, speed, has_usage) WHERE has_usage")
    # Claude Code's own running cost of a session (usage_reported).
    db.execute(
        "CREATE INDEX records_cost_state ON records(session_id, file_id, line_no) "
        "WHERE type = 'cost-state'")
    _m022_load_packaged_prices(db.conn)


def fill_usage_columns(db):
    """m022_prices: the usage columns of the existing assistant records,
    read from raw as lines.py reads them (tests/test_ingest.py holds the
    two equal)."""
    def count(path):
        # a JSON number that a SQLite integer holds, truncated (lines.count)
        return (f"CASE WHEN json_type(u, '{path}') IN ('integer', 'real') "
                f"AND abs(json_extract(u, '{path}')) < 9223372036854775807.0 "
                f"THEN CAST(json_extract(u, '{path}') AS INTEGER) END")

    def text(path):
        return f"CASE WHEN json_type(u, '{path}') = 'text' THEN json_extract(u, '{path}') END"

    db.execute(f"""
        UPDATE records SET has_usage = 1, input_tokens = {count('$.input_tokens')},
          output_tokens = {count('$.output_tokens')},
          cache_read_tokens = {count('$.cache_read_input_tokens')},
          cache_creation_tokens = {count('$.cache_creation_input_tokens')},
          cache_5m_tokens = {count('$.cache_creation.ephemeral_5m_input_tokens')},
          cache_1h_tokens = {count('$.cache_creation.ephemeral_1h_input_tokens')},
          speed = {text('$.speed')}, service_tier = {text('$.service_tier')}
        FROM (SELECT id AS usage_id, json_extract(raw, '$.message.usage') AS u FROM records
              WHERE type = 'assistant' AND json_valid(raw)
                AND json_type(raw, '$.message.usage') = 'object')
        WHERE id = usage_id
        """)
    rows = db.execute(
        "SELECT id, raw FROM records WHERE type = 'assistant' AND NOT json_valid(raw)")
    found = []
    for record_id, raw in rows.fetchall():
        record = _stored_record(raw)
        fields = _M022_NO_USAGE if record is None else _m022_usage(record)
        if fields != _M022_NO_USAGE:
            found.append((*fields, record_id))
    db.conn.executemany(
        f"UPDATE records SET {', '.join(c + ' = ?' for c in _M022_USAGE_COLUMNS)} WHERE id = ?",
        found)


# m022's usage columns of a record, as lines.py read them then (_usage_dict).
_M022_USAGE_COLUMNS = ("has_usage", "input_tokens", "output_tokens", "cache_read_tokens",
                       "cache_creation_tokens", "cache_5m_tokens", "cache_1h_tokens", "speed",
                       "service_tier")
_M022_NO_USAGE = (0, None, None, None, None, None, None, None, None)
_M022_INT_RANGE = 1 << 63


def _m022_usage(d: dict) -> tuple:
    msg = d.get("message")
    if not isinstance(msg, dict) or not isinstance(msg.get("usage"), dict) \
            or d.get("type") != "assistant":
        return _M022_NO_USAGE
    u = msg["usage"]
    cc = u.get("cache_creation")
    if not isinstance(cc, dict):
        cc = {}

    def count(value):
        # a JSON number a SQLite integer holds, truncated toward zero; else NULL
        if value.__class__ is int:
            return value if -_M022_INT_RANGE <= value < _M022_INT_RANGE else None
        if value.__class__ is float and -_M022_INT_RANGE < value < _M022_INT_RANGE:
            return int(value)
        return None

    def string(value):
        # a JSON string as SQLite stores it (a lone surrogate as its escape); else NULL
        if value.__class__ is not str:
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("ascii")
        return value

    return (1, count(u.get("input_tokens")), count(u.get("output_tokens")),
            count(u.get("cache_read_input_tokens")), count(u.get("cache_creation_input_tokens")),
            count(cc.get("ephemeral_5m_input_tokens")), count(cc.get("ephemeral_1h_input_tokens")),
            string(u.get("speed")), string(u.get("service_tier")))


def _m022_load_packaged_prices(conn, name: str = "prices.json") -> None:
    """A packaged price file (``name`` beside this file) into the prices
    table, as prices.py loaded it when m022 was written: the cache rates a
    model leaves out default to multiples of its input rate."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    with open(path, "rb") as f:
        data = json.loads(f.read().decode("utf-8"))
    snapshot = date.fromisoformat(data["snapshot_date"]).isoformat()
    loaded_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")
    defaults = {"cache_read": 0.1, "cache_write_5m": 1.25, "cache_write_1h": 2.0}

    def rates(spec: dict) -> dict:
        out = {"input": float(spec["input"]), "output": float(spec["output"])}
        for key, times in defaults.items():
            out[key] = (float(spec[key]) if spec.get(key) is not None
                        else out["input"] * times)
        return out

    rows = []
    for model, spec in data["models"].items():
        row = {"model": model,
               "name": spec.get("name") if isinstance(spec.get("name"), str) else None,
               **rates(spec)}
        long = spec.get("long_context")
        row["long_context_above"] = None if long is None else long["above_input_tokens"]
        long_rates = rates(long) if long is not None else dict.fromkeys(
            ("input", "output", *defaults))
        row.update({f"long_{k}": v for k, v in long_rates.items()})
        fast = spec.get("fast")
        row["fast_multiplier"] = None if fast is None else float(fast)
        row.update(snapshot_date=snapshot, source="package", loaded_at=loaded_at)
        rows.append(row)
    conn.executemany("""
        INSERT OR REPLACE INTO prices (
          model, name, input, output, cache_read, cache_write_5m, cache_write_1h,
          long_context_above, long_input, long_output, long_cache_read, long_cache_write_5m,
          long_cache_write_1h, fast_multiplier, snapshot_date, source, loaded_at)
        VALUES (:model, :name, :input, :output, :cache_read, :cache_write_5m, :cache_write_1h,
          :long_context_above, :long_input, :long_output, :long_cache_read, :long_cache_write_5m,
          :long_cache_write_1h, :fast_multiplier, :snapshot_date, :source, :loaded_at)
        """, rows)


@migrations()
def m023_record_kinds(db):
    # Format drift (record_kinds.py, the record_types view): per transcript
    # file how far its records' kinds are counted, per file and kind the
    # counts, and per kind their sums and its first sighting (first_run: the
    # ingest run, index_meta.ingest_runs; NULL for kinds already in the
    # index now).
    # '' stands for no type or no subtype (the key's columns are NOT NULL).
    db.execute(
        """
        CREATE TABLE record_kind_scans (
            file_id INTEGER PRIMARY KEY,
            generation INTEGER NOT NULL,
            ingested_offset INTEGER NOT NULL,
            last_offset INTEGER NOT NULL,   -- byte_offset of the last record counted; -1: none
            last_record_id INTEGER,
            version TEXT,                   -- inherited by the next record without one
            timestamp TEXT
        )
        """
    )
    db.execute(
        """
        CREATE TABLE record_kind_files (
            file_id INTEGER NOT NULL,
            type TEXT NOT NULL,
            subtype TEXT NOT NULL,
            records INTEGER NOT NULL,
            first_version_key TEXT,         -- record_kinds.version_key: sortable, then the version
            last_version_key TEXT,
            first_timestamp TEXT,
            last_timestamp TEXT,
            last_ingested_at TEXT,
            PRIMARY KEY (file_id, type, subtype)
        ) WITHOUT ROWID
        """
    )
    db.execute("CREATE INDEX record_kind_files_kind ON record_kind_files(type, subtype)")
    db.execute(
        """
        CREATE TABLE record_kinds (
            type TEXT NOT NULL,
            subtype TEXT NOT NULL,
            first_run INTEGER,
            first_ingested_at TEXT,
            -- the sums of its record_kind_files rows, kept with them
            records INTEGER NOT NULL DEFAULT 0,
            files INTEGER NOT NULL DEFAULT 0,
            first_version_key TEXT,
            last_version_key TEXT,
            first_timestamp TEXT,
            last_timestamp TEXT,
            last_ingested_at TEXT,
            PRIMARY KEY (type, subtype)
        ) WITHOUT ROWID
        """
    )
    # What after_ingest reads of every transcript file, without its wide rows.
    db.execute("CREATE INDEX files_record_kinds ON files(id, generation, ingested_offset) "
               "WHERE kind IN ('main', 'subagent')")
    _m023_count_kinds(db.conn)


# m023's count of every transcript's records by kind, as record_kinds.py
# counted an index's records then (record_kinds.count_file on every file,
# none counted before: kinds already in the index, never new).
_M023_FILES_SQL = """
SELECT id, generation, ingested_offset FROM files WHERE kind IN ('main', 'subagent') ORDER BY id
""".strip()
_M023_RECORDS_SQL = """
SELECT id, byte_offset, coalesce(type, ''),
  CASE type WHEN 'system' THEN coalesce(subtype, '')
    WHEN 'attachment' THEN coalesce(CASE WHEN json_valid(raw)
                                    THEN CAST(raw ->> '$.attachment.type' AS TEXT) END, '')
    ELSE '' END,
  version, timestamp
FROM records WHERE file_id = ? ORDER BY byte_offset
""".strip()
_M023_FACTS = ("records", "first_version_key", "last_version_key", "first_timestamp",
               "last_timestamp", "last_ingested_at")
_M023_MERGE = ",\n  ".join(
    f"{c} = {c} + excluded.{c}" if c == "records" else
    f"{c} = excluded.{c}" if c == "last_ingested_at" else
    f"{c} = coalesce({'min' if c.startswith('first') else 'max'}({c}, excluded.{c}), "
    f"{c}, excluded.{c})"
    for c in _M023_FACTS)
_M023_ADD_FILE_KIND_SQL = f"""
INSERT INTO record_kind_files (file_id, type, subtype, {", ".join(_M023_FACTS)})
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
""".strip()
_M023_ADD_KIND_SQL = f"""
INSERT INTO record_kinds (type, subtype, first_run, first_ingested_at, files, {", ".join(_M023_FACTS)})
VALUES (?, ?, NULL, NULL, 1, ?, ?, ?, ?, ?, NULL)
ON CONFLICT (type, subtype) DO UPDATE SET
  files = files + excluded.files,
  {_M023_MERGE}
""".strip()
_M023_SAVE_SCAN_SQL = """
INSERT OR REPLACE INTO record_kind_scans (file_id, generation, ingested_offset, last_offset,
  last_record_id, version, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?)
""".strip()


def _m023_version_key(version: str) -> str:
    """A key that sorts Claude Code versions number by number, then a space,
    then the version as written (record_kinds.version_key)."""
    return re.sub(r"[0-9]+", lambda m: m.group().zfill(12), version).replace(" ", "_") \
        + " " + version


def _m023_count_kinds(conn) -> None:
    for file_id, generation, ingested_offset in conn.execute(_M023_FILES_SQL).fetchall():
        # per kind: [records, lowest version key, highest, first timestamp, last];
        # a record without a version or timestamp counts the last one before it
        kinds: dict[tuple[str, str], list] = {}
        after, last_id, version, vkey, timestamp = -1, None, None, None, None
        for rid, offset, type_, subtype, v, ts in conn.execute(_M023_RECORDS_SQL, [file_id]):
            after, last_id = offset, rid
            if v and v != version:
                version, vkey = v, _m023_version_key(v)
            if ts:
                timestamp = ts
            k = kinds.get((type_, subtype))
            if k is None:
                kinds[type_, subtype] = [1, vkey, vkey, timestamp, timestamp]
                continue
            k[0] += 1
            if vkey is not None:
                k[1] = vkey if k[1] is None or vkey < k[1] else k[1]
                k[2] = vkey if k[2] is None or vkey > k[2] else k[2]
            if timestamp is not None:
                k[3] = timestamp if k[3] is None or timestamp < k[3] else k[3]
                k[4] = timestamp if k[4] is None or timestamp > k[4] else k[4]
        conn.executemany(_M023_ADD_FILE_KIND_SQL, [
            (file_id, t, s, *facts, None) for (t, s), facts in kinds.items()])
        conn.executemany(_M023_ADD_KIND_SQL, [(t, s, *facts) for (t, s), facts in kinds.items()])
        conn.execute(_M023_SAVE_SCAN_SQL, [file_id, generation, ingested_offset, after, last_id,
                                           version, timestamp])


@migrations()
def m024_fleet(db):
    # Transcripts of other hosts, carried by `session-index ship` over NATS
    # JetStream and written by `ingest --from` (fleet_ingest.py): files rows
    # of origin 'fleet', path fleet://HOST/PATH, with host set (NULL: this
    # machine's files and store copies).
    db.execute("ALTER TABLE files ADD COLUMN host TEXT")
    db.execute(
        """
        CREATE TABLE fleet_files (
            file_id INTEGER PRIMARY KEY REFERENCES files(id),
            host TEXT NOT NULL,
            remote_path TEXT NOT NULL,          -- the file's path on its host
            remote_generation INTEGER NOT NULL, -- the host's count of its rewrites
            gaps INTEGER NOT NULL DEFAULT 0,    -- messages that came before an earlier one
            UNIQUE (host, remote_path)
        )
        """
    )
    # Pieces of a line too long for one message, until the last one comes.
    db.execute(
        """
        CREATE TABLE fleet_parts (
            file_id INTEGER NOT NULL,
            line_offset INTEGER NOT NULL,  -- where the line starts in the file
            at INTEGER NOT NULL,           -- where this piece starts
            data BLOB NOT NULL,
            PRIMARY KEY (file_id, line_offset, at)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE fleet_hosts (
            host TEXT PRIMARY KEY,
            last_heartbeat_at TEXT,   -- the host's shipper's last heartbeat (ISO UTC)
            last_message_at TEXT,     -- when the central last stored a message of it
            messages INTEGER NOT NULL DEFAULT 0
        )
        """
    )
    # How far each durable consumer has committed (the stream sequence).
    db.execute(
        """
        CREATE TABLE fleet_consumers (
            name TEXT PRIMARY KEY,
            stream_seq INTEGER NOT NULL,
            updated_at TEXT
        )
        """
    )


@migrations()
def m025_session_hosts(db):
    # A session's main transcript per host (views.REFRESH_SESSION_SQLS): copies
    # of one session on two hosts are never merged, so each host has its own
    # (host '' is this machine: its files and store copies). sessions.host
    # says which host the sessions row answers for. Filled for every session
    # at the next derive (the sessions rule changed: index_meta.sessions_hash).
    db.execute(
        """
        CREATE TABLE session_hosts (
            session_id TEXT NOT NULL,
            host TEXT NOT NULL,
            main_file_id INTEGER,
            main_file_rule TEXT,
            PRIMARY KEY (session_id, host)
        ) WITHOUT ROWID
        """
    )
    db.execute("CREATE INDEX session_hosts_main_file ON session_hosts(main_file_id)")
    db.execute("ALTER TABLE sessions ADD COLUMN host TEXT")


@migrations()
def m026_application_id(db):
    # The file's header says it is a session index (connection.APPLICATION_ID,
    # "SIDX"), so that opening it needs no read of its schema first (db.probe).
    db.execute(f"PRAGMA application_id = {0x53494458}")


@migrations()
def m027_files_tracked(db):
    # What every ingest run reads of every file to see that it is unchanged
    # (ingest.TRACKED_FILES_SQL), from an index of its own: a files row is
    # about 900 bytes, these columns about 150 (a no-op ingest of 964 files
    # read 64 pages of the table, 12 of this).
    db.execute("CREATE INDEX files_tracked ON files(path, inode, dev, size, mtime_ns, "
               "deleted_at, ingested_offset)")


@migrations()
def m028_records_synthetic_by_model(db):
    # A synthetic placeholder is an assistant record whose message.model is
    # "<synthetic>", as Claude Code marks them (records.SYNTHETIC_RECORD,
    # word for word, so that SQLite uses the index), no longer also one whose
    # message.id does not start with msg_: a third-party provider's replies
    # have such ids and are real messages.
    db.execute("DROP INDEX IF EXISTS records_synthetic")
    db.execute(
        "CREATE INDEX records_synthetic ON records(file_id, uuid) "
        "WHERE type = 'assistant' AND model = '<synthetic>'")


@migrations()
def m029_records_compact_boundaries(db):
    # The compact_boundary records of each file, for session_compactions
    # (signals/classes.py): the view read every record of every main
    # transcript to find them (849 ms on the 1M-record bench index).
    db.execute(
        "CREATE INDEX records_compact_boundaries ON records(file_id, timestamp) "
        "WHERE type = 'system' AND subtype = 'compact_boundary'")


@migrations()
def m030_records_foreign_replies(db):
    # The assistant records with a requestId and an id that is not msg_ (a
    # provider's reply, or a placeholder Claude Code gave a requestId): the
    # only records Claude Code 2.1.332 can name as previous_message_id and
    # get the API's 400 for (records.PREVIOUS_MESSAGE_ID_RECORD), so that
    # the poisoned verdict's health row reads them alone. The WHERE clause is
    # records.FOREIGN_REPLY_RECORD word for word (with no alias).
    db.execute(
        "CREATE INDEX records_foreign_replies ON records(file_id) "
        "WHERE type = 'assistant' AND request_id <> '' "
        "AND message_id NOT LIKE 'msg\\_%' ESCAPE '\\'")


@migrations()
def m035_history_and_session_folders(db):
    # Evidence of sessions outside their transcripts (anthropics/claude-code
    # #91284, #76829, #79369, #70219, #53417, #95403): Claude Code's prompt
    # history and the session folders beside the transcripts.
    # history_files: one row per <config dir>/history.jsonl read, as files
    # does for transcripts: ingested_offset never passes a partial last line;
    # head_digest is of its first HEAD bytes (a changed head, or a shorter
    # file, is a rewrite: generation goes up and the file is read again, the
    # earlier generation's rows kept); retention_days: the config dir's
    # cleanupPeriodDays when it was last read.
    db.execute("""
        CREATE TABLE history_files (
          id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, config_dir TEXT,
          inode INTEGER, dev INTEGER, size INTEGER, mtime_ns INTEGER,
          ingested_offset INTEGER NOT NULL DEFAULT 0, generation INTEGER NOT NULL DEFAULT 1,
          head_digest TEXT, lines INTEGER NOT NULL DEFAULT 0, retention_days INTEGER,
          first_ingested_at TEXT, last_ingested_at TEXT, deleted_at TEXT)""")
    # history_prompts: one row per line of a history file (every line kept:
    # one that is not a JSON object has error set and raw its text): the
    # prompt's session_id, project (its cwd), timestamp (ISO-8601 UTC, from
    # the line's epoch milliseconds) and display text.
    db.execute("""
        CREATE TABLE history_prompts (
          id INTEGER PRIMARY KEY, history_file_id INTEGER NOT NULL REFERENCES history_files(id),
          generation INTEGER NOT NULL, line_no INTEGER NOT NULL, byte_offset INTEGER NOT NULL,
          session_id TEXT, project TEXT, timestamp TEXT, display TEXT, error TEXT,
          raw TEXT NOT NULL)""")
    db.execute("CREATE UNIQUE INDEX history_prompts_offset "
               "ON history_prompts(history_file_id, generation, byte_offset)")
    db.execute("CREATE INDEX history_prompts_session ON history_prompts(session_id, timestamp)")
    # session_folders: one row per <project>/<session id>/ folder found beside
    # the transcripts, as last scanned: how many files its tool-results/,
    # subagents/ and workflows/ hold (and any others), their bytes, the
    # newest file's mtime in tool-results/ and workflows/ (last_sidecar_at)
    # and in the whole folder (last_mtime), ISO-8601 UTC; deleted_at when the
    # folder was found gone; signature: a digest of the mtimes of the folder
    # and every folder in it (the same: nothing was added or removed, and its
    # files need no stat).
    db.execute("""
        CREATE TABLE session_folders (
          id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, project_dir TEXT,
          session_id TEXT NOT NULL, tool_results INTEGER NOT NULL DEFAULT 0,
          subagent_files INTEGER NOT NULL DEFAULT 0, workflow_files INTEGER NOT NULL DEFAULT 0,
          other_files INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0,
          first_mtime TEXT, last_sidecar_at TEXT, last_mtime TEXT, scanned_at TEXT,
          deleted_at TEXT, signature TEXT)""")
    db.execute("CREATE INDEX session_folders_session ON session_folders(session_id)")


@migrations()
def m036_session_links(db):
    # What Claude Code's session state says of a session's parent: the
    # background jobs' <config dir>/jobs/<id>/state.json (forkParentSessionId,
    # forkBoundaryAt: anthropics/claude-code#85875, where the fork's
    # transcript holds no copy to say so). One row per state file, as last
    # read: session_id (forkSessionId, else sessionId), parent_session_id,
    # boundary_at, mtime (ISO-8601 UTC), scanned_at; deleted_at when gone.
    db.execute("""
        CREATE TABLE session_links (
          id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL,
          parent_session_id TEXT NOT NULL, boundary_at TEXT, mtime TEXT, scanned_at TEXT,
          deleted_at TEXT)""")
    db.execute("CREATE INDEX session_links_session ON session_links(session_id)")
    db.execute("CREATE INDEX session_links_parent ON session_links(parent_session_id)")


@migrations()
def m040_fleet_quarantine(db):
    # What a fleet's central could not use (fleet_central.quarantine): a
    # message on the stream that is not a shipper's (damaged, forged: its
    # subject names another host, from a newer shipper), or a heartbeat
    # whose value is not one. Acknowledged and kept here with its reason
    # and raw bytes, so that the stream goes on; once per (subject,
    # stream_seq): a message delivered again is not kept twice.
    db.execute(
        """
        CREATE TABLE fleet_quarantine (
            id INTEGER PRIMARY KEY,
            received_at TEXT NOT NULL,  -- when the central took it (ISO UTC)
            subject TEXT NOT NULL,      -- its NATS subject
            stream_seq INTEGER,         -- its stream sequence (a heartbeat: the key's revision)
            host TEXT,                  -- the host token its subject names
            reason TEXT NOT NULL,       -- why it was not used, one line
            headers TEXT,               -- its NATS headers, a JSON object
            data BLOB NOT NULL,         -- its payload, byte for byte
            UNIQUE (subject, stream_seq)
        )
        """
    )


@migrations()
def m041_fleet_held_and_gaps(db):
    # A fleet's central acknowledges every message (fleet_central): one that
    # comes before an earlier one of its file is held here until that one
    # comes (a batch delivered again, a host's re-send), so that nothing is
    # pending in JetStream for one host's trouble. Held longer than the gap
    # wait, the bytes before it are recorded as a gap (fleet_gaps) and the
    # file goes on from it.
    db.execute(
        """
        CREATE TABLE fleet_held (
            file_id INTEGER NOT NULL,
            generation INTEGER NOT NULL,  -- the host's generation of the file
            offset INTEGER NOT NULL,      -- where its lines (a piece: its line) start
            at INTEGER NOT NULL,          -- a piece: where it starts; lines: offset
            line INTEGER NOT NULL,        -- the host's number of its first line
            held_at TEXT NOT NULL,        -- when the central first held it (ISO UTC)
            payload BLOB NOT NULL,        -- the message as it came
            PRIMARY KEY (file_id, generation, offset, at)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE fleet_gaps (
            id INTEGER PRIMARY KEY,
            file_id INTEGER NOT NULL REFERENCES files(id),
            host TEXT NOT NULL,
            remote_path TEXT NOT NULL,    -- the file's path on its host
            generation INTEGER NOT NULL,  -- the host's generation of it
            start INTEGER NOT NULL,       -- the bytes start..end of it never came
            end INTEGER NOT NULL,
            waited_since TEXT NOT NULL,   -- when a message past them was first held
            recorded_at TEXT NOT NULL,    -- when the central gave up waiting (ISO UTC)
            reason TEXT NOT NULL          -- why they are not in the stream, one line
        )
        """
    )


@migrations()
def m050_records_sent_as_uuid(db):
    # sentAsUuid: a prompt Claude Code stored anew (a new uuid, the one it
    # was sent under kept here) is loaded under that uuid when no earlier
    # line has it (resume.sent_as_renames). Read from the line for the rows
    # already in the index; the partial index serves the few that carry it.
    db.execute("ALTER TABLE records ADD COLUMN sent_as_uuid TEXT")
    db.execute(
        "UPDATE records SET sent_as_uuid = json_extract(raw, '$.sentAsUuid') "
        "WHERE instr(raw, '\"sentAsUuid\"') > 0 AND json_valid(raw) "
        "AND json_type(raw, '$.sentAsUuid') = 'text' AND json_extract(raw, '$.sentAsUuid') <> ''")
    db.execute("CREATE INDEX records_sent_as ON records(file_id, sent_as_uuid, line_no) "
               "WHERE sent_as_uuid IS NOT NULL")


@migrations()
def m037_history_tail_digest(db):
    # history_files.tail_digest: the digest of the KB before ingested_offset,
    # as last read: a change there (the same size or larger, the head the
    # same) is a rewrite too, as for transcripts (ingest/sidecars.py). NULL
    # for a file last read before this: its next read judges by its head
    # alone, and stores it.
    db.execute("ALTER TABLE history_files ADD COLUMN tail_digest TEXT")


@migrations()
def m085_search_code_optional(db):
    # search_state.code: whether the trigram index (search_code) is kept
    # too. A default ingest turns search on with the word index alone (code
    # 0: the trigram index costs several times the rest of an ingest);
    # `search --enable` builds it (code 1), as it always did, so an index
    # whose search was enabled before this keeps it (the default 1).
    db.execute("ALTER TABLE search_state ADD COLUMN code INTEGER NOT NULL DEFAULT 1")


@migrations()
def m075_agents(db):
    # files.agent / sessions.agent: whose session file it is: 'claude-code'
    # (every file indexed before this), 'codex' (a Codex CLI rollout) or
    # 'gemini' (a Gemini CLI chat); indexer/transcripts/agents.py.
    db.execute("ALTER TABLE files ADD COLUMN agent TEXT NOT NULL DEFAULT 'claude-code'")
    db.execute("ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT 'claude-code'")
    # The prices of the models they call (agent_prices.json), read as m022
    # reads prices.json; prices.refresh_packaged keeps them current.
    _m022_load_packaged_prices(db.conn, "agent_prices.json")


@migrations()
def m086_records_rows_ahead(db):
    # rowsAheadOfPutBack: a tool_result record naming the rows (a prompt
    # queued while its tool ran, companion records) Claude Code's loader
    # puts back ahead of it (walk.rows_ahead_put_back). Kept only when it is
    # a JSON array; read from the line for the rows already in the index;
    # the partial index serves the few that carry it.
    db.execute("ALTER TABLE records ADD COLUMN rows_ahead TEXT")
    db.execute(
        "UPDATE records SET rows_ahead = json(raw -> '$.rowsAheadOfPutBack') "
        "WHERE instr(raw, '\"rowsAheadOfPutBack\"') > 0 AND json_valid(raw) "
        "AND json_type(raw, '$.rowsAheadOfPutBack') = 'array'")
    db.execute("CREATE INDEX records_rows_ahead ON records(file_id, line_no) "
               "WHERE rows_ahead IS NOT NULL")


@migrations()
def m087_thinking_cache(db):
    # thinking_cache: what each assistant record's thinking blocks are
    # (transcripts/thinking.py, THINKING_CACHE_ROWS_TEMPLATE), kept by derive
    # for main transcripts, so the thinking_faults view reads a small table
    # instead of every assistant record's JSON. thinking_scans: how far each
    # file was read for it (its generation and the last record's
    # byte_offset; -1 none). Filled at the next ingest: the definitions'
    # hash changes with them, and every file is derived again.
    db.execute(
        """
        CREATE TABLE thinking_cache (
            file_id INTEGER NOT NULL,
            record_id INTEGER NOT NULL,
            block INTEGER,                 -- the block's index in message.content; NULL: shown
            kind TEXT NOT NULL,            -- shown | unsigned | truncated | blanked
            model TEXT,
            version TEXT
        )
        """
    )
    db.execute("CREATE INDEX thinking_cache_file ON thinking_cache(file_id, kind)")
    db.execute(
        """
        CREATE TABLE thinking_scans (
            file_id INTEGER PRIMARY KEY,
            generation INTEGER NOT NULL,
            scanned_offset INTEGER NOT NULL
        )
        """
    )


@migrations()
def m088_fork_heads_cache(db):
    # fork_heads_cache: per main transcript, its first user and assistant
    # records and what they say of another session (signals/forks.py,
    # FORK_HEADS_TEMPLATE), kept by derive, so session_forks (the forks
    # listing, the health page, every session page) reads no JSON. Filled
    # at the next ingest: the definitions' hash changes with it.
    db.execute(
        """
        CREATE TABLE fork_heads_cache (
            file_id INTEGER PRIMARY KEY,
            first_user INTEGER,            -- records.id of its first user record, by offset
            first_assistant INTEGER,       -- and of its first assistant record
            forked_from TEXT,              -- the first user record's forkedFrom.sessionId
            assistant_forked_from TEXT,    -- the first assistant record's
            user_session_id TEXT,          -- their sessionId
            assistant_session_id TEXT,
            request_session_id TEXT        -- the first assistant record's requestSessionId
        )
        """
    )


@migrations()
def m089_records_source_tool_assistant(db):
    # sourceToolAssistantUUID: the assistant record a tool_result record
    # answers, kept only when it names another uuid than parentUuid (the one
    # case Claude Code's loader reads it: it recovers a stray result under
    # the record it names, walk.recovered_by_tool_use_id). Read from the
    # line for the rows already in the index, a range of ids at a time; the
    # instr() test spares the JSON of the lines that do not name it.
    db.execute("ALTER TABLE records ADD COLUMN source_tool_assistant_uuid TEXT")
    top = db.execute("SELECT coalesce(max(id), 0) FROM records").fetchone()[0]
    for low in range(0, top, 50_000):
        db.execute(
            "UPDATE records SET source_tool_assistant_uuid = "
            "raw ->> '$.sourceToolAssistantUUID' "
            "WHERE id > ? AND id <= ? AND instr(raw, '\"sourceToolAssistantUUID\"') > 0 "
            "AND json_valid(raw) AND json_type(raw, '$.sourceToolAssistantUUID') = 'text' "
            "AND raw ->> '$.sourceToolAssistantUUID' <> '' "
            "AND raw ->> '$.sourceToolAssistantUUID' IS NOT json_extract(raw, '$.parentUuid')",
            [low, low + 50_000])


@migrations()
def m090_usage_calls(db):
    # usage_calls: one row per API call, the usage view's first step
    # (views.USAGE_CALLS_TEMPLATE) with its file's project folder and host
    # (never changed), kept at ingest (derive.keep_usage_calls),
    # so the usage view, `usage --by`, cost_by_project, cost_by_day and the
    # charts read 175k rows, not 311k lines grouped across files. A call is
    # one across files (message_id + request_id; else message_id within a
    # session; else the line itself): it is picked again from all its
    # copies whenever a line of it is added (usage_scans: how far each
    # file's lines were read, per generation) or deleted (the trigger
    # usage_lines_dropped notes the deleted line's message id, or its id when
    # it has none, in usage_dropped), through records_usage_message (the
    # lines of a message id in every file).
    db.execute(
        """
        CREATE TABLE usage_calls (
            pick INTEGER NOT NULL,         -- output_tokens * 2^32 - record_id of the kept line
            lines INTEGER NOT NULL,        -- the call's lines in every copy
            record_id INTEGER NOT NULL,    -- the kept line (most output tokens, then lowest id)
            file_id INTEGER NOT NULL,      -- and the rest is the kept line's
            session_id TEXT,
            message_id TEXT,
            request_id TEXT,
            model TEXT,
            timestamp TEXT,
            input_tokens INTEGER,
            output_tokens INTEGER,
            cache_read_tokens INTEGER,
            speed TEXT,
            w1h INTEGER NOT NULL,          -- 1-hour cache writes
            w5m INTEGER NOT NULL,          -- 5-minute cache writes
            project TEXT,                  -- the kept line's file's project_dir
            host TEXT NOT NULL             -- and host ('': this machine)
        )
        """
    )
    db.execute("CREATE INDEX usage_calls_message ON usage_calls(message_id)")
    db.execute("CREATE UNIQUE INDEX usage_calls_record ON usage_calls(record_id)")
    db.execute("CREATE INDEX usage_calls_timestamp ON usage_calls(timestamp)")
    db.execute(
        """
        CREATE TABLE usage_scans (
            file_id INTEGER PRIMARY KEY,
            generation INTEGER NOT NULL,
            scanned_offset INTEGER NOT NULL   -- the last line's byte_offset read; -1 none
        )
        """
    )
    db.execute(
        """
        CREATE TABLE usage_dropped (
            message_id TEXT,                  -- a deleted usage line's message id
            record_id INTEGER                 -- its id, when it has no message id
        )
        """
    )
    db.execute(
        """
        CREATE TRIGGER usage_lines_dropped AFTER DELETE ON records WHEN old.has_usage
        BEGIN
            INSERT INTO usage_dropped (message_id, record_id)
            VALUES (old.message_id, CASE WHEN old.message_id IS NULL THEN old.id END);
        END
        """
    )
    # (covering: the usage columns come after raw in a records row, and a
    # lookup by rowid would read every line's raw to reach them)
    db.execute(
        "CREATE INDEX records_usage_message ON records(message_id, request_id, session_id, "
        "file_id, model, timestamp, input_tokens, output_tokens, cache_read_tokens, "
        "cache_creation_tokens, cache_5m_tokens, cache_1h_tokens, speed, has_usage) "
        "WHERE has_usage")
    # Every call as the usage view picked it on the day of this migration.
    db.execute(
        """
        INSERT INTO usage_calls
        SELECT c.*, f.project_dir, coalesce(f.host, '') FROM (
          SELECT max(coalesce(output_tokens, 0) * 4294967296 - id), count(*), id AS record_id,
            file_id, session_id, message_id, request_id, model, timestamp, input_tokens,
            output_tokens, cache_read_tokens, speed, coalesce(cache_1h_tokens, 0),
            CASE WHEN cache_5m_tokens IS NULL AND cache_1h_tokens IS NULL
                 THEN coalesce(cache_creation_tokens, 0) ELSE coalesce(cache_5m_tokens, 0) END
          FROM records INDEXED BY records_usage
          WHERE has_usage AND model IS NOT '<synthetic>'
            AND file_id IN (SELECT id FROM files WHERE kind IN ('main', 'subagent'))
          GROUP BY message_id, request_id, CASE WHEN request_id IS NULL THEN session_id END,
            CASE WHEN message_id IS NULL THEN id END) c
        JOIN files f ON f.id = c.file_id
        """
    )
    db.execute(
        """
        INSERT INTO usage_scans (file_id, generation, scanned_offset)
        SELECT f.id, f.generation,
          coalesce((SELECT max(byte_offset) FROM records r WHERE r.file_id = f.id), -1)
        FROM files f
        """
    )


# m091_usage_call_prices's pricing of the calls usage_calls holds: the
# usage view's as it was then (tests/test_usage_calls.py holds it to the
# view's definition).
M091_PRICE_CALLS_SQL = """
UPDATE usage_calls SET price_model = p.price_model, long_context = p.long_context,
  cost_usd = p.cost_usd
FROM (
WITH call_models AS MATERIALIZED (
  SELECT model, coalesce(
      (SELECT q.model FROM prices q WHERE q.model = m.model),
      CASE WHEN m.model GLOB '*-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]'
           THEN substr(m.model, 1, length(m.model) - 9) END) AS price_model
  FROM (SELECT DISTINCT model FROM usage_calls WHERE model IS NOT NULL) m
),
priced AS (
  SELECT c.record_id, c.input_tokens, c.output_tokens, c.cache_read_tokens, c.w5m,
    c.w1h, p.model AS price_model, p.*,
    coalesce(c.input_tokens, 0) + coalesce(c.cache_read_tokens, 0) + c.w5m + c.w1h
      AS prompt_tokens,
    CASE WHEN c.speed = 'fast' THEN p.fast_multiplier ELSE 1 END AS multiplier
  FROM usage_calls c
    LEFT JOIN call_models m ON m.model = c.model
    LEFT JOIN prices p ON p.model = m.price_model
),
tiered AS (
  SELECT *, (long_context_above IS NOT NULL AND prompt_tokens > long_context_above)
    AS long
  FROM priced
)
SELECT record_id, price_model,
  CASE WHEN price_model IS NOT NULL THEN long END AS long_context,
  multiplier * (
      coalesce(input_tokens, 0) * CASE WHEN long THEN long_input ELSE input END
    + coalesce(output_tokens, 0) * CASE WHEN long THEN long_output ELSE output END
    + coalesce(cache_read_tokens, 0)
        * CASE WHEN long THEN long_cache_read ELSE cache_read END
    + w5m * CASE WHEN long THEN long_cache_write_5m ELSE cache_write_5m END
    + w1h * CASE WHEN long THEN long_cache_write_1h ELSE cache_write_1h END
  ) / 1e6 AS cost_usd
FROM tiered
) p WHERE usage_calls.record_id = p.record_id
"""


@migrations()
def m091_usage_call_prices(db):
    # usage_calls keeps each call's price (views.USAGE_SQL reads it): the
    # prices row it is priced by, whether the long-context rates apply, its
    # cost. Priced when a call is picked (derive.keep_usage_calls) and all
    # again after the prices table changed: prices.store does it at once;
    # any other change to prices is noted by these triggers in index_meta
    # ('usage_prices_stale') and the next ingest prices every call again.
    for column, kind in (("price_model", "TEXT"), ("long_context", "INTEGER"),
                         ("cost_usd", "REAL")):
        db.execute(f"ALTER TABLE usage_calls ADD COLUMN {column} {kind}")
    for event in ("INSERT", "UPDATE", "DELETE"):
        db.execute(
            f"""
            CREATE TRIGGER prices_changed_{event.lower()} AFTER {event} ON prices
            BEGIN
                INSERT OR REPLACE INTO index_meta (key, value) VALUES ('usage_prices_stale', '1');
            END
            """
        )
    # The calls the table holds, priced as the usage view priced them
    # (views.USAGE_PRICING_TEMPLATE as of this migration), so that an index
    # upgraded and served before its next ingest shows their costs.
    db.execute(M091_PRICE_CALLS_SQL)
    # The calls by time, covering what the cost-by-day chart reads (day,
    # model, cost): the chart over every call read each call's row through
    # the index (718 -> 154 ms on a 1M-record index).
    db.execute("DROP INDEX usage_calls_timestamp")
    db.execute("CREATE INDEX usage_calls_timestamp ON usage_calls(timestamp, model, cost_usd)")


# verdict_facts_cache's rows for every main transcript, as
# signals/verdict.py's VERDICT_FACTS_TEMPLATE computed them at this
# migration (its own copy: a migration never runs code that later changes;
# the api_error splices read orphans_cache, not the orphans view, which a
# new index has not made yet when its migrations run).
M092_VERDICT_FACTS_SQL = r"""
INSERT INTO verdict_facts_cache (file_id, last_assistant_uuid, last_assistant_message_id, named_uuid, named_message_id, named_synthetic, refused, writer_version, wedge, splices, spliced_records, graft_height, truncation, grafted_records, nothing_to_cut, wedge_cut, tail_id, named_id, top_height, top_record_id, scanned_offset, first_party)
SELECT x.file_id, t.uuid AS last_assistant_uuid, t.message_id AS last_assistant_message_id,
  n.uuid AS named_uuid, n.message_id AS named_message_id,
  coalesce(n.type = 'assistant' AND n.model = '<synthetic>', 0) AS named_synthetic,
  coalesce(CASE WHEN (n.message_id IS NOT NULL AND n.message_id NOT LIKE 'msg\_%' ESCAPE '\') THEN (n.type = 'assistant' AND n.model = '<synthetic>' OR x.first_party) END, 0) AS refused,
  x.writer_version, x.wedge, x.splices, x.spliced_records, x.graft_height,
  x.truncation, x.grafted_records, x.nothing_to_cut,
  CASE WHEN x.wedge IS NOT NULL THEN EXISTS (
  SELECT 1 FROM leaf_ancestry_cache k JOIN records t ON t.id = k.record_id
  WHERE k.file_id = x.file_id AND k.rule = 'resume' AND t.type = 'assistant'
    AND NOT (t.type = 'assistant' AND t.model = '<synthetic>') AND t.message_id IS NOT json_extract(x.wedge, '$.message_id')) END AS wedge_cut,
  x.tail_id, x.named_id, x.top_height, x.top_record_id, x.scanned_offset, x.first_party
FROM (
  SELECT DISTINCT f.id AS file_id,
    coalesce((SELECT k.record_id FROM leaf_ancestry_cache k JOIN records r ON r.id = k.record_id
     WHERE k.file_id = f.id AND k.rule = 'resume' AND k.height > -1
       AND r.type = 'assistant'
     ORDER BY k.height DESC LIMIT 1), NULL) AS tail_id,
    coalesce((SELECT k.record_id FROM leaf_ancestry_cache k JOIN records r ON r.id = k.record_id
     WHERE k.file_id = f.id AND k.rule = 'resume' AND k.height > -1
       AND r.type = 'assistant' AND NOT coalesce(r.is_api_error, 0) AND (coalesce(r.request_id, '') <> '' OR (r.message_id LIKE 'msg\_%' ESCAPE '\' AND r.model IS NOT '<synthetic>'))
     ORDER BY k.height DESC LIMIT 1), NULL) AS named_id,
    1 AND NOT EXISTS (
  SELECT 1 FROM leaf_ancestry_cache k JOIN records t ON t.id = k.record_id
  WHERE k.file_id = f.id AND k.rule = 'resume' AND k.height > -1 AND t.type = 'assistant'
    AND NOT (t.type = 'assistant' AND t.model = '<synthetic>'))
      AS nothing_to_cut,
    coalesce((SELECT v.version FROM records v
  WHERE v.file_id = f.id AND v.version IS NOT NULL AND v.byte_offset > -1 ORDER BY v.byte_offset DESC LIMIT 1), NULL)
      AS writer_version,
    (SELECT json_object('fault', lf.fault, 'uuid', lf.uuid, 'block', lf.block,
                        'message_id', lf.message_id, 'record_id', lf.record_id)
     FROM (SELECT lf.* FROM (
WITH displayed AS NOT MATERIALIZED (
  SELECT d.file_id, d.model, d.version FROM records d, json_each(CASE WHEN d.type = 'assistant' AND instr(d.raw, 'thinking') > 0 AND json_valid(d.raw) AND json_type(d.raw, '$.message.content') = 'array' THEN d.raw -> '$.message.content' END) x
  WHERE d.file_id = f.id AND x.type = 'object' AND (x.value ->> '$.type' = 'thinking' AND coalesce(CASE WHEN json_type(x.value, '$.thinking') = 'text' THEN x.value ->> '$.thinking' END, '') <> '' AND coalesce(CASE WHEN json_type(x.value, '$.signature') = 'text' THEN x.value ->> '$.signature' END, '') <> '')
)
SELECT * FROM (
  SELECT r.file_id, r.id AS record_id, r.line_no, r.uuid, r.message_id, r.model, r.version,
    CAST(b.key AS INTEGER) AS block,
    CASE WHEN (CASE WHEN b.type = 'object' THEN b.value END) ->> '$.type' = 'redacted_thinking' THEN CASE WHEN coalesce(CASE WHEN json_type((CASE WHEN b.type = 'object' THEN b.value END), '$.data') = 'text' THEN (CASE WHEN b.type = 'object' THEN b.value END) ->> '$.data' END, '') = '' THEN 'unsigned' END WHEN (CASE WHEN b.type = 'object' THEN b.value END) ->> '$.type' IS NOT 'thinking' THEN NULL WHEN coalesce(CASE WHEN json_type((CASE WHEN b.type = 'object' THEN b.value END), '$.signature') = 'text' THEN (CASE WHEN b.type = 'object' THEN b.value END) ->> '$.signature' END, '') = '' THEN 'unsigned' WHEN length(coalesce(CASE WHEN json_type((CASE WHEN b.type = 'object' THEN b.value END), '$.signature') = 'text' THEN (CASE WHEN b.type = 'object' THEN b.value END) ->> '$.signature' END, '')) < 184 OR coalesce(CASE WHEN json_type((CASE WHEN b.type = 'object' THEN b.value END), '$.signature') = 'text' THEN (CASE WHEN b.type = 'object' THEN b.value END) ->> '$.signature' END, '') GLOB '*[^A-Za-z0-9+/=]*' THEN 'truncated' WHEN coalesce(CASE WHEN json_type((CASE WHEN b.type = 'object' THEN b.value END), '$.thinking') = 'text' THEN (CASE WHEN b.type = 'object' THEN b.value END) ->> '$.thinking' END, '') = '' AND EXISTS (
      SELECT 1 FROM displayed p WHERE p.file_id = r.file_id AND p.model IS r.model
        AND p.version IS r.version) THEN 'blanked' END AS fault
  FROM records r, json_each(CASE WHEN r.type = 'assistant' AND instr(r.raw, 'thinking') > 0 AND json_valid(r.raw) AND json_type(r.raw, '$.message.content') = 'array' THEN r.raw -> '$.message.content' END) b
  WHERE r.file_id = f.id AND r.message_id = (SELECT CASE WHEN r.type = 'assistant'
    AND NOT (r.type = 'assistant' AND r.model = '<synthetic>') THEN r.message_id END
  FROM leaf_ancestry_cache k JOIN records r ON r.id = k.record_id
  WHERE k.file_id = f.id AND k.rule = 'resume' AND r.type IN ('user', 'assistant')
    AND NOT (r.type = 'assistant' AND coalesce(r.is_api_error, 0))
  ORDER BY k.height DESC LIMIT 1) AND (substr(r.message_id, 1, 4) = 'msg_' AND instr(r.model, 'claude') > 0)) WHERE fault IS NOT NULL) lf
  CROSS JOIN leaf_ancestry_cache lk ON lk.file_id = lf.file_id AND lk.rule = 'resume'
    AND lk.record_id = lf.record_id
  ORDER BY CASE lf.fault WHEN 'blanked' THEN 2001161 WHEN 'truncated' THEN 2001169 WHEN 'unsigned' THEN 2001183 END DESC, lk.height,
    lf.block) lf LIMIT 1) AS wedge,
    (SELECT count(*) FROM (SELECT o.file_id, o.session_id, child.uuid AS api_error_uuid,
       o.branch_point_uuid,
       count(*) AS orphaned_records,
       count(DISTINCT CASE WHEN o.type = 'assistant'
                           THEN coalesce(o.message_id, o.uuid) END)
         AS orphaned_assistant_messages,
       min(o.timestamp) AS first_orphan_at,
       max(o.timestamp) AS last_orphan_at,
       round((julianday(max(o.timestamp)) - julianday(min(o.timestamp))) * 1440, 1)
         AS minutes_spanned,
       NULL AS host
FROM orphans_cache o
JOIN leaf_ancestry_cache bp ON bp.file_id = o.file_id AND bp.rule = 'resume'
  AND bp.uuid = o.branch_point_uuid
JOIN leaf_ancestry_cache child ON child.file_id = o.file_id AND child.rule = 'resume'
  AND child.height = bp.height + 1
WHERE o.cause = 'api_error_splice' AND o.file_id = f.id
GROUP BY o.file_id, o.branch_point_uuid)) AS splices,
    (SELECT sum(orphaned_records) FROM (SELECT o.file_id, o.session_id, child.uuid AS api_error_uuid,
       o.branch_point_uuid,
       count(*) AS orphaned_records,
       count(DISTINCT CASE WHEN o.type = 'assistant'
                           THEN coalesce(o.message_id, o.uuid) END)
         AS orphaned_assistant_messages,
       min(o.timestamp) AS first_orphan_at,
       max(o.timestamp) AS last_orphan_at,
       round((julianday(max(o.timestamp)) - julianday(min(o.timestamp))) * 1440, 1)
         AS minutes_spanned,
       NULL AS host
FROM orphans_cache o
JOIN leaf_ancestry_cache bp ON bp.file_id = o.file_id AND bp.rule = 'resume'
  AND bp.uuid = o.branch_point_uuid
JOIN leaf_ancestry_cache child ON child.file_id = o.file_id AND child.rule = 'resume'
  AND child.height = bp.height + 1
WHERE o.cause = 'api_error_splice' AND o.file_id = f.id
GROUP BY o.file_id, o.branch_point_uuid))
      AS spliced_records,
    (SELECT min(ga.height) FROM orphans_cache go
  CROSS JOIN leaf_ancestry_cache ga ON ga.file_id = go.file_id AND ga.rule = 'resume'
    AND ga.uuid = go.branch_point_uuid
  WHERE go.file_id = f.id AND go.cause = 'late_graft'
    AND NOT EXISTS (SELECT 1 FROM leaf_ancestry_cache gk JOIN records gr ON gr.id = gk.record_id
                    WHERE gk.file_id = go.file_id AND gk.rule = 'resume'
                      AND gk.height > ga.height AND gr.type = 'user'
                      AND NOT gr.is_meta AND NOT gr.is_tool_result)) AS graft_height,
    (SELECT CASE
    WHEN unreached > 0 THEN json_object('cause', 'unreached_after_compaction',
      'lost', unreached, 'boundary', uuid, 'at', timestamp)
    WHEN finding = 'segment_does_not_reach_head' AND not_relinked > 0 THEN json_object(
      'cause', 'segment_not_relinked', 'lost', not_relinked, 'boundary', uuid, 'at', timestamp,
      'head', head, 'tail', tail) END
  FROM (SELECT lb.uuid, lb.timestamp, (CASE WHEN EXISTS (SELECT 1 FROM leaf_ancestry_cache k
    WHERE k.file_id = lb.file_id AND k.rule = 'resume' AND k.uuid = lb.uuid) THEN 0
  ELSE (SELECT count(*) FROM (SELECT o.uuid, o.line_no FROM orphans_cache o
  WHERE o.file_id = lb.file_id AND NOT o.restored AND o.cause IN ('unlinked', 'dangling_parent')
    AND EXISTS (SELECT 1 FROM records s WHERE s.file_id = lb.file_id AND s.uuid = o.uuid
    AND +s.byte_offset > lb.byte_offset AND (NULL IS NULL OR +s.byte_offset < NULL)
    AND s.type IN ('user', 'assistant') AND NOT s.is_sidechain
    AND NOT EXISTS (SELECT 1 FROM records e WHERE e.file_id = s.file_id AND e.uuid = s.uuid
                    AND e.line_no < lb.line_no))
    AND NOT EXISTS (SELECT 1 FROM leaf_ancestry_cache k WHERE k.file_id = lb.file_id
                    AND k.rule = 'resume' AND k.uuid = lb.uuid))) END) AS unreached,
          CASE
  WHEN json_type(lb.raw, '$.compactMetadata.preservedMessages') = 'object' THEN CASE WHEN EXISTS (
      SELECT 1 FROM json_each(lb.raw, '$.compactMetadata.preservedMessages.uuids') l
      WHERE NOT EXISTS (SELECT 1 FROM records q WHERE q.file_id = lb.file_id AND q.uuid = l.value)) THEN 'listed_missing' END
  WHEN json_type(lb.raw, '$.compactMetadata.preservedSegment') IS NOT 'object' THEN NULL
  WHEN NOT EXISTS (SELECT 1 FROM records q WHERE q.file_id = lb.file_id AND q.uuid = json_extract(lb.raw, '$.compactMetadata.preservedSegment.headUuid'))
    THEN 'head_missing'
  WHEN NOT EXISTS (SELECT 1 FROM records q WHERE q.file_id = lb.file_id AND q.uuid = json_extract(lb.raw, '$.compactMetadata.preservedSegment.tailUuid'))
    THEN 'tail_missing'
  WHEN NOT EXISTS (SELECT 1 FROM records q WHERE q.file_id = lb.file_id AND q.uuid = json_extract(lb.raw, '$.compactMetadata.preservedSegment.anchorUuid'))
    THEN 'anchor_missing'
  WHEN NOT EXISTS (WITH RECURSIVE walk(uuid, steps) AS (
    SELECT json_extract(lb.raw, '$.compactMetadata.preservedSegment.tailUuid'), 0
    UNION ALL
    SELECT (SELECT p.parent_uuid FROM records p WHERE p.file_id = lb.file_id
              AND p.uuid = w.uuid ORDER BY p.line_no DESC LIMIT 1), w.steps + 1
    FROM walk w
    WHERE w.uuid IS NOT NULL AND w.uuid IS NOT json_extract(lb.raw, '$.compactMetadata.preservedSegment.headUuid')
      AND EXISTS (SELECT 1 FROM records p WHERE p.file_id = lb.file_id AND p.uuid = w.uuid)
      AND w.steps <= (SELECT line_count FROM files x WHERE x.id = lb.file_id))
      SELECT 1 FROM walk WHERE uuid = json_extract(lb.raw, '$.compactMetadata.preservedSegment.headUuid'))
    THEN 'segment_does_not_reach_head'
  WHEN NOT EXISTS (WITH RECURSIVE up(uuid, type, steps) AS (
    SELECT lb.logical_parent_uuid, (SELECT p.type FROM records p WHERE p.file_id = lb.file_id
      AND p.uuid = lb.logical_parent_uuid ORDER BY p.line_no DESC LIMIT 1), 0
    UNION ALL
    SELECT p.parent_uuid, (SELECT q.type FROM records q WHERE q.file_id = lb.file_id
      AND q.uuid = p.parent_uuid ORDER BY q.line_no DESC LIMIT 1), u.steps + 1
    FROM up u JOIN records p ON p.id = (SELECT max(x.id) FROM records x
      WHERE x.file_id = lb.file_id AND x.uuid = u.uuid)
    WHERE u.type NOT IN ('user', 'assistant')
      AND u.steps <= (SELECT line_count FROM files f WHERE f.id = lb.file_id))
      SELECT 1 FROM up WHERE uuid = json_extract(lb.raw, '$.compactMetadata.preservedSegment.tailUuid'))
    THEN 'tail_not_logical_parent'
  END AS finding,
          (SELECT count(DISTINCT w.uuid) FROM (WITH RECURSIVE walk(uuid, steps) AS (
    SELECT json_extract(lb.raw, '$.compactMetadata.preservedSegment.tailUuid'), 0
    UNION ALL
    SELECT (SELECT p.parent_uuid FROM records p WHERE p.file_id = lb.file_id
              AND p.uuid = w.uuid ORDER BY p.line_no DESC LIMIT 1), w.steps + 1
    FROM walk w
    WHERE w.uuid IS NOT NULL AND w.uuid IS NOT json_extract(lb.raw, '$.compactMetadata.preservedSegment.headUuid')
      AND EXISTS (SELECT 1 FROM records p WHERE p.file_id = lb.file_id AND p.uuid = w.uuid)
      AND w.steps <= (SELECT line_count FROM files x WHERE x.id = lb.file_id)) SELECT uuid FROM walk) w
  JOIN records r ON r.file_id = lb.file_id AND r.uuid = w.uuid
  WHERE r.type IN ('user', 'assistant') AND NOT (EXISTS (SELECT 1 FROM leaf_ancestry_cache k WHERE k.file_id = lb.file_id
    AND k.rule = 'resume' AND k.uuid = w.uuid)
  OR EXISTS (SELECT 1 FROM orphans_cache o WHERE o.file_id = lb.file_id AND o.uuid = w.uuid
    AND o.restored))) AS not_relinked,
          json_extract(lb.raw, '$.compactMetadata.preservedSegment.headUuid') AS head,
          json_extract(lb.raw, '$.compactMetadata.preservedSegment.tailUuid') AS tail
        FROM records lb WHERE lb.file_id = f.id AND lb.type = 'system' AND lb.subtype = 'compact_boundary'
  AND NOT lb.is_sidechain AND NOT EXISTS (
    SELECT 1 FROM records lbe WHERE lbe.file_id = lb.file_id AND lbe.uuid = lb.uuid
      AND lbe.line_no < lb.line_no)
        ORDER BY lb.line_no DESC LIMIT 1)) AS truncation,
    (SELECT count(*) FROM orphans_cache x WHERE x.file_id = f.id
       AND x.cause = 'late_graft') AS grafted_records,
    (SELECT max(k.height) FROM leaf_ancestry_cache k
     WHERE k.file_id = f.id AND k.rule = 'resume') AS top_height,
    (SELECT k.record_id FROM leaf_ancestry_cache k WHERE k.file_id = f.id AND k.rule = 'resume'
     ORDER BY k.height DESC LIMIT 1) AS top_record_id,
    (SELECT max(byte_offset) FROM records WHERE file_id = f.id) AS scanned_offset,
    0 OR EXISTS (SELECT 1 FROM records fp WHERE fp.file_id = f.id AND fp.byte_offset > -1 AND fp.type = 'assistant' AND fp.message_id LIKE 'msg\_%' ESCAPE '\' AND fp.model IS NOT '<synthetic>')
      AS first_party
  FROM files f  WHERE f.kind = 'main' AND 1
) x
LEFT JOIN records t ON t.id = x.tail_id
LEFT JOIN records n ON n.id = x.named_id
""".strip()


@migrations()
def m092_verdict_facts(db):
    # verdict_facts_cache: per main transcript, the verdict's facts that read
    # only the file's records and its caches (signals/verdict.py,
    # VERDICT_FACTS_TEMPLATE), kept by derive (derive.keep_sql_caches), so
    # that session_verdicts (the health page's verdict rows, the verdicts
    # chart, sessions, show) reads a row per file instead of walking each
    # file's chain. Filled here with this migration's copy of the
    # definition, so an index upgraded and served before its next ingest
    # gives its verdicts; the next ingest fills it again from the definition
    # (index_meta.verdict_facts_hash is not stamped here).
    db.execute(
        """
        CREATE TABLE verdict_facts_cache (
            file_id INTEGER PRIMARY KEY,
            last_assistant_uuid TEXT,       -- the last assistant record on the resume chain
            last_assistant_message_id TEXT,
            named_uuid TEXT,                -- the record a resume names as previous_message_id
            named_message_id TEXT,
            named_synthetic INTEGER,        -- 1: it is a synthetic placeholder
            refused INTEGER,                -- 1: the API refuses its id
            writer_version TEXT,            -- the Claude Code that last wrote the file
            wedge TEXT,                     -- JSON: the refused thinking block of the latest message
            splices INTEGER,                -- api_error_splices of the file
            spliced_records INTEGER,        -- the records they leave off the chain
            graft_height INTEGER,           -- where a repair cuts a late graft back to
            truncation TEXT,                -- JSON: what a resume loses after the last compaction
            grafted_records INTEGER,        -- late_graft orphans
            nothing_to_cut INTEGER,         -- 1: no real assistant message on the chain
            wedge_cut INTEGER,              -- 1: a real assistant message before the wedge's
            tail_id INTEGER,                -- records.id of the last assistant on the chain
            named_id INTEGER,               -- and of the record named as previous_message_id
            top_height INTEGER,             -- the chain's top: its height and record
            top_record_id INTEGER,
            scanned_offset INTEGER,         -- byte_offset of the file's last record
            first_party INTEGER             -- 1: the file holds a reply of Anthropic's API
        )
        """
    )
    db.execute(M092_VERDICT_FACTS_SQL)


@migrations()
def m093_orphans_by_cause(db):
    # The orphans of a cause by time, covering what the health page's
    # orphan rows read (session, time, type, line: health.CHECK_SQL over
    # `orphans WHERE cause = ?`): they read each orphan's row through
    # orphans_cache_cause (39,225 parallel tool branches on a 1M-record
    # index: about 0.1 s). A query by file and cause keeps orphans_cache_cause
    # (two equalities against one; EXPLAIN QUERY PLAN checked for every
    # query that reads orphans_cache, tests/test_verdict_facts.py).
    db.execute("CREATE INDEX orphans_cache_cause_time "
               "ON orphans_cache(cause, timestamp, session_id, type, line_no)")


@migrations()
def m094_usage_day_sums(db):
    # The API calls of usage_calls summed per UTC day (their time's first 10
    # characters, NULL for none), project folder and model: the cost pages
    # (usage --by day|model|project, cost_by_project, cost_by_day,
    # chart_cost_by_day: signals/usage_sums.py) read a few thousand rows,
    # not every call. Kept by derive.keep_usage_calls (the calls it picks
    # again taken out, then added once picked and priced) and refilled
    # whenever every call is priced again. Cost in whole picodollars (each
    # call's cost_usd * 1e12 rounded), so that adding and taking calls away
    # keeps each row exactly the sum of its calls.
    db.execute(
        """
        CREATE TABLE usage_day_sums (
            day TEXT,                                  -- substr(timestamp, 1, 10)
            project TEXT,
            model TEXT,
            calls INTEGER NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cache_read_tokens INTEGER NOT NULL,
            cache_write_5m_tokens INTEGER NOT NULL,
            cache_write_1h_tokens INTEGER NOT NULL,
            cost_pico INTEGER NOT NULL,                -- priced calls' cost, USD * 1e12
            unpriced_calls INTEGER NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX usage_day_sums_key ON usage_day_sums(day, project, model)")
    # the rows left with no call, which keep_usage_calls deletes: found
    # without reading every row (there is one per day, project and model)
    db.execute("CREATE INDEX usage_day_sums_empty ON usage_day_sums(calls) WHERE calls = 0")
    db.execute(
        """
        INSERT INTO usage_day_sums
        SELECT substr(timestamp, 1, 10), project, model, count(*),
          sum(coalesce(input_tokens, 0)), sum(coalesce(output_tokens, 0)),
          sum(coalesce(cache_read_tokens, 0)), sum(w5m), sum(w1h),
          sum(coalesce(CAST(round(cost_usd * 1e12) AS INTEGER), 0)), sum(cost_usd IS NULL)
        FROM usage_calls GROUP BY 1, 2, 3
        """
    )
    # The usage table page's facets (model, project, speed, long_context:
    # metadata.py) each count the calls by one column: through an index of
    # it, not a scan and sort of every call (55-75 ms each on the bench
    # index). Every other query that reads usage_calls was checked with
    # EXPLAIN QUERY PLAN (tests/test_usage_day_sums.py holds the cost pages
    # off them: before the sums, cost_by_project since a time read the
    # project index, 18 -> 122 ms).
    for column in ("model", "project", "speed", "long_context"):
        db.execute(f"CREATE INDEX usage_calls_{column} ON usage_calls({column})")


@migrations()
def m095_search_compact_key(db):
    # search_text.key becomes (timestamp in seconds << 12) | (record_id &
    # 0xFFF), was (ms << 20) | (record_id & 0xFFFFF): the FTS5 indexes store
    # the deltas between keys, which these take from 5-6 bytes to 2-3 (the
    # word index 16.4 -> 12.0 MB on the 100 MB bench corpus). Each text's
    # new key from its old one (the time: key >> 20 ms), a clash moved up to
    # the next free key as search.catch_up_in does; then both FTS indexes
    # rebuilt from search_text (the trigram index only while it is kept).
    if db.execute("SELECT 1 FROM search_text LIMIT 1").fetchone() is None:
        return
    rows = db.execute(
        "SELECT record_id, (((key >> 20) / 1000) << 12) | (record_id & 4095) AS base "
        "FROM search_text ORDER BY base, record_id").fetchall()
    new_keys, last = [], -1
    for record_id, base in rows:
        last = max(base, last + 1)
        new_keys.append((record_id, last))
    db.execute("CREATE TEMP TABLE m095_keys (record_id INTEGER PRIMARY KEY, key INTEGER NOT NULL)")
    db.conn.executemany("INSERT INTO temp.m095_keys (record_id, key) VALUES (?, ?)", new_keys)
    # (all keys negative first: no new key meets an old one)
    db.execute("UPDATE search_text SET key = -1 - key")
    db.execute("UPDATE search_text SET key = (SELECT k.key FROM temp.m095_keys k "
               "WHERE k.record_id = search_text.record_id)")
    db.execute("DROP TABLE temp.m095_keys")
    db.execute("INSERT INTO search_words (search_words) VALUES ('rebuild')")
    if db.execute("SELECT code FROM search_state").fetchone() == (1,):
        db.execute("INSERT INTO search_code (search_code) VALUES ('rebuild')")


@migrations()
def m097_sent_names_cache(db):
    # sent_names_cache: the prompts stored anew that Claude Code's loader
    # names by their sentAsUuid beside another line of their own uuid
    # (definitions.SENT_NAMES_TEMPLATE, resume.loader_names), kept by derive
    # (keep_sql_caches) for the resume definitions to read by record and by
    # name. Filled at the next ingest: the definitions' hash changes with it.
    db.execute(
        """
        CREATE TABLE sent_names_cache (
            record_id INTEGER PRIMARY KEY, -- records.id of the prompt stored anew
            file_id INTEGER NOT NULL,
            line_no INTEGER NOT NULL,
            name TEXT NOT NULL             -- its sentAsUuid: the key the loader keeps it under
        )
        """
    )
    db.execute("CREATE INDEX sent_names_by_name ON sent_names_cache(file_id, name, line_no)")
