"""``session-index serve`` and ``session-index demo``: Datasette on the index,
with the metadata (datasette-plugins/metadata.py) and the plugins
(``datasette-plugins/``), whether the package runs from a checkout or from an
installed wheel (which carries the plugin as the package ``session_index_web``).

The index is served as a live, mutable database: ingest keeps writing to it
(WAL), and every page reads the latest commit.
"""

from __future__ import annotations

import asyncio
import ipaddress
import shutil
import socket
import tempfile
from pathlib import Path

import click

from indexer.index import db as dbmod
from indexer.index import migrations
from indexer.index.connection import IndexError_
from indexer.cli import demo_data
from session_index_web import metadata as web_metadata
from indexer.cli.commands import _nats_options, consumer_option, hosts_option, nats_auth_options

EXIT_UNUSABLE = 3
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8001
# Facets over a million records take longer than Datasette's default 200 ms.
# The *_definition views are the specification, not the fast path: a few
# seconds to plan and run, so the SQL time limit allows for them.
SETTINGS = {"facet_time_limit_ms": 1000, "sql_time_limit_ms": 5000}
# The plugin module the datasette entry point registers (pyproject.toml).
PLUGIN_MODULE = "session_index_web"


class Failure(click.ClickException):
    exit_code = EXIT_UNUSABLE


class WebError(Exception):
    """The web UI cannot start (no plugins, no index, port taken)."""


def check_plugin() -> None:
    """WebError unless Datasette has loaded the plugin from its entry point
    (the package is installed, not only checked out)."""
    from datasette.plugins import pm

    if not any(getattr(p, "__name__", None) == PLUGIN_MODULE for p in pm.get_plugins()):
        raise WebError("the session-index Datasette plugin is not registered: install the "
                       "package (pip install .) so its datasette entry point is there")


def make_datasette(db_path, **kwargs):
    """A Datasette on the index at ``db_path`` (mutable: not ``-i``) with
    the plugin, as ``datasette FILE.db`` has it once the package is
    installed, and the metadata (descriptions, facets) naming the database
    as Datasette does (the file's stem)."""
    from datasette.app import Datasette

    check_plugin()
    return Datasette([str(db_path)],
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


def prepare_index(db_path) -> None:
    """Fail early on a missing or foreign file, or a name Datasette would
    render unescaped; bring an older index's schema and views up to date,
    as ``status`` does."""
    check_database_name(db_path)
    try:
        db = dbmod.open_db(db_path, create=False)
        migrations.upgrade(db)
        db.conn.close()
    except IndexError_ as exc:
        raise WebError(str(exc)) from None
    except Exception as exc:  # sqlite3.DatabaseError: not an index
        raise WebError(f"{db_path} is not a usable session index: {exc}") from None


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


def run_server(db_path, host: str, port: int) -> None:
    """Serve until interrupted."""
    import uvicorn

    ds = make_datasette(db_path)
    asyncio.new_event_loop().run_until_complete(ds.invoke_startup())
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"Serving {db_path} at http://{shown}:{port}/-/session-health", err=True)
    if not is_loopback(host):
        click.echo("warning: listening beyond this machine; anyone who reaches it reads "
                   "every transcript (see the deployment notes)", err=True)
    uvicorn.run(ds.app(), host=host, port=port, log_level="warning", lifespan="on", workers=1)


def demo_folder(directory) -> Path:
    """A folder for the demo: a new temporary one, an empty one, or a
    previous demo's (its index and files are replaced)."""
    if directory is None:
        return Path(tempfile.mkdtemp(prefix="session-index-demo-"))
    path = Path(directory)
    if path.exists() and any(path.iterdir()):
        if not (path / "demo.db").exists():
            raise WebError(f"{path} is not empty and holds no earlier demo: name another folder")
        for sub in ("projects", "logs"):
            shutil.rmtree(path / sub, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    return path


db_option = click.option(
    "--db", "db_path", type=click.Path(dir_okay=False), default=dbmod.default_db_path,
    show_default="$SESSION_INDEX_DB, else sessions.db", help="The index file.")
host_option = click.option("--host", default=DEFAULT_HOST, show_default=True,
                           help="Address to listen on (loopback by default).")
port_option = click.option("--port", default=DEFAULT_PORT, show_default=True, type=int,
                           help="Port to listen on.")


@click.command()
@click.argument("sources", nargs=-1, type=click.Path())
@db_option
@host_option
@port_option
@click.option("--watch", is_flag=True,
              help="Also keep the index current: follow SOURCES as `ingest --watch` does, "
                   "in this process; SIGINT or SIGTERM stops both (exit 0).")
@click.option("--config-dir", type=click.Path(file_okay=False), default=None,
              help="With --watch: Claude Code's config dir, for settings.json and projects/ "
                   "[default: $CLAUDE_CONFIG_DIR (a comma-separated list), else ~/.config/claude and ~/.claude].")
@click.option("--from", "from_url", metavar="nats://HOST:PORT", default=None,
              help="With --watch: also consume what `session-index ship` sends to this NATS "
                   "JetStream server, as `ingest --from --watch` does (without SOURCES, "
                   "only that: a fleet's central index).")
@consumer_option
@hosts_option
@nats_auth_options
def serve(sources, db_path, host, port, watch, config_dir, from_url, consumer, hosts,
          **nats_auth):
    """Browse the index in Datasette, with the session pages.

    Serves the live index (ingest may keep writing) with the metadata, canned
    queries and plugins of this package: /-/session-health, and
    /-/sessions/SESSION_ID for each session's record tree. Listens on
    127.0.0.1 unless --host says otherwise.

    With --watch it is the one long-running process of a live index: it
    creates the index if needed, ingests SOURCES (default
    $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects) and follows them
    while serving, logging as `ingest --watch` does. Exit 3 if the watcher
    cannot go on.

    Example:

    \b
        session-index serve --db sessions.db --port 8001
        session-index serve --watch --db sessions.db
    """
    if sources and not watch:
        raise click.UsageError("SOURCES are followed only with --watch")
    if from_url and not watch:
        raise click.UsageError("--from is followed only with --watch")
    if hosts is not None and not from_url:
        raise click.UsageError("--hosts applies to --from")
    fleet = None
    try:
        check_database_name(db_path)   # before --watch makes the file
        if watch:
            from indexer.cli import service
            from indexer.ingest import watch as watchmod

            try:
                if sources or not from_url:
                    sources = watchmod.default_sources(sources, config_dir)
                dbmod.open_db(db_path).conn.close()   # create or upgrade it
            except (watchmod.WatchError, IndexError_) as exc:
                raise WebError(str(exc)) from None
            if from_url:
                from indexer.ingest import fleet_central as fleet_ingest

                fleet = fleet_ingest.Follower(
                    db_path, _nats_options(from_url, nats_auth), consumer=consumer, hosts=hosts,
                    log=lambda line: watchmod.stderr_log(f"fleet: {line}"))
        prepare_index(db_path)
        check_port(host, port)
        if watch:
            code = service.serve_and_watch(db_path, host, port, sources, config_dir=config_dir,
                                           fleet=fleet)
            if code:
                raise SystemExit(code)
        else:
            run_server(db_path, host, port)
    except WebError as exc:
        raise Failure(str(exc)) from None


@click.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False),
              help="Build it here (default: a new temporary folder).")
@click.option("--no-serve", is_flag=True, help="Build the index, print its path, exit.")
@host_option
@port_option
def demo(directory, no_serve, host, port):
    """Build a demo index with one example of every problem class, and serve it.

    The transcripts, execution logs and session references are made by the
    package (nothing is read from ~/.claude). Prints the index's path.

    Example:

    \b
        session-index demo --port 8001
        session-index demo --dir /tmp/si-demo --no-serve
    """
    try:
        folder = demo_folder(directory)
        if not no_serve:
            check_port(host, port)
        path = demo_data.build_demo(folder)
        click.echo(str(path))
        if not no_serve:
            run_server(path, host, port)
    except WebError as exc:
        raise Failure(str(exc)) from None
