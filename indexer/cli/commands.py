"""The ``session-index`` command: parses options, calls the library, prints.

Exit codes: 0 ok; 1 a finding (rows listed by poisoned/stale/expiring/failed,
rows rejected by refs import, verify: the CLI and the index differ); 2 a usage error; 3 the index or a source
cannot be used (a file that is not an index, a full disk, a read-only file
system, a corrupt page: one line, never a traceback; for export/restore also:
the generation asked for is not in the index, or only a session store copy of
the session is; a target
outside the folder, a symlink or a different file: refused; for search: search
is not enabled on the index); 4/5/6/11 the check verdicts
missing/poisoned/spliced/wedged; 7 a repair refused (the file is live); 8 a repair
rolled back; 9 show/export/restore/repair/verify: no such session in the index;
13 check/repair/verify: a Codex or Gemini CLI session, not Claude Code's (agents.py);
10 check: the session is on several hosts of a fleet, none of them this machine, and
--host names none; 11 check: wedged.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time

import click

from indexer.cli.options import nats_auth_options, nats_options, nats_url
from indexer.index import db as dbmod
from indexer.cli.options import (claude_version_option, config_dir_option, db_option,
                                 from_options, generation_option, json_option, named_path,
                                 now_option, metrics_option, output_options, param_type,
                                 port_option, project_option, since_option)
from indexer.signals import projects
from indexer.signals.classes import EXPIRING_WINDOW_DAYS, LISTED, listing_help
from indexer.index.connection import IndexError_, remove_made
from indexer.ingest.log import counted
from indexer.index.clock import WEEKDAYS


class _OnUse:
    """A module of the indexer package, imported when one of its names is first
    used: a command loads only what it runs (a check of a current index
    needs neither the parser nor sqlite-utils; bench/startup_speed.py)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(f"indexer.{self._name}"), attr)


checkmod, derive = _OnUse("repair.check"), _OnUse("ingest.derive")
discover, agentsmod = _OnUse("transcripts.discover"), _OnUse("transcripts.agents")
exportmod, ingestmod = _OnUse("repair.export"), _OnUse("ingest.files")
mainfile = _OnUse("chain.mainfile")
refsmod, repairmod, showmod = _OnUse("ingest.refs"), _OnUse("repair.repair"), _OnUse("repair.show")
signals, statusmod = _OnUse("signals.listings"), _OnUse("index.status")
verdicts = _OnUse("signals.verdict")
record_kinds = _OnUse("index.record_kinds")
pricesmod, usagemod = _OnUse("index.prices"), _OnUse("index.usage")
reportmod, statuslinemod = _OnUse("index.usage_report"), _OnUse("repair.statusline")

EXIT_FINDING = 1
EXIT_UNUSABLE = 3
EXIT_UNKNOWN_SESSION = 9
EXIT_AMBIGUOUS_HOST = 10


class Failure(click.ClickException):
    exit_code = EXIT_UNUSABLE


class UnknownSession(click.ClickException):
    exit_code = EXIT_UNKNOWN_SESSION


class AmbiguousHost(click.ClickException):
    exit_code = EXIT_AMBIGUOUS_HOST


class NotClaudeCode(click.ClickException):
    """A Codex or Gemini CLI session asked of check, repair or verify."""
    exit_code = 13   # agents.EXIT_NOT_CLAUDE_CODE (held equal by tests/test_agents.py)


def _known(db, session_id: str):
    """``db``, if it holds any file of ``session_id``; else exit 9."""
    if db.conn.execute(mainfile.KNOWN_SESSION_SQL, [session_id]).fetchone() is None:
        raise UnknownSession(f"session {session_id} is not in the index (exit 9); "
                             "ingest its transcripts first")
    return db


def _open(path: str, create: bool = False, write: bool = False):
    """The index at ``path``; only ingest creates one (``create``). A command
    that writes it (``write``) is refused on an index this user may only
    read; any other reads it as it stands."""
    try:
        return dbmod.open_index(path, create=create, write=write)
    except IndexError_ as exc:
        raise Failure(str(exc)) from None




class _Commands(click.Group):
    """The group, with the web commands imported only when they run (Datasette
    and its friends cost every other command start-up time)."""

    LAZY = {"serve": "serve", "demo": "demo"}   # name -> attribute of indexer.cli.serve

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.LAZY))

    def get_command(self, ctx, name):
        if name in self.LAZY and name not in self.commands:
            from indexer.cli import serve as web   # (serve and demo only: Datasette costs every other command start-up time)
            self.add_command(getattr(web, self.LAZY[name]), name)
        return super().get_command(ctx, name)


# color: click.echo never strips escape sequences from what it prints. When
# stdout is no terminal it would cut a transcript's own (``\x1b[2J``) out of
# the text, where on a terminal visible.Writer shows it as ``\u001b[2J``;
# the command styles text only on a terminal (sys.stdout.isatty()), so
# nothing else is left to strip.
@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"],
                                              "color": True})
@click.version_option(package_name="session-index")
def cli():
    """A SQLite index of Claude Code session transcripts: every line kept, what
    `claude --resume` and the Agent SDK will load, and what falls off the chain
    and why; poisoned, stale and expiring sessions; failed `claude -p` runs.

    Exit codes: 0 ok; 1 a finding; 2 usage; 3 the index or a source cannot
    be used; 4/5/6/11 check: missing/poisoned/spliced/wedged; 7/8 repair: refused/rolled
    back; 9 the session id is not in the index; 13 check/repair/verify: a Codex or
    Gemini CLI session (the resume checks are for Claude Code's).
    """


@cli.command()
@click.argument("sources", nargs=-1, type=click.Path())
@db_option
@config_dir_option()
@click.option("--silent", is_flag=True, help="No progress bar.")
@json_option
@click.option("--watch", is_flag=True,
              help="Then keep following SOURCES (file notifications) and index each new "
                   "line within a second of its write, until SIGINT or SIGTERM (exit 0); "
                   "logs one line per batch on stderr.")
@from_options("Instead of SOURCES: the lines `session-index ship` sent to this NATS "
              "JetStream server (every host's), drained, then exit; with --watch, keep "
              "consuming until SIGINT or SIGTERM.")
@metrics_option
@click.option("--search/--no-search", "search", default=True, show_default=True,
              help="On an index this run makes (not with --from): search it by words "
                   "(`search QUERY`), the word index built in the same run. "
                   "`search --enable` adds the trigram index; an existing index keeps "
                   "what it has.")
def ingest(sources, db_path, config_dir, silent, as_json, watch, from_url, consumer, hosts,
           gap_wait, metrics, search, **nats_auth):
    """Index new lines of the transcripts under SOURCES.

    SOURCES are folders and/or .jsonl files; the default is the projects/
    folder of each config dir: $CLAUDE_CONFIG_DIR (a comma-separated list
    allowed), else ~/.config/claude and ~/.claude. The summary names the
    index file. Only lines added
    since the last run are read; files that vanished are marked deleted and
    their lines kept. `claude -p --output-format stream-json` logs found in
    SOURCES are indexed as execution logs. The retention in force
    (cleanupPeriodDays) is resolved from the config dir's settings.json, each
    project's .claude/settings*.json and managed settings; a
    cleanupPeriodDays of 0 is reported on stderr.

    With --watch it indexes, then follows SOURCES as they are written (new
    files and folders, appends, rewrites, deletions) until SIGINT or SIGTERM,
    which end it at the next commit (exit 0; what is left, the next ingest
    does). Its log on stderr: one line per batch, one per error.

    Example:

    \b
        session-index ingest ~/.claude/projects --db sessions.db --json
        session-index ingest --watch --db sessions.db
        session-index ingest --from nats://central:4222 --hosts build-7,build-8 --db part-1.db
    """
    if from_url is not None:
        if sources:
            raise click.UsageError("--from reads NATS, not SOURCES: give one or the other")
        _ingest_from(db_path, from_url, consumer, hosts, watch, as_json, nats_auth, gap_wait,
                     metrics)
        return
    if hosts is not None:
        raise click.UsageError("--hosts applies to --from")
    if metrics is not None:
        raise click.UsageError("--metrics applies to --from")
    try:
        sources = discover.default_sources(sources, config_dir)
    except discover.NoProjectsFolder as exc:
        raise Failure(str(exc)) from None
    if watch:
        if as_json:
            raise click.UsageError("--json does not apply to --watch (it logs on stderr)")
        from indexer.ingest import watch as watchmod   # (ingest --watch only: start-up time of every other run)

        try:
            watchmod.run_until_signal(db_path, list(sources), config_dir=config_dir,
                                      search_new=search)
        except watchmod.WatchError as exc:
            raise Failure(str(exc)) from None
        return
    show = not silent and not as_json and sys.stderr.isatty()
    bar = None

    def plan(total):
        nonlocal bar
        if bar is not None:   # (a build that lost the race runs again: fresh_build.py)
            bar.__exit__(None, None, None)
            bar = None
        if show and total:
            bar = click.progressbar(length=total, label="Indexing", file=sys.stderr)
            bar.__enter__()

    def progress(n):
        if bar is not None:
            bar.update(n)

    from indexer.ingest import fresh_build   # (a plain ingest only: start-up time)

    try:
        summary = fresh_build.ingest(db_path, lambda db: ingestmod.ingest(
            db, list(sources), progress=progress, plan=plan, config_dir=config_dir,
            search_new=search))
    except IndexError_ as exc:
        raise Failure(str(exc)) from None
    except ingestmod.SourceNotFound as exc:
        raise Failure(str(exc)) from None
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    ingestmod.report(summary, as_json, sys.stdout, sys.stderr,
                     style=lambda text: click.style(text, fg="red", bold=True)
                     if sys.stderr.isatty() else text, db_path=db_path)


def _endpoint(address, **kwargs):
    """The --metrics endpoint (fleet_metrics.Endpoint), or None without it."""
    if address is None:
        return None
    from indexer.ingest import fleet_metrics   # (--metrics only: prometheus-client)

    try:
        return fleet_metrics.Endpoint(address, **kwargs)
    except fleet_metrics.MetricsError as exc:
        raise Failure(str(exc)) from None


def _ingest_from(db_path, url, consumer, hosts, watch, as_json, auth, gap_wait, metrics):
    """ingest --from: drain (or follow) the fleet's stream into the index."""
    from indexer.ingest import fleet_central as fleet_ingest, fleet_nats   # (ingest --from only: asyncio and the fleet's modules cost start-up time)

    options = nats_options(url, auth)
    made = not os.path.lexists(db_path)
    # Opened (made) before the server is asked: an index that cannot be used
    # is said at once, not once the server answers (--watch waits for it).
    db = _open(db_path, create=True)
    live = None
    if metrics is not None:
        from indexer.ingest import fleet_metrics   # (--metrics only: prometheus-client)

        live = fleet_metrics.Live("central")
    endpoint = _endpoint(metrics, db_path=db_path, live=live)

    from indexer.ingest.log import stderr_line  # (a log that cannot be written never stops it)

    step = fleet_ingest.CatchUp(db)

    def log(summary):
        if watch:
            stderr_line(f"batch: {summary.messages} messages, {summary.new_lines} new lines "
                        f"so far")
        return step()

    try:
        summary = fleet_nats.run(lambda stop: fleet_ingest.consume(
            db, options, consumer=consumer, hosts=hosts, watch=watch, gap_wait=gap_wait,
            stop=stop, after_batch=log, live=live,
            log=lambda line: stderr_line(f"ingest --from: {line}")), follow=watch)
    except fleet_nats.NotConnected as exc:
        if made:   # nothing was received: the index this run made goes with it
            db.conn.close()
            remove_made(db_path)
        raise Failure(str(exc)) from None
    except (fleet_nats.FleetError, dbmod.IndexReplaced) as exc:
        raise Failure(str(exc)) from None
    finally:
        if endpoint is not None:
            endpoint.close()
    fleet_ingest.catch_up(db)
    if as_json:
        click.echo(json.dumps(dict(summary.as_dict(), db=db_path)))
    else:
        click.echo(f"{counted(summary.messages, 'message')} from "
                   f"{counted(len(summary.hosts), 'host')}: "
                   f"{counted(summary.new_lines, 'new line')} ({summary.duplicates} duplicates skipped, "
                   f"{summary.gaps} held for earlier bytes, {summary.recorded_gaps} gaps "
                   f"recorded, {summary.bad_messages} quarantined) in {summary.seconds:.1f}s; "
                   f"index {db_path}")


@cli.command()
@click.argument("sources", nargs=-1, type=click.Path())
@click.option("--to", "to_url", required=True, metavar="nats://HOST:PORT", callback=nats_url,
              help="The NATS server (JetStream enabled) the central index reads.")
@click.option("--host", default=None, help="This machine's name in the central index "
                                           "[default: the hostname].")
@click.option("--ledger", type=click.Path(dir_okay=False), default=None, callback=named_path,
              help="The shipper's ledger: what JetStream acknowledged, per file "
                   "[default: ship.db beside the default index].")
@click.option("--once", is_flag=True, help="Send what is new now, then exit "
                                           "(default: follow SOURCES until SIGINT/SIGTERM).")
@config_dir_option()
@nats_auth_options
@metrics_option
def ship(sources, to_url, host, ledger, once, config_dir, metrics, **auth):
    """Send every new complete line of the transcripts under SOURCES to NATS
    JetStream, for a central `session-index ingest --from` (a fleet of hosts
    in one index).

    Each line goes byte-exact with this host's name, its file, the file's
    generation and its byte offset (a last line without its newline too, when
    it is a whole record, as ingest stores it); the ledger moves on only after
    JetStream acknowledged it, so a crash re-sends (a duplicate JetStream or
    the central drops), never loses; bytes the central asks for again (the
    stream lost them) are sent again while the file holds them. Rewrites start a new generation; deleted files are
    sent as such. SOURCES default as for ingest. Logs on stderr. Exit codes:
    0 done or stopped by a signal; 3 the server, a source or the ledger
    cannot be used.

    Example:

    \b
        session-index ship --to nats://central:4222 --host build-7
        session-index ship ~/.claude/projects --to nats://127.0.0.1:4222 --once
    """
    from indexer.ingest import fleet_nats, ship as shipmod   # (ship only: asyncio and the fleet's modules cost start-up time)

    try:
        sources = discover.default_sources(sources, config_dir)
    except discover.NoProjectsFolder as exc:
        raise Failure(str(exc)) from None
    host = host or shipmod.default_host()

    from indexer.ingest.log import stderr_line  # (a log that cannot be written never stops it)

    def log(line):
        stderr_line(f"ship {host}: {line}")

    live = None
    if metrics is not None:
        from indexer.ingest import fleet_metrics   # (--metrics only: prometheus-client)

        live = fleet_metrics.Live("ship")
    endpoint = _endpoint(metrics, live=live)
    try:
        shipper = fleet_nats.run(lambda stop: shipmod.ship(
            nats_options(to_url, auth), list(sources), host=host,
            ledger_path=ledger or shipmod.default_ledger(), once=once, log=log, stop=stop,
            live=live), follow=not once)
    except (fleet_nats.FleetError, shipmod.ShipError) as exc:
        raise Failure(str(exc)) from None
    except fleet_nats.Stopped:
        log("stopped before the server answered: nothing sent")
        return
    finally:
        if endpoint is not None:
            endpoint.close()
    log(f"{counted(shipper.messages, 'message')}, {counted(shipper.sent_lines, 'line')}, "
        f"{counted(shipper.sent_bytes, 'byte')} sent")


@cli.command()
@db_option
@json_option
def status(db_path, as_json):
    """Counts of files, sessions, records, bad lines, orphans by cause, the
    operator signals, and the files with more than one generation (rewritten)
    with the superseded lines kept.

    Example:

    \b
        session-index status --db sessions.db --json
    """
    s = statusmod.status(_open(db_path, create=False))
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    click.echo(f"files:     {s['live_files']} live, {s['deleted_files']} deleted "
               f"({s['main_files']} main, {s['subagent_files']} subagent, "
               f"{s['execution_logs']} execution logs)")
    click.echo(f"sessions:  {s['sessions']}")
    click.echo(f"records:   {s['records']}")
    click.echo(f"bad lines: {s['bad_lines']}")
    click.echo(f"leaves that disagree (resume vs SDK): {s['leaves_disagree']}")
    click.echo(f"api_error splices: {s['api_error_splices']}")
    click.echo(f"poisoned at the resume tail: {s['poisoned_sessions']}")
    click.echo(f"stale session refs: {s['stale_session_refs']}")
    click.echo(f"transcripts expired or expiring within {EXPIRING_WINDOW_DAYS} days: "
               f"{s['expired_transcripts']}")
    click.echo(f"failed executions: {s['failed_executions']}")
    click.echo(f"rewritten files (more than one generation): {s['multi_generation_files']}; "
               f"superseded generations kept: {s['superseded_generations']}, "
               f"{s['superseded_lines']} lines")
    click.echo("orphans by cause:" + ("" if s["orphans_by_cause"] else " none"))
    for cause, n in s["orphans_by_cause"].items():
        click.echo(f"  {cause:22} {n}")
    click.echo(f"last ingest: {s['last_ingest_at'] or 'never'}")
    if s["files_to_derive"]:   # (a fleet's central behind its hosts derives less often)
        click.echo(f"files not derived yet: {s['files_to_derive']} (their lines are stored; "
                   "leaves, orphans and the sessions rows do not show them yet)")
    if s["fleet_hosts"] or s["fleet_quarantined"] or s["fleet_gaps"]:
        click.echo(f"fleet: {counted(s['fleet_hosts'], 'host')}, "
                   f"{counted(s['fleet_files'], 'file')} shipped; oldest "
                   f"last heartbeat {s['oldest_heartbeat_at'] or 'none'}; sessions on several "
                   f"hosts: {s['sessions_on_several_hosts']} "
                   f"({s['sessions_diverged_across_hosts']} diverged, see host_copies); "
                   f"quarantined messages: {s['fleet_quarantined']} (see quarantined); "
                   f"gaps: {s['fleet_gaps']} (see fleet-gaps); files waiting for earlier "
                   f"bytes: {s['fleet_files_waiting']}")
    click.echo("new record types in the last ingest: "
               + record_kinds.describe(s["new_record_types"].items()))


@cli.command()
@db_option
@output_options
def quarantined(db_path, fmt):
    """The messages and heartbeats a fleet's central could not use (`ingest
    --from`): acknowledged and kept with why (a damaged or forged message,
    a host on another host's subject, a heartbeat time that is not one),
    so that the stream went on. Their bytes are in the fleet_quarantine
    table. Exit 1 when there are any.

    Example:

    \b
        session-index quarantined --db central.db --table
    """
    from indexer.cli import output   # (csv and the formats: only for a command that prints a listing)

    rows = statusmod.quarantined(_open(db_path, create=False))
    output.write_rows(rows, fmt, sys.stdout)
    if rows:
        sys.exit(EXIT_FINDING)


@cli.command("fleet-gaps")
@db_option
@output_options
def fleet_gaps(db_path, fmt):
    """The bytes of hosts' files a fleet's central never got (`ingest
    --from`): the stream no longer held them (its limits, a purge, a server
    that lost them) and the host did not send them again within --gap-wait;
    the central recorded the gap and went on. Per gap: the file, its host
    and path there, the generation, the byte range, since when a later
    message waited, when recorded, why. Exit 1 when there are any.

    Example:

    \b
        session-index fleet-gaps --db central.db --table
    """
    from indexer.cli import output   # (csv and the formats: only for a command that prints a listing)

    rows = statusmod.gaps(_open(db_path, create=False))
    output.write_rows(rows, fmt, sys.stdout)
    if rows:
        sys.exit(EXIT_FINDING)


@cli.group()
def refs():
    """Session ids your application holds and means to resume."""


@refs.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@db_option
@json_option
def refs_import(file, db_path, as_json):
    """Record the session ids in FILE (CSV with a header, JSON array, or JSONL)
    with at least `session_id`, optionally `source`, `key`, `cached_at`.

    A reference is identified by (source, key, session_id): importing the same
    file again adds nothing. Rows without a usable session_id are listed and
    skipped; the others are kept (exit 1 when any row was rejected).

    Example:

    \b
        session-index refs import cached-sessions.csv --db sessions.db
    """
    db = _open(db_path, write=True)
    try:
        result = refsmod.import_refs(db, file)
    except refsmod.RefsFileError as exc:
        raise Failure(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        for n, error in result.rejected:
            click.echo(f"rejected row {n}: {error}", err=True)
        click.echo(f"{result.rows} rows: {result.added} new references, "
                   f"{result.updated} updated, {len(result.rejected)} rejected")
    if result.rejected:
        sys.exit(EXIT_FINDING)


@cli.command()
@click.argument("session_id")
@db_option
@config_dir_option()
@now_option
@click.option("--cwd", type=click.Path(file_okay=False), default=None, callback=named_path,
              help="Check the transcript a resume run from this directory opens "
                   "[default: the one a resume from the session's own cwd opens].")
@click.option("--host", default=None, metavar="NAME",
              help="A central index of a fleet: the host whose copy to check ('' for this "
                   "machine) [default: this machine when it holds the session, else the one "
                   "host that does; several: exit 10].")
@claude_version_option
@json_option
def check(session_id, db_path, config_dir, now, cwd, host, claude_version, as_json):
    """May SESSION_ID be resumed? For an agent server to call before `--resume`.

    Verdicts, the first that matches, and exit codes: missing (4): no
    transcript on disk, the resume fails with "No conversation found";
    poisoned (5): the resume chain ends at a synthetic placeholder, the
    resume gets a 400; wedged (11): the latest assistant message holds a
    thinking block the API refuses (blanked, unsigned or cut), and the Claude
    Code that resumes (--claude-version, else the one that last wrote the
    session) resends it on every resume (before 2.1.161, 2.1.169 or 2.1.183,
    by the API's answer; newer ones drop every thinking block and resume, with
    a warning); spliced (6): late
    api_error records orphan output, the resume drops it; truncated (12): the
    resume loses conversation after the last compaction that nobody abandoned
    (its walk stops at a parent never written before the summary, or the
    compaction's preservedSegment does not lead from tail to head so Claude
    Code relinks nothing); resumable (0), with warnings when the transcript expires
    within 7 days, has expired, or cleanupPeriodDays is 0. The transcript is
    stat'ed afresh: a file deleted since the last ingest is missing.

    The transcript checked is the one `claude --resume` opens: the file
    named SESSION_ID.jsonl in the project folder of the resume's cwd, else
    the only one named so in any project folder (several: missing). Without
    --cwd, the cwd is the session's own (the one its records carry); other
    copies of the session are listed as warnings.

    A Codex CLI or Gemini CLI session (sessions lists its agent) has no
    verdict: check says the resume checks are for Claude Code and exits 13.

    On a fleet's central index each host's copies are its own: the answer is
    for the session on --host, by default this machine when it holds the
    session, else the one host that does; on several hosts and not here,
    exit 10 (give --host).

    Example:

    \b
        session-index check 0b1fed78-ad30-4641-94b1-5f6931526c96 --json
        session-index check 0b1fed78-ad30-4641-94b1-5f6931526c96 --cwd ~/src/app
        session-index check 0b1fed78-ad30-4641-94b1-5f6931526c96 --host build-7
        session-index check 0b1fed78-ad30-4641-94b1-5f6931526c96 --claude-version 2.1.154
    """
    try:
        verdict = checkmod.check(_open(db_path), session_id, now=signals.iso_now(now),
                                 config_dir=config_dir, cwd=cwd, host=host,
                                 claude_version=claude_version)
    except mainfile.AmbiguousHost as exc:
        raise AmbiguousHost(str(exc)) from None
    except agentsmod.NotClaudeCode as exc:
        raise NotClaudeCode(str(exc)) from None
    sys.exit(checkmod.report(verdict, as_json, sys.stdout, sys.stderr))


def _listing(name, db_path, now=None, fmt=None, **options):
    from indexer.cli import output   # (csv and the formats: only for a command that prints a listing)

    db = _open(db_path, create=False)
    rows = signals.listing(db, name, now=now, **options)
    output.write_rows(rows, fmt, sys.stdout, shown=LISTED[name].listing.columns)
    if rows:
        sys.exit(EXIT_FINDING)


def listing_command(cls):
    """The click command of a problem class's listing (signals/classes.py):
    --db, --now when it answers at a time, its own options, the output
    formats; exit 1 when it lists rows."""
    listing = cls.listing

    def command(db_path, fmt, now=None, **options):
        _listing(listing.command, db_path, now=now, fmt=fmt, **options)

    command.__doc__ = listing_help(cls)
    command = output_options(command)
    for param in reversed(listing.params):
        command = click.option(param.flag, param.name,
                               type=param_type(param.type, param.minimum), default=param.default,
                               show_default=True, metavar=param.metavar,
                               help=param.help)(command)
    if listing.now:
        command = now_option(command)
    return cli.command(listing.command)(db_option(command))


for _cls in LISTED.values():
    listing_command(_cls)


@cli.command("record-types")
@db_option
@click.option("--new", "only_new", is_flag=True,
              help="Only the kinds the most recent ingest run brought (exit 1 when there "
                   "are any).")
@since_option("the kinds the index first stored")
@output_options
def record_types(db_path, only_new, since, fmt):
    """Every record type, system subtype and attachment type in the
    transcripts (the record_types view), newest first: records, files, first
    and last Claude Code version and time, when the index first stored one,
    new (brought by the most recent ingest run), and whether the index models
    it (modeled, meaning) or keeps it raw.

    Example:

    \b
        session-index record-types --new --table
        session-index record-types --since 2026-11-01 --json
    """
    from indexer.cli import output   # (csv and the formats: only for a command that prints a listing)

    rows = record_kinds.listing(_open(db_path, create=False), new=only_new, since=since)
    output.write_rows(rows, fmt, sys.stdout)
    if only_new and rows:
        sys.exit(EXIT_FINDING)


@cli.command()
@db_option
@project_option("sessions")
@since_option("sessions active")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@output_options
def sessions(db_path, project, since, limit, fmt):
    """The sessions most recently active, newest first: title (the
    custom-title, else the ai-title, else a summary record, else the first
    prompt), project, last activity, records and state (missing, poisoned,
    spliced or resumable, from the index: `check` stats the file too).

    Example:

    \b
        session-index sessions --since 2026-11-01 --table
    """
    from indexer.cli import output   # (csv and the formats: only for a command that prints a listing)

    db = _open(db_path, create=False)
    rows = [dict(r, title=signals.plain_title(r["title"]) or None)   # as the web pages show it
            for r in signals.sessions(db, project=project, since=since, limit=limit)]
    output.write_rows(rows, fmt, sys.stdout, shown=signals.SESSIONS_SHOWN)
    _say_unmatched(db, project)


def _say_unmatched(db, project) -> None:
    """A --project that matches no session says so on stderr (the listing
    is empty either way; the exit code stays the listing's)."""
    note = projects.unmatched(db.conn, project)
    if note:
        click.echo(f"note: {note}", err=True)




def _usage_time(value: str | None, option: str, tz, now, end: bool = False):
    """--since/--until of a usage command as an aware time (None: open)."""
    if value is None:
        return None
    try:
        return reportmod.when(value, tz, now, end=end)
    except reportmod.BadTime as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def _usage_zone(ctx, param, value):
    try:
        return reportmod.zone(value)
    except reportmod.BadZone as exc:
        raise click.BadParameter(str(exc)) from None


USAGE_WHEN_HELP = ("a date (YYYY-MM-DD or YYYYMMDD), an ISO-8601 time, or now, today, "
                   "yesterday, N hours/days/weeks ago")


def _refresh_prices(db) -> None:
    if dbmod.read_only(db):   # (this user may not write it: the prices it holds)
        return
    try:
        pricesmod.refresh_packaged(db)
    except pricesmod.PricesError as exc:
        click.echo(f"warning: the packaged prices were not loaded: {exc}", err=True)


def _unpriced_warning(rows: list[dict]) -> None:
    unpriced = sum(r["unpriced_calls"] for r in rows)
    if unpriced:
        models = sorted({m for r in rows for m in (r["unpriced_models"] or "").split(",") if m})
        click.echo(f"{unpriced} calls of models with no price ({', '.join(models)}): not in "
                   "cost_usd; load a price file with 'session-index prices load FILE'", err=True)


@cli.group(invoke_without_command=True)
@db_option
@click.option("--by", type=click.Choice(["day", "session", "model", "project"]), default=None,
              help="One row per day (UTC), session, model or project folder "
                   "[default: one row for all].")
@click.option("--since", default=None, metavar="WHEN",
              help=f"Only API calls at or after this time (UTC): {USAGE_WHEN_HELP}.")
@output_options
@click.pass_context
def usage(ctx, db_path, by, since, fmt):
    """Tokens and cost of the API calls in the transcripts, each call counted
    once (the usage view: split content blocks, forks, copies and resumed
    sessions repeat a call's lines), priced from the prices table: the
    5-minute and 1-hour cache writes apart, the long-context tier, the fast
    multiplier. Calls of a model with no price are counted in unpriced_calls
    and left out of cost_usd (never priced at 0). By session, Claude Code's
    own figures for the session are beside it (cost-state records,
    `claude -p` total_cost_usd) with the difference; stderr compares the
    totals. The reports (daily, weekly, monthly, session, blocks) group the
    same calls by period in a time zone, with totals; `usage calls` lists
    the calls any of their figures counts.

    Example:

    \b
        session-index usage --by project --since 2026-11-24 --table
        session-index usage --by day --json
        session-index usage daily --since "7 days ago" --breakdown
    """
    if ctx.invoked_subcommand is not None:
        return
    from indexer.cli import output   # (csv and the formats: only for a command that prints a listing)

    if since is not None:
        now = reportmod.clock()
        since = reportmod.stored(_usage_time(since, "--since", reportmod.UTC, now))
    db = _open(db_path, create=False)
    _refresh_prices(db)
    rows = usagemod.summary(db, by=by, since=since)
    output.write_rows(rows, fmt, sys.stdout)
    _unpriced_warning(rows)
    for line in usagemod.comparison_lines(usagemod.comparison(db, since=since)):
        click.echo(line, err=True)


def report_options(fn):
    """The options every usage report takes."""
    for option in reversed((
        db_option,
        click.option("--since", default=None, metavar="WHEN",
                     help=f"Only calls at or after this time: {USAGE_WHEN_HELP} "
                          "(in --timezone)."),
        click.option("--until", default=None, metavar="WHEN",
                     help="Only calls before this time; a date or a word naming a day "
                          "includes that day."),
        click.option("--timezone", "tz", default=None, metavar="ZONE", callback=_usage_zone,
                     help="The IANA time zone days, weeks and months are counted in (UTC, "
                          "Europe/Berlin) [default: this machine's]."),
        click.option("--start-of-week", type=click.Choice(WEEKDAYS), default="sunday",
                     show_default=True, help="The first day of a week (weekly)."),
        now_option,
    )):
        fn = option(fn)
    return fn


def _report_command(kind: str, doc: str):
    @usage.command(kind, help=doc)
    @report_options
    @click.option("--breakdown", is_flag=True, help="Each row's figures per model too.")
    @click.option("--evidence", is_flag=True,
                  help="Each row's API calls too (the files and sessions holding each).")
    @output_options
    def command(db_path, since, until, tz, start_of_week, now, breakdown, evidence, fmt):
        from indexer.cli import usage_output   # (the report's formats: only for a report)

        moment = reportmod.clock(now)
        _usage_time(since, "--since", tz, moment)
        _usage_time(until, "--until", tz, moment, end=True)
        db = _open(db_path, create=False)
        _refresh_prices(db)
        found = reportmod.report(db, kind, since=since, until=until, tz=tz, now=moment,
                                 breakdown=breakdown, start_of_week=start_of_week,
                                 evidence=evidence)
        usage_output.write(found, kind, fmt, sys.stdout)
    return command


REPORT_HELP = {
    "daily": "the calls of each day",
    "weekly": "the calls of each week (its first day: --start-of-week)",
    "monthly": "the calls of each month",
    "session": "the calls of each session, with its title, project folder and last call",
    "blocks": ("Claude's 5-hour billing windows (ccusage's blocks: a block starts at the "
               "hour of its first call and ends 5 hours later, or when 5 hours pass without "
               "a call); the active one with its burn rate and projected to its end"),
}
REPORT_EXAMPLES = {
    "daily": "session-index usage daily --since 2026-11-01 --timezone Europe/Berlin",
    "weekly": "session-index usage weekly --breakdown",
    "monthly": "session-index usage monthly --json",
    "session": "session-index usage session --since yesterday",
    "blocks": "session-index usage blocks --since today",
}
for _kind, _what in REPORT_HELP.items():
    _report_command(_kind, f"""Tokens and cost of {_what}: each API call once (as the usage
    view counts it), a totals row, money in dollars, in the --timezone. --json for
    machines (raw numbers); --evidence lists the calls each row counts (as
    `session-index usage calls` does).

    Example:

    \b
        {REPORT_EXAMPLES[_kind]}
    """)


@usage.command("calls")
@report_options
@click.option("--day", default=None, metavar="YYYY-MM-DD", help="The calls of this day.")
@click.option("--week", default=None, metavar="YYYY-MM-DD",
              help="The calls of the week that starts on this day.")
@click.option("--month", default=None, metavar="YYYY-MM", help="The calls of this month.")
@click.option("--session", "session_id", default=None, metavar="ID",
              help="The calls of this session.")
@click.option("--block", default=None, metavar="START",
              help="The calls of the 5-hour block that starts then (as blocks prints it).")
@click.option("--model", default=None, metavar="MODEL", help="Only this model's calls.")
@output_options
def usage_calls(db_path, since, until, tz, start_of_week, now, day, week, month, session_id,
                block, model, fmt):
    """The API calls a usage figure counts, the evidence of a report's row:
    each call once, its time, session, model, message and request ids, its
    lines and the files and sessions that hold it (a fork, a copy or a
    resumed session repeats it: counted once), tokens and cost.

    Example:

    \b
        session-index usage calls --day 2026-11-24 --timezone UTC --table
    """
    from indexer.cli import output   # (csv and the formats: only for a command that prints a listing)

    moment = reportmod.clock(now)
    _usage_time(since, "--since", tz, moment)
    _usage_time(until, "--until", tz, moment, end=True)
    db = _open(db_path, create=False)
    _refresh_prices(db)
    rows = reportmod.calls(db, since=since, until=until, tz=tz, now=moment, day=day, week=week,
                           month=month, session=session_id, block=block, model=model,
                           start_of_week=start_of_week)
    if fmt != "json":
        rows = [dict(r, sessions=",".join(r["sessions"])) for r in rows]
    output.write_rows(rows, fmt, sys.stdout)


@cli.command()
@db_option
@click.option("--freshen", is_flag=True,
              help="Ingest the session's transcript first when it changed since the last "
                   "ingest (a write) [default: answer from the index as it stands].")
def statusline(db_path, freshen):
    """Claude Code's status line: reads the statusLine JSON Claude Code pipes
    to the command (session_id, transcript_path, cost...) on stdin and prints
    one short line: the session's verdict (as `check` gives it, from the
    index; nothing is ingested without --freshen), the cost of its API calls
    as the index counts them, and Claude Code's own figure when it differs.
    Always exits 0 (a status line that fails is blank).

    Example:

    \b
        session-index statusline < status.json
    """
    click.echo(statuslinemod.line(db_path, sys.stdin.read(), freshen=freshen))


@cli.group()
def prices():
    """The price table the usage view costs calls with."""


@prices.command("list")
@db_option
@output_options
def prices_list(db_path, fmt):
    """The price of every model (USD per million tokens): input, output,
    cache read, 5-minute and 1-hour cache writes, the long-context tier and
    the threshold above which a call pays it, the fast multiplier, the
    snapshot date and the file the rates came from.

    Example:

    \b
        session-index prices list --table
    """
    from indexer.cli import output   # (csv and the formats: only for a command that prints a listing)

    db = _open(db_path, create=False)
    _refresh_prices(db)
    output.write_rows(pricesmod.listing(db), fmt, sys.stdout)


@prices.command("load")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@db_option
@json_option
def prices_load(file, db_path, as_json):
    """Load the price file FILE (JSON, the shape of the packaged
    indexer/prices.json: snapshot_date and models) into the index: the models
    it names get its rates and snapshot date; the others keep theirs. A file
    that cannot be used loads nothing (exit 3).

    Example:

    \b
        session-index prices load prices-2027-01.json
    """
    db = _open(db_path, write=True)
    try:
        result = pricesmod.load_file(db, file)
    except pricesmod.PricesError as exc:
        raise Failure(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(f"{result['models']} models priced as of {result['snapshot_date']}: "
                   f"{result['added']} new, {result['updated']} updated")


@cli.command()
@click.argument("session_id")
@click.option("--out", "out", required=True, metavar="DIR|-", callback=named_path,
              help="Folder to write into (the files keep their projects/ places), "
                   "or - for the main transcript on stdout. Required: export never "
                   "writes into the current directory unasked.")
@click.option("--force", is_flag=True,
              help="Replace a different file already at a target (else exit 3, nothing written).")
@generation_option
@db_option
def export(session_id, out, force, generation, db_path):
    """Write SESSION_ID's transcripts (main and subagents) from the index alone,
    byte for byte as last ingested, whether or not the originals still exist;
    with --generation N, as they were in generation N (a rewrite of a file
    keeps its earlier generations in the index). Exit 9 when the session is
    not in the index; exit 3 when that generation is not, when only a session
    store copy of it is (no transcript file to write), and when a target
    lies outside --out (a `..` or a symlink), is a symlink, or is a different
    file (unless --force); then nothing is written. Each file is written to a
    new temporary file beside it and renamed into place.

    Example:

    \b
        session-index export 0b1fed78-ad30-4641-94b1-5f6931526c96 --out backup/
    """
    db = _known(_open(db_path, create=False), session_id)
    try:
        if out == "-":
            main = exportmod.main_transcript(db, session_id, generation)
            sys.stdout.buffer.write(main.data)
            sys.stdout.buffer.flush()
            return
        written = exportmod.export(db, session_id, out, generation, force=force)
        left_out = exportmod.left_out(db, session_id, generation)
    except (exportmod.NothingToExport, exportmod.WriteRefused) as exc:
        raise Failure(str(exc)) from None
    for f, target in written:
        click.echo(f"{target}  {len(f.data):,} bytes  sha256 {f.sha256}  "
                   f"generation {f.generation}")
    for path in left_out:
        click.echo(f"left out: {path} has no generation {generation}", err=True)


@cli.command()
@click.argument("session_id")
@generation_option
@db_option
@config_dir_option()
def restore(session_id, generation, db_path, config_dir):
    """Put SESSION_ID's transcripts back, from the index, so a cached id
    resumes again: where they were ingested from, or with --config-dir at
    their places under that dir's projects/; with --generation N, as they
    were in generation N. Refuses to overwrite a different existing file (exit
    3, nothing written; so does a generation not in the index, and a session
    it holds only as a session store copy; a session not in it is exit 9).
    Sets each file's mtime to now: Claude Code's cleanup deletes by mtime, so
    the restored transcript gets a full retention period.

    Example:

    \b
        session-index restore 0b1fed78-ad30-4641-94b1-5f6931526c96 --config-dir ~/.claude
    """
    db = _known(_open(db_path, create=False), session_id)
    try:
        done = exportmod.restore(db, session_id, config_dir, generation)
        left_out = exportmod.left_out(db, session_id, generation)
    except (exportmod.NothingToExport, exportmod.WriteRefused) as exc:
        raise Failure(str(exc)) from None
    for f, target, what in done:
        click.echo(f"{what}: {target} ({len(f.data):,} bytes, generation {f.generation})")
    for path in left_out:
        click.echo(f"left out: {path} has no generation {generation}", err=True)
    click.echo("mtime set to now: Claude Code's cleanup counts retention from the mtime",
               err=True)


def _fresh(db, session_id, required: bool = True, host: str = "") -> bool:
    """Ingest the session's main transcripts first if they changed on disk (or
    went away: which one a resume opens may change with them). Whether the
    index holds a main transcript of it on ``host`` (exit 3 without one, if
    required). An index this user may only read is taken as it stands, with
    check's warning on stderr for each transcript changed since."""
    if dbmod.read_only(db):
        for warning in checkmod.unread_warnings(db, session_id, host):
            click.echo(f"warning: {warning}", err=True)
    else:
        paths = [r[0] for r in db.conn.execute(
            "SELECT path FROM files WHERE session_id = ? AND kind = 'main' AND origin = 'file'",
            [session_id])]
        if paths:
            ingestmod.ingest(db, paths)
        derive.refresh_sessions_if_stale(db)
    if db.conn.execute(repairmod.MAIN_FILE_SQL, [session_id, host]).fetchone() is None:
        if required:
            raise Failure(f"session {session_id} has no main transcript in the index")
        return False
    return True


def _say_copies(db, session_id, host: str = ""):
    """On stderr: which main transcript this is, and the session's other ones."""
    rows = mainfile.copies(db, session_id, host=host)
    for row in rows:
        if row["chosen"]:
            click.echo(f"transcript: {row['path']} ({row['why']})", err=True)
    for row in rows:
        if not row["chosen"]:
            differs = (f"differs: {row['only_here']} uuid(s) only there, "
                       f"{row['only_in_chosen']} only in the transcript" if row["diverged"]
                       else "same records")
            click.echo(f"copy: {row['path']} ({row['why']}; {differs}; not merged)", err=True)


@cli.command()
@click.argument("session_id")
@db_option
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]),
              default="text", show_default=True)
@click.option("--json", "fmt", flag_value="json", help="The same as --format json.")
@click.option("--host", default=None, metavar="NAME",
              help="A central index of a fleet: the host whose copy to show ('' for this "
                   "machine) [default: as for check; several: exit 10].")
def show(session_id, db_path, fmt, host):
    """The conversation SESSION_ID really holds: the resume chain, with the
    parallel tool calls and results put back where the Agent SDK puts them and
    the output orphaned by an api_error splice put back in place; each
    recovered message is marked, and synthetic placeholders too. The text
    and markdown formats start with the session's verdict as `check` states
    it, and its fix (--format json is the messages only; `check --json` has
    the verdict). A session with only subagent transcripts left has no
    conversation to show.

    Example:

    \b
        session-index show 0b1fed78-ad30-4641-94b1-5f6931526c96 --format markdown
    """
    db = _known(_open(db_path, create=False), session_id)
    agent = agentsmod.session_agent(db.conn, session_id)
    if agent != agentsmod.CLAUDE_CODE:   # a Codex or Gemini CLI session: its conversation
        click.echo(showmod.render_agent(showmod.agent_conversation(db.conn, session_id, agent), fmt))
        return
    if host is None:
        try:
            host = mainfile.default_host(db, session_id)
        except mainfile.AmbiguousHost as exc:
            raise AmbiguousHost(str(exc)) from None
    has_main = _fresh(db, session_id, required=False, host=host)
    verdict = showmod.verdict_on(db.conn, session_id, host)
    if verdict is not None and fmt != "json":  # JSON stays the list of messages
        click.echo(showmod.header(verdict, fmt))
    if not has_main:  # only subagent transcripts: the verdict says why
        click.echo("[]" if fmt == "json" else
                   "(no main transcript of this session is in the index: no conversation "
                   "to show)")
        return
    _say_copies(db, session_id, host)
    try:
        messages = showmod.recovered_conversation(db, session_id, host)
    except repairmod.RepairError as exc:
        raise Failure(str(exc)) from None
    click.echo(showmod.render(messages, fmt))


@cli.command()
@click.argument("session_id")
@db_option
@click.option("--write", is_flag=True, help="Change the file (default: only say what would change).")
@click.option("--force", is_flag=True,
              help="Repair even a file modified in the last minute or open in a process.")
@json_option
def repair(session_id, db_path, write, force, as_json):
    """Repair SESSION_ID's main transcript so `--resume` sees the work on disk.

    An api_error splice: the record after each late-flushed error chain is
    re-parented onto the last record of the orphaned output, so the errors
    become a dead-end side branch. A poisoned tail: the records after the
    last real assistant message (any reply of a model, whatever its message.id;
    not a placeholder, whose message.model is <synthetic>) are dropped, so the
    next resume does not send a synthetic id. Without --write it prints what would change and
    changes nothing. With --write it keeps a backup next to the file (and the
    original bytes in the index's repairs table), writes a temporary file and
    renames it into place, re-ingests, and checks that the recovered records
    are read back; otherwise it puts the original back. Exit codes: 0 done or
    nothing to do; 7 refused (the file is live); 8 rolled back.

    Example:

    \b
        session-index repair 0b1fed78-ad30-4641-94b1-5f6931526c96 --write
    """
    db = _known(_open(db_path, write=write), session_id)
    try:
        agentsmod.require_claude_code(db.conn, session_id)
    except agentsmod.NotClaudeCode as exc:
        raise NotClaudeCode(str(exc)) from None
    _fresh(db, session_id)
    _say_copies(db, session_id)
    try:
        plan = repairmod.plan(db, session_id)
        if plan.empty:
            stuck = repairmod.poisoned_beyond_repair(db, plan)
            if as_json:
                click.echo(json.dumps(dict(plan.as_dict(), nothing_to_cut_back_to=stuck),
                                      indent=2))
            elif stuck:
                click.echo("nothing to repair: the resume chain ends at a synthetic placeholder "
                           "and holds no real assistant message to cut back to; start a new "
                           "session (the transcript is left as it is)")
            else:
                click.echo("nothing to repair")
            return
        if not write:
            result = repairmod.Result(plan)
        else:
            result = repairmod.write(db, plan, force=force)
    except repairmod.RepairError as exc:
        raise Failure(str(exc)) from None
    except repairmod.Refused as exc:
        click.echo(f"refused: {exc}", err=True)
        sys.exit(7)
    except repairmod.RolledBack as exc:
        click.echo(f"rolled back: {exc}", err=True)
        sys.exit(8)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    for row in plan.rows:
        if row["action"] == "reparent":
            click.echo(f"re-parent line {row['line_no']} ({row['uuid']}): "
                       f"{row['old_parent_uuid']} -> {row['new_parent_uuid']}  [{row['reason']}]")
        elif row["action"] == "strip":
            click.echo(f"remove thinking block(s) {row['blocks']} from line {row['line_no']} "
                       f"({row['uuid']})  [{row['reason']}]")
        elif row["action"] == "rehead":
            click.echo(f"set preservedSegment.headUuid of line {row['line_no']} "
                       f"({row['uuid']}): {row['old_parent_uuid']} -> "
                       f"{row['new_parent_uuid']}  [{row['reason']}]")
        else:
            click.echo(f"drop line {row['line_no']} ({row['uuid']})  [{row['reason']}]")
    orphans = sum(1 for c in plan.orphaned.values() if c == "api_error_splice")
    click.echo(f"resume chain: {plan.chain_before} records before"
               + (f", {result.chain_after} after" if result.chain_after is not None else "")
               + f"; {orphans} orphaned record(s) to recover")
    if result.written:
        click.echo(f"written; the original is kept as {result.backup}")
    else:
        click.echo("nothing changed (use --write)")



@cli.command()
@click.argument("session_id")
@db_option
@click.option("--claude", "claude", default=None, metavar="PATH",
              help="The Claude Code binary to ask [default: `claude` on PATH, else the one "
                   "bundled in the claude-agent-sdk package].")
@json_option
def verify(session_id, db_path, claude, as_json):
    """Ask the real Claude Code what a resume of SESSION_ID loads, and compare
    it with what the index says the resume keeps and drops.

    It copies the session's main transcript (as the index holds it) into a
    temporary config dir, runs `claude --resume SESSION_ID -p PING` there
    against a fake Messages API on 127.0.0.1, and reads the conversation the
    CLI sends: tool_use ids, tool_result ids and assistant text are matched
    against the index's resume chain (plus what the CLI puts back) and its
    dropped orphans. It never talks to any other API and never touches the
    original file. Exit codes: 0 they agree; 1 they differ; 3 no Claude Code
    binary, no main transcript of the session in the index, or the CLI sent
    nothing; 9 the session is not in the index; 13 a Codex or Gemini CLI
    session.

    Example:

    \b
        session-index verify 0b1fed78-ad30-4641-94b1-5f6931526c96 --json
    """
    from indexer.repair import oracle, verify as verifymod   # (verify only: it runs the real Claude Code)

    db = _known(_open(db_path, create=False), session_id)
    try:
        agentsmod.require_claude_code(db.conn, session_id)
    except agentsmod.NotClaudeCode as exc:
        raise NotClaudeCode(str(exc)) from None
    try:
        binary = oracle.find_claude(claude)
    except oracle.NoClaudeBinary as exc:
        raise Failure(str(exc)) from None
    _fresh(db, session_id)
    file_id, path = db.conn.execute(repairmod.MAIN_FILE_SQL, [session_id, ""]).fetchone()[:2]
    try:
        verdict = verifymod.verify_file(db.conn, file_id, session_id, path, binary)
    except oracle.OracleFailed as exc:
        raise Failure(str(exc)) from None
    if as_json:
        click.echo(json.dumps(verdict.as_dict(), indent=2))
    else:
        click.echo(f"{'agree' if verdict.agree else 'DIFFER'}: Claude Code "
                   f"{verdict.claude_version} sent {verdict.sent_messages} messages"
                   f"{' (after compacting)' if verdict.compacted else ''}; checked "
                   f"{verdict.checked['kept']} kept and {verdict.checked['dropped']} dropped items")
        for item in verdict.kept_not_sent:
            click.echo(f"  kept by the index, not sent: line {item['line_no']} "
                       f"{item['kind']} {item['value']!r}")
        for item in verdict.sent_but_dropped:
            click.echo(f"  sent, the index drops it ({item['cause']}): line {item['line_no']} "
                       f"{item['kind']} {item['value']!r}")
    if not verdict.agree:
        sys.exit(EXIT_FINDING)


@cli.command()
@db_option
@config_dir_option()
@click.option("--http", is_flag=True,
              help="Serve streamable HTTP on 127.0.0.1 (at /mcp) rather than stdio.")
@port_option(8765, "With --http: the loopback port.")
def mcp(db_path, config_dir, http, port):
    """The index as an MCP server for agents (Claude Code and others), over
    stdio (or --http, streamable HTTP on 127.0.0.1), read-only: the index is
    never written (an ingest, e.g. `ingest --watch`, keeps it current).
    Tools: check_session (the answer of `check --json`), search, show_session
    (the conversation as a resume loads it, paged), usage and problems (the
    health page's problem classes). Every answer names the file, generation
    and byte offset it was computed from.

    Example:

    \b
        session-index mcp --db ~/.local/share/session-index/sessions.db
        claude mcp add session-index -- session-index mcp
        session-index mcp --http --port 8765
    """
    from indexer.cli import mcp_server   # (mcp only: the MCP SDK costs every other command start-up time)

    try:
        db = dbmod.open_readonly(db_path)
    except IndexError_ as exc:
        raise Failure(str(exc)) from None
    mcp_server.serve(db, config_dir, http=http, port=port)


@cli.command()
@click.argument("query", required=False)
@db_option
@click.option("--session", "session_id", default=None, metavar="ID",
              help="Only records of this session.")
@project_option("records")
@since_option("records")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              metavar="N", help="At most N records.")
@click.option("--enable", is_flag=True,
              help="Make this index searchable with both indexes: build the search tables "
                   "(the trigram index too, on an index `ingest` made searchable by words) "
                   "from what it holds (progress on stderr); from then on every ingest, "
                   "watch and store append keeps them current.")
@click.option("--disable", is_flag=True,
              help="Empty the search tables and stop keeping them current.")
@output_options
def search(query, db_path, session_id, project, since, limit, enable, disable, fmt):
    """Records whose text matches QUERY, newest first: session, time, type,
    project and a snippet with each match marked ([[...]], bold on a
    terminal). Searched: user prompts, assistant text and thinking, tool
    names and inputs, tool results (each input and result up to 4,000
    characters), system messages, summaries and titles.

    Search is on by words in an index `ingest` made (unless --no-search);
    `search --enable` turns it on elsewhere and adds the trigram index (exit 3
    on an index without search). Without the trigram index a code term is
    matched as a substring of the stored text (ASCII case folded). QUERY is
    words, "quoted phrases" and prefixes (word*); every term must match. No
    FTS syntax is read: quotes, -, ', *, : and AND/OR/NOT are text. Each term
    goes to one of two indexes: terms of 3 characters or more holding a
    character of code (anything but letters, digits, - and ', e.g.
    _recover_orphaned_parallel_tool_results, foo.bar, a::b) or of CJK, kana,
    hangul or thai go to a trigram index, which matches them as substrings
    (case-insensitive); all others to a word index (porter unicode61:
    whole words, stemmed, so `running` finds `run`), which is where terms
    shorter than 3 characters must go (a trigram index cannot match them):
    a 2-character CJK word is found only where it stands as a word. A prefix
    (word*) must also appear as typed.

    Example:

    \b
        session-index search --enable
        session-index search "login redirect" --since 2026-11-01
        session-index search _recover_orphaned_parallel_tool_results --json
    """
    from indexer.cli import output   # (csv and the formats: only for a command that prints a listing)
    from indexer.index import search as searchmod   # (search only: start-up time)

    if enable and disable:
        raise click.UsageError("--enable and --disable cannot be given together")
    db = _open(db_path, write=enable or disable)
    if disable:
        was = searchmod.disable(db)
        click.echo(f"search {'disabled' if was else 'was not enabled'} on {db_path}")
        return
    if enable:
        bar = None

        def progress(done, total):
            nonlocal bar
            if sys.stderr.isatty():
                if bar is None:
                    bar = click.progressbar(length=total, label="Indexing text",
                                            file=sys.stderr)
                    bar.__enter__()
                bar.update(done - bar.pos)

        t0 = time.monotonic()
        try:
            n = searchmod.enable(db, progress)
        finally:
            if bar is not None:
                bar.__exit__(None, None, None)
        click.echo(f"search enabled on {db_path}: {n} records indexed in "
                   f"{time.monotonic() - t0:.1f} s")
        if not query:
            return
    if not query:
        raise click.UsageError("give a QUERY, or --enable or --disable")
    try:
        rows = searchmod.search(db, query, session=session_id, project=project, since=since,
                                limit=limit)
    except searchmod.SearchNotEnabled as exc:
        raise Failure(f"{exc} (on {db_path})") from None
    except (searchmod.EmptyQuery, searchmod.QueryRefused) as exc:
        raise click.UsageError(str(exc)) from None
    fmt = output.chosen(fmt)
    bold = fmt == "tsv" and sys.stdout.isatty()
    for row in rows:
        row["snippet"] = searchmod.marked(
            row["snippet"], style=(lambda match: click.style(match, bold=True)) if bold else None)
    output.write_rows(rows, fmt, sys.stdout)
    _say_unmatched(db, project)
