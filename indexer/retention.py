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
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DAYS = 30
# Where managed (enterprise) settings live; SESSION_INDEX_MANAGED_SETTINGS
# names another file (tests, unusual installs).
MANAGED_SETTINGS = {
    "darwin": "/Library/Application Support/ClaudeCode/managed-settings.json",
    "win32": r"C:\ProgramData\ClaudeCode\managed-settings.json",
}.get(sys.platform, "/etc/claude-code/managed-settings.json")


@dataclass(frozen=True)
class Retention:
    days: int
    source: str            # the settings file that set it, or 'default'
    warnings: tuple = ()   # unreadable settings files, bad values

    @property
    def deletes_everything(self) -> bool:
        return self.days == 0


def default_config_dir() -> Path:
    config = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(config) if config else Path.home() / ".claude"


def settings_files(config_dir: Path, cwd: str | None) -> list[Path]:
    """The settings files that can set cleanupPeriodDays, highest precedence first."""
    files = [Path(os.environ.get("SESSION_INDEX_MANAGED_SETTINGS") or MANAGED_SETTINGS)]
    if cwd and os.path.isdir(cwd):
        project = Path(cwd) / ".claude"
        files += [project / "settings.local.json", project / "settings.json"]
    files.append(Path(config_dir) / "settings.json")
    return files


def _read_days(path: Path) -> tuple[int | None, str | None]:
    """(cleanupPeriodDays, warning) from one settings file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
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


def resolve(config_dir: Path, cwd: str | None, read_days=_read_days) -> Retention:
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


# The transcript files whose retention is resolved: each distinct cwd once.
FILES_BY_CWD_SQL = """
SELECT coalesce(s.cwd, f.cwd) AS cwd, f.id, f.retention_days, f.retention_source
FROM files f LEFT JOIN sessions s ON s.session_id = f.session_id
WHERE f.kind IN ('main', 'subagent')
""".strip()
SET_RETENTION_SQL = "UPDATE files SET retention_days = ?, retention_source = ? WHERE id = ?"


def apply(db, config_dir: Path) -> list[str]:
    """Store the retention in force on every transcript file; return warnings
    (settings problems, and loudly, any cleanupPeriodDays of 0)."""
    from .db import write_lock

    resolved: dict = {}
    changes = []
    # The managed and the user settings are read once, not once per cwd.
    read_days = functools.lru_cache(maxsize=None)(_read_days)
    for cwd, file_id, days, source in db.conn.execute(FILES_BY_CWD_SQL).fetchall():
        if cwd not in resolved:
            resolved[cwd] = resolve(config_dir, cwd, read_days)
        r = resolved[cwd]
        if (days, source) != (r.days, r.source):
            changes.append((r.days, r.source, file_id))
    if changes:
        with write_lock(db) as conn:
            conn.executemany(SET_RETENTION_SQL, changes)
    warnings = sorted({w for r in resolved.values() for w in r.warnings})
    for source in sorted({r.source for r in resolved.values() if r.deletes_everything}):
        warnings.append(
            f"cleanupPeriodDays is 0 in {source}: Claude Code deletes every transcript "
            "at its next start and writes no new ones")
    return warnings
