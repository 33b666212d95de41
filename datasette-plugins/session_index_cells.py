"""session-index cells: session ids and uuids link to the session page,
synthetic message ids, causes and error classes get a badge, raw JSON is
pretty-printed. Only in databases the metadata marks as a session index;
everything is escaped (indexer/web_cells.py)."""

from datasette import hookimpl

from indexer import web_cells
from indexer.web_metadata import PLUGIN


@hookimpl
def render_cell(row, value, column, table, database, datasette):
    if not datasette.plugin_config(PLUGIN, database=database, fallback=False):
        return None
    return web_cells.render_cell(row, value, column, table, database, datasette.urls)
