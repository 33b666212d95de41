"""``session-index serve --watch``: Datasette and the watcher in one process,
the one long-running process an operator starts.

uvicorn serves Datasette in the main thread; a :class:`watch.Watcher` runs
in a thread of its own with its own SQLite connection (Datasette reads
through its own; WAL lets every page see the latest commit). SIGINT and
SIGTERM stop both: the server stops taking requests and finishes those in
flight, the watcher stops at its next commit, then the process exits 0 with
one log line. A second signal stops at once (an open transaction is rolled
back by SQLite). If the watcher cannot go on, the server stops too and the
process exits 3, so a supervisor restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading

from indexer.index import db as dbmod
from indexer.ingest import watch as watchmod
from indexer.cli import web
from indexer.ingest.log import stderr_line

EXIT_UNUSABLE = 3
JOIN_STEP_SECONDS = 0.1


def _server_class():
    import uvicorn   # (only once a server runs: its start-up time)

    class Server(uvicorn.Server):
        """uvicorn's server without its own signal handling (which re-raises
        the signal after shutdown, so the process would die by it)."""

        @contextlib.contextmanager
        def capture_signals(self):
            yield

    return Server


def serve_and_watch(db_path, host: str, port: int, sources, *, config_dir=None,
                    fleet=None, log=watchmod.stderr_log) -> int:
    """Serve ``db_path`` and keep it current with ``sources`` (if any) and
    ``fleet`` (a fleet_ingest.Follower: ``serve --watch --from``) until a
    signal; returns the exit code (0 on a signal, 3 when a follower failed)."""
    import uvicorn   # (only once a server runs: its start-up time)

    ds = web.make_datasette(db_path)
    asyncio.new_event_loop().run_until_complete(ds.invoke_startup())
    config = uvicorn.Config(ds.app(), host=host, port=port, log_level="warning",
                            lifespan="on", workers=1)
    server = _server_class()(config)
    followers = []
    if sources:
        followers.append(watchmod.Watcher(db_path, sources, config_dir=config_dir, log=log))
    if fleet is not None:
        followers.append(fleet)
    failure: list[str] = []
    forced = threading.Event()
    stopping = threading.Event()
    stopped_by: list[str] = []

    def follow(follower):
        try:
            follower.run()
        except (watchmod.WatchError, dbmod.IndexReplaced) as exc:
            failure.append(str(exc))
        except Exception as exc:  # never a traceback: say it, stop the server
            failure.append(f"the {_name(follower)} stopped: {type(exc).__name__}: {exc}")
        if not stopping.is_set():
            if not failure:
                failure.append(f"the {_name(follower)} stopped")
            server.should_exit = True

    def stop_all(sig=None):
        stopping.set()
        for follower in followers:
            follower.request_stop(sig)

    def handle(sig, _frame):
        if server.should_exit:
            server.force_exit = True
            forced.set()
        server.should_exit = True
        stopped_by.append(watchmod.signal_name(sig))
        stop_all(sig)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    threads = [threading.Thread(target=follow, args=(f,), name=f"session-index-{_name(f)}",
                                daemon=True) for f in followers]
    try:
        shown = f"[{host}]" if ":" in host else host
        stderr_line(f"Serving {db_path} at http://{shown}:{port}/-/session-health")
        if not web.is_loopback(host):
            stderr_line("warning: listening beyond this machine; anyone who reaches "
                                 "it reads every transcript (see the deployment notes)")
        for thread in threads:
            thread.start()
        try:
            server.run()
        except SystemExit:   # uvicorn could not start (it said why)
            failure.append(f"the web server could not start on {host}:{port}")
        stop_all()
        for thread in threads:
            while thread.is_alive() and not forced.is_set():
                thread.join(JOIN_STEP_SECONDS)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failure:
        for message in failure:
            log(watchmod.LOG_FORMATS["error"].format(message=message))
        return EXIT_UNUSABLE
    log(watchmod.LOG_FORMATS["stopped"].format(signal=stopped_by[0] if stopped_by else "request"))
    return 0


def _name(follower) -> str:
    return "watcher" if isinstance(follower, watchmod.Watcher) else "fleet consumer"
