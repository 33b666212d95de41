"""Full-text search over what was said in the transcripts (FTS5).

Search is on in every index ``session-index ingest`` makes (``--no-search``:
off) with the word index alone (``enable(db, code=False)``), and with the
trigram index too once ``session-index search --enable`` runs (the
trigram index costs a cold ingest several times the CPU and disk of the
rest). The tables are in every index (migrations.m021_search), empty until
then, so SQL naming them runs anywhere. Once enabled:

- ``search_text`` holds one row per record that carries text: user prompts,
  assistant text and thinking, tool names and tool inputs, tool results (each
  tool input and each tool result cut at ``TOOL_TEXT_CHARS`` characters, a
  record's whole text at ``RECORD_TEXT_CHARS``), system messages, summaries
  and titles. Its key orders the rows by time (``sort_key``), so "newest
  first" walks an FTS index backwards and stops at the limit, whatever the
  number of hits.
- Two external-content FTS5 tables index that text: ``search_words``
  (``porter unicode61``: words, stemmed) and ``search_code`` (``trigram``:
  any substring of 3 characters or more, for code identifiers and CJK text,
  which unicode61 does not segment); ``search_words`` also indexes each
  row's session id, in a column of its own. ``search_state.code`` says
  whether ``search_code`` is kept; without it a code term is matched as a
  substring of the stored text (``FALLBACK_TEMPLATE``).
- ``catch_up`` indexes the records above the high-water mark in
  ``search_state``; every writer calls it after its commit (ingest, and so
  ``ingest --watch``, ``serve --watch``, ``check``'s fresh ingest, repair's
  re-ingest) or inside its transaction (the session store's append).
- A trigger on ``records`` removes a deleted record's text (a rewrite, a
  taken-back unterminated line, a store delete): no stale hits. When the
  deleted record was at or below the mark, the mark goes back below it, so a
  new record that reuses its rowid is indexed too.

Queries (``compile_query``) never reach FTS5 as written: each term is quoted.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Optional

import msgspec

from indexer.index.clock import utcnow
from indexer.sql import dict_rows, write_lock
from indexer.signals import projects
from indexer.transcripts import agents, codex, gemini
from indexer.index.search_state import behind, state

# Bounds on the text indexed per record (characters).
TOOL_TEXT_CHARS = 4_000
RECORD_TEXT_CHARS = 64_000
# Records per catch-up transaction: the write lock is held about a second.
BATCH = 2_000
# At most this many records an ingest transaction indexes before its commit
# (files._Writer): one transaction's records (TXN_BYTES of lines), not a
# backlog (search just enabled on a big index), which the batched catch-up
# after the run does.
IN_TRANSACTION_BATCH = 4 * BATCH
FTS_HASH_BYTES = 16 << 20
# search_text.key = (timestamp in seconds << KEY_SHIFT) | (records.id & KEY_MASK):
# time-ordered, unique (a clash moves the key up one). Seconds, not ms, and
# 12 low bits, not 20 (before m095_search_compact_key): the FTS5 doclists
# store the deltas between keys, and these keys take them from 5-6 bytes to
# 2-3 (the word index 16.4 MB -> 12.0 MB on the 100 MB bench corpus).
# --since stays exact to the ms (SINCE_SQL checks the boundary second).
KEY_SHIFT = 12
KEY_MASK = (1 << KEY_SHIFT) - 1
MAX_SECONDS = (1 << (63 - KEY_SHIFT)) - 1
# Snippet marks around each match (control characters: indexed text never
# holds them, see _clean), and the snippet's length in tokens (a trigram
# index's token is one character).
MARK_START, MARK_END = "\x02", "\x03"
SNIPPET_TOKENS = {"words": 16, "code": 64}
# The record types whose text is indexed (Claude Code's, then the other
# agents': agents.py).
CLAUDE_CODE_TEXT_TYPES = ("user", "assistant", "system", "summary", "custom-title", "ai-title")
AGENT_TEXT_TYPES = codex.TEXT_TYPES + gemini.TEXT_TYPES
TEXT_TYPES = CLAUDE_CODE_TEXT_TYPES + AGENT_TEXT_TYPES


class SearchNotEnabled(Exception):
    """Search is not enabled on the index: ``session-index search --enable``."""


class EmptyQuery(ValueError):
    """The query has nothing to search for."""


class QueryRefused(ValueError):
    """The query is longer, or has more terms, than a search takes
    (MAX_QUERY_CHARS, MAX_QUERY_TERMS)."""


# Bounds on one query: each term is a walk of an FTS5 index, and a query of
# thousands of words (or of 10,000 characters) held a web page's search for
# a minute on a 1M-record index (issue 29).
MAX_QUERY_CHARS = 1_000
MAX_QUERY_TERMS = 32


# --- turning it on and off -------------------------------------------------------

ENABLE_SQL = (
    # A deleted record takes its text out of both indexes (the trigram
    # index's only while it is kept); a mark at or past it goes back below it
    # (its rowid may be reused by the next insert). (Made again at each
    # enable: an index enabled before search_state.code has the trigger
    # without its condition, right while code is 1.)
    "DROP TRIGGER IF EXISTS search_forget_record",
    """CREATE TRIGGER search_forget_record AFTER DELETE ON records BEGIN
        INSERT INTO search_words (search_words, rowid, text, session_id)
          SELECT 'delete', key, text, session_id FROM search_text WHERE record_id = OLD.id;
        INSERT INTO search_code (search_code, rowid, text)
          SELECT 'delete', key, text FROM search_text
          WHERE record_id = OLD.id AND (SELECT code FROM search_state) = 1;
        DELETE FROM search_text WHERE record_id = OLD.id;
        UPDATE search_state SET high_water = OLD.id - 1 WHERE high_water >= OLD.id;
    END""",
    "INSERT OR IGNORE INTO search_state (id, high_water, enabled_at, code) "
    "VALUES (1, 0, :now, :code)",
    # A catch-up transaction's postings (a trigram index makes many) flushed
    # once, at its commit, rather than at every 1 MB (FTS5's default).
    f"INSERT INTO search_words (search_words, rank) VALUES ('hashsize', {FTS_HASH_BYTES})",
    f"INSERT INTO search_code (search_code, rank) VALUES ('hashsize', {FTS_HASH_BYTES})",
)
# Is the trigram index kept? (None: search is off.)
CODE_KEPT_SQL = "SELECT code FROM search_state"
# search --enable on an index searched by words alone: the trigram index
# made from the text already stored, then kept.
ADD_CODE_SQL = (
    "INSERT INTO search_code (rowid, text) SELECT key, text FROM search_text",
    "UPDATE search_state SET code = 1",
)
# After search --enable built an index from the stored records: its
# segments merged into one, a step at a time (FTS5's 'merge' with a negative
# page count merges segments of any level; a step that changes fewer than 2
# rows did nothing). The catch-up's one segment per transaction left 11 in
# a 1M-record index, and a walk newest first reads each: "def build_" took
# 12.6 ms on it, 1.6 ms merged (the merge: 26 s for both indexes there).
MERGE_PAGES = 2_000
MERGE_SQL = {table: f"INSERT INTO {table} ({table}, rank) VALUES ('merge', -{MERGE_PAGES})"
             for table in ("search_words", "search_code")}
DISABLE_SQL = (
    "DROP TRIGGER IF EXISTS search_forget_record",
    "INSERT INTO search_words (search_words) VALUES ('delete-all')",
    "INSERT INTO search_code (search_code) VALUES ('delete-all')",
    "DELETE FROM search_text",
    "DELETE FROM search_state",
)

# --- catching up ----------------------------------------------------------------

# The next records above the mark that carry text and are not indexed yet
# (one below the mark again after a delete may be), each under the session
# of the file it is in: a fork's copied records keep their parent's
# sessionId (anthropics/claude-code#95234) and are found with the fork.
# The line as bytes (its UTF-8), which the decoders read as they are: a str
# was made of each line only to be read back as UTF-8.
PENDING_SQL = f"""
SELECT r.id, r.file_id,
  coalesce((SELECT f.session_id FROM files f WHERE f.id = r.file_id), r.session_id),
  r.type, r.timestamp, CAST(r.raw AS BLOB) FROM records r
WHERE r.id > :high_water
  AND r.type IN ({", ".join(f"'{t}'" for t in TEXT_TYPES)})
  AND NOT EXISTS (SELECT 1 FROM search_text s WHERE s.record_id = r.id)
ORDER BY r.id LIMIT :batch
""".strip()
# Records with text above the mark: what a catch-up has to do (progress).
PENDING_COUNT_SQL = f"""
SELECT count(*) FROM records r WHERE r.id > :high_water
  AND r.type IN ({", ".join(f"'{t}'" for t in TEXT_TYPES)})
""".strip()
INSERT_TEXT_SQL = """
INSERT OR IGNORE INTO search_text (key, record_id, file_id, session_id, type, timestamp, text)
VALUES (?, ?, ?, ?, ?, ?, ?)
""".strip()
KEY_TAKEN_SQL = "SELECT 1 FROM search_text WHERE key = ?"
TEXT_STORED_SQL = "SELECT 1 FROM search_text WHERE key = ? AND record_id = ?"
INDEX_WORDS_SQL = "INSERT INTO search_words (rowid, text, session_id) VALUES (?, ?, ?)"
INDEX_CODE_SQL = "INSERT INTO search_code (rowid, text) VALUES (?, ?)"
SET_HIGH_WATER_SQL = "UPDATE search_state SET high_water = max(high_water, :high_water)"


def enabled(conn) -> bool:
    return state(conn) is not None


def code_kept(conn) -> bool:
    """Is the trigram index (search_code) kept on this index?"""
    row = conn.execute(CODE_KEPT_SQL).fetchone()
    return row is not None and row[0] == 1


def enable(db, progress=None, code: bool = True) -> int:
    """Turn search on (the trigger, the mark) and index every stored record
    with text; the number of records indexed. ``code``: keep the trigram
    index too (on an index searched by words alone, it is made from the
    stored text). ``progress(looked_at, total)`` after each batch."""

    added = False   # the trigram index made from the stored text
    with write_lock(db) as conn:
        now = conn.execute(CODE_KEPT_SQL).fetchone()
        if now is None:
            for sql in ENABLE_SQL:
                conn.execute(sql, {"now": utcnow(), "code": int(code)}
                             if ":now" in sql else {})
        elif code and now[0] != 1:
            for sql in ADD_CODE_SQL:
                conn.execute(sql)
            added = True
    done = catch_up(db, progress)
    if done or added:   # (not on a new index: ingest enables it empty)
        merge(db)
    return done


def merge(db) -> None:
    """Merge each kept FTS index's segments into one (MERGE_SQL), a
    transaction a step, so a writer waits for no more than a step."""
    for table, sql in MERGE_SQL.items():
        while True:
            with write_lock(db) as conn:
                if table == "search_code" and not code_kept(conn):
                    break
                before = conn.total_changes
                conn.execute(sql)
                if conn.total_changes - before < 2:
                    break


def disable(db) -> bool:
    """Empty the search tables and drop the trigger; False if search was not enabled."""
    with write_lock(db) as conn:
        was = enabled(conn)
        for sql in DISABLE_SQL:
            conn.execute(sql)
    return was


def catch_up(db, progress=None) -> int:
    """Index the records above the high-water mark, ``BATCH`` per
    transaction; the number indexed. Nothing (one query) when search is not
    enabled or nothing is new: every writer calls this after its commit."""
    conn = db.conn
    now = state(conn)
    if not behind(now):
        return 0
    total = conn.execute(PENDING_COUNT_SQL, {"high_water": now[0]}).fetchone()[0] \
        if progress else 0
    done = looked_at = 0
    while True:
        with write_lock(db) as c:
            n, rows, more = catch_up_in(c, BATCH)
        done, looked_at = done + n, looked_at + rows
        if progress:
            progress(looked_at, max(total, looked_at))
        if not more:
            return done


def catch_up_in(conn, batch: int | None = None) -> tuple[int, bool]:
    """Inside the caller's transaction: index up to ``batch`` records above
    the mark (all, without one) and move the mark; (records indexed,
    records looked at, whether more are left)."""
    now = state(conn)
    if not behind(now):
        return 0, 0, False
    high_water, last = now
    rows = conn.execute(PENDING_SQL, {"high_water": high_water,
                                      "batch": batch or -1}).fetchall()
    texts = []
    for record_id, file_id, session_id, rtype, timestamp, raw in rows:
        text = record_text(rtype, raw)
        if text:
            texts.append([sort_key(timestamp, record_id), record_id, file_id, session_id,
                          rtype, timestamp, text])
    # In key order: FTS5 writes its pending postings out as a new segment
    # whenever a rowid is not above the last one, so keys out of order (the
    # files of a transaction, each in time order, interleave) made dozens of
    # small segments a transaction, and merges of them: sorted, one (the
    # word index's CPU on the 100 MB bench corpus 1.28 s -> 0.86 s).
    texts.sort()
    before = conn.total_changes
    conn.executemany(INSERT_TEXT_SQL, texts)
    if conn.total_changes - before != len(texts):   # two records, one key: move one up
        for row in texts:
            if not conn.execute(TEXT_STORED_SQL, [row[0], row[1]]).fetchone():
                while conn.execute(KEY_TAKEN_SQL, [row[0]]).fetchone():
                    row[0] += 1
                conn.execute(INSERT_TEXT_SQL, row)
        texts.sort()
    conn.executemany(INDEX_WORDS_SQL, [(row[0], row[-1], row[3]) for row in texts])
    if code_kept(conn):
        conn.executemany(INDEX_CODE_SQL, [(row[0], row[-1]) for row in texts])
    more = batch is not None and len(rows) == batch
    conn.execute(SET_HIGH_WATER_SQL, {"high_water": rows[-1][0] if more else last})
    return len(texts), len(rows), more


def sort_key(timestamp, record_id: int) -> int:
    """search_text.key: the record's time in seconds (0 when it has none,
    or an unreadable one) above the low bits of its id."""
    return (min(_ms(timestamp) // 1000, MAX_SECONDS) << KEY_SHIFT) | (record_id & KEY_MASK)



def _ms(timestamp) -> int:
    """``timestamp`` (ISO 8601; UTC when it has no zone) in ms since the
    epoch; 0 when it has none or an unreadable one."""
    if not isinstance(timestamp, str) or not timestamp:
        return 0
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return max(int(moment.timestamp() * 1000), 0)
    except (ValueError, OverflowError, OSError):
        return 0


def since_params(since: str | None) -> dict:
    """The parameters of SINCE_SQL for ``since`` (an ISO-8601 time, or None:
    every time)."""
    ms = _ms(since) if since else 0
    if not ms:   # (an unreadable time: every time, as before)
        return {"since_key": 0, "since_next_key": 0, "since_ms": 0}
    seconds = min(ms // 1000, MAX_SECONDS)
    return {"since_key": seconds << KEY_SHIFT, "since_next_key": (seconds + 1) << KEY_SHIFT,
            "since_ms": ms}


# --- the text of a record ---------------------------------------------------------

# Control characters (ANSI escapes, the snippet marks) become spaces: what is
# indexed is what a snippet shows, and no snippet can hold a mark or move a
# terminal's cursor. Tab, newline and carriage return stay. As a table of
# the UTF-8 bytes (each of these characters is one byte there, and no byte of
# a longer character is below 0x80): bytes.translate is a table look-up per
# byte, where a regular expression's character class took 0.10 s for the
# 21.7 MB of text of the 100 MB bench corpus (0.05 s this way).
_CONTROL_TO_SPACE = bytes(
    0x20 if (byte < 0x20 and byte not in (0x09, 0x0A, 0x0D)) or byte == 0x7F else byte
    for byte in range(256))


def _clean(text: str) -> str:
    """``text`` with each control character a space (_CONTROL_TO_SPACE);
    ``text`` itself when it holds none. (A lone surrogate, which json.loads
    may give, passes through as it is.)"""
    data = text.encode("utf-8", "surrogatepass")
    cleaned = data.translate(_CONTROL_TO_SPACE)
    return text if cleaned == data else cleaned.decode("utf-8", "surrogatepass")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _leaves(value, out: list) -> None:
    """The strings and numbers of a tool input, in order."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, out)
    elif value is not None and not isinstance(value, bool):
        out.append(str(value))


def _result_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content
                         if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _content_text(content, out: list) -> None:
    if isinstance(content, str):
        out.append(content)
        return
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            out.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            out.append(block["thinking"])
        elif kind == "tool_use":
            values: list = []
            _leaves(block.get("input"), values)
            name = block.get("name") if isinstance(block.get("name"), str) else ""
            out.append(_cut(f"{name}: " + "\n".join(values), TOOL_TEXT_CHARS))
        elif kind == "tool_result":
            out.append(_cut(_result_text(block.get("content")), TOOL_TEXT_CHARS))


class _Message(msgspec.Struct):
    content: Any = None


class _Fields(msgspec.Struct, rename="camel"):
    """The fields of a record its text is read from; the rest of the line is
    skipped, not decoded (a user record's toolUseResult repeats its tool
    result, often at length)."""
    message: Optional[_Message] = None
    content: Any = None
    summary: Any = None
    custom_title: Any = None
    ai_title: Any = None


_FIELDS = msgspec.json.Decoder(_Fields)
_TITLE_FIELD = {"summary": "summary", "custom-title": "custom_title", "ai-title": "ai_title"}
_JSON_NAME = {"summary": "summary", "custom_title": "customTitle", "ai_title": "aiTitle"}


def _fields(raw) -> _Fields | None:
    """A record's _Fields: decoded by msgspec, or, for what it refuses (a
    message that is not an object, NaN, a lone surrogate...), read from
    json.loads as before; None if the line is no JSON object."""
    try:
        return _FIELDS.decode(raw)
    except (msgspec.DecodeError, TypeError):
        pass
    try:
        data = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    message = data.get("message")
    return _Fields(message=_Message(message.get("content")) if isinstance(message, dict)
                   else None, content=data.get("content"),
                   **{name: data.get(key) for name, key in _JSON_NAME.items()})


def record_text(rtype: str, raw) -> str | None:
    """The text search indexes for a record (None: nothing to index); ``raw``
    the line, str or its UTF-8 bytes."""
    if rtype in AGENT_TEXT_TYPES:
        return _cut(_clean(agents.record_text(rtype, raw)), RECORD_TEXT_CHARS) or None
    data = _fields(raw)
    if data is None:
        return None
    out: list = []
    if rtype in ("user", "assistant"):
        if data.message is not None:
            _content_text(data.message.content, out)
    elif rtype == "system":
        if isinstance(data.content, str):
            out.append(data.content)
    else:
        field = _TITLE_FIELD.get(rtype)
        if field and isinstance(getattr(data, field), str):
            out.append(getattr(data, field))
    text = _clean("\n".join(t for t in out if t)).strip()
    return _cut(text, RECORD_TEXT_CHARS) if text else None


# --- queries -----------------------------------------------------------------------

WORDS, CODE = "words", "code"
# A term goes to the trigram index when it is 3 characters or more and holds
# a character of code (anything but letters, digits, spaces, - and ') or of
# a script written without spaces (CJK, kana, hangul, thai).
_CODE_CHAR = re.compile(r"[^\w\s'’-]|_")
_UNSPACED = re.compile("[\u0e00-\u0e7f\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]")
_TERM = re.compile(r'"([^"]*)"?|(\S+)')


class Term:
    __slots__ = ("text", "prefix", "index")

    def __init__(self, text: str, prefix: bool, index: str):
        self.text, self.prefix, self.index = text, prefix, index

    def fts(self) -> str:
        """The term as an FTS5 string, quoted (a prefix query in the word index)."""
        quoted = '"' + self.text.replace('"', '""') + '"'
        return quoted + " *" if self.prefix and self.index == WORDS else quoted

    def __repr__(self):
        return f"Term({self.text!r}, prefix={self.prefix}, index={self.index!r})"


def route(text: str) -> str | None:
    """Which index can match ``text``: CODE (trigram), WORDS, or None (it
    holds nothing either can match)."""
    if len(text) >= 3 and (_CODE_CHAR.search(text) or _UNSPACED.search(text)):
        return CODE
    if any(c.isalnum() for c in text):
        return WORDS
    return CODE if len(text.strip()) >= 3 else None


def clean_query(query: str) -> str:
    """``query`` with each control character (a NUL) a space, as in the
    indexed text (_clean): FTS5 reads a NUL as the end of its query."""
    return _clean(query)


def parse_query(query: str) -> list[Term]:
    """The terms of ``query``: "a phrase" (an unclosed quote runs to the
    end), or a word; ``word*`` is a prefix. Each is routed (``route``). A
    control character (a NUL) is a space, as in the indexed text (_clean).
    QueryRefused past MAX_QUERY_CHARS or MAX_QUERY_TERMS."""
    if len(query) > MAX_QUERY_CHARS:
        raise QueryRefused(f"the query is longer than {MAX_QUERY_CHARS:,} characters")
    terms = []
    for phrase, word in _TERM.findall(clean_query(query)):
        prefix = False
        text = phrase
        if word:
            text = word.rstrip("*")
            prefix = text != word
            text = text.strip('"')
        text = " ".join(text.split())
        index = route(text) if text else None
        if index is not None:
            terms.append(Term(text, prefix, index))
    if len(terms) > MAX_QUERY_TERMS:
        raise QueryRefused(f"the query has more than {MAX_QUERY_TERMS} terms")
    return terms


def typed_prefixes(query: str) -> list[str]:
    """The prefixes of ``query`` (lower case) a hit's text must also hold as
    typed: the porter tokenizer stems a prefix too ("pars*" would look for
    "par*" and find "parallel"). ASCII ones of 3 characters or more (porter
    stems only those; SQLite's lower() folds only ASCII)."""
    return [t.text.lower() for t in parse_query(query)
            if t.prefix and t.index == WORDS and len(t.text) >= 3 and t.text.isascii()]


def compile_query(query: str) -> dict[str, str]:
    """{index: FTS5 expression} for the query's terms (all must match);
    EmptyQuery when none is left."""
    by_index: dict[str, list[str]] = {}
    for term in parse_query(query):
        by_index.setdefault(term.index, []).append(term.fts())
    if not by_index:
        raise EmptyQuery(f"nothing to search for in {query!r}")
    compiled = {index: " AND ".join(parts) for index, parts in by_index.items()}
    if WORDS in compiled:   # the text, not the session ids search_words also holds
        compiled[WORDS] = f"text : ({compiled[WORDS]})"
    return compiled


# --since: a key at or past :since_key (the walk's bound) is in the second
# of :since_ms or later; in that second, the record's own time (ms, as
# SQLite reads it: julianday() counts whole ms) decides. (julianday is NULL
# for a time SQLite cannot read: left out, as a record without a time is.)
SINCE_SQL = ("(t.key >= :since_next_key OR CAST(round(julianday(t.timestamp) * 86400000.0) "
             "AS INTEGER) - 210866760000000 >= :since_ms)")

# Hits, newest first: a walk of one index's rowids (search_text.key, so in
# time order) backwards from the newest, which FTS5 stops at :limit, so a
# common word costs no more than a rare one. The walk is of the trigram
# index when the query has a code term, else of the word index. Checked per
# hit: the word terms of a query that has both (a probe of the word index
# at that rowid: materializing a common word's hits costs more); the
# session's rows for the trigram index (the word index holds each record's
# session id: there --session is one more doclist joined inside FTS5); a
# prefix as typed (:typed).
SEARCH_TEMPLATE = """
SELECT t.session_id, t.timestamp, t.type, f.project_dir AS project,
  snippet({table}, 0, char(2), char(3), '…', {tokens}) AS snippet, t.record_id
FROM {table} JOIN search_text t ON t.key = {table}.rowid
  JOIN files f ON f.id = t.file_id
WHERE {table} MATCH :match AND {table}.rowid >= :since_key AND {since}
  AND (:session IS NULL OR t.session_id = :session)
  AND {project}
  AND (:typed IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(:typed) p
                                     WHERE instr(lower(t.text), p.value) = 0))
  {also} {session}
ORDER BY {table}.rowid DESC LIMIT :limit
""".strip()
ALSO_SQL = ("AND EXISTS (SELECT 1 FROM search_words w WHERE search_words MATCH :also "
            "AND w.rowid = {table}.rowid)")
# (+rowid: a filter on the walk, not a list of rowids to look up one by one)
SESSION_SQL = ("AND +{table}.rowid IN (SELECT key FROM search_text "
               "WHERE session_id = :session AND key >= :since_key)")
SEARCH_SQL = {
    (table, also, session): SEARCH_TEMPLATE.format(
        table=f"search_{table}", tokens=SNIPPET_TOKENS[table],
        also=ALSO_SQL.format(table=f"search_{table}") if also else "",
        session=SESSION_SQL.format(table=f"search_{table}") if session else "",
        project=projects.PROJECT_MATCH_TEMPLATE.format(dir="f.project_dir", cwd="f.cwd"),
        since=SINCE_SQL)
    for table, also, session in ((WORDS, False, False), (CODE, False, False),
                                 (CODE, True, False), (CODE, False, True), (CODE, True, True))
}


def _phrase(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


# Without the trigram index (search_state.code 0), a code term is a
# substring of the stored text (:contains, lower case: instr() on lower(),
# which folds ASCII letters; the trigram index folds every letter). The walk
# is of the word index when the query has a word term or a code term with
# a whole word in it (``_inner_words``: a word between two separators of
# the term is a whole word of any text that holds the term), each hit
# checked for the substrings; else of search_text by key, newest first,
# stopping at :limit like any walk (a rare term reads the text of every
# record in range). The snippet is cut around the first substring in
# Python (``_substring_snippet``): t.text comes along as _text.
FALLBACK_TEMPLATE = """
SELECT t.session_id, t.timestamp, t.type, f.project_dir AS project,
  NULL AS snippet, t.record_id, t.text AS _text
FROM {source}
  JOIN files f ON f.id = t.file_id
WHERE {match} t.key >= :since_key AND {since}
  AND (:session IS NULL OR t.session_id = :session)
  AND {project}
  AND (:typed IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(:typed) p
                                     WHERE instr(lower(t.text), p.value) = 0))
  AND NOT EXISTS (SELECT 1 FROM json_each(:contains) c
                  WHERE instr(lower(t.text), c.value) = 0)
ORDER BY {order} DESC LIMIT :limit
""".strip()
_FALLBACK_PROJECT = projects.PROJECT_MATCH_TEMPLATE.format(dir="f.project_dir", cwd="f.cwd")
FALLBACK_SQL = {
    WORDS: FALLBACK_TEMPLATE.format(
        source="search_words JOIN search_text t ON t.key = search_words.rowid",
        match="search_words MATCH :match AND", order="search_words.rowid",
        project=_FALLBACK_PROJECT, since=SINCE_SQL),
    None: FALLBACK_TEMPLATE.format(source="search_text t", match="", order="t.key",
                                   project=_FALLBACK_PROJECT, since=SINCE_SQL),
}
# Characters of context a substring snippet keeps before and after a match.
SNIPPET_BEFORE, SNIPPET_AFTER = 24, 40
_SEPARATORS = re.compile(r"[\W_]+")


def _inner_words(text: str) -> list[str]:
    """The whole words of a code term: its ASCII words with a separator on
    both sides in the term (the first and last may be part of a longer
    word of the text)."""
    return [w for w in _SEPARATORS.split(text)[1:-1] if w and w.isascii() and w.isalnum()]


def _ascii_lower(text: str) -> str:
    """``text`` with its ASCII letters in lower case, as SQLite's lower()."""
    return text.lower() if text.isascii() else "".join(
        c.lower() if c.isascii() else c for c in text)


def _substring_snippet(text: str, needles: list[str]) -> str:
    """``text`` cut around the first of ``needles`` (_ascii_lower) it holds,
    each of them marked (MARK_START, MARK_END) within the cut."""
    lower = _ascii_lower(text)
    first = min((i for i in (lower.find(n) for n in needles) if i >= 0), default=0)
    start = max(0, first - SNIPPET_BEFORE)
    end = min(len(text), first + max(map(len, needles), default=0) + SNIPPET_AFTER)
    out, at = [], start
    while at < end:
        hits = [(i, len(n)) for n in needles for i in (lower.find(n, at, end),) if i >= 0]
        if not hits:
            break
        i, n = min(hits)
        out += [text[at:i], MARK_START, text[i:i + n], MARK_END]
        at = i + n
    out.append(text[at:end])
    return ("…" if start else "") + "".join(out) + ("…" if end < len(text) else "")


def _search_without_code(conn, query: str, params: dict) -> list[dict]:
    """search() on an index without the trigram index (search_state.code
    0): FALLBACK_SQL."""
    terms = parse_query(query)
    contains = [_ascii_lower(t.text) for t in terms if t.index == CODE]
    words = [t.fts() for t in terms if t.index == WORDS]
    words += [_phrase(w) for t in terms if t.index == CODE for w in _inner_words(t.text)]
    match = f"text : ({' AND '.join(words)})" if words else None
    if match and params["session"]:
        match = f"({match}) AND session_id : {_phrase(params['session'])}"
    rows = dict_rows(conn, FALLBACK_SQL[WORDS if match else None],
                     dict(params, match=match, contains=json.dumps(contains)))
    for row in rows:
        row["snippet"] = _substring_snippet(row.pop("_text"), contains)
    return rows


def search(db, query: str, *, session: str | None = None, project: str | None = None,
           since: str | None = None, limit: int = 20) -> list[dict]:
    """The records whose text matches every term of ``query``, newest
    first: session_id, timestamp, type, project, snippet (matches between
    MARK_START and MARK_END), record_id. ``since``: an ISO-8601 time."""
    conn = db.conn
    if not enabled(conn):
        raise SearchNotEnabled("search is not enabled on this index: run "
                               "'session-index search --enable' first")
    compiled = compile_query(query)
    table = CODE if CODE in compiled else WORDS
    if table == CODE and not code_kept(conn):
        return _search_without_code(conn, query, {
            "session": session or None, "project": projects.project_value(project),
            "limit": limit,
            "typed": json.dumps(typed_prefixes(query)) if typed_prefixes(query) else None,
            **since_params(since)})
    words = compiled.get(WORDS)
    if words and session:
        words = f"({words}) AND session_id : {_phrase(session)}"
    typed = typed_prefixes(query)
    params = {"match": compiled[CODE] if table == CODE else words,
              "also": words if table == CODE else None,
              "session": session or None, "project": projects.project_value(project),
              "limit": limit,
              "typed": json.dumps(typed) if typed else None,
              **since_params(since)}
    sql = SEARCH_SQL[(table, table == CODE and words is not None,
                      table == CODE and bool(session) and words is None)]
    return dict_rows(conn, sql, params)


_MATCH = re.compile(f"{MARK_START}(.*?){MARK_END}", re.S)


def marked(snippet: str, start: str = "[[", end: str = "]]", style=None) -> str:
    """A snippet with each match between ``start`` and ``end`` (or passed
    through ``style``) instead of the marks."""
    style = style or (lambda match: start + match + end)
    return _MATCH.sub(lambda m: style(m.group(1)), snippet or "")


def html_snippet(snippet: str):
    """A snippet as HTML: its text escaped, each match in <mark>."""
    from markupsafe import Markup, escape   # (markupsafe: only the web pages mark snippets up)

    return Markup(marked(str(escape(snippet or "")), "<mark>", "</mark>"))


# The canned query (web_metadata.QUERIES): plain SQL (it must run without
# the plugin's functions), so :q is searched as one phrase, quoted here, in
# the index route() picks for it.
CANNED_SEARCH_SQL = """
SELECT t.session_id, t.timestamp, t.type, h.snippet, t.record_id
FROM (
  SELECT rowid AS key, snippet(search_words, 0, '[[', ']]', '…', 16) AS snippet
  FROM search_words
  WHERE NOT (length(trim(:q)) >= 3 AND (:q GLOB '*[^A-Za-z0-9 ''-]*'))
    AND search_words MATCH 'text : "' || replace(:q, '"', '""') || '"'
  UNION ALL
  SELECT rowid AS key, snippet(search_code, 0, '[[', ']]', '…', 64) AS snippet
  FROM search_code
  WHERE length(trim(:q)) >= 3 AND (:q GLOB '*[^A-Za-z0-9 ''-]*')
    AND search_code MATCH '"' || replace(:q, '"', '""') || '"'
  UNION ALL
  -- (without the trigram index: :q as a substring, ASCII case folded)
  SELECT key, CASE WHEN at > 25 THEN '…' ELSE '' END
           || substr(text, max(1, at - 24), at - max(1, at - 24)) || '[['
           || substr(text, at, length(:q)) || ']]' || substr(text, at + length(:q), 40)
           || CASE WHEN length(text) >= at + length(:q) + 40 THEN '…' ELSE '' END AS snippet
  FROM (SELECT key, text, instr(lower(text), lower(:q)) AS at FROM search_text
        WHERE length(trim(:q)) >= 3 AND (:q GLOB '*[^A-Za-z0-9 ''-]*')
          AND (SELECT code FROM search_state) = 0)
  WHERE at > 0
  ORDER BY key DESC LIMIT 100
) h JOIN search_text t ON t.key = h.key
ORDER BY h.key DESC
""".strip()

