"""The first ingest into an index that does not exist yet: built aside, then published whole.

A WAL writes every page twice (into the WAL, then into the index at the
checkpoint) so that readers and other writers can work meanwhile. An index
that does not exist yet has neither, so `session-index ingest` builds it in
a file of its own beside it (``.NAME.building-PID``, the same folder): a
rollback journal kept in memory, no fsync at each commit, each page written
once (about 5% of a cold ingest's time, bench/compare_builds.py). Once the
ingest is done the build is switched to WAL, synced, and published under the
index's name with link(2), which fails rather than replace an index another
process created meanwhile (a second ingest, a session store): this ingest
then runs again into that one (the lines are still in the transcripts) and
the build goes; so does it where the file system has no hard links.

Until it is published there is no index: `check`, `serve` and the web say
so, as before any ingest. Ctrl-C publishes what was committed (the next
ingest goes on from there); a build cut short otherwise (SIGTERM, SIGKILL,
a power loss) is a stray file, removed by the next build once its process
is gone. `ingest --watch`, `serve --watch` and `ingest --from` create the
index in place (WAL from the start), as readers may come at once.
"""

from __future__ import annotations

import gc
import os

from indexer.index import db as dbmod
from indexer.index.connection import IndexError_, remove_stale_sidecars

MARK = ".building-"


def build_path(final: str) -> str:
    folder, name = os.path.split(os.path.abspath(final))
    return os.path.join(folder, f".{name}{MARK}{os.getpid()}")


def _remove(path: str) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True   # someone else's process
    return True


def remove_strays(final: str) -> None:
    """Remove the builds of ``final`` whose process is gone."""
    folder, name = os.path.split(os.path.abspath(final))
    prefix = f".{name}{MARK}"
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for entry in names:
        pid = entry[len(prefix):]
        if entry.startswith(prefix) and pid.isdigit() and not _alive(int(pid)):
            _remove(os.path.join(folder, entry))


def _publish(conn, build: str, final: str) -> bool:
    """Switch the build to WAL, sync it and link it as ``final``: False if
    a file is there by now."""
    mode = conn.execute(dbmod.TO_WAL_SQL).fetchone()[0]
    conn.close()
    if mode != "wal":
        raise OSError(f"{build}: could not switch it to WAL (journal mode {mode})")
    fd = os.open(build, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    remove_stale_sidecars(final)   # (a WAL of a deleted index would be replayed into this one)
    try:
        os.link(build, final)
    except OSError:   # a file is there now (or no hard links here): ingest into it in place
        return False
    try:
        fd = os.open(os.path.dirname(os.path.abspath(final)), os.O_RDONLY)
        try:
            os.fsync(fd)   # the new name, too
        finally:
            os.close(fd)
    except OSError:
        pass   # (a folder some file systems cannot sync; the index is there)
    return True


_NOT_BUILT = object()   # _build's answer when the caller is to ingest in place

# How often the build's written pages are handed to the disk (Writeback).
WRITEBACK_EVERY_S = 0.1
SYNC_FILE_RANGE_WRITE = 2   # <fcntl.h>: start writing the range, do not wait


class Writeback:
    """``with Writeback(build):`` while the build is written, a thread has
    the kernel start writing its dirty pages to the disk every
    WRITEBACK_EVERY_S (sync_file_range(2), SYNC_FILE_RANGE_WRITE: it waits
    for nothing, and evicts nothing). The kernel would otherwise keep them
    all in memory until the fsync of ``_publish``, which then wrote the
    whole index while nothing else ran (about 130 ms of a 200 MB cold
    ingest, bench/ingest_speed.py; about 3 ms after). Where there is no
    sync_file_range (not Linux) it does nothing; the fsync is as before."""

    def __init__(self, path: str):
        self.path = path
        self.thread = None
        self.calls = 0   # sync_file_range calls made (tests)

    def __enter__(self):
        import threading   # (only while a build is written: a no-op ingest's start-up time)

        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="session-index-writeback",
                                       daemon=True)
        self.thread.start()
        return self

    def _run(self):
        try:
            import ctypes   # (only while a build is written: ctypes' start-up time)

            sync_file_range = ctypes.CDLL(None, use_errno=True).sync_file_range
            sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_uint]
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except (ImportError, AttributeError, TypeError, OSError):
            return   # no sync_file_range here, or no build to open: the fsync does it all
        try:
            while not self.stop.wait(WRITEBACK_EVERY_S):
                if sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0:
                    return   # (a file system that refuses it)
                self.calls += 1
        finally:
            os.close(fd)

    def __exit__(self, *exc) -> bool:
        self.stop.set()
        self.thread.join()
        return False


def ingest(final: str, run):
    """``run(db)`` (an ingest) on a new build of the index ``final``, then
    the build published as ``final``; on ``final`` opened as always
    (``db.open_index``, which may raise connection.IndexError_) when a file or a
    link is there already, or by the time the build is done, or its folder
    is missing. Returns run's result."""
    result = _build(final, run) if not os.path.lexists(final) else _NOT_BUILT
    if result is _NOT_BUILT:
        result = run(dbmod.open_index(final, create=True))
    return result


def _build(final: str, run):
    dbmod.make_default_folder(final)
    if not os.path.isdir(os.path.dirname(os.path.abspath(final))):
        return _NOT_BUILT
    remove_strays(final)
    build = build_path(final)
    _remove(build)   # (this process's own, from a build before)
    try:
        index = dbmod.open_index(build, create=True, bulk=True)
    except IndexError_:   # (a folder it may not write: opening the index says so)
        _remove(build)
        return _NOT_BUILT
    # What is loaded by now lives as long as the process: the cycle
    # collector, which would walk it at each of the build's many
    # collections, leaves it be.
    gc.freeze()
    writeback = Writeback(build)
    try:
        with writeback:
            result = run(index)
    except KeyboardInterrupt:   # what is committed is kept
        try:
            _publish(index.conn, build, final)   # (an index there by now: the next ingest reads them)
        finally:
            _remove(build)
        raise
    except BaseException:
        index.conn.close()
        _remove(build)
        raise
    try:
        published = _publish(index.conn, build, final)
    finally:
        _remove(build)
    return result if published else _NOT_BUILT
