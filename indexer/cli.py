"""The ``session-index`` command: parses options, calls the library, prints.

Exit codes: 0 success; 1 a command's finding (documented per command);
2 usage error (click); 3 the index or a SOURCE cannot be used.
"""

from __future__ import annotations

import json
import sys

import click

from . import db as dbmod
from . import discover, ingest as ingestmod, status as statusmod

EXIT_UNUSABLE = 3


class Failure(click.ClickException):
    exit_code = EXIT_UNUSABLE


def _open(path: str, create: bool = True):
    try:
        return dbmod.open_db(path, create=create)
    except dbmod.IndexError_ as exc:
        raise Failure(str(exc)) from None


db_option = click.option(
    "--db", "db_path", type=click.Path(dir_okay=False), default=dbmod.default_db_path,
    show_default="$SESSION_INDEX_DB, else sessions.db", help="The index file.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="session-index")
def cli():
    """A SQLite index of Claude Code session transcripts: every line kept, what
    `claude --resume` and the Agent SDK will load, and what falls off the chain
    and why.

    Exit codes: 0 ok; 1 a finding (see each command); 2 usage; 3 the index or
    a source cannot be used.
    """


@cli.command()
@click.argument("sources", nargs=-1, type=click.Path())
@db_option
@click.option("--silent", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def ingest(sources, db_path, silent, as_json):
    """Index new lines of the transcripts under SOURCES.

    SOURCES are folders and/or .jsonl files; the default is
    $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects. Only lines added
    since the last run are read; files that vanished are marked deleted and
    their lines kept.

    Example:

        session-index ingest ~/.claude/projects --db sessions.db --json
    """
    if not sources:
        default = discover.default_projects_dir()
        if not default.is_dir():
            raise Failure(f"{default} does not exist: name the transcript folders to index")
        sources = (str(default),)
    db = _open(db_path)
    show = not silent and not as_json and sys.stderr.isatty()
    bar = None

    def plan(total):
        nonlocal bar
        if show and total:
            bar = click.progressbar(length=total, label="Indexing", file=sys.stderr)
            bar.__enter__()

    def progress(n):
        if bar is not None:
            bar.update(n)

    try:
        summary = ingestmod.ingest(db, list(sources), progress=progress, plan=plan)
    except ingestmod.SourceNotFound as exc:
        raise Failure(str(exc)) from None
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    for error in summary.errors:
        click.echo(f"warning: {error}", err=True)
    if as_json:
        click.echo(json.dumps(summary.as_dict(), indent=2))
    else:
        d = summary
        click.echo(
            f"{d.files} files ({d.changed_files} changed, {d.deleted_files} newly deleted, "
            f"{d.rewritten_files} rewritten, {d.skipped_files} not transcripts): "
            f"{d.new_records} new records, {d.bad_lines} bad lines, "
            f"{d.bytes_read:,} bytes read in {d.seconds:.2f}s")


@cli.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def status(db_path, as_json):
    """Counts of files, sessions, records, bad lines and orphans by cause.

    Example:

        session-index status --db sessions.db --json
    """
    db = _open(db_path, create=False)
    dbmod.upgrade(db)
    s = statusmod.status(db)
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    click.echo(f"files:     {s['live_files']} live, {s['deleted_files']} deleted "
               f"({s['main_files']} main, {s['subagent_files']} subagent)")
    click.echo(f"sessions:  {s['sessions']}")
    click.echo(f"records:   {s['records']}")
    click.echo(f"bad lines: {s['bad_lines']}")
    click.echo(f"leaves that disagree (resume vs SDK): {s['leaves_disagree']}")
    click.echo(f"api_error splices: {s['api_error_splices']}")
    click.echo("orphans by cause:" + ("" if s["orphans_by_cause"] else " none"))
    for cause, n in s["orphans_by_cause"].items():
        click.echo(f"  {cause:22} {n}")
    click.echo(f"last ingest: {s['last_ingest_at'] or 'never'}")
