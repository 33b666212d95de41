"""Prometheus metrics and a health endpoint for a fleet's processes: ``serve``
and ``ingest --from`` (a central: its figures read from the index at each
scrape, and the consumer's own), and ``ship`` (the shipper's own).

``--metrics [ADDR:]PORT`` serves, on loopback unless ADDR says otherwise,
``/metrics`` (the Prometheus text format, prometheus-client: the ``fleet``
extra) and ``/healthz`` (JSON; 200 while the process's loop has gone round
within HEALTHY_WITHIN_S, else 503), from a thread of its own.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from indexer.ingest.extras import install_hint
from indexer.index.status import FILES_TO_DERIVE_SQL

# A process whose loop (a batch, a fetch that waited, a shipper's pass) last
# went round longer ago than this is not healthy.
HEALTHY_WITHIN_S = 30.0
DEFAULT_ADDRESS = "127.0.0.1"

# Per host shipping to the index: its files, the lines and bytes of them
# stored (a rewritten file counts from its new generation), its records.
HOST_FIGURES_SQL = """
SELECT host, count(*) AS files, coalesce(sum(line_count), 0) AS lines,
  coalesce(sum(ingested_offset), 0) AS bytes, coalesce(sum(records), 0) AS records
FROM files WHERE origin = 'fleet' GROUP BY host ORDER BY host
""".strip()
# Per host: the age of its last heartbeat and of the last message stored, at
# :now (seconds; NULL: none yet; never below 0: a host's clock may run ahead).
HOST_AGES_SQL = """
SELECT host,
  max(0, (julianday(:now) - julianday(last_heartbeat_at)) * 86400) AS heartbeat_age_s,
  max(0, (julianday(:now) - julianday(last_message_at)) * 86400) AS message_age_s
FROM fleet_hosts ORDER BY host
""".strip()
# Per host: the gaps recorded and the bytes they lack.
GAPS_BY_HOST_SQL = """
SELECT host, count(*) AS gaps, sum(end - start) AS bytes FROM fleet_gaps
GROUP BY host ORDER BY host
""".strip()
QUARANTINED_COUNT_SQL = "SELECT count(*) FROM fleet_quarantine"
HELD_COUNT_SQL = "SELECT count(*), count(DISTINCT file_id) FROM fleet_held"
# Sessions by the verdict of their default host (as `check` answers without
# --host: sessions.host).
SESSIONS_BY_VERDICT_SQL = """
SELECT v.verdict, count(*) FROM session_verdicts v
JOIN sessions s ON s.session_id = v.session_id AND s.host = v.host
GROUP BY v.verdict ORDER BY v.verdict
""".strip()


def read_only(db_path: str) -> sqlite3.Connection:
    """A read-only connection to the index (any file name: a URI of it)."""
    return sqlite3.connect(Path(db_path).resolve().as_uri() + "?mode=ro", uri=True, timeout=5)


class MetricsError(Exception):
    """prometheus-client is missing, or the address cannot be listened on."""


def parse_address(value: str) -> tuple[str, int]:
    """``PORT`` or ``ADDR:PORT`` (``[::1]:PORT``) as (address, port)."""
    addr, sep, port = value.rpartition(":")
    if not sep:
        addr = DEFAULT_ADDRESS
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{value!r}: give PORT or ADDRESS:PORT")
    return (addr.strip("[]") or DEFAULT_ADDRESS), int(port)


def _client():
    try:
        import prometheus_client   # (the fleet extra: only with --metrics)
    except ImportError:
        raise MetricsError(f"--metrics needs prometheus-client: {install_hint('fleet')}") \
            from None
    return prometheus_client


class Live:
    """What a process knows of itself, for its metrics and health: counters
    it adds to (``add``), gauges per label (``set``), and when its loop last
    went round (``beat``)."""

    def __init__(self, role: str):
        self.role = role
        self.lock = threading.Lock()
        self.counters: dict[str, float] = {}
        self.gauges: dict[tuple[str, str], float] = {}
        self.started = self.last_beat = time.time()

    def add(self, name: str, n: float = 1) -> None:
        with self.lock:
            self.counters[name] = self.counters.get(name, 0) + n

    def set(self, name: str, label: str, value: float) -> None:
        with self.lock:
            self.gauges[(name, label)] = value

    def beat(self) -> None:
        self.last_beat = time.time()

    def health(self) -> tuple[bool, dict]:
        age = time.time() - self.last_beat
        ok = age <= HEALTHY_WITHIN_S
        return ok, {"ok": ok, "role": self.role, "loop_age_s": round(age, 3),
                    "uptime_s": round(time.time() - self.started, 3)}


# The in-process figures: name -> help (counters end in _total).
LIVE_HELP = {
    "session_index_fleet_messages_total": "Messages taken from the stream (central) or sent "
                                          "and acknowledged (ship).",
    "session_index_fleet_lines_total": "Lines stored (central) or sent (ship) by this process.",
    "session_index_fleet_bytes_total": "Bytes of lines sent by this process (ship).",
    "session_index_fleet_quarantined_total": "Messages and heartbeats this process quarantined.",
    "session_index_fleet_gaps_total": "Gaps this process recorded.",
    "session_index_fleet_resends_total": "Requests to send bytes again this process made "
                                         "(central) or answered (ship).",
    "session_index_fleet_lag_seconds": "Per host: seconds from a message's sending to its "
                                       "commit in the index, its last batch (central).",
}


class IndexCollector:
    """The central's figures, read from the index at each scrape (a
    read-only connection of its own): per host files, lines, bytes,
    records, heartbeat and last-message ages, gaps; quarantined and held
    messages; sessions by verdict. And the process's own (``live``)."""

    def __init__(self, db_path: str | None, live: Live | None = None):
        self.db_path, self.live = db_path, live

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily   # (the fleet extra)

        if self.live is not None:
            yield from self._live(CounterMetricFamily, GaugeMetricFamily)
        if self.db_path is None:
            return
        try:
            conn = read_only(self.db_path)
        except sqlite3.Error:
            return
        try:
            yield from self._index(conn, GaugeMetricFamily)
        except sqlite3.Error:   # an index being made, or not one: nothing from it now
            return
        finally:
            conn.close()

    def _live(self, counter, gauge):
        with self.live.lock:
            counters, gauges = dict(self.live.counters), dict(self.live.gauges)
        for name, help_text in LIVE_HELP.items():
            if name.endswith("_total"):
                yield counter(name[:-len("_total")], help_text, value=counters.get(name, 0))
            else:
                family = gauge(name, help_text, labels=["host"])
                for (n, label), value in sorted(gauges.items()):
                    if n == name:
                        family.add_metric([label], value)
                yield family
        yield gauge("session_index_loop_age_seconds", "Seconds since the process's loop last "
                    "went round (healthy within 30 s).", value=time.time() - self.live.last_beat)

    @staticmethod
    def _index(conn, gauge):
        per_host = {name: gauge(f"session_index_fleet_host_{name}", help_text, labels=["host"])
                    for name, help_text in (
                        ("files", "Files of the host in the index."),
                        ("lines", "Lines of the host's files stored (of their generation)."),
                        ("bytes", "Bytes of the host's files stored (of their generation)."),
                        ("records", "Records of the host's files stored."))}
        for host, *figures in conn.execute(HOST_FIGURES_SQL):
            for (name, family), value in zip(per_host.items(), figures):
                family.add_metric([host], value)
        yield from per_host.values()
        stamp = time.time()   # to the millisecond: a heartbeat's time has them
        now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp)) + f".{int(stamp % 1 * 1000):03d}Z"
        heartbeat = gauge("session_index_fleet_heartbeat_age_seconds",
                          "Seconds since the host's last heartbeat.", labels=["host"])
        message = gauge("session_index_fleet_last_message_age_seconds",
                        "Seconds since a message of the host was last stored (the host's "
                        "lag behind its heartbeat shows here).", labels=["host"])
        for host, beat_age, message_age in conn.execute(HOST_AGES_SQL, {"now": now}):
            if beat_age is not None:
                heartbeat.add_metric([host], beat_age)
            if message_age is not None:
                message.add_metric([host], message_age)
        yield heartbeat
        yield message
        gaps = gauge("session_index_fleet_gaps", "Gaps recorded (bytes the stream lost and the "
                     "host did not send again), per host.", labels=["host"])
        gap_bytes = gauge("session_index_fleet_gap_bytes", "Bytes the gaps lack, per host.",
                          labels=["host"])
        for host, n, lacking in conn.execute(GAPS_BY_HOST_SQL):
            gaps.add_metric([host], n)
            gap_bytes.add_metric([host], lacking)
        yield gaps
        yield gap_bytes
        yield gauge("session_index_fleet_quarantined", "Messages and heartbeats quarantined.",
                    value=conn.execute(QUARANTINED_COUNT_SQL).fetchone()[0])
        held, waiting = conn.execute(HELD_COUNT_SQL).fetchone()
        yield gauge("session_index_fleet_held_messages", "Messages held for earlier bytes of "
                    "their file.", value=held)
        yield gauge("session_index_fleet_files_waiting", "Files whose later messages wait for "
                    "earlier bytes.", value=waiting)
        yield gauge("session_index_files_to_derive", "Files whose stored lines are not "
                    "derived yet (a central behind its hosts derives once per "
                    "DERIVE_BEHIND_S).", value=conn.execute(FILES_TO_DERIVE_SQL).fetchone()[0])
        verdicts = gauge("session_index_sessions", "Sessions by the verdict check gives on "
                         "their default host.", labels=["verdict"])
        for verdict, n in conn.execute(SESSIONS_BY_VERDICT_SQL):
            verdicts.add_metric([verdict], n)
        yield verdicts


class Endpoint:
    """/metrics and /healthz on ``address`` from a daemon thread."""

    def __init__(self, address: tuple[str, int], *, db_path: str | None = None,
                 live: Live | None = None):
        client = _client()
        self.registry = client.CollectorRegistry()
        self.registry.register(IndexCollector(db_path, live))
        self.live, self.db_path = live, db_path
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):   # noqa: N802  (http.server's name)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, status = client.generate_latest(endpoint.registry), 200
                    kind = client.CONTENT_TYPE_LATEST
                elif path == "/healthz":
                    ok, answer = endpoint.health()
                    body, status, kind = json.dumps(answer).encode(), 200 if ok else 503, \
                        "application/json"
                else:
                    body, status, kind = b"not found\n", 404, "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):   # (no access log on stderr)
                pass

        try:
            self.server = ThreadingHTTPServer(address, Handler)
        except OSError as exc:
            raise MetricsError(f"--metrics {address[0]}:{address[1]}: {exc.strerror or exc}") \
                from None
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="metrics")
        self.thread.start()

    def health(self) -> tuple[bool, dict]:
        if self.live is not None:
            return self.live.health()
        try:   # serve alone: the index answers
            conn = read_only(self.db_path)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            conn.close()
            return True, {"ok": True, "role": "serve"}
        except sqlite3.Error as exc:
            return False, {"ok": False, "role": "serve", "error": str(exc)}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
