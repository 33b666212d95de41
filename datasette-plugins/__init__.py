"""The session-index Datasette plugin, installed as ``indexer.datasette_plugins``
and registered by the ``datasette`` entry point in pyproject.toml: ``pip
install session-index`` and any ``datasette FILE.db`` that is a session index
has the pages, the cell rendering, the SQL functions and the canned queries;
``session-index serve`` is the same Datasette with the package's metadata
(descriptions, facets). Its templates and stylesheet are served as Datasette
serves a plugin's (``templates/``, ``static/`` beside this file)."""

from .session_index_cells import render_cell
from .session_index_functions import prepare_connection
from .session_index_pages import (canned_queries, extra_css_urls, menu_links,
                                  permission_allowed, register_routes)

__all__ = ["canned_queries", "extra_css_urls", "menu_links", "permission_allowed",
           "prepare_connection", "register_routes", "render_cell"]
