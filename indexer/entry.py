"""The ``session-index`` console script.

``session-index check SESSION_ID [--db F] [--config-dir D] [--now T] [--cwd D]
[--json]`` is what an agent server runs before every resume, so it is
answered here without loading click (about 50 ms of a fresh process's
start-up; bench/startup_speed.py). Any other command, ``--help``, an option
this parser does not know, or an argument that needs an error message goes
to the click CLI (indexer/cli.py), which owns every option's help and
errors: the answer and the output are the same either way (check.report).
"""

from __future__ import annotations

import os
import sys

# check's options as cli.py declares them: flag -> (keyword, what its value
# is). "file": a path click refuses when it is a directory; "dir": one it
# refuses when it is a file; "text": any value; None: a flag.
CHECK_OPTIONS = {
    "--db": ("db_path", "file"), "--config-dir": ("config_dir", "dir"),
    "--now": ("now", "text"), "--cwd": ("cwd", "dir"), "--json": ("as_json", None),
}
REFUSED = {"file": os.path.isdir, "dir": os.path.isfile, "text": lambda value: False}


def parse_check(args: list[str]) -> dict | None:
    """``check``'s arguments as keyword arguments, or None when the click
    CLI should parse them (help, an unknown or repeated option, no or two
    session ids, a missing value)."""
    found: dict = {}
    session_ids = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg == "-":
            session_ids.append(arg)
            i += 1
            continue
        flag, eq, value = arg.partition("=")
        if flag not in CHECK_OPTIONS:
            return None
        name, kind = CHECK_OPTIONS[flag]
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
    if len(session_ids) != 1:
        return None
    return {"session_id": session_ids[0], **found}


def fast_check(args: list[str]) -> int | None:
    """Answer a plain ``check``; its exit code, or None to leave it to click."""
    options = parse_check(args)
    if options is None:
        return None
    from . import check, db, signals

    try:
        now = signals.iso_now(options.get("now"))
        index = db.open_index(options.get("db_path") or db.default_db_path())
    except (signals.BadTime, db.IndexError_):
        return None  # click words the error (a usage error, or exit 3)
    verdict = check.check(index, options["session_id"], now=now,
                          config_dir=options.get("config_dir"), cwd=options.get("cwd"))
    return check.report(verdict, options.get("as_json", False), sys.stdout, sys.stderr)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["check"]:
        code = fast_check(args[1:])
        if code is not None:
            sys.stdout.flush()
            sys.exit(code)
    from .cli import cli

    cli()
