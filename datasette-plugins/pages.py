"""The plugin pages: session health, a session's tree, a record's raw JSON.

The hook files in ``datasette-plugins/`` route to these handlers. Each reads
the index through Datasette (its permissions, its read-only connections) and
renders a template of the plugin (``datasette-plugins/templates``) inside
Datasette's layout.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import sqlite3
from pathlib import Path
from urllib.parse import quote, unquote, urlencode

from datasette.database import QueryInterrupted
from datasette.utils import sqlite_timelimit
from datasette.utils.asgi import NotFound, Request, Response
from datasette.views.index import IndexView

from indexer.chain import definitions, resume
from indexer.index import search
from indexer.repair import show
from indexer.transcripts import agents, codex
from indexer.signals import forks, listings as signals, verdict as verdicts
from indexer.signals.classes import SEVERITIES
from session_index_web import charts as web_charts, health as web_health, tree as web_tree
from session_index_web.format import CAUSE_COLOURS, pretty_json, session_path
from session_index_web.metadata import QUERIES

PAGE_TIME_LIMIT_MS = 20_000
SESSION_SEARCH_LIMIT = 50   # hits shown on a session page
SEARCH_LIMIT = 100   # hits shown on the search page
# The session page's search stops after this long (never later than
# Datasette's sql_time_limit_ms): a slow query gives its SQL thread back to
# the other pages in a second, and the page says the search took too long.
SEARCH_TIME_LIMIT_MS = 1_000
RECENT_SESSIONS = 15   # on the health page
RAW_PRETTY_MAX = 5_000_000  # characters; a longer line is shown as written

# The session's row and its transcript files (main first, the one a resume
# opens first of those), with both leaves.
SESSION_SQL = "SELECT * FROM sessions WHERE session_id = :session_id"
SESSION_FILES_SQL = """
SELECT f.id, f.path, f.kind, f.agent_id, f.records, f.first_timestamp, f.last_timestamp,
  f.deleted_at, f.generation, f.host, l.resume_leaf_uuid, l.sdk_leaf_uuid, l.leaves_agree, l.branch_count,
  l.resume_rule, (SELECT count(*) FROM orphans o WHERE o.file_id = f.id AND o.restored) AS restored
FROM files f LEFT JOIN leaves l ON l.file_id = f.id
WHERE f.session_id = :session_id AND f.kind IN ('main', 'subagent')
ORDER BY f.kind = 'main' DESC,
  f.id IS (SELECT main_file_id FROM sessions s WHERE s.session_id = f.session_id) DESC,
  f.deleted_at IS NOT NULL, f.first_timestamp, f.id
""".strip()
# The session's transcripts held on two hosts (host_copies: '' is this
# machine), side by side, the differing ones first.
SESSION_HOST_COPIES_SQL = """
SELECT kind, agent_id, a_host, a_file_id, a_records, b_host, b_file_id, b_records, a_only,
  b_only, diverged
FROM host_copies WHERE session_id = :session_id
ORDER BY diverged DESC, kind = 'main' DESC, a_file_id, b_file_id
""".strip()
# The session's main transcripts when it has several: which one a resume
# opens and why, and how each other one differs from it (the view has rows
# only for a session with two main transcripts or more: the page asks only
# then, which spares 11 ms of a page on a 1M-record index).
SESSION_MAIN_COPIES_SQL = """
SELECT file_id, chosen, why, diverged, only_here, only_in_chosen, project_dir
FROM session_main_copies WHERE session_id = :session_id
""".strip()
# The file's api_error episodes and chain breaks (the page's summary line).
FILE_SPLICES_SQL = """
SELECT api_error_uuid, branch_point_uuid, orphaned_records, minutes_spanned
FROM api_error_splices WHERE file_id = :file_id
""".strip()
FILE_BREAKS_SQL = "SELECT count(*) FROM chain_breaks WHERE file_id = :file_id"
# The file's generations, oldest first (the current one is the last).
FILE_GENERATIONS_SQL = """
SELECT generation, current, started_at, superseded_at, reason, lines, bytes
FROM file_generations WHERE file_id = :file_id ORDER BY generation
""".strip()
# One record's exact line.
RECORD_SQL = "SELECT raw, session_id, line_no FROM records WHERE id = :id"
# Is this file the main transcript of a session whose resume chain ends at a
# synthetic placeholder? (With its splices: whether repair_plan has rows for it.)
# poisoned_sessions computes every session's placeholders (15-20 ms on a
# 1M-record index); a file with no placeholder (its records_synthetic rows,
# the view's placeholders) has no poisoned tail, so it is asked only of a
# file that has one.
POISONED_TAIL_SQL = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM records r WHERE r.file_id = :file_id
                         AND r.type = 'assistant' AND r.model = '<synthetic>')
  THEN (SELECT count(*) FROM poisoned_sessions WHERE file_id = :file_id AND at_resume_tail)
  ELSE 0 END
""".strip()
# The session's prompts in history.jsonl (the unwritten_transcripts evidence:
# the only record of a session whose transcript was never written), oldest first.
SESSION_PROMPTS_SQL = """
SELECT timestamp, project, display FROM history_prompts
WHERE session_id = :session_id AND error IS NULL ORDER BY timestamp, id
""".strip()
# Its forks and what it was forked from (session_forks' rows, computed only
# for the transcripts that can name it: forks.SESSION_FORKS_OF_SESSION_SQL),
# the parent first.
SESSION_FORKS_SQL = f"""
SELECT session_id, kind, parent_session_id, link, copied_records, foreign_records, forked_at
FROM ({forks.SESSION_FORKS_OF_SESSION_SQL})
WHERE session_id = :session_id OR parent_session_id = :session_id
ORDER BY session_id <> :session_id, forked_at, session_id
""".strip()
# The compactions of the file (compaction_segments), the first first.
FILE_COMPACTIONS_SQL = """
SELECT boundary_uuid, position, last, compacted_at, records, copies, reached, lost,
       lost_causes, preserved, preserved_finding, truncated, truncated_records
FROM compaction_segments WHERE file_id = :file_id ORDER BY position
""".strip()
# Its row of unwritten_transcripts, when it has one.
SESSION_UNWRITTEN_SQL = "SELECT * FROM unwritten_transcripts WHERE session_id = :session_id"
# What else the index holds of a session id it holds no transcript of: the
# pages link every id it names (render_cell links every session_id,
# init_session_id and resume_target cell; the health page its problems'
# sessions), and the page says what is known of it. The `claude -p` runs that
# name it: named_as, the column that names it (the session the run reported,
# its init event's, or the one its resume could not find), newest first.
SESSION_EXECUTIONS_SQL = """
SELECT id, error_class, subtype, error_message, log_path, log_mtime, line_no,
  CASE :session_id WHEN resume_target THEN 'resume_target' WHEN session_id THEN 'session_id'
       ELSE 'init_session_id' END AS named_as
FROM executions WHERE :session_id IN (session_id, init_session_id, resume_target)
ORDER BY log_mtime DESC, line_no DESC
""".strip()
# Its reference a resume cannot use (a stale_session_refs row: never_indexed).
SESSION_STALE_REF_SQL = """
SELECT reason, refs, sources, last_cached_at, last_execution_class
FROM stale_session_refs WHERE session_id = :session_id
""".strip()
# The transcripts of other sessions holding records under its id (a line
# keeps the sessionId it was written with: a fork's or a copy's lines; the
# usage view counts their calls under that id): each file, the session it
# belongs to and how many of its records carry the id.
SESSION_RECORDS_ELSEWHERE_SQL = f"""
SELECT f.id AS file_id, f.path, f.session_id AS file_session_id, count(*) AS records
FROM records r JOIN files f ON f.id = r.file_id
WHERE r.session_id = :session_id AND f.kind IN {definitions.TRANSCRIPT_KINDS}
GROUP BY f.id ORDER BY f.id
""".strip()
# The thinking blocks the API refuses on the file's resume chain
# (thinking_faults, read from thinking_cache, which ingest keeps: the wedge
# in the latest message first). Computing them from the file's records
# (classes.thinking_faults_where) read every record: 104 ms against 4 ms for
# a 10,653-record session; the tests hold the cache equal to that definition.
FILE_THINKING_SQL = """
SELECT uuid, line_no, block, fault, latest, stuck, resumer_version FROM thinking_faults
WHERE file_id = :file_id ORDER BY latest DESC, line_no, block
""".strip()
# The title each of the sessions :ids (a JSON array) goes by (listings'
# SESSION_TITLE_TEMPLATE: custom title, AI title, summary, first prompt).
SESSION_TITLES_SQL = f"""
SELECT s.session_id, {signals.SESSION_TITLE_TEMPLATE.format(s="s")} AS title FROM sessions s
WHERE s.session_id IN (SELECT value FROM json_each(:ids))
""".strip()
DOWNLOAD_FILE_SQL = """
SELECT f.id, f.path, f.session_id, s.main_file_id = f.id AS is_main FROM files f
LEFT JOIN sessions s ON s.session_id = f.session_id
WHERE f.id = :id AND f.kind IN ('main', 'subagent')
""".strip()


async def index_database(datasette, request):
    """The index database a page is about: ``?database=`` or the first the
    metadata marks as a session index (else the first with the views)."""
    names = [n for n in datasette.databases if await is_session_index(datasette, n)]
    wanted = request.args.get("database")
    name = wanted if wanted in names else (names[0] if names else None)
    if name is None:
        raise NotFound("No session index is attached to this Datasette")
    await datasette.ensure_permissions(
        request.actor, [("view-database", name), "view-instance"])
    return name, datasette.get_database(name)


def known_session_index(datasette, name: str) -> bool | None:
    """What is_session_index answered for ``name`` already (None: not asked yet)."""
    return datasette.__dict__.get("_session_index_databases", {}).get(name)


async def is_session_index(datasette, name: str) -> bool:
    """Is the attached database ``name`` a session index (it has the
    views)? Asked once per database and Datasette instance."""
    known = datasette.__dict__.setdefault("_session_index_databases", {})
    if name not in known:
        try:
            db = datasette.get_database(name)
        except KeyError:
            return False
        known[name] = name != "_internal" and "leaf_ancestry" in await db.view_names()
    return known[name]


async def render(datasette, request, template, context, status=200):
    """A page of the plugin's templates/ (found by Datasette's loader, which
    holds every plugin's templates) inside Datasette's layout."""
    html = await datasette.render_template(template, context, request=request)
    return Response.html(html, status=status)


async def execute_limited(datasette, db, fn, limit_ms: int | None = None):
    """``fn(conn)`` on one of Datasette's read connections under its SQL time
    limit (sql_time_limit_ms, or ``limit_ms`` when lower), as ``db.execute``
    runs SQL: Python of the plugin that runs SQL itself (the search, the
    downloads) does not escape it. Past it, QueryInterrupted."""
    ms = datasette.sql_time_limit_ms
    ms = min(ms, limit_ms) if limit_ms is not None else ms

    def run(conn):
        with sqlite_timelimit(conn, ms):
            try:
                return fn(conn)
            except sqlite3.OperationalError as exc:
                if exc.args == ("interrupted",):
                    raise QueryInterrupted(exc, "", {}) from None
                raise

    return await db.execute_fn(run)


def bounded(handler):
    """A page handler whose query passed the SQL time limit answers 503 with
    a one-line reason (Datasette's own pages answer 400 with the SQL), never
    a 500."""
    @functools.wraps(handler)
    async def inner(datasette, request):
        try:
            return await handler(datasette, request)
        except QueryInterrupted:
            return Response.text(
                "This page's query took longer than the SQL time limit "
                f"(sql_time_limit_ms, {datasette.sql_time_limit_ms} ms); "
                "try again when the server is less busy.", status=503)
    return inner


def _db_query(name: str) -> str:
    return "?" + urlencode({"database": name})


async def _section(coroutine, slow: list, label: str, default=None):
    """A part of a page, or ``default`` (its label added to ``slow``) when
    its query passed the SQL time limit: the rest of the page still shows."""
    try:
        return await coroutine
    except QueryInterrupted:
        slow.append(label)
        return default


@bounded
async def health_page(datasette, request):
    name, db = await index_database(datasette, request)
    slow = []   # the parts whose query passed the time limit
    results, recent = await web_health.run_checks(db)
    overview = await web_health.overview(db)
    usage_panel = await _section(web_health.usage_panel(db, signals.iso_now(None)), slow,
                                 "the usage panel")

    def check_url(check):
        url = datasette.urls.table(name, check.name)
        return url + ("?" + check.link if check.link else "")

    def session_url(session_id):
        return datasette.urls.path(session_path(session_id)) if session_id else None

    results = [{"label": r.check.label, "url": check_url(r.check), "total": r.total,
                "newest": r.newest, "error": r.error, "severity": r.check.severity,
                "fix": r.check.fix}
               for r in results]
    recent_sessions = [dict(row, url=session_url(row["session_id"])) for row in await _section(
        db.execute(signals.SESSIONS_SQL, signals.sessions_params(limit=RECENT_SESSIONS)),
        slow, "the recently active sessions", [])]
    kinds = await _section(web_health.new_kinds(db), slow, "the new record kinds")
    kinds_url = datasette.urls.table(name, web_health.NEW_KINDS_VIEW)
    fleet = await _section(web_health.fleet_panel(db, signals.iso_now(None)), slow,
                           "the fleet panel")
    return await render(datasette, request, "session_health.html", {
        "database": name,
        "db_url": datasette.urls.database(name),
        "overview": overview,
        "usage": usage_panel,
        "usage_url": datasette.urls.table(name, "usage"),
        "cost_url": datasette.urls.query(name, "cost_by_project"),
        "groups": [{"key": key, "title": title, "note": note,
                    "results": [r for r in results if r["severity"] == key],
                    "problems": sum(r["total"] for r in results if r["severity"] == key)}
                   for key, title, note in SEVERITIES],
        "when": web_health.WHEN,
        "recent_sessions": recent_sessions,
        "recent": [{"at": row["at"], "label": check.label, "url": check_url(check),
                    "session_id": row["session_id"], "session_url": session_url(row["session_id"]),
                    "detail": row["detail"]} for row, check in recent],
        "queries": [{"title": title, "url": datasette.urls.query(name, q)}
                    for q, (title, _, _) in QUERIES.items()],
        "lookup_url": datasette.urls.path("/-/sessions"),
        "new_kinds": None if kinds is None else [
            dict(k, url=kinds_url + "?" + urlencode({"kind": k["kind"]})) for k in kinds],
        "record_types_url": kinds_url,
        "fleet": fleet,
        "fleet_hosts_url": datasette.urls.table(name, "fleet_hosts"),
        "fleet_quarantine_url": datasette.urls.table(name, "fleet_quarantine"),
        "fleet_gaps_url": datasette.urls.table(name, "fleet_gaps"),
        "host_copies_url": datasette.urls.table(name, "host_copies") + "?diverged=1",
        **_charts_context(datasette, name, web_charts.CHARTS),
        "slow": slow,
        "time_limit_ms": datasette.sql_time_limit_ms,
    })


def _charts_context(datasette, name, chosen, since=""):
    """The charts a page shows (templates/_charts.html) and its scripts."""
    return {"charts": [web_charts.figure(c, datasette.urls, name, since) for c in chosen],
            "chart_scripts": web_charts.script_urls(datasette.urls),
            "charts_url": datasette.urls.path("/-/charts")}


async def charts_page(datasette, request):
    """``/-/charts`` (every chart) and ``/-/charts/NAME`` (one), with
    ``?since=`` (an ISO day or time) passed on to their queries."""
    name, _ = await index_database(datasette, request)
    wanted = request.url_vars.get("name")
    if wanted is not None and wanted not in web_charts.BY_NAME:
        raise NotFound("No such chart")
    chosen = [web_charts.BY_NAME[wanted]] if wanted else web_charts.CHARTS
    since = (request.args.get("since") or "").strip()
    return await render(datasette, request, "session_charts.html", {
        "database": name, "title": chosen[0].query.title if wanted else "Charts",
        "one": wanted is not None, "since": since,
        "health_url": datasette.urls.path("/-/session-health"),
        **_charts_context(datasette, name, chosen, since)})


async def index_page(datasette, request):
    """``/``: the health page when a session index is attached (as at
    ``/-/session-health``), else Datasette's own index (the plugin is in
    every Datasette)."""
    for db_name in datasette.databases:
        if await is_session_index(datasette, db_name):
            return await health_page(datasette, request)
    scope = dict(request.scope, url_route={"kwargs": {"format": None}})
    return await IndexView(datasette).get(Request(scope, request.receive))


async def search_page(datasette, request):
    """``/-/search?q=``: what was said, in every session (the search
    command's query, search.search), newest first, each hit with its
    session's title and page; snippets escaped, matches in <mark>."""
    name, db = await index_database(datasette, request)
    query = (request.args.get("q") or "").strip()
    found = await _search(datasette, db, query, None, SEARCH_LIMIT)
    hits, note = found["hits"], found["note"]
    ids = sorted({h["session_id"] for h in hits if h["session_id"]})
    titles = {r["session_id"]: signals.plain_title(r["title"]) for r in await db.execute(
        SESSION_TITLES_SQL, {"ids": json.dumps(ids)})} if ids else {}
    records_url = datasette.urls.table(name, "records") + "/"
    return await render(datasette, request, "session_search.html", {
        "database": name, "q": query, "note": note, "limit": SEARCH_LIMIT,
        "hits": [dict(h, title=titles.get(h["session_id"]) or "",
                      session_url=datasette.urls.path(session_path(h["session_id"]))
                      + "?" + urlencode({"q": query}) if h["session_id"] else None,
                      record_url=f"{records_url}{int(h['record_id'])}")
                 for h in hits]}, status=found["status"])


async def session_lookup(datasette, request):
    """``/-/sessions?session_id=...``: the session's page (a form's target)."""
    session_id = (request.args.get("session_id") or "").strip()
    if not session_id:
        return Response.redirect(datasette.urls.path("/-/session-health"))
    return Response.redirect(datasette.urls.path(session_path(session_id)))


@bounded
async def session_page(datasette, request):
    session_id = unquote(request.url_vars["session_id"])
    name, db = await index_database(datasette, request)
    params = {"session_id": session_id}
    session = (await db.execute(SESSION_SQL, params)).first()
    files = [dict(r) for r in await db.execute(SESSION_FILES_SQL, params)]
    copies = {r["file_id"]: dict(r) for r in await db.execute(SESSION_MAIN_COPIES_SQL, params)} \
        if sum(f["kind"] == "main" for f in files) > 1 else {}
    host_copies = [dict(r) for r in await db.execute(SESSION_HOST_COPIES_SQL, params)]
    prompts = [dict(r) for r in await db.execute(SESSION_PROMPTS_SQL, params)]
    unwritten = (await db.execute(SESSION_UNWRITTEN_SQL, params)).first()
    unwritten = dict(unwritten) if unwritten else None
    if session is None and not files:
        return await _missing_session_page(datasette, request, name, db, session_id, prompts,
                                           unwritten)
    agent = (await db.execute(agents.SESSION_AGENT_SQL, params)).first()
    if agent is not None:   # a Codex or Gemini CLI session: its conversation, no verdict
        return await _agent_session_page(datasette, request, db, session_id, agent[0],
                                         dict(session) if session else {}, files)
    file = _chosen_file(request, session, files)
    fid = {"file_id": file["id"]}
    # The layout (its queries, then Python) and the summary's views read
    # different things: two lanes side by side on Datasette's SQL threads.
    (tree, causes, start), summary = await asyncio.gather(
        _layout(db, fid, file, request), _summary(datasette, db, fid, params, request))
    (others, splices, breaks, generations, refused, compactions, verdict, forks, found, title,
     changes) = summary
    verdict = dict(verdict) if verdict else {"verdict": "missing", "cause": "never_seen",
                                             "reason": "the session is not in sessions yet",
                                             "fix": None}
    # A repaired download only where a repair changes something.
    repairable = changes and verdict["cause"] not in ("synthetic_tail_uncuttable",
                                                      "thinking_uncuttable")
    size = web_tree.WINDOW
    shown = web_tree.window(tree, start, size)
    in_window = {n.row["uuid"] for n in shown["nodes"]}

    records_url = datasette.urls.table(name, "records") + "/"

    def row_url(record_id):  # records.id is an integer: nothing to encode
        return f"{records_url}{int(record_id)}"

    page = datasette.urls.path(session_path(session_id))
    here = {"file": file["id"], "database": name}

    def window_url(first):
        return page + "?" + urlencode(dict(here, start=first))

    def uuid_anchor(uuid):
        """A record's link: its anchor, on the window that holds it."""
        anchor = "#u-" + quote(uuid or "", safe="")
        if uuid in in_window:
            return anchor
        return page + "?" + urlencode(dict(here, at=uuid or "")) + anchor

    total = tree["counts"]["nodes"]
    windows = {"first": start + 1 if total else 0, "last": min(start + size, total),
               "total": total,
               "previous": window_url(max(0, start - size)) if start > 0 else None,
               "next": window_url(start + size) if start + size < total else None,
               "first_url": window_url(0),
               "last_url": window_url(max(0, total - 1) - max(0, total - 1) % size)}
    by_cause = {}
    for cause in causes.values():
        by_cause[cause] = by_cause.get(cause, 0) + 1
    queries = {q: datasette.urls.query(name, q) + "?" + urlencode(params)
               for q in ("session_health", "resume_chain", "session_orphans", "session_files")}
    return await render(datasette, request, "session_tree.html", {
        "session_id": session_id,
        "title": signals.plain_title(title["title"]) if title else "",
        "search": found,
        "session": dict(session) if session else {},
        "database": name,
        "files": [dict(f, url=page + "?" + urlencode({"file": f["id"], "database": name}),
                       current=f["id"] == file["id"], main_copy=copies.get(f["id"])) for f in files],
        "main_rule": session["main_file_rule"] if session else None,
        "copies_url": datasette.urls.table(name, "session_main_copies") + "?" + urlencode(params),
        "host_copies": host_copies,
        "host_copies_url": datasette.urls.table(name, "host_copies") + "?" + urlencode(params),
        "file": file,
        "leaves_differ": file["resume_leaf_uuid"] != file["sdk_leaf_uuid"],
        "cli_version": resume.CLI_VERSION,
        "uuid_anchor": uuid_anchor,
        "window": windows,
        "counts": tree["counts"],
        "by_cause": sorted(by_cause.items(), key=lambda kv: -kv[1]),
        "colours": CAUSE_COLOURS,
        "splices": splices,
        "thinking_latest": [r for r in refused if r["latest"]],
        "thinking_earlier": [r for r in refused if not r["latest"]],
        "thinking_url": datasette.urls.table(name, "thinking_faults") + "?" + urlencode(
            {"file_id": file["id"]}),
        "breaks": breaks,
        "others": others,
        "top": web_tree.render(shown["top"], row_url),
        "spine": web_tree.render(shown["spine"], row_url),
        "groups": [(label, web_tree.render(units, row_url)) for label, _, units in shown["groups"]],
        "record_url": datasette.urls.path("/-/session-record/"),
        "record_query": _db_query(name),
        "queries": queries,
        "orphans_url": datasette.urls.table(name, "orphans") + "?" + urlencode(
            {"file_id": file["id"]}),
        "download_url": datasette.urls.path(f"/-/session-download/{int(file['id'])}/"),
        "generations": generations,
        "repairable": repairable,
        "verdict": verdict,
        "repair_plan_url": datasette.urls.table(name, "repair_plan") + "?" + urlencode(
            {"file_id": file["id"]}),
        "prompts": prompts,
        "unwritten": unwritten,
        "unwritten_url": datasette.urls.table(name, "unwritten_transcripts"),
        "forks": [dict(r, url=datasette.urls.path(session_path(
            r["parent_session_id"] if r["session_id"] == session_id else r["session_id"])))
            for r in forks],
        "forks_url": datasette.urls.table(name, "session_forks"),
        "compactions": compactions,
        "compactions_url": datasette.urls.table(name, "compaction_segments") + "?" + urlencode(
            {"file_id": file["id"]}),
    }, status=found["status"])


async def _missing_session_page(datasette, request, name, db, session_id, prompts, unwritten):
    """A session id the index holds no transcript of: its verdict (a
    session_verdicts row: history.jsonl and the session folder know it;
    else, when the index names it elsewhere, check's: missing, never_seen)
    and what the index holds of it: its prompts, the runs that name it, its
    stale reference, its records in other sessions' transcripts. 404 when
    the index knows nothing of it."""
    params = {"session_id": session_id}
    verdict = (await db.execute(verdicts.SESSION_VERDICT_SQL, params)).first()
    runs = [dict(r) for r in await db.execute(SESSION_EXECUTIONS_SQL, params)]
    stale = (await db.execute(SESSION_STALE_REF_SQL, params)).first()
    elsewhere = [dict(r, url=datasette.urls.path(session_path(r["file_session_id"])) + "?"
                      + urlencode({"file": r["file_id"], "database": name}))
                 for r in await db.execute(SESSION_RECORDS_ELSEWHERE_SQL, params)]
    if verdict is None and (prompts or runs or stale or elsewhere):
        verdict = (await db.execute(verdicts.CHECK_VERDICT_SQL,
                                    verdicts.unseen_subject(session_id))).first()
    return await render(datasette, request, "session_tree.html", {
        "session_id": session_id, "missing": True, "prompts": prompts,
        "unwritten": unwritten, "verdict": dict(verdict) if verdict else None,
        "runs": runs, "stale": dict(stale) if stale else None, "elsewhere": elsewhere,
        "runs_url": datasette.urls.table(name, "executions"),
        "stale_url": datasette.urls.table(name, "stale_session_refs"),
        "unwritten_url": datasette.urls.table(name, "unwritten_transcripts"),
        "sessions_url": datasette.urls.table(name, "sessions")},
        status=200 if verdict else 404)


async def _layout(db, fid, file, request):
    """The session page's tree of the file ``fid``: laid out from its
    records' parent links (web_tree.build), the window the request asks for
    given the details of the records it draws. Returns (tree, causes
    {uuid: orphan cause}, the window's first place)."""
    limit = PAGE_TIME_LIMIT_MS
    rows = await db.execute(web_tree.TREE_NODES_SQL, fid, custom_time_limit=limit)
    ancestry = await db.execute(web_tree.ANCESTRY_SQL, fid, custom_time_limit=limit)
    causes = {r["uuid"]: r["cause"] for r in await db.execute(web_tree.ORPHAN_CAUSES_SQL, fid)}
    tree = web_tree.build(rows, ancestry, causes, file)
    size = web_tree.WINDOW
    start = web_tree.window_start(tree, _int_arg(request, "start"), size, request.args.get("at"))
    drawn = web_tree.window_nodes(tree, start, size)
    web_tree.attach_details(drawn, await db.execute(
        web_tree.NODE_DETAILS_SQL, {"ids": json.dumps([n.row["id"] for n in drawn])}))
    return tree, causes, start


async def _summary(datasette, db, fid, params, request):
    """The session page's summary of the file ``fid`` and its session, the
    whole file's on every window: its other records, splices, breaks,
    generations, refused thinking, compactions, the session's verdict row
    (or None), forks, the search of ``?q=``, the title row (or None) and
    whether a repair changes something in the file (its splices, refused
    thinking, a truncation, or a poisoned tail: POISONED_TAIL_SQL, asked in
    this lane, beside the layout, and only when nothing else says so)."""
    others = [dict(r) for r in await db.execute(web_tree.OTHER_RECORDS_SQL, fid)]
    splices = [dict(r) for r in await db.execute(FILE_SPLICES_SQL, fid)]
    breaks = (await db.execute(FILE_BREAKS_SQL, fid)).first()[0]
    generations = [dict(r) for r in await db.execute(FILE_GENERATIONS_SQL, fid)]
    refused = [dict(r) for r in await db.execute(FILE_THINKING_SQL, fid)]
    compactions = [dict(r) for r in await db.execute(FILE_COMPACTIONS_SQL, fid)]
    verdict = (await db.execute(verdicts.SESSION_VERDICT_SQL, params)).first()
    forks = [dict(r) for r in await db.execute(SESSION_FORKS_SQL, params)]
    found = await _session_search(datasette, db, params["session_id"], request.args.get("q"))
    title = (await db.execute(SESSION_TITLES_SQL,
                              {"ids": json.dumps([params["session_id"]])})).first()
    changes = (bool(splices) or bool(refused) or any(c["truncated"] for c in compactions)
               or (await db.execute(POISONED_TAIL_SQL, fid)).first()[0] > 0)
    return (others, splices, breaks, generations, refused, compactions, verdict, forks, found,
            title, changes)


async def _agent_session_page(datasette, request, db, session_id, agent, session, files):
    """Another agent's session (agents.py): its files, to download, and its
    conversation as `show` gives it; the resume checks are Claude Code's."""
    turns = await db.execute_fn(lambda conn: show.agent_conversation(conn, session_id, agent))
    parent = (await db.execute(codex.PARENT_SQL, {"session_id": session_id})).first()
    links = [(what, sid, datasette.urls.path(session_path(sid))) for what, sid in (
        ("subagent of", parent["spawned_by"] if parent else None),
        ("forked from", parent["forked_from"] if parent else None)) if isinstance(sid, str)]
    return await render(datasette, request, "session_agent.html", {
        "parents": links[:1],   # (a subagent spawned with the history is both: say subagent)
        "session_id": session_id, "agent": agent, "session": session, "turns": turns,
        "not_claude_code": agents.NOT_CLAUDE_CODE.format(session=session_id, agent=agent),
        "files": [dict(f, download_url=datasette.urls.path(
            f"/-/session-download/{int(f['id'])}/")) for f in files]})


async def _session_search(datasette, db, session_id: str, query: str | None) -> dict:
    """The session page's search field: ``?q=`` searched within the session."""
    return await _search(datasette, db, (query or "").strip(), session_id, SESSION_SEARCH_LIMIT)


async def _search(datasette, db, query: str, session_id: str | None, limit: int) -> dict:
    """``query`` searched (search.search), within the session when one is
    given, under SEARCH_TIME_LIMIT_MS: {q, hits, note (for the reader, or
    None), status (400 for a query search refuses: too long, too many
    terms; else 200)}, each hit's snippet escaped with its matches in
    <mark>."""
    if not query:
        return {"q": "", "hits": [], "note": None, "status": 200}
    shown = search.clean_query(query)[:search.MAX_QUERY_CHARS]

    def run(conn):
        try:
            return search.search(_Conn(conn), query, session=session_id, limit=limit), None, 200
        except search.SearchNotEnabled:
            return [], "Search is not enabled on this index: run session-index search --enable.", 200
        except search.EmptyQuery:
            return [], "Nothing to search for in that query.", 200
        except search.QueryRefused as exc:
            return [], f"Not searched: {exc}.", 400

    try:
        hits, note, status = await execute_limited(datasette, db, run, SEARCH_TIME_LIMIT_MS)
    except QueryInterrupted:
        hits, status = [], 200
        note = (f"The search took longer than {SEARCH_TIME_LIMIT_MS:,} ms and was stopped: "
                "search for fewer or rarer words.")
    return {"q": shown, "note": note, "status": status,
            "hits": [dict(h, snippet=search.html_snippet(h["snippet"])) for h in hits]}


def _int_arg(request, name: str) -> int:
    """A non-negative integer argument of the URL (0 when absent or not one)."""
    text = request.args.get(name) or ""
    return int(text) if re.fullmatch(r"[0-9]{1,18}", text) else 0


def _chosen_file(request, session, files):
    wanted = request.args.get("file")
    for f in files:
        if wanted and str(f["id"]) == wanted:
            return f
    if wanted:
        raise NotFound("That file is not a transcript of this session")
    main_id = session["main_file_id"] if session else None
    for f in files:
        if f["id"] == main_id:
            return f
    return files[0]


SQLITE_MAX_INT = (1 << 63) - 1


def url_int(text: str, what: str) -> int:
    """A row id from a URL: NotFound when SQLite's integer cannot hold it
    (binding it would raise OverflowError: a 500)."""
    n = int(text)
    if n > SQLITE_MAX_INT:
        raise NotFound(f"No such {what}")
    return n


@bounded
async def record_raw(datasette, request):
    """A record's line, pretty-printed, as text/plain (the session page shows
    it with textContent, never as HTML)."""
    name, db = await index_database(datasette, request)
    await datasette.ensure_permissions(request.actor, [("view-table", (name, "records"))])
    row = (await db.execute(RECORD_SQL, {"id": url_int(request.url_vars["record_id"], "record")})).first()
    if row is None:
        raise NotFound("No such record")
    raw = row["raw"]
    text = pretty_json(raw) if len(raw) <= RAW_PRETTY_MAX else raw
    return Response.text(text, headers={"X-Content-Type-Options": "nosniff",
                                        "Cache-Control": "no-store"})


class _Conn:
    """The library's functions take an object with ``.conn``."""

    def __init__(self, conn):
        self.conn = conn


@bounded
async def download(datasette, request):
    """A transcript file rebuilt from the index: ``original`` (byte for byte as
    last ingested; ``?generation=N``: as it was in generation N) or
    ``repaired`` (repair_plan applied, the main transcript)."""
    from indexer.index import generations   # (the download route only: the plugin loads in every Datasette)
    from indexer.repair import repair   # (the download route only: repair loads the parser and ingest)

    name, db = await index_database(datasette, request)
    await datasette.ensure_permissions(request.actor, [("view-table", (name, "records"))])
    which = request.url_vars["which"]
    row = (await db.execute(DOWNLOAD_FILE_SQL, {"id": url_int(request.url_vars["file_id"], "transcript file")})).first()
    if row is None or (which == "repaired" and not row["is_main"]):
        raise NotFound("No such transcript file")
    generation = request.args.get("generation")
    if generation is not None and (which != "original" or not generation.isdigit()
                                   or int(generation) > SQLITE_MAX_INT):
        raise NotFound("No such generation of the transcript")

    def build(conn):
        index = _Conn(conn)
        if which == "original":
            try:
                return b"".join(generations.generation_bytes(
                    conn, row["id"], int(generation) if generation else None))
            except generations.UnknownGeneration:
                return None
        return repair.repaired_bytes(index, repair.plan(index, row["session_id"]))

    data = await execute_limited(datasette, db, build)
    if data is None:
        raise NotFound("No such generation of the transcript")
    filename = Path(row["path"]).name.replace('"', "")
    if which == "repaired":
        filename = filename.replace(".jsonl", ".repaired.jsonl")
    elif generation:
        filename = filename.replace(".jsonl", f".generation-{int(generation)}.jsonl")
    return Response(data, content_type="application/x-ndjson", headers={
        "Content-Disposition": f'attachment; filename="{quote(filename)}"',
        "X-Content-Type-Options": "nosniff"})
