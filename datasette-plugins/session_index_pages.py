"""session-index pages: the health page (in the menu), a session's tree, a
record's raw JSON, downloads; the canned queries of any database that is a
session index; the stylesheet. The handlers are in indexer/web_pages.py."""

from datasette import hookimpl

from indexer import web_metadata, web_pages


@hookimpl
def register_routes():
    return [
        (r"^/-/session-health$", web_pages.health_page),
        (r"^/-/sessions$", web_pages.session_lookup),
        (r"^/-/sessions/(?P<session_id>[^/]+)$", web_pages.session_page),
        (r"^/-/session-record/(?P<record_id>[0-9]+)$", web_pages.record_raw),
        (r"^/-/session-download/(?P<file_id>[0-9]+)/(?P<which>original|repaired)$",
         web_pages.download),
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
