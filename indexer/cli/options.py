"""The CLI's option blocks, each defined once and imported by the commands
that take it (commands.py, serve.py): the index (--db), Claude Code's config
dir, --now, --json, the output formats of a listing, --generation."""

from __future__ import annotations

import click

from indexer.index import db as dbmod

db_option = click.option(
    "--db", "db_path", type=click.Path(dir_okay=False), default=dbmod.default_db_path,
    show_default="$SESSION_INDEX_DB, else $XDG_DATA_HOME/session-index/sessions.db, "
                 "else ~/.local/share/session-index/sessions.db", help="The index file.")

CONFIG_DIR_HELP = ("Claude Code's config dir, for settings.json and projects/ "
                   "[default: $CLAUDE_CONFIG_DIR (a comma-separated list allowed), else "
                   "~/.config/claude and ~/.claude].")


def config_dir_option(when: str = ""):
    """--config-dir; ``when`` says when it applies ("With --watch: ")."""
    return click.option("--config-dir", type=click.Path(file_okay=False), default=None,
                        help=when + CONFIG_DIR_HELP)


now_option = click.option(
    "--now", default=None, metavar="ISO-TIME",
    help="Answer as if it were this time (ISO-8601, UTC if no zone; default: the clock).")
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
    "tsv": "Print tab-separated values with a header row (the default).",
    "table": "Print aligned columns.",
}


def output_options(fn):
    """--json, --nl, --csv, --tsv, --table: one of them (the last given wins),
    tab-separated by default (indexer/cli/output.py)."""
    for fmt, help_text in reversed(FORMAT_HELP.items()):
        fn = click.option(f"--{fmt}", "fmt", flag_value=fmt, help=help_text)(fn)
    return fn
