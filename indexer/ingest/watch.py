"""Following transcripts as they are written: ``session-index ingest --watch``.

A :class:`Watcher` runs one normal ingest of its sources, then follows them
with the kernel's file notifications (the ``watchfiles`` library, inotify on
Linux; its polling mode only when notifications cannot be had, or when
``WATCHFILES_FORCE_POLLING`` is set) and hands the paths that changed to
``ingest.ingest(db, paths)``: a changed or new ``.jsonl`` file as itself, a
folder that appeared (or vanished) as a folder to scan, a deleted tracked
file by its path, so ingest reads only what is new and marks what is gone.
Every few minutes, and whenever a watched folder is replaced, it ingests the
whole sources again: a safety net for notifications the kernel dropped.

Notifications are grouped for at most DEBOUNCE_MS (and yielded as soon as
STEP_MS pass without a new one), so a complete line is committed well within
a second of its write. When polling, a write in the same second as the one
before it is seen about RECHECK_SECONDS later (polling compares mtimes to
the second).

Stopping (``request_stop``, from a SIGINT/SIGTERM handler) is cooperative:
a batch stops at its next commit (ingest calls its ``progress`` callback
right after each ``COMMIT``, and the callback raises :class:`Stopped` there,
so the transaction it ended is whole and nothing is open), the derive step of
a batch finishes; a wait for notifications ends within STEP_MS. What a stop
leaves undone (lines not read yet, caches not derived) the next ingest does,
exactly once. A second signal stops at once (``Stopped`` raised from the
handler): every open transaction rolls back.

An index file deleted or replaced while the watcher runs stops it
(``db.OpenedFile``, checked before each batch and at least once a tick):
its connection would otherwise write into the unlinked file.

The log goes to stderr, one line each, never a traceback (formats in
LOG_FORMATS below and in docs/guides/agent-server.md). An error on one file, or a failed
batch, is logged and the watcher goes on (a failed batch is retried with a
growing delay).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from typing import Callable

from indexer.index import db as dbmod
from indexer.index.clock import utcnow
from indexer.index.connection import IndexError_
from indexer.transcripts import discover
from indexer.ingest import files as ingestmod, sidecars
from indexer.ingest.log import counted, stderr_line

# Group notifications for at most this long, and yield once this long passes
# without a new one: a write is seen after about STEP_MS, at most DEBOUNCE_MS.
DEBOUNCE_MS = 200
STEP_MS = 50
# How long one wait for notifications lasts before the loop looks at its
# timers (retries, the periodic rescan, replaced folders).
TICK_MS = 1000
POLL_DELAY_MS = 200           # the polling fallback's interval
# Polling compares mtimes to the second: a write in the same second as the
# change just reported goes unseen. So, when polling, each path reported (and
# the sources, after a whole ingest) is ingested once more this long after.
RECHECK_SECONDS = 1.1
RESCAN_SECONDS = 300.0        # the safety-net ingest of the whole sources
RETRY_SECONDS, MAX_RETRY_SECONDS = 1.0, 60.0

# The log's lines (after an ISO-8601 UTC time and a space).
LOG_FORMATS = {
    "watching": "watching {sources} ({mode})",
    "batch": ("ingest: {files} ({changed} changed, {deleted} deleted, {rewritten} "
              "rewritten), {new_lines}, {seconds:.3f}s{named}"),
    "error": "error: {message}",
    "warning": "warning: {message}",
    "unwritten": "warning: unwritten transcript {session_id} ({cause}): {reason}",
    "stopped": "stopped on {signal}",
}

# Is this path, or anything under this folder, tracked? (files.path is unique
# and indexed; the range is every path starting with the folder and a '/'.)
TRACKED_PATH_SQL = "SELECT 1 FROM files WHERE path = ? LIMIT 1"
TRACKED_UNDER_SQL = "SELECT 1 FROM files WHERE path > ? AND path < ? LIMIT 1"
# The sessions whose transcript was never written, stopped, or is a husk
# (signals/unwritten.py, the unwritten_transcripts view): each is logged once,
# when the watcher first sees it.
UNWRITTEN_SQL = "SELECT session_id, cause, reason FROM unwritten_transcripts ORDER BY evidence_at"


class WatchError(Exception):
    """The watcher cannot start: the index or a source cannot be used."""


class Stopped(Exception):
    """A requested stop, raised where it leaves nothing half-done."""


def default_sources(sources, config_dir=None) -> list[str]:
    """The SOURCES given, else the projects folder ingest defaults to."""
    try:
        return discover.default_sources(sources, config_dir)
    except discover.NoProjectsFolder as exc:
        raise WatchError(str(exc)) from None


NAMED_FILES = 3   # the changed files a batch's log line names; the rest are counted


def named_files(changed: list[tuple]) -> str:
    """The batch line's tail: ": PATH (session ID), ..." for the first
    NAMED_FILES changed files, "and N more" for the others; none: ""."""
    if not changed:
        return ""
    named = [path + (f" (session {sid})" if sid else "") for path, sid in changed[:NAMED_FILES]]
    more = len(changed) - NAMED_FILES
    return ": " + ", ".join(named) + (f" and {more:,} more" if more > 0 else "")


def stderr_log(line: str) -> None:
    """One log line on stderr, after the time (``log.stderr_line``)."""
    stderr_line(f"{utcnow()} {line}")


def signal_name(sig) -> str:
    try:
        return signal.Signals(sig).name
    except (TypeError, ValueError):
        return "request"


def _force_polling() -> bool:
    """watchfiles' own switch, WATCHFILES_FORCE_POLLING, read as it reads it."""
    value = os.environ.get("WATCHFILES_FORCE_POLLING", "")
    return bool(value) and value.lower() not in {"false", "disable", "disabled"}


class Watcher:
    """Keeps the index at ``db_path`` current with ``sources`` until stopped.

    ``run()`` blocks; it opens its own connection (so it may run in a thread
    beside Datasette's). ``request_stop()`` may be called from any thread or
    from a signal handler.
    """

    def __init__(self, db_path, sources, *, config_dir=None,
                 log: Callable[[str], None] = stderr_log, force_polling: bool | None = None,
                 rescan_seconds: float = RESCAN_SECONDS, search_new: bool = False):
        self.db_path = str(db_path)
        self.search_new = search_new   # (ingest.ingest's: search on in an index it makes)
        self.sources = [os.path.abspath(s) for s in sources]
        self.config_dir = config_dir
        self.log = log
        self.force_polling = _force_polling() if force_polling is None else force_polling
        self.rescan_seconds = rescan_seconds
        self.stop = threading.Event()
        self.stop_signal = None
        self.db = None
        self.polling = self.force_polling
        self.retry: set[str] = set()
        self.retry_at = 0.0
        self.retry_delay = RETRY_SECONDS
        self.last_errors: dict[str, str] = {}   # path -> the error last logged for it
        self.last_warnings: set[str] = set()
        self.unwritten_logged: set[tuple] = set()   # (session id, cause) logged
        self.recheck: dict[str, float] = {}     # polling: path -> when to ingest it again
        self.dir_roots = [s for s in self.sources if os.path.isdir(s)]
        self.file_roots = {s for s in self.sources if s not in self.dir_roots}

    def _say(self, kind: str, **values) -> None:
        self.log(LOG_FORMATS[kind].format(**values))

    # -- stopping ---------------------------------------------------------

    def request_stop(self, sig=None) -> None:
        if self.stop_signal is None:
            self.stop_signal = signal_name(sig) if sig is not None else "request"
        self.stop.set()

    def _progress(self, _n: int) -> None:
        # Called by ingest right after each COMMIT: the place to stop.
        if self.stop.is_set():
            raise Stopped()

    # -- the loop ---------------------------------------------------------

    def run(self) -> None:
        """Ingest, then follow the sources until a stop is requested.
        Raises WatchError when the index or a source cannot be used at start."""
        try:
            self.db = dbmod.open_db(self.db_path)
        except IndexError_ as exc:
            raise WatchError(str(exc)) from None
        self.opened = dbmod.OpenedFile(self.db.conn)
        try:
            self._loop()
        except Stopped:
            pass
        except dbmod.IndexReplaced as exc:
            raise WatchError(str(exc)) from None
        finally:
            self.db.conn.close()

    def _loop(self) -> None:
        first = True
        while not self.stop.is_set():
            notify = self._notifier()
            if notify is None:           # a watched folder is missing: wait for it
                self.stop.wait(TICK_MS / 1000)
                continue
            with notify:
                # Started before the ingest, so a write during it is not missed.
                self._full_ingest(at_start=first)
                if first:
                    self._say("watching", sources=", ".join(self.sources),
                              mode="polling" if self.polling else "inotify")
                first = False
                self._follow(notify)

    def _watch_roots(self) -> list[str]:
        roots = list(self.dir_roots)
        roots += sorted({os.path.dirname(p) for p in self.file_roots} - set(roots))
        return roots

    def _notifier(self):
        """A RustNotify on the watch roots (inotify, else polling), or None
        while one of them is missing."""
        from watchfiles._rust_notify import RustNotify   # (only once following: watchfiles' start-up time)

        roots = self._watch_roots()
        if not all(os.path.isdir(r) for r in roots):
            return None
        self.root_ids = {r: dbmod.file_identity(r) for r in roots}
        while True:
            try:
                return RustNotify(roots, False, self.polling, POLL_DELAY_MS, True, True)
            except FileNotFoundError:
                return None
            except (OSError, RuntimeError) as exc:
                if self.polling:
                    raise WatchError(f"cannot watch {', '.join(roots)}: {exc}") from None
                self._polling_instead(exc)

    def _polling_instead(self, exc) -> None:
        self._say("warning", message=f"file notifications unavailable ({exc}); "
                                     f"polling every {POLL_DELAY_MS} ms")
        self.polling = True

    def _follow(self, notify) -> None:
        last_full = time.monotonic()
        while not self.stop.is_set():
            try:
                changes = notify.watch(DEBOUNCE_MS, STEP_MS, self._timeout_ms(), self.stop)
            except (OSError, RuntimeError) as exc:  # the watch broke: start it anew
                if not self.polling and discover.UNDECODABLE_PATH in str(exc):
                    self._polling_instead(exc)
                    return
                self._error(f"watching failed, restarting it: {type(exc).__name__}: {exc}")
                self.stop.wait(TICK_MS / 1000)
                return
            if changes in ("stop", "signal"):
                return
            self.opened.verify()         # at least once a tick
            paths = set() if changes == "timeout" else self._relevant(changes)
            now = time.monotonic()
            if self.polling:
                for path in paths:
                    self.recheck[path] = now + RECHECK_SECONDS
                due = {p for p, at in self.recheck.items() if at <= now}
                for path in due:
                    del self.recheck[path]
                paths |= due
            if self.retry and now >= self.retry_at:
                paths |= self.retry
                self.retry = set()
            if paths:
                self._ingest(sorted(paths))
            if any(dbmod.file_identity(r) != i for r, i in self.root_ids.items()):
                return                   # a watched folder was replaced: watch it anew
            if time.monotonic() - last_full >= self.rescan_seconds:
                self._full_ingest()
                last_full = time.monotonic()

    def _timeout_ms(self) -> int:
        """How long to wait for notifications: a tick, or less when a
        recheck is due sooner."""
        if not self.recheck:
            return TICK_MS
        wait = min(self.recheck.values()) - time.monotonic()
        return max(10, min(TICK_MS, int(wait * 1000) + 1))

    # -- which paths to ingest ---------------------------------------------

    def _tracked(self, path: str) -> bool:
        return self.db.conn.execute(TRACKED_PATH_SQL, [path]).fetchone() is not None

    def _tracked_under(self, folder: str) -> bool:
        prefix = folder.rstrip(os.sep) + os.sep
        end = prefix[:-1] + chr(ord(os.sep) + 1)
        return self.db.conn.execute(TRACKED_UNDER_SQL, [prefix, end]).fetchone() is not None

    def _relevant(self, changes) -> set[str]:
        """The sources to give ingest for a set of (change, path) notifications."""
        out = set()
        for _change, path in changes:
            if discover.not_utf8(path) is not None:   # never tracked: ingest says so
                if os.path.lexists(path):
                    out.add(path)
                continue
            root = next((r for r in self.dir_roots
                         if path == r or path.startswith(r.rstrip(os.sep) + os.sep)), None)
            if root is None:
                if path in self.file_roots and (os.path.isfile(path) or self._tracked(path)):
                    out.add(path)
                continue
            if not discover.walked(root, path):
                continue                 # tool outputs, workflow journals, linked folders
            if os.path.isfile(path):
                if discover.may_be_session_file(path):
                    out.add(path)
            elif os.path.isdir(path):
                if not os.path.islink(path):   # (a plain ingest does not follow it either)
                    out.add(path)        # a new folder: scan it (its files may predate its watch)
            elif discover.may_be_session_file(path) and self._tracked(path):
                out.add(path)            # a deleted transcript
            elif self._tracked_under(path):
                out.add(path)            # a deleted folder that held transcripts
        return out

    # -- ingesting ----------------------------------------------------------

    def _full_ingest(self, at_start: bool = False) -> None:
        if self.polling:
            for source in self.sources:
                self.recheck[source] = time.monotonic() + RECHECK_SECONDS
        try:
            self._run_ingest(list(self.sources))
        except ingestmod.SourceNotFound as exc:
            if at_start:
                raise WatchError(str(exc)) from None
            self._error(str(exc))

    def _ingest(self, paths: list[str]) -> None:
        try:
            self._run_ingest(paths)
        except ingestmod.SourceNotFound:
            # One of them vanished since it was looked at: the others alone.
            for path in paths:
                try:
                    self._run_ingest([path])
                except ingestmod.SourceNotFound:
                    pass

    def _run_ingest(self, paths: list[str]) -> None:
        """One batch: ingest ``paths``, log it; errors are logged, and the
        batch retried later, never raised (but SourceNotFound and Stopped)."""
        try:
            summary = ingestmod.ingest(self.db, paths, progress=self._progress,
                                       config_dir=self.config_dir, search_new=self.search_new)
        except (Stopped, ingestmod.SourceNotFound):
            raise
        except Exception as exc:  # the index is locked, the disk full, ...: retry later
            self._error(f"ingest of {len(paths)} path(s) failed, will retry: "
                        f"{type(exc).__name__}: {exc}")
            self.retry |= set(paths)
            self.retry_at = time.monotonic() + self.retry_delay
            self.retry_delay = min(self.retry_delay * 2, MAX_RETRY_SECONDS)
            return
        self.retry_delay = RETRY_SECONDS
        self._say("batch", files=counted(summary.files, "file"), changed=summary.changed_files,
                  deleted=summary.deleted_files, rewritten=summary.rewritten_files,
                  new_lines=counted(summary.new_lines, "new line"), seconds=summary.seconds,
                  named=named_files(summary.changed))
        failed = {error.rsplit(": ", 1)[0]: error for error in summary.errors}
        for path, error in failed.items():
            if self.last_errors.get(path) != error:
                self._error(error)       # once per file, until it changes or heals
        for path in [p for p in self.last_errors if p not in failed and _under(p, paths)]:
            del self.last_errors[path]
        self.last_errors.update(failed)
        for warning in summary.warnings:
            if warning not in self.last_warnings:
                self._say("warning", message=warning)
        self.last_warnings = set(summary.warnings)
        self._log_unwritten()

    def _log_unwritten(self) -> None:
        """history.jsonl read (beside the projects folders watched: a batch of
        changed files does not name it); then each session whose transcript was not written (unwritten_transcripts),
        logged the first time the watcher sees it with that cause."""
        for path in sidecars.history_paths(self.dir_roots):
            sidecars.ingest_history(self.db, path, os.path.dirname(path))
        for session_id, cause, reason in self.db.conn.execute(UNWRITTEN_SQL):
            if (session_id, cause) not in self.unwritten_logged:
                self.unwritten_logged.add((session_id, cause))
                self._say("unwritten", session_id=session_id, cause=cause, reason=reason)

    def _error(self, message: str) -> None:
        self._say("error", message=message)


def _under(path: str, sources: list[str]) -> bool:
    return any(path == s or path.startswith(s.rstrip(os.sep) + os.sep) for s in sources)


def run_until_signal(db_path, sources, *, config_dir=None, log=stderr_log,
                     search_new: bool = False) -> None:
    """``ingest --watch``: a Watcher in this (the main) thread until SIGINT or
    SIGTERM; the first stops at the next safe point, a second at once."""
    watcher = Watcher(db_path, sources, config_dir=config_dir, log=log, search_new=search_new)
    running = [True]

    def handle(sig, _frame):
        if watcher.stop.is_set() and running[0]:
            raise Stopped()
        watcher.request_stop(sig)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        watcher.run()
    except Stopped:
        pass
    except WatchError:
        raise
    except Exception as exc:
        if not (watcher.stop.is_set() and isinstance(exc, sqlite3.Error)):
            raise WatchError(f"the watcher stopped: {type(exc).__name__}: {exc}") from None
        # A second signal cut a transaction's bookkeeping short: SQLite rolled it back.
    finally:
        running[0] = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log(LOG_FORMATS["stopped"].format(signal=watcher.stop_signal or "request"))
