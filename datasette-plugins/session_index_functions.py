"""session-index SQL functions, for the pages and for operators' own queries:
is_synthetic_message_id(id) and json_excerpt(raw, length)."""

from datasette import hookimpl

from indexer.web_format import is_synthetic_message_id, json_excerpt


@hookimpl
def prepare_connection(conn):
    conn.create_function("is_synthetic_message_id", 1, is_synthetic_message_id,
                         deterministic=True)
    conn.create_function("json_excerpt", 2, json_excerpt, deterministic=True)
