"""The CLI's option blocks, each defined once and imported by the commands
that take it (commands.py, serve.py): the index (--db), Claude Code's config
dir, --now and --since, --claude-version, --port, --json, the output formats
of a listing, --generation, --from and the NATS connection's options."""

from __future__ import annotations

import math
import os

import click

from indexer.index import db as dbmod

def db_default_help() -> str:
    """--db's help, naming the index this run opens without it and why."""
    path = dbmod.default_db_path()
    home = os.path.expanduser("~").rstrip(os.sep)
    if home and path.startswith(home + os.sep):
        path = "~" + path[len(home):]   # as a user writes it (and the docs show it)
    if os.environ.get("SESSION_INDEX_DB"):
        why = "from $SESSION_INDEX_DB"
    elif os.environ.get("XDG_DATA_HOME"):
        why = "in $XDG_DATA_HOME; $SESSION_INDEX_DB names another"
    else:
        why = "$SESSION_INDEX_DB or $XDG_DATA_HOME name another"
    return f"The index file [default: {path}; {why}]."


class DbOption(click.Option):
    """--db, whose --help names the file this run opens without it (read
    when --help runs, not when the command was defined)."""

    def get_help_record(self, ctx):
        self.help = db_default_help()
        return super().get_help_record(ctx)


# Any path: one that cannot be an index (a folder, a FIFO, not SQLite) is the
# library's to refuse (db.probe), exit 3 in one line as every unusable index
# is; click's own check of a folder would make it a usage error (exit 2) and
# break statusline's promise of exit 0.
db_option = click.option(
    "--db", "db_path", cls=DbOption, type=click.Path(),
    default=dbmod.default_db_path, help="The index file.")


def named_path(ctx, param, value):
    """The callback of a path option that names a folder to read or write
    (--config-dir, export --out, demo --dir, ship --ledger, check --cwd):
    '' names none, a usage error, never the current directory (nothing is
    written there unasked) nor the option's default."""
    if value == "":
        raise click.BadParameter("an empty path names no file or folder")
    return value


CONFIG_DIR_HELP = ("Claude Code's config dir, for settings.json and projects/ "
                   "[default: $CLAUDE_CONFIG_DIR (a comma-separated list allowed), else "
                   "~/.config/claude and ~/.claude].")


def config_dir_option(when: str = ""):
    """--config-dir; ``when`` says when it applies ("With --watch: ")."""
    return click.option("--config-dir", type=click.Path(file_okay=False), default=None,
                        callback=named_path, help=when + CONFIG_DIR_HELP)




def iso_time(ctx, param, value):
    """An ISO-8601 time option as YYYY-MM-DDTHH:MM:SS.sssZ (naive means UTC);
    not given: None."""
    if value is None:
        return None
    from indexer.signals import listings   # (only when a time is given: it loads the verdict's SQL)

    try:
        return listings.iso_now(value)
    except listings.BadTime:
        raise click.BadParameter(f"{value!r} is not an ISO-8601 time") from None


now_option = click.option(
    "--now", default=None, metavar="ISO-TIME", callback=iso_time,
    help="Answer as if it were this time (ISO-8601, UTC if no zone; default: the clock).")


def since_option(what: str):
    """--since: only ``what`` at or after a time."""
    return click.option("--since", default=None, metavar="ISO-TIME", callback=iso_time,
                        help=f"Only {what} at or after this time (ISO-8601, UTC if no zone).")


def project_option(what: str):
    """--project P: only ``what`` of the projects P names (signals/projects.py)."""
    return click.option(
        "--project", default=None, metavar="P",
        help=f"Only {what} of a project whose folder (as in ~/.claude/projects) or cwd "
             "holds P: its name, a part of it, or a folder here ('.'); a note on stderr when "
             "no session matches.")


def checked(value, check, refused):
    """``check(value)``, the library's check of an option's value, with its
    error ``refused`` a usage error (exit 2, its one line)."""
    try:
        return check(value)
    except refused as exc:
        raise click.BadParameter(str(exc)) from None


def _claude_version(ctx, param, value):
    """--claude-version V: a version thinking.claude_version reads, else a
    usage error (one that is not a version would read as today's Claude Code
    and flip the verdict)."""
    if value is None:
        return None
    from indexer.transcripts import thinking   # (only when a version is given: start-up time)

    return checked(value, thinking.claude_version, thinking.NotAVersion)


claude_version_option = click.option(
    "--claude-version", default=None, metavar="V", callback=_claude_version,
    help="The Claude Code version that will resume (MAJOR.MINOR.PATCH, e.g. 2.1.154): what "
         "it does with thinking the API refuses decides wedged [default: the version that "
         "last wrote the transcript].")


def port_option(default: int, help_text: str):
    """-p/--port: a TCP port a server listens on (serve, demo, mcp --http),
    1-65535; any other number is click's range error (exit 2), not a failed
    bind."""
    return click.option("-p", "--port", type=click.IntRange(1, 65535), default=default,
                        show_default=True, help=help_text)


class FiniteFloatRange(click.FloatRange):
    """A FloatRange of finite numbers: nan (which no bound refuses, every
    comparison with it being false) and the infinities are not numbers of
    days or the like."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def param_type(kind: type, minimum=None):
    """The click type of a listing's option (classes.Param): a float is
    finite; a minimum makes it a range."""
    if kind is float:
        return FiniteFloatRange(min=minimum)
    if kind is int and minimum is not None:
        return click.IntRange(min=minimum)
    return kind


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
generation_option = click.option(
    "--generation", type=click.IntRange(min=1), default=None, metavar="N",
    help="Generation N of each transcript (1 is the first; every rewrite starts one), "
         "leaving out those without one; exit 3 if none has it [default: the current].")

# Each output format's flag and help, in the order --help lists them
# (indexer/cli/output.py writes them: output.FORMATS).
FORMAT_HELP = {
    "json": "Print a JSON array.",
    "nl": "Print one JSON object per line.",
    "csv": "Print CSV with a header row.",
    "tsv": "Print tab-separated values with a header row (the default, but for a "
           "problem listing on a terminal).",
    "table": "Print aligned columns; a problem listing's show those an operator reads (its "
             "default on a terminal).",
}


# Where --columns and --all leave their values for output.write_rows.
COLUMNS_META, ALL_META = "session_index.columns", "session_index.all_columns"


def _keep_in_meta(key):
    def callback(ctx, param, value):
        if value:
            ctx.meta[key] = value
    return callback


def _column_list(ctx, param, value):
    if value is None:
        return None
    columns = [c.strip() for c in value.split(",")]
    if not all(columns):
        raise click.BadParameter("a comma-separated list of column names, none empty")
    ctx.meta[COLUMNS_META] = columns
    return columns


def output_options(fn):
    """--json, --nl, --csv, --tsv, --table: one of them (the last given wins),
    tab-separated unless a listing is on a terminal (indexer/cli/output.py); and
    --columns / --all, which write_rows reads from the click context."""
    fn = click.option("--all", "all_columns", is_flag=True, expose_value=False,
                      callback=_keep_in_meta(ALL_META),
                      help="Every column (a table shows the ones an operator reads).")(fn)
    fn = click.option("--columns", metavar="COL,COL", expose_value=False,
                      callback=_column_list,
                      help="Only these columns, in this order (any format).")(fn)
    for fmt, help_text in reversed(FORMAT_HELP.items()):
        fn = click.option(f"--{fmt}", "fmt", flag_value=fmt, help=help_text)(fn)
    return fn


def nats_auth_options(fn):
    """The NATS connection's auth and TLS options (ship, ingest --from)."""
    for option in reversed((
        click.option("--token", "nats_token", envvar="NATS_TOKEN", default=None,
                     help="The server's auth token [default: $NATS_TOKEN]."),
        click.option("--creds", "nats_creds", type=click.Path(dir_okay=False, exists=True),
                     default=None, help="A NATS credentials file (.creds: JWT and nkey)."),
        click.option("--tls-ca", "nats_tls_ca", type=click.Path(dir_okay=False, exists=True),
                     default=None, help="Verify the server's TLS certificate with this CA "
                                        "file (use a tls:// URL)."),
    )):
        fn = option(fn)
    return fn


consumer_option = click.option(
    "--consumer", default=None, metavar="NAME",
    help="With --from: the durable consumer's name [default: session-index-central]; one "
         "per central index.")


def _hosts(ctx, param, value):
    """--hosts a,b: the host names, each non-empty."""
    if value is None:
        return None
    hosts = [h.strip() for h in value.split(",")]
    if not all(hosts):
        raise click.BadParameter("a comma-separated list of host names, none empty")
    return hosts


hosts_option = click.option(
    "--hosts", default=None, metavar="HOST,HOST", callback=_hosts,
    help="With --from: only these hosts' lines (a partition of the fleet over several "
         "central indexes); a durable consumer per host, NAME-HOST [default: every host's].")


gap_wait_option = click.option(
    "--gap-wait", type=click.FloatRange(min=0), default=60.0, show_default=True,
    metavar="SECONDS",
    help="With --from: how long a file waits for bytes the stream no longer holds (its host "
         "is asked to send them again) before the central records them as a gap and goes on.")


def nats_url(ctx, param, value):
    """--from or --to: a URL fleet_nats.check_url takes (nats://, tls://,
    ws://, wss://, or HOST[:PORT]), else a usage error before anything is
    opened or written (http://x was tried as a host named http)."""
    if value is None:
        return None
    from indexer.ingest import fleet_nats   # (--from and --to only: asyncio and the fleet's modules)

    return checked(value, fleet_nats.check_url, fleet_nats.NotANatsUrl)


def from_options(help_text: str):
    """--from nats://HOST:PORT (``help_text`` says what it does) and what goes
    with it: --consumer, --hosts, --gap-wait, the auth and TLS options."""
    def decorate(fn):
        fn = consumer_option(hosts_option(gap_wait_option(nats_auth_options(fn))))
        return click.option("--from", "from_url", metavar="nats://HOST:PORT", default=None,
                            callback=nats_url, help=help_text)(fn)
    return decorate


def nats_options(url: str, auth: dict):
    """The fleet_nats.ConnectOptions of a NATS URL and the auth options."""
    from indexer.ingest import fleet_nats   # (asyncio and the fleet's modules only for its commands: start-up time)

    return fleet_nats.ConnectOptions(url, token=auth.get("nats_token"),
                                     creds=auth.get("nats_creds"),
                                     tls_ca=auth.get("nats_tls_ca"))


def _metrics_address(ctx, param, value):
    """--metrics PORT or ADDRESS:PORT: (address, port), loopback by default."""
    if value is None:
        return None
    from indexer.ingest import fleet_metrics   # (--metrics only: http.server's start-up time)

    try:
        return fleet_metrics.parse_address(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


metrics_option = click.option(
    "--metrics", "metrics", default=None, metavar="[ADDRESS:]PORT", callback=_metrics_address,
    help="Serve Prometheus metrics at /metrics and a health probe at /healthz on this port "
         "(127.0.0.1 unless ADDRESS says otherwise; prometheus-client: the fleet extra).")
