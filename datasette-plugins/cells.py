"""How a cell of the index renders in Datasette's tables and query results
(the ``render_cell`` hook). Returns None to leave a cell to Datasette.

Every value is escaped by ``Markup.format``; links are built from ids that
are percent-encoded, never from text that could carry a ``javascript:`` URL.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from markupsafe import Markup

from indexer.transcripts import records

from session_index_web.format import CAUSE_COLOURS, ERROR_CLASS_COLOURS, STATUS_COLOURS, badge, json_block, session_path

# Columns holding a session id: each links to its session page.
SESSION_COLUMNS = frozenset({"session_id", "init_session_id", "resume_target"})
# Columns holding a record uuid of the row's session: each links to that
# record on the session page (the window of it that draws the record).
UUID_COLUMNS = frozenset({"uuid", "parent_uuid", "logical_parent_uuid", "branch_point_uuid",
                          "resume_leaf_uuid", "sdk_leaf_uuid", "api_error_uuid"})
# Columns whose words get a coloured badge.
BADGE_COLUMNS = {
    "cause": CAUSE_COLOURS,
    "error_class": ERROR_CLASS_COLOURS,
    "last_execution_class": ERROR_CLASS_COLOURS,
    "status": STATUS_COLOURS,
    "reason": STATUS_COLOURS,
}
# 0/1 columns that are worth a badge when they say something is wrong.
FLAG_BADGES = {
    "leaves_agree": (0, "leaves differ", "#c62828"),
    "is_api_error": (1, "api error", "#ad1457"),
    "is_error": (1, "error", "#c62828"),
    "at_resume_tail": (1, "poisoned tail", "#ad1457"),
}
# Every column render_cell acts on: a cell of any other is Datasette's at
# once (a canned query's HTML page asks for up to 1,000 rows of cells).
RENDERED_COLUMNS = (SESSION_COLUMNS | UUID_COLUMNS | frozenset(BADGE_COLUMNS)
                    | frozenset(FLAG_BADGES) | {"message_id", "raw"})
# The badge of each word of each badge column, made once.
_BADGES = {(column, word): badge(word, colour, column)
           for column, colours in BADGE_COLUMNS.items() for word, colour in colours.items()}
_LINK = Markup('<a href="{}">{}</a>')


def _plain(value):
    """A cell's value: a table page hands render_cell a foreign key's cell
    expanded ({"value": 33, "label": "33"}: records.file_id)."""
    return value["value"] if isinstance(value, dict) and "value" in value else value


def render_cell(row, value, column, table, database, urls):
    if column not in RENDERED_COLUMNS:
        return None
    if column in SESSION_COLUMNS and isinstance(value, str) and value:
        return _LINK.format(urls.path(session_path(value)), value)
    keys = row.keys() if hasattr(row, "keys") else ()
    if column in UUID_COLUMNS and isinstance(value, str) and value \
            and "session_id" in keys and row["session_id"]:
        # ?at= opens the window of the session page that draws the record.
        args = {"file": _plain(row["file_id"])} if "file_id" in keys else {}
        query = "?" + urlencode(dict(args, at=value))
        href = urls.path(session_path(row["session_id"])) + query + "#u-" + quote(value, safe="")
        return _LINK.format(href, value)
    if column == "message_id" and isinstance(value, str) and "model" in keys \
            and records.is_synthetic(row["type"] if "type" in keys else "assistant", row["model"]):
        return Markup("{} {}").format(
            badge("synthetic", "#ad1457", "a synthetic placeholder (model <synthetic>)"), value)
    if column in BADGE_COLUMNS and isinstance(value, str) and value:
        return _BADGES.get((column, value))
    if column in FLAG_BADGES and value == FLAG_BADGES[column][0]:
        _, text, colour = FLAG_BADGES[column]
        return Markup("{} {}").format(value, badge(text, colour, column))
    if column == "raw" and isinstance(value, str):
        full = None
        if table == "records" and "id" in keys:
            full = urls.row(database, "records", str(row["id"]), format="json")
        return json_block(value, full)
    return None
