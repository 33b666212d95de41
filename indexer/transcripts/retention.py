"""How long Claude Code keeps a transcript: ``cleanupPeriodDays``, resolved as
Claude Code resolves settings.

Claude Code deletes ``<project>/*.jsonl`` whose mtime is older than
``cleanupPeriodDays`` (default 30) at startup. The value comes from, highest
precedence first: managed settings, the project's
``.claude/settings.local.json``, the project's ``.claude/settings.json``
(both only when the session's cwd exists), the user's ``settings.json`` in
the config dir. ``0`` deletes everything and stops writing transcripts.
"""

from __future__ import annotations

import functools
import json
import os
import sys

from indexer.sql import write_lock

DEFAULT_DAYS = 30
# Where managed (enterprise) settings live; SESSION_INDEX_MANAGED_SETTINGS
# names another file (tests, unusual installs).
MANAGED_SETTINGS = {
    "darwin": "/Library/Application Support/ClaudeCode/managed-settings.json",
    "win32": r"C:\ProgramData\ClaudeCode\managed-settings.json",
}.get(sys.platform, "/etc/claude-code/managed-settings.json")


class Retention:
    """The cleanupPeriodDays in force: ``source`` is the settings file that
    set it, or 'default'; ``warnings`` name unreadable files and bad values."""

    __slots__ = ("days", "source", "warnings")

    def __init__(self, days: int, source: str, warnings: tuple = ()):
        self.days, self.source, self.warnings = days, source, warnings

    def __eq__(self, other):
        return isinstance(other, Retention) and (self.days, self.source, self.warnings) == (
            other.days, other.source, other.warnings)

    def __repr__(self) -> str:
        return f"Retention({self.days!r}, {self.source!r}, {self.warnings!r})"

    @property
    def deletes_everything(self) -> bool:
        return self.days == 0


def config_dirs() -> list[str]:
    """Claude Code's config dirs: $CLAUDE_CONFIG_DIR (a comma-separated list
    allowed, as other Claude Code tools take it), else those of
    $XDG_CONFIG_HOME/claude (~/.config/claude) and ~/.claude that exist
    (~/.claude if neither does)."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    if env and env.strip(", "):
        return [d for d in (part.strip() for part in env.split(",")) if d]
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    found = [d for d in (os.path.join(xdg, "claude"), os.path.join(home, ".claude"))
             if os.path.isdir(d)]
    return found or [os.path.join(home, ".claude")]


def default_config_dir() -> str:
    """The config dir whose settings.json applies: the first of config_dirs()."""
    return config_dirs()[0]


def settings_files(config_dir, cwd: str | None) -> list[str]:
    """The settings files that can set cleanupPeriodDays, highest precedence first."""
    files = [os.environ.get("SESSION_INDEX_MANAGED_SETTINGS") or MANAGED_SETTINGS]
    if cwd and os.path.isdir(cwd):
        project = os.path.join(cwd, ".claude")
        files += [os.path.join(project, "settings.local.json"),
                  os.path.join(project, "settings.json")]
    files.append(os.path.join(config_dir, "settings.json"))
    return files


def _read_days(path: str) -> tuple[int | None, str | None]:
    """(cleanupPeriodDays, warning) from one settings file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"{path}: unreadable settings ({exc.__class__.__name__}: {exc})"
    if not isinstance(data, dict) or "cleanupPeriodDays" not in data:
        return None, None
    value = data["cleanupPeriodDays"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None, f"{path}: cleanupPeriodDays {value!r} is not a number of days; ignored"
    return int(value), None


def resolve(config_dir, cwd: str | None, read_days=_read_days) -> Retention:
    """The cleanupPeriodDays in force for a session whose cwd is ``cwd``
    (``read_days``: _read_days, or a memo of it over many cwds)."""
    warnings = []
    for path in settings_files(config_dir, cwd):
        days, warning = read_days(path)
        if warning:
            warnings.append(warning)
        if days is not None:
            return Retention(days, str(path), tuple(warnings))
    return Retention(DEFAULT_DAYS, "default", tuple(warnings))


# The transcript files whose retention is resolved, grouped by their cwd
# (each resolved once) and the retention they have now (a JSON array of
# their ids: most groups need no change, and every run asks).
FILES_BY_CWD_SQL = """
SELECT coalesce(s.cwd, f.cwd) AS cwd, f.retention_days, f.retention_source,
       json_group_array(f.id) AS ids
FROM files f LEFT JOIN sessions s ON s.session_id = f.session_id
WHERE f.kind IN ('main', 'subagent') AND f.agent = 'claude-code'   -- (Claude Code's cleanup deletes only its own)
GROUP BY 1, 2, 3
""".strip()
SET_RETENTION_SQL = "UPDATE files SET retention_days = ?, retention_source = ? WHERE id = ?"


def apply(db, config_dir) -> list[str]:
    """Store the retention in force on every transcript file; return warnings
    (settings problems, and loudly, any cleanupPeriodDays of 0)."""
    resolved: dict = {}
    changes = []
    # The managed and the user settings are read once, not once per cwd.
    read_days = functools.lru_cache(maxsize=None)(_read_days)
    for cwd, days, source, ids in db.conn.execute(FILES_BY_CWD_SQL).fetchall():
        if cwd not in resolved:
            resolved[cwd] = resolve(config_dir, cwd, read_days)
        r = resolved[cwd]
        if (days, source) != (r.days, r.source):
            changes += [(r.days, r.source, file_id) for file_id in json.loads(ids)]
    if changes:
        with write_lock(db) as conn:
            conn.executemany(SET_RETENTION_SQL, changes)
    warnings = sorted({w for r in resolved.values() for w in r.warnings})
    for source in sorted({r.source for r in resolved.values() if r.deletes_everything}):
        warnings.append(
            f"cleanupPeriodDays is 0 in {source}: Claude Code deletes every transcript "
            "at its next start and writes no new ones")
    return warnings
