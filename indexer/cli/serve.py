"""``session-index serve`` and ``session-index demo``: Datasette on the index,
with the metadata (datasette-plugins/metadata.py) and the plugins
(``datasette-plugins/``), whether the package runs from a checkout or from an
installed wheel (which carries the plugin as the package ``session_index_web``).

The index is served as a live, mutable database: ingest keeps writing to it
(WAL), and every page reads the latest commit.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import click

from indexer.cli import demo_data, service
from indexer.cli.options import nats_options
from indexer.cli.web import WebError, check_database_name, check_port, is_loopback, \
    make_datasette, prepare_index
from indexer.index import db as dbmod
from indexer.cli.options import (config_dir_option, db_option, from_options, metrics_option,
                                 named_path, port_option)
from indexer.index.connection import IndexError_
from indexer.ingest import watch as watchmod

EXIT_UNUSABLE = 3
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8001


class Failure(click.ClickException):
    exit_code = EXIT_UNUSABLE


def run_server(db_path, host: str, port: int, immutable: bool = False) -> None:
    """Serve until interrupted (``immutable``: prepare_index's)."""
    import uvicorn   # (only to serve: demo --no-serve never starts a server)

    ds = make_datasette(db_path, immutable=immutable)
    asyncio.new_event_loop().run_until_complete(ds.invoke_startup())
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"Serving {db_path} at http://{shown}:{port}/-/session-health", err=True)
    if immutable:
        click.echo(f"note: {db_path} is served as it is now: this user may not write its "
                   "folder (for SQLite's -shm file) and no ingest has it open, so what an "
                   "ingest adds later shows after a restart", err=True)
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


host_option = click.option("--host", default=DEFAULT_HOST, show_default=True,
                           help="Address to listen on (loopback by default).")
listen_port_option = port_option(DEFAULT_PORT, "Port to listen on.")

# What names an index rather than a folder or file to follow: Datasette's
# habit (`datasette serve sessions.db`), so `serve sessions.db` serves it.
DB_SUFFIXES = (".db", ".sqlite", ".sqlite3")
SQLITE_HEADER = b"SQLite format 3\x00"


def names_index(path: str) -> bool:
    """Is this argument an index (a SQLite file, or a file name ending in
    .db, .sqlite or .sqlite3 that is not a folder) rather than a source?"""
    if os.path.isdir(path):
        return False
    if path.endswith(DB_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def index_argument(ctx, sources, db_path, watch):
    """serve's arguments as (sources, db): without --watch the one argument
    is the index (``serve sessions.db``); with it, the argument that names an
    index is the index and the others are followed. An index named both
    ways must be the same file."""
    if watch:
        named = [s for s in sources if names_index(s)]
        sources = tuple(s for s in sources if s not in named)
    else:
        named, sources = list(sources), ()
        if named and os.path.isdir(named[0]):
            raise click.UsageError(f"{named[0]} is a folder: serve DB serves an index; "
                                   "--watch follows folders")
    if len(named) > 1:
        raise click.UsageError("serve takes one index: " + ", ".join(named))
    if not named:
        return sources, db_path
    explicit = ctx.get_parameter_source("db_path") == click.core.ParameterSource.COMMANDLINE
    if explicit and os.path.abspath(named[0]) != os.path.abspath(db_path):
        raise click.UsageError(f"two indexes named: {named[0]} and --db {db_path}")
    return sources, named[0]


@click.command()
@click.argument("args", nargs=-1, type=click.Path(), metavar="[DB] [SOURCES]...")
@db_option
@host_option
@listen_port_option
@click.option("--watch", is_flag=True,
              help="Also keep the index current: follow SOURCES as `ingest --watch` does, "
                   "in this process; SIGINT or SIGTERM stops both (exit 0).")
@config_dir_option("With --watch: ")
@from_options("With --watch: also consume what `session-index ship` sends to this NATS "
              "JetStream server, as `ingest --from --watch` does (without SOURCES, only "
              "that: a fleet's central index).")
@metrics_option
@click.pass_context
def serve(ctx, args, db_path, host, port, watch, config_dir, from_url, consumer, hosts, gap_wait,
          metrics, **nats_auth):
    """Browse the index in Datasette, with the session pages.

    Serves the live index DB (as `datasette serve DB` does; or --db) with the
    metadata, canned queries and plugins of this package: /-/session-health,
    and /-/sessions/SESSION_ID for each session's record tree. Ingest may keep
    writing to it. Listens on 127.0.0.1 unless --host says otherwise.

    With --watch it is the one long-running process of a live index: it
    creates the index if needed, ingests SOURCES (default
    $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects) and follows them
    while serving, logging as `ingest --watch` does; an argument that names
    an index (a SQLite file, or a name ending in .db, .sqlite or .sqlite3) is
    the index, the others are SOURCES. Exit 3 if the watcher cannot go on.

    Example:

    \b
        session-index serve sessions.db -p 8001
        session-index serve --watch sessions.db ~/.claude/projects
    """
    sources, db_path = index_argument(ctx, args, db_path, watch)
    if from_url and not watch:
        raise click.UsageError("--from is followed only with --watch")
    if hosts is not None and not from_url:
        raise click.UsageError("--hosts applies to --from")
    fleet = None
    try:
        check_database_name(db_path)   # before --watch makes the file
        if watch:
            try:
                if sources or not from_url:
                    sources = watchmod.default_sources(sources, config_dir)
                dbmod.open_index(db_path, create=True).conn.close()   # create or upgrade it
            except (watchmod.WatchError, IndexError_) as exc:
                raise WebError(str(exc)) from None
            if from_url:
                from indexer.ingest import fleet_central as fleet_ingest   # (serve --watch --from only: the fleet's modules)

                live = None
                if metrics is not None:
                    from indexer.ingest import fleet_metrics   # (--metrics only: prometheus-client)

                    live = fleet_metrics.Live("central")
                fleet = fleet_ingest.Follower(
                    db_path, nats_options(from_url, nats_auth), consumer=consumer, hosts=hosts,
                    gap_wait=gap_wait, live=live,
                    log=lambda line: watchmod.stderr_log(f"fleet: {line}"))
        immutable = prepare_index(db_path)
        check_port(host, port)
        endpoint = _metrics_endpoint(metrics, db_path, fleet)
        try:
            if watch:
                code = service.serve_and_watch(db_path, host, port, sources,
                                               config_dir=config_dir, fleet=fleet)
                if code:
                    raise SystemExit(code)
            else:
                run_server(db_path, host, port, immutable)
        finally:
            if endpoint is not None:
                endpoint.close()
    except WebError as exc:
        raise Failure(str(exc)) from None


def _metrics_endpoint(address, db_path, fleet):
    """serve --metrics: the index's figures, and the fleet consumer's own
    (serve --watch --from); its /healthz is the consumer's loop, else the
    index answering."""
    if address is None:
        return None
    from indexer.ingest import fleet_metrics   # (--metrics only: prometheus-client)

    try:
        return fleet_metrics.Endpoint(address, db_path=db_path,
                                      live=fleet.live if fleet is not None else None)
    except fleet_metrics.MetricsError as exc:
        raise WebError(str(exc)) from None


@click.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False), callback=named_path,
              help="Build it here (default: a new temporary folder).")
@click.option("--no-serve", is_flag=True, help="Build the index, print its path, exit.")
@host_option
@listen_port_option
def demo(directory, no_serve, host, port):
    """Build a demo index with one example of every problem class, and serve it.

    The transcripts, execution logs and session references are made by the
    package (nothing is read from ~/.claude). Prints the index's path. A
    temporary folder is removed when the server stops (Ctrl-C); --dir and
    --no-serve keep what they build.

    Example:

    \b
        session-index demo --port 8001
        session-index demo --dir /tmp/si-demo --no-serve
    """
    folder = None
    try:
        folder = demo_folder(directory)
        if not no_serve:
            check_port(host, port)
        path = demo_data.build_demo(folder)
        click.echo(str(path))
        if not no_serve:
            # SIGINT or SIGTERM stop it (exit 0), so the folder goes with it.
            code = service.serve_and_watch(path, host, port, None)
            if code:
                raise SystemExit(code)
    except WebError as exc:
        raise Failure(str(exc)) from None
    finally:
        # A temporary folder goes with the server (Ctrl-C, SIGTERM) or a
        # failed build; --dir and --no-serve keep theirs for the user.
        if folder is not None and directory is None and not no_serve:
            shutil.rmtree(folder, ignore_errors=True)
