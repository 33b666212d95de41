"""Transcripts back out of the index: ``export`` (byte for byte, from the index
alone) and ``restore`` (to their place under a config dir's projects/)."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path, PurePath

from .ingest import stored_bytes

# A session's transcript files (the one `claude --resume` opens first, then the
# other main files, then subagents), never execution logs or store copies.
SESSION_FILES_SQL = """
SELECT id, path, kind, project_dir, deleted_at FROM files
WHERE session_id = ? AND kind IN ('main', 'subagent') AND path NOT LIKE 'store://%'
ORDER BY id IS (SELECT main_file_id FROM sessions s WHERE s.session_id = files.session_id) DESC,
  kind = 'main' DESC, path
""".strip()


class NothingToExport(Exception):
    """No transcript of this session is in the index."""


class RestoreRefused(Exception):
    """A different file already sits where a transcript would be restored."""


@dataclass
class Exported:
    file_id: int
    kind: str
    source: str          # the path it was ingested from
    relative: str        # its place under projects/
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def relative_path(path: str, project_dir: str | None) -> str:
    """``<project>/<session>.jsonl`` or ``<project>/<session>/subagents/agent-x.jsonl``:
    the part of ``path`` from its project folder on."""
    parts = PurePath(path).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == project_dir:
            return str(PurePath(*parts[i:]))
    return str(PurePath(*parts[-2:]))


def session_files(db, session_id: str) -> list[Exported]:
    rows = db.conn.execute(SESSION_FILES_SQL, [session_id]).fetchall()
    if not rows:
        raise NothingToExport(f"no transcript of session {session_id} is in the index")
    return [Exported(file_id, kind, path, relative_path(path, project_dir),
                     b"".join(stored_bytes(db.conn, file_id, with_pending=True)))
            for file_id, path, kind, project_dir, _deleted in rows]


def export(db, session_id: str, out_dir: str | Path) -> list[tuple[Exported, Path]]:
    """Write the session's files under ``out_dir`` at their projects/ places."""
    written = []
    for f in session_files(db, session_id):
        target = Path(out_dir) / f.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(target, f.data)
        written.append((f, target))
    return written


def restore(db, session_id: str, config_dir: str | Path | None = None
            ) -> list[tuple[Exported, Path, str]]:
    """Put the session's files back where they were ingested from, or with
    ``config_dir`` at their places under ``config_dir``/projects/, each with
    its mtime set to now (Claude Code's cleanup goes by mtime). A file already
    there with the same bytes is left alone; a different one is refused, and
    then nothing is written."""
    files = session_files(db, session_id)
    plan = []
    for f in files:
        target = (Path(config_dir) / "projects" / f.relative) if config_dir else Path(f.source)
        if target.exists():
            if target.read_bytes() == f.data:
                plan.append((f, target, "already there"))
                continue
            raise RestoreRefused(
                f"{target} exists and differs from the indexed transcript: move it away "
                "first (nothing was restored)")
        plan.append((f, target, "restored"))
    now = time.time()
    for f, target, what in plan:
        if what == "restored":
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(target, f.data)
        os.utime(target, (now, now))
    return plan


def _write_atomically(target: Path, data: bytes) -> None:
    tmp = target.with_name(f".{target.name}.session-index-tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)
