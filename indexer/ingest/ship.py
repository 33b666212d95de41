"""``session-index ship``: carry this host's transcripts to NATS JetStream.

For every transcript under the sources, the shipper sends each complete
line once it is written (whole lines, byte-exact, cut by fleet_wire.cut),
with the file's path, its generation and each message's byte range. Its
ledger, a small SQLite file of its own, says per file how far JetStream has
acknowledged: it moves on only after the publish was acknowledged, so a
crash at any point re-sends from the last acknowledged line (a duplicate
JetStream drops, or the central skips by offset). A file rewritten (another
inode, shorter, or its first or last acknowledged bytes changed) starts a new
generation from its first byte; a file gone is sent as ``deleted``.

It follows the sources with the kernel's file notifications (watchfiles, as
``ingest --watch``), looks at every file again at least every RESCAN_S, and
puts a heartbeat in a key-value bucket every HEARTBEAT_S.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import socket
import sqlite3
import time

from indexer.transcripts import discover
from indexer.index.connection import remove_made
from indexer.index.db import data_dir
from indexer.ingest import fleet_nats, fleet_wire
from indexer.transcripts.digests import blake2b
from indexer.transcripts.safefiles import NotRegular, open_regular, regular_stat

HEAD_BYTES = 1024
TAIL_BYTES = 4096
READ_CHUNK = 4 << 20
HEARTBEAT_S = 5.0
RESCAN_S = 2.0
PUBLISH_TIMEOUT_S = 10.0
RETRY_S = 1.0

LEDGER_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS shipped (
    path TEXT PRIMARY KEY,
    generation INTEGER NOT NULL,   -- this host's count of the file's rewrites, from 1
    offset INTEGER NOT NULL,       -- bytes acknowledged: always just after a newline
    line INTEGER NOT NULL,         -- the number of the next line to send
    dev INTEGER, ino INTEGER,      -- of the file those bytes came from
    size INTEGER, mtime_ns INTEGER,  -- at the last look (unchanged: nothing to read)
    head_len INTEGER,              -- its first bytes hashed (HEAD_BYTES, or all it had)
    head_hash TEXT,                -- of those head_len bytes
    tail_hash TEXT,                -- of the TAIL_BYTES before offset
    deleted INTEGER NOT NULL DEFAULT 0,
    resend INTEGER NOT NULL DEFAULT 0  -- times the central asked for its bytes again
)
""".strip()
# A ledger from before the central could ask for bytes again.
LEDGER_COLUMNS_SQL = "SELECT name FROM pragma_table_info('shipped')"
LEDGER_ADD_RESEND_SQL = "ALTER TABLE shipped ADD COLUMN resend INTEGER NOT NULL DEFAULT 0"
LEDGER_ROW_SQL = "SELECT * FROM shipped WHERE path = ?"
LEDGER_LIVE_SQL = "SELECT path FROM shipped WHERE deleted = 0"
LEDGER_SAVE_SQL = """
INSERT OR REPLACE INTO shipped
  (path, generation, offset, line, dev, ino, size, mtime_ns, head_len, head_hash, tail_hash,
   deleted, resend)
VALUES (:path, :generation, :offset, :line, :dev, :ino, :size, :mtime_ns, :head_len,
        :head_hash, :tail_hash, :deleted, :resend)
""".strip()


class ShipError(Exception):
    """A source or the ledger cannot be used."""


def default_host() -> str:
    return socket.gethostname() or "localhost"


def default_ledger() -> str:
    return os.path.join(data_dir(), "ship.db")


# The file beside a ledger whose lock its shipper holds.
LOCK_SUFFIX = ".lock"


class Ledger:
    """What JetStream has acknowledged, per file (one connection), held by
    one shipper at a time (a lock on LEDGER.lock)."""

    def __init__(self, path: str):
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        self.lock = open(path + LOCK_SUFFIX, "a")
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.lock.close()
            raise ShipError(f"{path}: another ship is using this ledger") from None
        try:
            self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)
            others = [n for (n,) in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'") if n != "shipped"]
            if others:
                raise ShipError(f"{path} is another SQLite database (its tables: "
                                f"{', '.join(others[:5])}), not a ship ledger: name another "
                                "--ledger")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute(LEDGER_SCHEMA_SQL)
            if "resend" not in {n for (n,) in self.conn.execute(LEDGER_COLUMNS_SQL)}:
                self.conn.execute(LEDGER_ADD_RESEND_SQL)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise ShipError(f"{path}: not a usable ledger: {exc}") from None
        except ShipError:
            self.close()
            raise
        self.conn.row_factory = sqlite3.Row

    def get(self, path: str) -> dict | None:
        row = self.conn.execute(LEDGER_ROW_SQL, [path]).fetchone()
        return dict(row) if row else None

    def live(self) -> list[str]:
        return [p for (p,) in self.conn.execute(LEDGER_LIVE_SQL)]

    def save(self, row: dict) -> None:
        self.conn.execute(LEDGER_SAVE_SQL, {"resend": 0, **row})

    def close(self) -> None:
        if getattr(self, "conn", None) is not None:
            self.conn.close()
        self.lock.close()


def whole_record(data: bytes) -> bool:
    """Are the bytes after a file's last newline a whole record, which local
    ingest stores as its last line (files.py: take_tail_record)?"""
    from indexer.transcripts.lines import BadLine, parse_line_bytes   # (msgspec: only for a last line without its newline)

    if not data[-64:].rstrip().endswith(b"}"):
        return False
    try:
        parse_line_bytes(data)
    except BadLine:
        return False
    return True


def _hash(f, start: int, length: int) -> str:
    f.seek(start)
    return blake2b(f.read(length), digest_size=16).hexdigest()


class Shipper:
    """One host's shipper: ``await pass_()`` sends what is new once."""

    def __init__(self, js, kv, ledger: Ledger, sources: list[str], host: str, log):
        self.js, self.kv, self.ledger = js, kv, ledger
        self.sources = [os.path.abspath(s) for s in sources]
        self.host, self.log = host, log
        self.sent_lines = self.sent_bytes = self.messages = 0
        self.last_heartbeat = 0.0
        self.said: set[str] = set()   # files not_utf8, logged once
        self.asked: dict[str, tuple[int, int]] = {}   # path: (generation, offset) to send again
        self.others: dict[str, int] = {}   # path: size, of files that are not transcripts
        self.agents: dict[str, str] = {}   # path: agent, of another agent's files (fleet_wire)
        self.live = None   # a fleet_metrics.Live: told what is sent, and each pass

    def transcripts(self) -> list[str]:
        found = []
        for source in self.sources:
            if os.path.isdir(source):
                found.extend(discover.walk(source))
            elif os.path.exists(source):
                found.append(source)
        return list(dict.fromkeys(found))

    def transcript(self, path: str) -> bool:
        """Is a file the ledger does not know yet one to ship? As ingest
        decides: a transcript's name, else its first complete lines say it
        is a transcript or an execution log (none yet: not now)."""
        if path.endswith(".json"):
            return False   # a Gemini .json chat, one document rewritten whole: not shipped
        if discover.describe(path).named or self.ledger.get(path) is not None:
            return True
        try:
            size = os.stat(path).st_size
        except OSError:
            return False
        if self.others.get(path) == size:
            return False
        verdict = discover.sniff(path)
        if verdict in (discover.CODEX, discover.GEMINI):
            self.agents[path] = verdict
        if verdict in (discover.TRANSCRIPT, discover.EXECUTION_LOG, discover.CODEX,
                       discover.GEMINI):
            return True
        self.others[path] = size   # looked at again when it grows
        return False

    def ask(self, payload: bytes) -> None:
        """The central asks for a file's bytes again (fleet_wire.read_resend):
        done at the next pass."""
        asked = fleet_wire.read_resend(self.host, payload)
        if asked is not None:
            path, generation, offset = asked
            before = self.asked.get(path)
            if before is None or (generation, offset) < before:
                self.asked[path] = (generation, offset)

    def rewind(self, path: str, generation: int, offset: int) -> None:
        """Send the file's bytes from ``offset`` again when the ledger says
        they were sent (acknowledged) and the file still holds them: the same
        generation, not rewritten, a line starting there. Its messages get
        ids of their own (``resend``): JetStream may still remember the lost
        ones' within its duplicate window."""
        row = self.ledger.get(path)
        if row is None or row["deleted"] or row["generation"] != generation or \
                row["offset"] <= offset:
            return   # another generation (sent anew), or not sent yet: it comes anyway
        try:
            with open_regular(path) as f:
                st = os.fstat(f.fileno())
                if self._rewritten(row, f, st):
                    return   # the next pass sends a new generation
                f.seek(0)
                before = f.read(offset)
        except (OSError, NotRegular):
            return
        if len(before) != offset or (offset and not before.endswith(b"\n")):
            return
        tail = min(TAIL_BYTES, offset)
        self.ledger.save(dict(row, offset=offset, line=before.count(b"\n") + 1,
                              tail_hash=blake2b(before[offset - tail:], digest_size=16)
                              .hexdigest(), size=None, mtime_ns=None,
                              resend=row["resend"] + 1))
        self.log(f"{path}: the central asked for bytes {offset}-{row['offset']} again: sending")
        if self.live is not None:
            self.live.add("session_index_fleet_resends_total")

    async def pass_(self) -> None:
        if self.live is not None:
            self.live.beat()
        asked, self.asked = self.asked, {}
        for path, (generation, offset) in asked.items():
            self.rewind(path, generation, offset)
        found = self.transcripts()
        for path in found:
            if (shown := discover.not_utf8(path)) is not None:
                if path not in self.said:      # once a run
                    self.log(f"{shown}: {discover.NOT_UTF8}")
                    self.said.add(path)
                continue
            if not self.transcript(path):
                continue
            try:
                await self.ship_file(path)
            except (OSError, NotRegular) as exc:
                self.log(f"{path}: {getattr(exc, 'strerror', None) or exc}: skipped")
        seen = set(found)
        for path in self.ledger.live():
            if path not in seen and any(path.startswith(s.rstrip(os.sep) + os.sep) or path == s
                                        for s in self.sources):
                await self.ship_deleted(path)
        await self.heartbeat()

    async def publish(self, header: dict, body: bytes = b"") -> None:
        header = dict(header, host=self.host, sent_at=time.time())
        msg_id = fleet_wire.message_id(header)
        await self.js.publish(
            fleet_wire.subject(self.host, header["kind"]), fleet_wire.encode(header, body),
            timeout=PUBLISH_TIMEOUT_S, stream=fleet_wire.STREAM,
            headers={"Nats-Msg-Id": msg_id} if msg_id else None)
        self.messages += 1
        if self.live is not None:
            self.live.add("session_index_fleet_messages_total")

    async def ship_file(self, path: str) -> None:
        st = regular_stat(path)
        row = self.ledger.get(path)
        if row is not None and not row["deleted"] and (
                row["size"], row["mtime_ns"], row["dev"], row["ino"]) == (
                st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino):
            return
        with open_regular(path) as f:
            st = os.fstat(f.fileno())
            if row is None:
                row = {"path": path, "generation": 1, "offset": 0, "line": 1,
                       "head_len": 0, "head_hash": None, "tail_hash": None, "resend": 0}
            elif self._rewritten(row, f, st):
                row = dict(row, generation=row["generation"] + 1, offset=0, line=1,
                           head_len=0, head_hash=None, tail_hash=None, resend=0)
                self.log(f"{path}: rewritten: generation {row['generation']} from its start")
            row.update(dev=st.st_dev, ino=st.st_ino, deleted=0)
            f.seek(row["offset"])
            carry = b""
            while True:
                chunk = f.read(READ_CHUNK)
                if not chunk:
                    break
                data = carry + chunk
                last = data.rfind(b"\n")
                if last < 0:
                    carry = data
                    continue
                complete, carry = data[:last + 1], data[last + 1:]
                await self._send(row, f, complete)
            if carry and len(carry) <= fleet_wire.MESSAGE_BYTES and whole_record(carry):
                # (the ledger stays at the newline: the line is sent again with it)
                await self.publish({"kind": "tail", "path": path, "generation": row["generation"],
                                    "offset": row["offset"], "end": row["offset"] + len(carry),
                                    "line": row["line"],
                                    **({"resend": row["resend"]} if row.get("resend") else {})},
                                   carry)
            # Seen as far as it was when opened: unchanged since, nothing to read.
            row.update(size=st.st_size, mtime_ns=st.st_mtime_ns)
            self.ledger.save(row)

    def _agent(self, path: str) -> str | None:
        """CODEX or GEMINI for another agent's file (its first line says so,
        once a run), else None."""
        if path not in self.agents:
            verdict = discover.sniff(path)
            self.agents[path] = verdict if verdict in (discover.CODEX, discover.GEMINI) else None
        return self.agents[path]

    async def _send(self, row: dict, f, complete: bytes) -> None:
        generation = row["generation"]
        again = {"resend": row["resend"]} if row.get("resend") else {}
        agent = self._agent(row["path"])
        again.update({"agent": agent} if agent else {})
        for header, body in fleet_wire.cut(complete, row["offset"], row["line"]):
            await self.publish(dict(header, path=row["path"], generation=generation, **again),
                               body)
            if header["kind"] == "part" and header["at"] + len(body) < header["end"]:
                continue   # the line's last piece moves the ledger
            lines = body.count(b"\n")
            row["offset"], row["line"] = header["end"], row["line"] + lines
            position = f.tell()
            if (row["head_len"] or 0) < HEAD_BYTES:   # until HEAD_BYTES are there
                row["head_len"] = min(HEAD_BYTES, row["offset"])
                row["head_hash"] = _hash(f, 0, row["head_len"])
            tail = min(TAIL_BYTES, row["offset"])
            row["tail_hash"] = _hash(f, row["offset"] - tail, tail)
            f.seek(position)
            row["size"] = row["mtime_ns"] = None   # not all read yet
            self.ledger.save(row)   # after the acknowledgement, never before
            self.sent_lines += lines
            sent = len(body) if header["kind"] == "lines" else header["end"] - header["offset"]
            self.sent_bytes += sent
            if self.live is not None:
                self.live.add("session_index_fleet_lines_total", lines)
                self.live.add("session_index_fleet_bytes_total", sent)

    @staticmethod
    def _rewritten(row: dict, f, st) -> bool:
        """Is the file no longer the one whose bytes were acknowledged?"""
        if row["deleted"] or (row["dev"], row["ino"]) != (st.st_dev, st.st_ino):
            return True
        offset = row["offset"]
        if st.st_size < offset:
            return True
        if row["head_hash"] is not None and _hash(f, 0, row["head_len"]) != row["head_hash"]:
            return True
        tail = min(TAIL_BYTES, offset)
        return row["tail_hash"] is not None and _hash(f, offset - tail, tail) != row["tail_hash"]

    async def ship_deleted(self, path: str) -> None:
        row = self.ledger.get(path)
        await self.publish({"kind": "deleted", "path": path, "generation": row["generation"]})
        self.ledger.save(dict(row, deleted=1))
        self.log(f"{path}: deleted: sent")

    async def heartbeat(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last_heartbeat < HEARTBEAT_S:
            return
        value = json.dumps({"host": self.host, "at": now, "files": len(self.ledger.live()),
                            "lines": self.sent_lines}).encode()
        await self.kv.put(fleet_wire.host_token(self.host), value)
        self.last_heartbeat = now


async def ship(options: fleet_nats.ConnectOptions, sources: list[str], *, host: str,
               ledger_path: str, once: bool, log, stop: asyncio.Event | None = None,
               live=None) -> Shipper:
    """Ship the sources' new lines; with ``once``, what is there now, else
    follow them until ``stop`` is set. ``live`` (a fleet_metrics.Live) is
    told what is sent and each pass."""
    for source in sources:
        if not os.path.exists(source):
            raise ShipError(discover.not_found(source))
    made = not os.path.lexists(ledger_path)
    ledger = Ledger(ledger_path)   # (first: a ledger in use or unusable is said at once)
    stop = stop or asyncio.Event()
    try:
        nc = await fleet_nats.connect(options, name=f"session-index ship {host}",
                                      follow=not once, stop=stop, log=log)
    except BaseException:   # Stopped (a signal before the server answered), FleetError
        ledger.close()
        if made:   # nothing was sent: the ledger this run made goes with it
            remove_made(ledger_path, extra=(LOCK_SUFFIX,))
        raise
    try:
        shipper = await _start(nc, ledger, sources, host, log, once=once, stop=stop,
                               url=options.url)
        shipper.live = live
        if once:
            await shipper.pass_()
            await shipper.heartbeat(force=True)
            return shipper
        await _retrying(shipper.pass_, log)
        await _follow(shipper, stop or asyncio.Event())
        return shipper
    finally:
        ledger.close()
        await fleet_nats.close(nc)


async def _start(nc, ledger: Ledger, sources: list[str], host: str, log, *, once: bool,
                 stop: asyncio.Event, url: str) -> Shipper:
    """The stream, the heartbeat bucket and (following) the subscription to
    the central's requests to send bytes again, tried until they answer (a
    server still starting, or restarted: logged) unless ``once`` (FleetError);
    Stopped if ``stop`` is set meanwhile."""
    while True:
        try:
            js = nc.jetstream()
            await fleet_nats.ensure_stream(js)
            kv = await fleet_nats.heartbeats(js)
            shipper = Shipper(js, kv, ledger, sources, host, log)
            if not once:
                async def asked(msg):
                    shipper.ask(msg.data)

                await nc.subscribe(fleet_wire.resend_subject(host), cb=asked)
            return shipper
        except fleet_nats.TRANSIENT as exc:
            said = f"{type(exc).__name__}: {str(exc) or 'no answer'}"
            if once:
                raise fleet_nats.FleetError(f"{url}: {said}") from None
            log(f"NATS: starting: {said}: retrying")
            try:   # a signal meanwhile: stop
                await asyncio.wait_for(stop.wait(), RETRY_S)
            except asyncio.TimeoutError:
                continue
            raise fleet_nats.Stopped() from None


async def _follow(shipper: Shipper, stop: asyncio.Event) -> None:
    """A pass after every batch of file notifications, and every RESCAN_S."""
    import watchfiles   # (ship --watch only: the file notifications)

    roots = [s if os.path.isdir(s) else os.path.dirname(s) for s in shipper.sources]
    polling = None   # watchfiles' choice (inotify, unless WATCHFILES_FORCE_POLLING)
    while not stop.is_set():
        try:
            async for _changes in watchfiles.awatch(
                    *roots, stop_event=stop, debounce=200, step=50, yield_on_timeout=True,
                    rust_timeout=int(RESCAN_S * 1000), recursive=True, force_polling=polling):
                if stop.is_set():
                    return
                await _retrying(shipper.pass_, shipper.log)
            return
        except (RuntimeError, OSError, ExceptionGroup) as exc:   # (awatch's task group wraps it)
            cause = _undecodable(exc) or _no_notifications(exc)
            if cause is None:
                raise
            if not polling:
                shipper.log(f"file notifications unavailable ({cause}); polling")
                polling = True
            await _retrying(shipper.pass_, shipper.log)


# What watchfiles raises when the kernel gives no more file notifications:
# inotify instances used up (fs.inotify.max_user_instances: EMFILE, as a
# process out of descriptors) or watches (max_user_watches: ENOSPC).
NO_NOTIFICATIONS = ("Error creating recommended watcher", "os error 24", "os error 28",
                    "Too many open files", "inotify")


def _no_notifications(exc: BaseException) -> BaseException | None:
    """watchfiles' error for notifications the kernel will not give, in
    ``exc`` or an exception group around it; None if it is something else."""
    if isinstance(exc, BaseExceptionGroup):
        return next((found for sub in exc.exceptions if (found := _no_notifications(sub))),
                    None)
    if isinstance(exc, (RuntimeError, OSError)) and any(
            word in str(exc) for word in NO_NOTIFICATIONS):
        return exc
    return None


def _undecodable(exc: BaseException) -> BaseException | None:
    """watchfiles' error for a name that is not UTF-8, in ``exc`` or in an
    exception group around it; None if it is something else."""
    if isinstance(exc, BaseExceptionGroup):
        return next((found for sub in exc.exceptions if (found := _undecodable(sub))), None)
    if isinstance(exc, RuntimeError) and discover.UNDECODABLE_PATH in str(exc):
        return exc
    return None


async def _retrying(step, log) -> None:
    """One step, an outage of the server logged instead of raised: the
    ledger has not moved past what was acknowledged, so the next step
    sends the rest (nats-py reconnects meanwhile)."""
    try:
        await step()
    except fleet_nats.TRANSIENT as exc:
        log(f"NATS: {type(exc).__name__}: {str(exc) or 'no answer'}: retrying")
        await asyncio.sleep(RETRY_S)
