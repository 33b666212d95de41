"""The plugin's Datasette hooks, all of them, each a few lines that hand the
work to the package's modules: the pages and their routes (pages.py), the
menu link and stylesheet, the canned queries of any database that is a
session index (metadata.py), the rendering of its cells (cells.py), the
SQL functions for the pages and operators' own queries:
is_synthetic(type, model) and json_excerpt(raw, length) (format.py), and
the answer to an error (errors.py). Everything else acts only in databases
that are session indexes."""

import sqlite3

from datasette import hookimpl

from indexer.index import search
from indexer.signals.listings import plain_title
from session_index_web import cells, errors, metadata as web_metadata, pages as web_pages
from session_index_web.format import is_synthetic, json_excerpt, relative_time, when


@hookimpl
def register_routes():
    return [
        (r"^/-/session-health$", web_pages.health_page),
        (r"^/-/sessions$", web_pages.session_lookup),
        (r"^/-/sessions/(?P<session_id>[^/]+)$", web_pages.session_page),
        (r"^/-/session-record/(?P<record_id>[0-9]+)$", web_pages.record_raw),
        (r"^/-/session-download/(?P<file_id>[0-9]+)/(?P<which>original|repaired)$",
         web_pages.download),
        (r"^/$", web_pages.index_page),
        (r"^/-/charts$", web_pages.charts_page),
        (r"^/-/charts/(?P<name>[^/]+)$", web_pages.charts_page),
        (r"^/-/search$", web_pages.search_page),
    ]


@hookimpl
def menu_links(datasette):
    return [{"href": datasette.urls.path("/-/session-health"), "label": "Session health"}]


@hookimpl
def extra_css_urls(datasette):
    return [datasette.urls.static_plugins(web_metadata.PLUGIN, "session-index.css")]


@hookimpl
def permission_allowed(datasette, actor, action, resource):
    """The *_definition views (the recursive specification, seconds per
    query on a large index) are kept out of the listings and their table
    pages; SQL can still name them."""
    if action != "view-table" or not isinstance(resource, tuple) \
            or not resource[1].endswith("_definition"):
        return None

    async def inner():
        if await web_pages.is_session_index(datasette, resource[0]):
            return False
        return None

    return inner


@hookimpl
def canned_queries(datasette, database):
    async def inner():
        if await web_pages.is_session_index(datasette, database):
            return web_metadata.canned_queries()
        return {}

    return inner


@hookimpl
def render_cell(row, value, column, table, database, datasette):
    # Called for every cell of a page (a canned query's HTML page holds up
    # to 1,000 rows): once the database is known, answered at once, with no
    # coroutine for Datasette to await (bench/web_speed.py --only resume_chain);
    # a column it never renders is left to Datasette first of all.
    if column not in cells.RENDERED_COLUMNS:
        return None
    known = web_pages.known_session_index(datasette, database)
    if known is not None:
        return cells.render_cell(row, value, column, table, database, datasette.urls) \
            if known else None

    async def inner():
        if not await web_pages.is_session_index(datasette, database):
            return None
        return cells.render_cell(row, value, column, table, database, datasette.urls)

    return inner


@hookimpl(hookwrapper=True)
def handle_exception(datasette, request, exception):
    """Every error is answered as Datasette answers it, without the default
    handler's rich traceback (errors.py says why): the plugin's answer takes
    the default's place among the hook's answers."""
    outcome = yield
    outcome.force_result(errors.instead_of_default(outcome.get_result(), datasette, request,
                                                   exception))


@hookimpl
def prepare_jinja2_environment(env):
    """The pages' filters: a session title as a person reads it (markup
    stripped) and a stored time with how long ago it was."""
    env.filters["si_title"] = plain_title
    env.filters["si_when"] = when
    env.filters["si_ago"] = relative_time


@hookimpl
def extra_template_vars(database, request, datasette):
    """Every page of a Datasette with a session index: the global search
    box's target (templates/base.html) and, on a session index's table or
    view page, that its descriptions fold away (templates/table.html)."""
    async def inner():
        names = [n for n in datasette.databases
                 if await web_pages.is_session_index(datasette, n)]
        if not names:
            return {}
        target = database if database in names else names[0]
        return {"si_search_url": datasette.urls.path("/-/search"),
                "si_search_database": target,
                # the query as search reads it (a NUL is a space, at most
                # MAX_QUERY_CHARS): a hostile ?q= is not echoed whole
                "si_search_q": search.clean_query(request.args.get("q") or "")[
                    :search.MAX_QUERY_CHARS] if request is not None else "",
                "si_index": database in names}

    return inner


@hookimpl
def prepare_connection(conn, database, datasette):
    conn.create_function("is_synthetic", 2, is_synthetic, deterministic=True)
    conn.create_function("json_excerpt", 2, json_excerpt, deterministic=True)
    config = datasette.plugin_config(web_metadata.PLUGIN, database=database) or {}
    if config.get("sql_value_limit_bytes"):   # (metadata.SQL_MEMORY_LIMITS)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, int(config["sql_value_limit_bytes"]))
    if config.get("sql_heap_limit_bytes"):
        conn.execute(f"PRAGMA hard_heap_limit = {int(config['sql_heap_limit_bytes'])}")
