"""The session-index Datasette plugin: the web UI, one package (hooks.py, the
pages, templates/ and static/ together), installed as ``session_index_web``
from the top-level ``datasette-plugins/`` folder and registered by the
``datasette`` entry point in pyproject.toml: ``pip install session-index`` and
any ``datasette FILE.db`` that is a session index has the pages, the cell
rendering, the SQL functions and the canned queries; ``session-index serve``
is the same Datasette with the package's metadata (descriptions, facets).
The core (``indexer``) never imports it."""

from session_index_web.hooks import (canned_queries, extra_css_urls, extra_template_vars,
                                     handle_exception, menu_links, permission_allowed,
                                     prepare_connection, prepare_jinja2_environment,
                                     register_routes, render_cell)

__all__ = ["canned_queries", "extra_css_urls", "extra_template_vars", "handle_exception",
           "menu_links", "permission_allowed", "prepare_connection",
           "prepare_jinja2_environment", "register_routes", "render_cell"]
