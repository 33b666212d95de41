"""Full-text search over what was said in the transcripts (FTS5).

Search is enabled per index (``session-index search --enable``), as
sqlite-utils users know from ``enable-fts``: a default cold ingest pays
nothing for it. The tables are in every index (migrations.m021_search),
empty until then, so SQL naming them runs anywhere. Once enabled:

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
  row's session id, in a column of its own.
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
FTS_HASH_BYTES = 16 << 20
# search_text.key = (timestamp in ms << KEY_SHIFT) | (records.id & KEY_MASK):
# time-ordered, unique (a clash moves the key up one), fits SQLite's
# integer until the year 2248.
KEY_SHIFT = 20
KEY_MASK = (1 << KEY_SHIFT) - 1
MAX_MS = (1 << (63 - KEY_SHIFT)) - 1
# Snippet marks around each match (control characters: indexed text never
# holds them, see _CLEAN), and the snippet's length in tokens (a trigram
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
    # A deleted record takes its text out of both indexes; a mark at or past
    # it goes back below it (its rowid may be reused by the next insert).
    """CREATE TRIGGER IF NOT EXISTS search_forget_record AFTER DELETE ON records BEGIN
        INSERT INTO search_words (search_words, rowid, text, session_id)
          SELECT 'delete', key, text, session_id FROM search_text WHERE record_id = OLD.id;
        INSERT INTO search_code (search_code, rowid, text)
          SELECT 'delete', key, text FROM search_text WHERE record_id = OLD.id;
        DELETE FROM search_text WHERE record_id = OLD.id;
        UPDATE search_state SET high_water = OLD.id - 1 WHERE high_water >= OLD.id;
    END""",
    "INSERT OR IGNORE INTO search_state (id, high_water, enabled_at) VALUES (1, 0, :now)",
    # A catch-up transaction's postings (a trigram index makes many) flushed
    # once, at its commit, rather than at every 1 MB (FTS5's default).
    f"INSERT INTO search_words (search_words, rank) VALUES ('hashsize', {FTS_HASH_BYTES})",
    f"INSERT INTO search_code (search_code, rank) VALUES ('hashsize', {FTS_HASH_BYTES})",
)
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
PENDING_SQL = f"""
SELECT r.id, r.file_id,
  coalesce((SELECT f.session_id FROM files f WHERE f.id = r.file_id), r.session_id),
  r.type, r.timestamp, r.raw FROM records r
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


def enable(db, progress=None) -> int:
    """Turn search on (the trigger, the mark) and index every stored record
    with text; the number of records indexed.
    ``progress(looked_at, total)`` after each batch."""

    with write_lock(db) as conn:
        for sql in ENABLE_SQL:
            conn.execute(sql, {"now": utcnow()} if ":now" in sql else {})
    return catch_up(db, progress)


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
    before = conn.total_changes
    conn.executemany(INSERT_TEXT_SQL, texts)
    if conn.total_changes - before != len(texts):   # two records, one key: move one up
        for row in texts:
            if not conn.execute(TEXT_STORED_SQL, [row[0], row[1]]).fetchone():
                while conn.execute(KEY_TAKEN_SQL, [row[0]]).fetchone():
                    row[0] += 1
                conn.execute(INSERT_TEXT_SQL, row)
    conn.executemany(INDEX_WORDS_SQL, [(row[0], row[-1], row[3]) for row in texts])
    conn.executemany(INDEX_CODE_SQL, [(row[0], row[-1]) for row in texts])
    more = batch is not None and len(rows) == batch
    conn.execute(SET_HIGH_WATER_SQL, {"high_water": rows[-1][0] if more else last})
    return len(texts), len(rows), more


def sort_key(timestamp, record_id: int) -> int:
    """search_text.key: the record's time in ms (0 when it has none, or an
    unreadable one) above the low bits of its id."""
    return (_ms(timestamp) << KEY_SHIFT) | (record_id & KEY_MASK)


def _ms(timestamp) -> int:
    if not isinstance(timestamp, str) or not timestamp:
        return 0
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return min(max(int(moment.timestamp() * 1000), 0), MAX_MS)
    except (ValueError, OverflowError, OSError):
        return 0


# --- the text of a record ---------------------------------------------------------

# Control characters (ANSI escapes, the snippet marks) become spaces: what is
# indexed is what a snippet shows, and no snippet can hold a mark or move a
# terminal's cursor. Tab and newline stay.
_CLEAN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


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


def record_text(rtype: str, raw) -> str | None:
    """The text search indexes for a record (None: nothing to index)."""
    if rtype in AGENT_TEXT_TYPES:
        return _cut(_CLEAN.sub(" ", agents.record_text(rtype, raw)), RECORD_TEXT_CHARS) or None
    try:
        data = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    out: list = []
    if rtype in ("user", "assistant"):
        message = data.get("message")
        if isinstance(message, dict):
            _content_text(message.get("content"), out)
    elif rtype == "system":
        if isinstance(data.get("content"), str):
            out.append(data["content"])
    else:
        field = {"summary": "summary", "custom-title": "customTitle",
                 "ai-title": "aiTitle"}.get(rtype)
        if field and isinstance(data.get(field), str):
            out.append(data[field])
    text = _CLEAN.sub(" ", "\n".join(t for t in out if t)).strip()
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
    indexed text (_CLEAN): FTS5 reads a NUL as the end of its query."""
    return _CLEAN.sub(" ", query)


def parse_query(query: str) -> list[Term]:
    """The terms of ``query``: "a phrase" (an unclosed quote runs to the
    end), or a word; ``word*`` is a prefix. Each is routed (``route``). A
    control character (a NUL) is a space, as in the indexed text (_CLEAN).
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
WHERE {table} MATCH :match AND {table}.rowid >= :since_key
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
        project=projects.PROJECT_MATCH_TEMPLATE.format(dir="f.project_dir", cwd="f.cwd"))
    for table, also, session in ((WORDS, False, False), (CODE, False, False),
                                 (CODE, True, False), (CODE, False, True), (CODE, True, True))
}


def _phrase(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


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
    words = compiled.get(WORDS)
    if words and session:
        words = f"({words}) AND session_id : {_phrase(session)}"
    typed = typed_prefixes(query)
    params = {"match": compiled[CODE] if table == CODE else words,
              "also": words if table == CODE else None,
              "session": session or None, "project": projects.project_value(project),
              "limit": limit,
              "typed": json.dumps(typed) if typed else None,
              "since_key": (_ms(since) << KEY_SHIFT) if since else 0}
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
  ORDER BY key DESC LIMIT 100
) h JOIN search_text t ON t.key = h.key
ORDER BY h.key DESC
""".strip()

