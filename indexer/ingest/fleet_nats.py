"""The NATS side of the fleet, in one place: connecting (auth and TLS passed
through to nats-py), the stream the lines travel on, the key-value bucket of
each host's last heartbeat. Only ``ship`` and ``ingest --from`` import it;
nats-py is the optional ``fleet`` extra.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time

from indexer.ingest import fleet_wire
from indexer.ingest.extras import install_hint

# The hosts' heartbeats: one key per host, its last value only.
HEARTBEAT_BUCKET = "session_index_hosts"


try:  # what an outage of the server raises while connected: nats-py
    # reconnects, and the step is tried again
    import nats.errors as _errors

    TRANSIENT = (_errors.Error, asyncio.TimeoutError, OSError)
except ImportError:
    TRANSIENT = (asyncio.TimeoutError, OSError)


class FleetError(Exception):
    """NATS cannot be reached or used (no client, refused, no JetStream)."""


class NotConnected(FleetError):
    """No connection was made (no client, a credentials or CA file that
    cannot be used, a server that does not answer or refuses): nothing was
    sent or received."""


class NotANatsUrl(ValueError):
    """A --from or --to that nats-py would not connect to as meant."""


# The URL schemes nats-py connects with (nats.aio.client._parse_server_uri):
# TCP, TLS, WebSocket and WebSocket over TLS. A URL without "://" it takes as
# nats://HOST[:PORT].
URL_SCHEMES = ("nats", "tls", "ws", "wss")


def check_url(url: str) -> str:
    """``url`` if it names a NATS server as nats-py reads it (a scheme of
    URL_SCHEMES, or none: HOST[:PORT]), with a host and a port that is one;
    else NotANatsUrl, in one line. nats-py would take http://x for a host
    named http, and wait for it."""
    from urllib.parse import urlsplit   # (only for --from and --to)

    scheme = url.split("://", 1)[0] if "://" in url else "nats"
    if scheme not in URL_SCHEMES:
        raise NotANatsUrl(f"{url!r} is not a NATS server's URL (nats://HOST:PORT, or "
                          f"{', '.join(s + '://' for s in URL_SCHEMES[1:])})")
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    try:
        parts.port   # (a port that is not a number, or out of range: ValueError)
    except ValueError:
        raise NotANatsUrl(f"{url!r}: the port is not a number from 0 to 65535") from None
    if not parts.hostname:
        raise NotANatsUrl(f"{url!r} names no host (nats://HOST:PORT)")
    return url


class Stopped(Exception):
    """Asked to stop (SIGINT, SIGTERM) while still waiting for the server."""


class ConnectOptions:
    """How to reach the server: a nats:// (or tls://) URL, with a token, a
    credentials file (.creds, NATS' JWT + nkey) and/or a TLS CA file."""

    __slots__ = ("url", "token", "creds", "tls_ca")

    def __init__(self, url: str, token=None, creds=None, tls_ca=None):
        self.url, self.token, self.creds, self.tls_ca = url, token, creds, tls_ca


def client():
    try:
        import nats   # (nats-py: the optional fleet extra)
    except ImportError:
        raise NotConnected(f"the NATS client is not installed: {install_hint('fleet')}") \
            from None
    return nats


# How long a run that is not following (ship --once, ingest --from without
# --watch) tries to reach the server before it gives up (exit 3).
CONNECT_WAIT_S = 5.0


def _refusal(exc) -> bool:
    """The server said no to these credentials, or its certificate is not
    one the CA vouches for: no retry helps."""
    import ssl   # (only for a tls:// server or --tls-ca: ssl's start-up time)

    return isinstance(exc, ssl.SSLCertVerificationError) or any(
        word in str(exc).lower() for word in ("authorization", "authentication"))


class _QuietSSLEOF(logging.Filter):
    """asyncio warns on every TLS connection nats-py closes ("returning true
    from eof_received() has no effect when using ssl"): nothing an operator
    can act on, so not in the log."""

    def filter(self, record):
        return "eof_received()" not in record.getMessage()


_QUIET_SSL_EOF = _QuietSSLEOF()   # one filter, however often connect runs


async def connect(options: ConnectOptions, *, name: str, follow: bool = False,
                  stop: asyncio.Event | None = None, log=None):
    """A connected client that reconnects after an outage; NotConnected (one
    line) if the server cannot be reached within CONNECT_WAIT_S, unless
    ``follow`` (a service: it waits for the server), or at once if it
    refuses the credentials or its TLS certificate does not verify; Stopped
    if ``stop`` is set while waiting. ``log(line)``: told when the connection
    is lost and when it is back (an outage no publish or fetch failed in,
    shorter than their timeouts, is said too)."""
    nats = client()
    kwargs = {"name": name, "connect_timeout": 2, "allow_reconnect": True,
              "max_reconnect_attempts": -1, "reconnect_time_wait": 0.5}
    if options.token:
        kwargs["token"] = options.token
    if options.creds:
        try:
            import nkeys  # noqa: F401  (nats-py signs the server's nonce with it)
        except ImportError:
            raise NotConnected(f"--creds needs the nkeys package: {install_hint('fleet')}") \
                from None
        kwargs["user_credentials"] = options.creds
    if options.tls_ca or options.url.startswith("tls://"):
        logging.getLogger("asyncio").addFilter(_QUIET_SSL_EOF)
    if options.tls_ca:
        import ssl   # (only for a tls:// server or --tls-ca: ssl's start-up time)

        try:
            kwargs["tls"] = ssl.create_default_context(cafile=options.tls_ca)
        except (ssl.SSLError, ValueError) as exc:
            raise NotConnected(f"--tls-ca {options.tls_ca}: not a CA certificate file "
                             f"({exc})") from None
    errors = []
    refused = asyncio.Event()

    async def on_error(exc):
        errors.append(exc)
        if _refusal(exc):
            refused.cause = exc   # what to say, whatever comes after it (a reset connection)
            refused.set()

    kwargs["error_cb"] = on_error
    if log is not None:
        async def on_disconnected():
            # (a connection made, not closed: nats-py calls it on a close too,
            # and while the first connection is tried)
            if connecting.done() and not connecting.cancelled() \
                    and connecting.exception() is None and not connecting.result().is_closed:
                log(f"NATS: disconnected from {options.url}: reconnecting")

        async def on_reconnected():
            log(f"NATS: reconnected to {options.url}")

        kwargs["disconnected_cb"], kwargs["reconnected_cb"] = on_disconnected, on_reconnected
    connecting = asyncio.ensure_future(nats.connect(options.url, **kwargs))
    waiting = asyncio.ensure_future(refused.wait())
    stopping = asyncio.ensure_future((stop or asyncio.Event()).wait())
    done, _ = await asyncio.wait({connecting, waiting, stopping},
                                 return_when=asyncio.FIRST_COMPLETED,
                                 timeout=None if follow else CONNECT_WAIT_S)
    waiting.cancel()
    stopping.cancel()
    if connecting in done and connecting.exception() is None:
        return connecting.result()
    if not connecting.done():
        connecting.cancel()
    if stopping in done and not refused.is_set():
        raise Stopped()
    cause = getattr(refused, "cause", None) or (errors[-1] if errors else (
        connecting.exception() if connecting.done() and not connecting.cancelled()
        else TimeoutError()))
    # nats-py raises several unrelated types here: the cause, in one line
    raise NotConnected(f"cannot connect to {options.url}: {str(cause) or type(cause).__name__}")


async def close(nc) -> None:
    """Close a connection; a server already gone is not an error then (what
    was acknowledged is all that counts)."""
    try:
        await nc.close()
    except TRANSIENT:
        pass


# How many times (0.05 s apart) ensure_stream looks for a stream another
# client was making when its own add was refused.
STREAM_MADE_TRIES = 40


async def ensure_stream(js) -> None:
    """The lines stream, made if missing: file storage, the duplicate
    window, messages kept fleet_wire.STREAM_MAX_AGE_S at most (the oldest
    dropped first: a central away longer gets gaps, filled by the hosts that
    still have the bytes), one replica (a cluster: raise it with `nats stream
    edit`). A stream that is there is left as it is (an operator's limits)."""
    from nats.js.api import StorageType, StreamConfig   # (nats-py: the optional fleet extra)
    from nats.js.errors import BadRequestError, NotFoundError   # (nats-py: the optional fleet extra)

    try:
        await js.stream_info(fleet_wire.STREAM)
        return
    except NotFoundError:
        pass
    try:
        await js.add_stream(StreamConfig(
            name=fleet_wire.STREAM, subjects=fleet_wire.STREAM_SUBJECTS,
            storage=StorageType.FILE, duplicate_window=fleet_wire.DUPLICATE_WINDOW_S,
            max_age=fleet_wire.STREAM_MAX_AGE_S, num_replicas=1))
    except BadRequestError as refused:
        # Another client made it between the look and the add (a central and
        # its shippers starting at once: the server answers "subjects overlap
        # with an existing stream"): the stream it made is the one to use,
        # once the server lists it.
        for _ in range(STREAM_MADE_TRIES):
            try:
                await js.stream_info(fleet_wire.STREAM)
                return
            except NotFoundError:
                await asyncio.sleep(0.05)
        raise refused from None


async def heartbeats(js):
    """The key-value bucket of heartbeats, made if missing."""
    from nats.js.errors import BucketNotFoundError   # (nats-py: the optional fleet extra)

    try:
        return await js.key_value(HEARTBEAT_BUCKET)
    except BucketNotFoundError:
        return await js.create_key_value(bucket=HEARTBEAT_BUCKET, history=1)


# A durable pull consumer's next messages are asked for on this subject
# (JetStream's API, no domain), the messages delivered to the asker's inbox.
NEXT_SUBJECT = "$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
# A request that waits for a message ends at its expiry, or after its batch;
# one that does not wait ends once what is waiting is delivered. Past its
# expiry by PULL_GRACE_S with no word from the server (a reconnect lost it),
# it is taken as ended. What a request that does not wait delivers is waited
# for until PULL_ANSWER_S passes without a message of it (what comes later
# joins the next batch).
PULL_GRACE_S = 0.5
PULL_ANSWER_S = 0.05
# What the server says on a pull's inbox when a request ends without an
# error: 404 no messages (a request that does not wait), 408 expired: asked
# again at once. 409: a limit (max waiting, the consumer deleted, ...): it
# answers every request at once, so asked again at the next fetch. 100: an
# idle heartbeat (not asked for). Any other status is raised.
PULL_ENDED = frozenset({"404", "408"})
PULL_LIMIT = "409"
PULL_HEARTBEAT = "100"


class Pull:
    """The batches of one durable pull consumer, asked for with JetStream's
    own pull requests on one inbox subscription kept for the life of the
    connection (nats-py's ``fetch`` waits for each message of a batch on its
    own, a task and an ``asyncio.wait_for`` a message). A fetch asks for
    what is waiting (delivered at once, in a burst: a backlog is a whole
    batch), else for one message and waits for it; once one came, it waits
    until ``gather`` seconds after the last batch was taken (no request open:
    what comes meanwhile waits at the server) and asks for what is waiting (a
    request open while messages trickle in costs a delivery, and a wake-up,
    per message). A batch is so taken at most once per ``gather`` seconds,
    and the time its caller spent on the last batch counts towards it (a
    central that stores for 0.25 s gathers for 0.05 s more, not 0.3 s: a
    gather after the work made each line wait the two). A
    message is a stream message when it has a reply subject (its
    acknowledgement's); the server's status messages have none (a header
    named Status on a host's message does not end a pull). A message
    delivered after a fetch returned is in the next one's batch, never
    dropped. ``requests``: the pull requests sent (tests)."""

    def __init__(self, nc, stream: str, consumer: str, batch: int):
        self.nc, self.batch = nc, batch
        self.next_subject = NEXT_SUBJECT.format(stream=stream, consumer=consumer)
        self.inbox = nc.new_inbox()
        self.got: list = []      # delivered, not yet taken
        self.asked = 0           # what the open request may still deliver
        self.until = 0.0         # when it has ended at the latest (monotonic)
        self.reconnects = 0      # the connection's, when it was asked
        self.ended = None        # the status that ended the last request
        self.error = None        # a status that is not a request's end: raised
        self.arrived = asyncio.Event()
        self.requests = 0
        self.sub = None
        self.taken_at = time.monotonic()   # when the last batch was taken (or it started)

    async def start(self) -> "Pull":
        self.sub = await self.nc.subscribe(self.inbox, cb=self._delivered)
        return self

    async def _delivered(self, msg) -> None:
        if msg.reply:
            self.got.append(msg)
            self.asked -= 1
        else:
            status = (msg.headers or {}).get("Status")
            if status == PULL_HEARTBEAT:
                return
            self.asked, self.ended = 0, status
            if status not in PULL_ENDED and status != PULL_LIMIT:
                self.error = (status, (msg.headers or {}).get("Description"))
        self.arrived.set()

    async def _ask(self, batch: int, expires: float | None = None) -> bool:
        """A pull request for ``batch`` messages, waiting ``expires`` seconds
        for them (None: what is waiting, at once), unless one is open."""
        reconnects = self.nc.stats["reconnects"]
        if self.asked > 0 and time.monotonic() < self.until and reconnects == self.reconnects:
            return False
        request = {"batch": batch}
        if expires:
            request["expires"] = int(expires * 1e9)
        else:
            request["no_wait"] = True
        self.asked, self.reconnects, self.ended = batch, reconnects, None
        self.until = time.monotonic() + (expires or 0.0) + PULL_GRACE_S
        self.requests += 1
        await self.nc.publish(self.next_subject, json.dumps(request).encode(),
                              reply=self.inbox)
        return True

    async def _arrival(self, seconds: float) -> bool:
        """Wait for a message or a status, ``seconds`` at most; False if none came."""
        self.arrived.clear()
        try:
            await asyncio.wait_for(self.arrived.wait(), seconds)
        except asyncio.TimeoutError:
            return False
        return True

    def _raise(self) -> None:
        if self.error is not None:
            from nats.js.errors import APIError   # (nats-py: the optional fleet extra)

            (status, description), self.error = self.error, None
            raise APIError(code=int(status) if str(status).isdigit() else None,
                           description=description)

    async def _answered(self) -> None:
        """Wait for the open request to end (its burst read), or for
        PULL_ANSWER_S without a message of it (what comes later joins the
        next batch). A burst still coming is a backlog: read whole, however
        long a loaded machine takes to deliver it (a bound on the whole
        burst, 0.05 s, cut a backlog of 1,024 messages short in CI and made
        the fetch gather)."""
        while self.asked > 0 and len(self.got) < self.batch:
            if not await self._arrival(PULL_ANSWER_S):
                return

    async def fetch(self, wait: float, gather: float) -> list:
        """The next batch (at most ``batch`` messages), or [] when nothing
        came within ``wait``: what is waiting, asked for at once, else the
        first message to come; then, fewer than ``batch``, what else came
        until ``gather`` seconds after the last batch was taken joins it."""
        self._raise()
        deadline = time.monotonic() + wait
        waiting = True   # (asked first: what is waiting, at once)
        while not self.got:
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            await (self._ask(self.batch) if waiting else self._ask(1, left))
            waiting = False
            if self.got:   # (delivered while it was asked)
                break
            if not await self._arrival(left):
                return []
            self._raise()
            if not self.got and self.ended == PULL_LIMIT:   # (asked again next fetch)
                await asyncio.sleep(max(0.0, deadline - time.monotonic()))
                return []
        await self._answered()   # (a backlog: a whole batch, no gathering)
        rest = self.taken_at + gather - time.monotonic()
        if len(self.got) < self.batch and gather > 0 and rest > 0:
            await asyncio.sleep(rest)
            if len(self.got) < self.batch and await self._ask(
                    self.batch - len(self.got)):   # what came meanwhile
                await self._answered()
        taken, self.got = self.got[:self.batch], self.got[self.batch:]
        self.taken_at = time.monotonic()
        return taken


def run(make, *, follow: bool):
    """``asyncio.run`` of ``make(stop)``; when following, SIGINT and SIGTERM
    set ``stop`` (the coroutine ends at its next step, nothing half-written)."""
    async def main():
        stop = asyncio.Event()
        if follow:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
        return await make(stop)

    return asyncio.run(main())
