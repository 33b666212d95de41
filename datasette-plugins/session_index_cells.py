"""session-index cells: session ids and uuids link to the session page,
synthetic message ids, causes and error classes get a badge, raw JSON is
pretty-printed. Only in databases that are session indexes; everything is
escaped (indexer/web_cells.py)."""

from datasette import hookimpl

from indexer import web_cells, web_pages


@hookimpl
def render_cell(row, value, column, table, database, datasette):
    async def inner():
        if not await web_pages.is_session_index(datasette, database):
            return None
        return web_cells.render_cell(row, value, column, table, database, datasette.urls)

    return inner
