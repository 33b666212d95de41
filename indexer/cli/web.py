"""Datasette on the index: the plugin (``session_index_web``) and the
metadata, the checks before serving (the index, its file name, the port),
for ``serve``, ``demo`` and ``serve --watch`` (service.py)."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from indexer.index import db as dbmod
from indexer.index.connection import IndexError_

# Facets over a million records take longer than Datasette's default 200 ms.
# The *_definition views are the specification, not the fast path: a few
# seconds to plan and run, so the SQL time limit allows for them. No
# suggested facets: Datasette looks for them with a query per column (is it
# a date? JSON?), each reading up to every row of the table or view: 20-50
# ms a column and about 2 s of the usage page's 2.8 s at 1M records. The
# facets metadata.yml names are still shown, and ?_facet= adds any.
SETTINGS = {"facet_time_limit_ms": 1000, "sql_time_limit_ms": 5000, "suggest_facets": False}
# The plugin module the datasette entry point registers (pyproject.toml).
PLUGIN_MODULE = "session_index_web"


class WebError(Exception):
    """The web UI cannot start (no plugins, no index, port taken)."""


def check_plugin() -> None:
    """WebError unless Datasette has loaded the plugin from its entry point
    (the package is installed, not only checked out)."""
    from datasette.plugins import pm   # (Datasette: only to serve, not for the checks before it)

    if not any(getattr(p, "__name__", None) == PLUGIN_MODULE for p in pm.get_plugins()):
        raise WebError("the session-index Datasette plugin is not registered: install the "
                       "package (pip install .) so its datasette entry point is there")


def make_datasette(db_path, immutable: bool = False, **kwargs):
    """A Datasette on the index at ``db_path`` (mutable: not ``-i``) with
    the plugin, as ``datasette FILE.db`` has it once the package is
    installed, and the metadata (descriptions, facets) naming the database
    as Datasette does (the file's stem). ``immutable`` (prepare_index's):
    served as ``datasette -i`` serves it."""
    from datasette.app import Datasette   # (Datasette: only to serve, not for the checks before it)
    from session_index_web import metadata as web_metadata   # (it loads Datasette too: only to serve)

    check_plugin()
    files = {"immutables": [str(db_path)]} if immutable else {"files": [str(db_path)]}
    return Datasette(**files,
                     metadata=web_metadata.metadata(Path(db_path).stem, queries=False),
                     settings=dict(SETTINGS), **kwargs)


# Characters Datasette 0.65 puts unescaped into the foreign-key links of a
# table page (datasette/views/table.py, LINK_WITH_LABEL / LINK_WITH_VALUE
# format the database name into an href as it is): a file named
# x"><img src=x onerror=...>.db would run script there.
MARKUP_CHARACTERS = set('<>"\'&`')


def check_database_name(db_path) -> None:
    """WebError when the database name Datasette derives from the file (its
    stem) holds markup or control characters."""
    name = Path(db_path).stem
    if any(c in MARKUP_CHARACTERS or ord(c) < 32 for c in name):
        raise WebError(
            f"refusing to serve {str(db_path)!r}: its name holds markup characters, which "
            "Datasette 0.65 puts unescaped into the foreign-key links of table pages; "
            "rename the file (or serve a symlink with a plain name)")


def prepare_index(db_path) -> bool:
    """Fail early on a missing or foreign file, or a name Datasette would
    render unescaped; bring an older index's schema and views up to date,
    as ``status`` does (db.open_index: not an index this user may only
    read). Whether it must be served immutable: this user may not make its
    -shm file and no writer has it open (connection.connect_readonly)."""
    check_database_name(db_path)
    try:
        db = dbmod.open_index(db_path)
        db.conn.close()
    except IndexError_ as exc:
        raise WebError(str(exc)) from None
    except Exception as exc:  # sqlite3.DatabaseError: not an index
        raise WebError(f"{db_path} is not a usable session index: {exc}") from None
    return dbmod.read_only(db) and db.immutable


def check_port(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise WebError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
