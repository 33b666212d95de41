"""Transcripts back out of the index: ``export`` (byte for byte, from the index
alone) and ``restore`` (to their place under a config dir's projects/), each
file as its current generation or, asked for one, as generation N
(generations.py): then the files that have no generation N are left out."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path, PurePath

from indexer.transcripts.digests import sha256
from indexer.index import generations as gens
from indexer.transcripts import safefiles

# A session's transcript files (the one `claude --resume` opens first, then the
# other main files, then subagents), never execution logs or store copies.
SESSION_FILES_SQL = """
SELECT id, path, kind, project_dir, deleted_at FROM files
WHERE session_id = ? AND kind IN ('main', 'subagent') AND path NOT LIKE 'store://%'
ORDER BY id IS (SELECT main_file_id FROM sessions s WHERE s.session_id = files.session_id) DESC,
  kind = 'main' DESC, path
""".strip()

# A session store copy of the session (store.py: its files' paths), when it
# has no transcript file: what export says instead of "no transcript".
STORE_COPY_SQL = """
SELECT path FROM files WHERE session_id = ? AND path LIKE 'store://%' ORDER BY id LIMIT 1
""".strip()


class NothingToExport(Exception):
    """No transcript of this session is in the index."""


class UnknownGeneration(NothingToExport):
    """None of the session's transcripts has the generation asked for."""


class WriteRefused(Exception):
    """A transcript would be written outside the folder asked for, through a
    symlink, or over a different file."""


class RestoreRefused(WriteRefused):
    """A different file already sits where a transcript would be restored."""


TMP_SUFFIX = ".session-index-tmp"


def _target(root: str | Path | None, f: Exported) -> Path:
    """Where ``f`` goes: under ``root`` at its projects/ place, or (no root)
    back at the path it was ingested from. WriteRefused when a ``..`` or a
    symlink in the path (a crafted ``files.path``) leads out of ``root``,
    or the path it came from is not a plain absolute one."""
    target = f.source if root is None else os.path.join(root, f.relative)
    if root is None and (not os.path.isabs(target) or os.path.normpath(target) != target):
        raise WriteRefused(f"{target!r} is not a plain absolute path: refusing to write it "
                           "(name a --config-dir to restore under)")
    if os.path.islink(target):
        raise WriteRefused(f"{target} is a symlink: refusing to write through it "
                           "(nothing was written)")
    if root is not None and not safefiles.inside(root, target):
        raise WriteRefused(f"{f.source!r} would be written to {target}, outside {root}: "
                           "refused (nothing was written)")
    return Path(target)


@dataclass
class Exported:
    file_id: int
    kind: str
    source: str          # the path it was ingested from
    relative: str        # its place under projects/
    data: bytes
    generation: int

    @property
    def sha256(self) -> str:
        return sha256(self.data).hexdigest()


def relative_path(path: str, project_dir: str | None) -> str:
    """``<project>/<session>.jsonl`` or ``<project>/<session>/subagents/agent-x.jsonl``:
    the part of ``path`` from its project folder on."""
    parts = PurePath(path).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == project_dir:
            return str(PurePath(*parts[i:]))
    return str(PurePath(*parts[-2:]))


def _rows(db, session_id: str) -> list[tuple]:
    rows = db.conn.execute(SESSION_FILES_SQL, [session_id]).fetchall()
    if not rows:
        store = db.conn.execute(STORE_COPY_SQL, [session_id]).fetchone()
        if store is not None:
            raise NothingToExport(
                f"session {session_id} is in the index only as a session store copy "
                f"({store[0]}): export and restore write transcript files, and no file of it "
                "was indexed (the SessionStore's load reads the copy)")
        raise NothingToExport(f"no transcript of session {session_id} is in the index")
    return rows


def session_files(db, session_id: str, generation: int | None = None) -> list[Exported]:
    """The session's transcripts (main first), each as its current generation,
    or only those that have ``generation``, as that one. Raises
    NothingToExport, or UnknownGeneration when none has that generation."""
    files, kept = [], {}
    for file_id, path, kind, project_dir, _deleted in _rows(db, session_id):
        numbers = gens.generations(db.conn, file_id)
        kept[path] = numbers
        if generation is not None and generation not in numbers:
            continue
        data = b"".join(gens.generation_bytes(db.conn, file_id, generation))
        files.append(Exported(file_id, kind, path, relative_path(path, project_dir), data,
                              generation or numbers[-1]))
    if not files:
        raise UnknownGeneration(
            f"no transcript of session {session_id} has a generation {generation} in the "
            "index (it holds " + "; ".join(
                f"{PurePath(p).name}: {_spans(n)}" for p, n in kept.items()) + ")")
    return files


def left_out(db, session_id: str, generation: int | None) -> list[str]:
    """The session's transcripts that have no generation ``generation``."""
    if generation is None:
        return []
    return [path for file_id, path, *_ in _rows(db, session_id)
            if generation not in gens.generations(db.conn, file_id)]


def main_transcript(db, session_id: str, generation: int | None = None) -> Exported:
    """The session's main transcript (else its first file) at ``generation``."""
    first = session_files(db, session_id)[0]
    if generation is None or generation == first.generation:
        return first
    try:
        data = b"".join(gens.generation_bytes(db.conn, first.file_id, generation))
    except gens.UnknownGeneration:
        raise UnknownGeneration(
            f"{first.source} has no generation {generation} in the index (it holds "
            f"{_spans(gens.generations(db.conn, first.file_id))})") from None
    return Exported(first.file_id, first.kind, first.source, first.relative, data, generation)


def _spans(numbers: list[int]) -> str:
    """[1, 2, 3, 5] -> '1-3, 5'."""
    out, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(out)


def export(db, session_id: str, out_dir: str | Path, generation: int | None = None,
           force: bool = False) -> list[tuple[Exported, Path]]:
    """Write the session's files under ``out_dir`` at their projects/ places
    (with ``generation``, those that have it, as it was). A different file
    already at a target is refused unless ``force`` (then nothing is
    written); one with the same bytes is left as it is."""
    plan, to_write = [], []
    for f in session_files(db, session_id, generation):
        target = _target(out_dir, f)
        if not _holds(target, f.data):
            if not force and os.path.lexists(target):
                raise WriteRefused(f"{target} exists and differs from the indexed transcript: "
                                   "--force replaces it (nothing was written)")
            to_write.append((f, target))
        plan.append((f, target))
    for f, target in to_write:
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(target, f.data)
    return plan


def _holds(target: Path, data: bytes) -> bool:
    """Is ``target`` a regular file with exactly these bytes?"""
    try:
        with safefiles.open_regular(str(target)) as f:
            return f.read(len(data) + 1) == data
    except OSError:
        return False


def restore(db, session_id: str, config_dir: str | Path | None = None,
            generation: int | None = None) -> list[tuple[Exported, Path, str]]:
    """Put the session's files back where they were ingested from, or with
    ``config_dir`` at their places under ``config_dir``/projects/, each with
    its mtime set to now (Claude Code's cleanup goes by mtime); with
    ``generation``, those that have it, as it was. A file already there with
    the same bytes is left alone; a different one is refused, and then
    nothing is written."""
    files = session_files(db, session_id, generation)
    plan = []
    for f in files:
        target = _target(os.path.join(config_dir, "projects") if config_dir else None, f)
        if os.path.lexists(target):
            if _holds(target, f.data):
                plan.append((f, target, "already there"))
                continue
            raise RestoreRefused(
                f"{target} exists and differs from the indexed transcript"
                + (f" (generation {generation})" if generation is not None else "")
                + ": move it away first (nothing was restored)")
        plan.append((f, target, "restored"))
    now = time.time()
    for f, target, what in plan:
        if what == "restored":
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(target, f.data)
        os.utime(target, (now, now))
    return plan


def _write_atomically(target: Path, data: bytes) -> None:
    """Write through a new temporary file beside ``target`` (O_EXCL, no
    symlink followed), then rename it over ``target``."""
    out, tmp = safefiles.temp_beside(str(target), TMP_SUFFIX)
    try:
        with out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
