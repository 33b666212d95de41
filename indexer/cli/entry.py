"""The ``session-index`` console script.

Two commands run so often that start-up is most of their cost: ``check``
(an agent server runs it before every resume) and a no-op ``ingest`` (cron,
every minute). Their plain forms are answered here without loading click,
about 50 ms of a fresh process (bench/startup_speed.py,
bench/ingest_speed.py):

    session-index check SESSION_ID [--db F] [--config-dir D] [--now T] [--cwd D] [--host H]
        [--json]
    session-index ingest [SOURCES...] [--db F] [--config-dir D] [--silent] [--json]
        [--search | --no-search]
        (when stderr is not a terminal: no progress bar to draw)

Any other command, ``--help``, an option this parser does not know, or an
argument that needs an error message goes to the click CLI (indexer/cli/commands.py),
which owns every option's help and errors: the answer and the output are the
same either way (check.report, ingest.report).
"""

from __future__ import annotations

import os
import sys

from indexer.cli import visible

# Options as cli.py declares them: flag -> (keyword, what its value is).
# "dir": a path click refuses when it is a file; "text": any value (--db
# too: the library refuses a path that cannot be an index, options.db_option);
# None: a flag.
DB = {"--db": ("db_path", "text"), "--config-dir": ("config_dir", "dir")}
CHECK_OPTIONS = {**DB, "--now": ("now", "text"), "--cwd": ("cwd", "dir"),
                 "--host": ("host", "text"), "--json": ("as_json", None)}
INGEST_OPTIONS = {**DB, "--silent": ("silent", None), "--json": ("as_json", None),
                  "--search": ("search", None), "--no-search": ("no_search", None)}
REFUSED = {"dir": os.path.isfile, "text": lambda value: False}


def parse(args: list[str], options: dict) -> tuple[list[str], dict] | None:
    """(the positional arguments, the options as keyword arguments), or
    None when the click CLI should parse them (help, an unknown or repeated
    option, a missing or empty value, a value click would refuse)."""
    found: dict = {}
    positional = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            i += 1
            continue
        flag, eq, value = arg.partition("=")
        if flag not in options:
            return None
        name, kind = options[flag]
        if name in found:
            return None  # click's rule for a repeated option: leave it to click
        if kind is None:
            if eq:
                return None
            found[name] = True
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
            i += 1
        if not value or REFUSED[kind](value):
            return None  # click's error message
        found[name] = value
        i += 1
    return positional, found


def parse_check(args: list[str]) -> dict | None:
    """``check``'s keyword arguments, or None (see ``parse``; also: no or
    two session ids)."""
    parsed = parse(args, CHECK_OPTIONS)
    if parsed is None or len(parsed[0]) != 1:
        return None
    return {"session_id": parsed[0][0], **parsed[1]}


def _open(db_path: str, create: bool = False):
    from indexer.index import db   # (the fast path loads only what it runs: bench/startup_speed.py)
    from indexer.index.connection import IndexError_   # (the fast path loads only what it runs)

    try:
        return db.open_index(db_path, create=create)
    except IndexError_:
        return None  # click words the error (exit 3)


def _db_path(options: dict) -> str:
    """--db, else the default (db.default_db_path), as click's default is."""
    from indexer.index import db   # (the fast path loads only what it runs: bench/startup_speed.py)

    return options.get("db_path") or db.default_db_path()


def fast_check(args: list[str]) -> int | None:
    """Answer a plain ``check``; its exit code, or None to leave it to click."""
    options = parse_check(args)
    if options is None:
        return None
    from indexer.repair import check   # (a check only: start-up time of the fast path)
    from indexer.chain import mainfile   # (a check only: start-up time of the fast path)
    from indexer.signals import listings as signals   # (a check only: start-up time of the fast path)

    try:
        now = signals.iso_now(options.get("now"))
    except signals.BadTime:
        return None  # click words the usage error
    index = _open(_db_path(options))
    if index is None:
        return None
    try:
        verdict = check.check(index, options["session_id"], now=now,
                              config_dir=options.get("config_dir"), cwd=options.get("cwd"),
                              host=options.get("host"))
    except (mainfile.AmbiguousHost, check.agents.NotClaudeCode):
        return None  # click words it (exit 10, 13)
    return check.report(verdict, options.get("as_json", False), sys.stdout, sys.stderr)


def fast_ingest(args: list[str]) -> int | None:
    """Run a plain ``ingest`` whose stderr is no terminal (no progress bar
    to draw, no colour); its exit code, or None to leave it to click."""
    parsed = parse(args, INGEST_OPTIONS)
    if parsed is None or sys.stderr.isatty():
        return None
    sources, options = parsed
    if "search" in options and "no_search" in options:
        return None   # (click's rule: the last one)
    from indexer.transcripts import discover   # (a plain ingest only: start-up time of the fast path)
    from indexer.ingest import files as ingest   # (a plain ingest only: start-up time of the fast path)

    try:
        sources = discover.default_sources(sources, options.get("config_dir"))
    except discover.NoProjectsFolder:
        return None
    from indexer.index.connection import IndexError_   # (the fast path loads only what it runs)
    from indexer.ingest import fresh_build   # (a plain ingest only: start-up time of the fast path)

    db_path = _db_path(options)
    try:
        summary = fresh_build.ingest(db_path, lambda index: ingest.ingest(
            index, sources, config_dir=options.get("config_dir"),
            search_new=not options.get("no_search")))
    except IndexError_:
        return None  # click words the error (exit 3)
    except ingest.SourceNotFound:
        return None  # raised before anything is written: click says it
    ingest.report(summary, options.get("as_json", False), sys.stdout, sys.stderr,
                  db_path=db_path)
    return 0


FAST = {"check": fast_check, "ingest": fast_ingest}
EXIT_UNUSABLE = 3
DEBUG_ENV = "SESSION_INDEX_DEBUG"


def failure_line(exc: BaseException) -> str:
    """One line naming what went wrong: SQLite's or the system's own words
    (``database or disk is full``, ``Read-only file system: PATH``)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else ""
        return f"{exc.strerror}: {where}" if where else exc.strerror
    text = " ".join(str(exc).split()) or exc.__class__.__name__
    import sqlite3   # (only when something failed: start-up time)

    if isinstance(exc, (sqlite3.Error, OSError)):
        return text
    return f"internal error, {exc.__class__.__name__}: {text} ({DEBUG_ENV}=1 shows the traceback)"


def run() -> None:
    args = sys.argv[1:]
    if args and args[0] in FAST:
        code = FAST[args[0]](args[1:])
        if code is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            # The answer is out and the index closed (its connection went
            # with the call); no thread, child or temporary file is left.
            # What remains is the interpreter's teardown of every module it
            # loaded: 2-3 ms of a 35 ms no-op ingest or check, for nothing.
            os._exit(code)
    if follows(args):
        import signal   # (a following command only)

        # Until its loop takes SIGINT and SIGTERM over (fleet_nats.run,
        # service), a signal ends it as they do: exit 0, nothing written yet.
        signal.signal(signal.SIGTERM, _stopped)
    from indexer.cli.commands import cli   # (click: only when the fast path leaves the command to it)

    cli()


def follows(args: list[str]) -> bool:
    """A command that runs until a signal: ship (not --once), ingest or
    serve with --watch."""
    if not args:
        return False
    return (args[0] == "ship" and "--once" not in args) or (
        args[0] in ("ingest", "serve") and "--watch" in args)


def _stopped(signum, frame):
    raise SystemExit(0)


def main() -> None:
    """Run the command; whatever escapes it (a full disk, a read-only
    folder, a corrupt page, a bug) ends in one line on stderr and exit 3,
    never a traceback (unless $SESSION_INDEX_DEBUG is set). What it prints
    goes through visible.Writer: no transcript's control characters reach
    the terminal."""
    visible.install()
    try:
        run()
    except KeyboardInterrupt:
        sys.stderr.write("Aborted!\n")
        sys.exit(130)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        try:
            sys.stdout.flush()
        except OSError:
            pass
        sys.stderr.write(f"Error: {failure_line(exc)}\n")
        sys.exit(EXIT_UNUSABLE)
