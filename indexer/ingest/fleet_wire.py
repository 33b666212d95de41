"""What ``ship`` sends and ``ingest --from`` reads: the fleet's messages on
NATS JetStream. Neither the NATS client nor SQLite here: both ends import it.

Every message is one JSON header line, a newline, then a body of raw bytes:
- ``lines``: complete lines of one file (each with its newline), byte-exact,
  the bytes from ``offset`` to ``end`` of the file's generation
  ``generation`` on the shipping host; ``line`` is the first one's number.
- ``part``: a piece of one line too long for a message: the line is at
  ``offset``..``end``, this piece starts at ``at``. The central keeps the
  pieces until the last one arrives, then stores the line.
- ``tail``: the bytes after the file's last newline, ``offset``..``end``,
  when they are a whole record (Claude Code writes a record, then the
  newline before its next one): the central stores it as local ingest does
  (files.unterminated_tail), and the line comes again in a ``lines``
  message once its newline is written (or it went on: it is read again).
- ``deleted``: the file is gone from the host (its lines stay indexed).

Any message of another agent's file (a Codex CLI rollout, a Gemini CLI
chat: transcripts/agents.py) says so in ``agent`` (``codex`` or ``gemini``;
absent for Claude Code's): the central reads its lines with that agent's
parser and stores it in files.agent.

(A host's heartbeat is not a message: the shipper puts it in a key-value
bucket, fleet_nats.HEARTBEAT_BUCKET, which keeps the last one per host.)

A ``lines`` or ``part`` message's id (``Nats-Msg-Id``) names the host, file,
generation and byte range: the shipper cuts a file into the same messages
whenever it starts from the same offset, so a re-send after a crash is a
duplicate JetStream drops within DUPLICATE_WINDOW_S, and the central stores a
line only past the file's stored offset, so one that comes again later is
still stored once.
"""

from __future__ import annotations

import hashlib
import math
import json
import posixpath
import re

# One stream holds every host's messages; subjects session-index.HOST.KIND.
STREAM = "SESSION_INDEX"
SUBJECT_PREFIX = "session-index"
STREAM_SUBJECTS = [SUBJECT_PREFIX + ".>"]
# How long the stream keeps a message (a stream made by ship or ingest
# --from; docs/guides/fleet.md: durability): a week, then the oldest go first.
STREAM_MAX_AGE_S = 7 * 86400
# How long JetStream remembers a message id to drop its re-send.
DUPLICATE_WINDOW_S = 600
# The most bytes of lines in one message (NATS' default max_payload is 1 MB).
MESSAGE_BYTES = 512 << 10
# The central asks a host to send a file's bytes again (the stream lost
# them) on RESEND_PREFIX.HOST: a core NATS message, not kept (it asks again).
RESEND_PREFIX = "session-index-resend"
# The durable consumer the central index reads with, unless told another.
DEFAULT_CONSUMER = "session-index-central"

KINDS = ("lines", "part", "tail", "deleted")
# The agents a header's ``agent`` may name (agents.OTHER_AGENTS; none: Claude Code).
AGENTS = ("codex", "gemini")
_TOKEN = re.compile(r"[^A-Za-z0-9_-]")


class BadMessage(Exception):
    """A message that is not one of ours (or from a newer shipper)."""


def host_token(host: str) -> str:
    """``host`` as one subject token (NATS subjects split on dots)."""
    return _TOKEN.sub("_", host) or "_"


def subject(host: str, kind: str) -> str:
    return f"{SUBJECT_PREFIX}.{host_token(host)}.{kind}"


def resend_subject(host: str) -> str:
    return f"{RESEND_PREFIX}.{host_token(host)}"


def resend_request(host: str, path: str, generation: int, offset: int) -> bytes:
    """Ask ``host`` for its file ``path``'s bytes of ``generation`` from
    ``offset`` again."""
    return json.dumps({"host": host, "path": path, "generation": generation,
                       "offset": offset}, separators=(",", ":")).encode()


def read_resend(host: str, payload: bytes) -> tuple[str, int, int] | None:
    """(path, generation, offset) of a resend request for ``host``; None for
    anything else."""
    try:
        asked = json.loads(bytes(payload).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(asked, dict) or asked.get("host") != host:
        return None
    path, generation, offset = asked.get("path"), asked.get("generation"), asked.get("offset")
    if not isinstance(path, str) or type(generation) is not int or type(offset) is not int \
            or generation < 1 or offset < 0:
        return None
    return path, generation, offset


def consumers(name: str, hosts: list[str] | None) -> list[tuple[str, str]]:
    """The durable consumers a central reads with, (name, filter subject)
    each: one for every host's messages, or, for a central that takes only
    some hosts (a partition), one per host (NATS 2.9 gives a consumer one
    filter subject), named NAME-HOST with the host as a subject token
    (hosts whose names differ only in characters outside [A-Za-z0-9_-]
    share it)."""
    if not hosts:
        return [(name, STREAM_SUBJECTS[0])]
    tokens = sorted({host_token(h) for h in hosts})
    return [(f"{name}-{t}", f"{SUBJECT_PREFIX}.{t}.>") for t in tokens]


def file_key(host: str, path: str) -> str:
    """A short stable name for one host's file, for message ids."""
    return hashlib.blake2b(f"{host}\0{path}".encode(), digest_size=10).hexdigest()


def message_id(header: dict) -> str | None:
    """The id that makes a re-send of this message a duplicate. A re-send the
    central asked for (``resend`` N: the stream lost the first one) has ids
    of its own, since JetStream still remembers the lost message's id within
    DUPLICATE_WINDOW_S and would drop it."""
    kind = header["kind"]
    again = f":r{header['resend']}" if header.get("resend") else ""
    if kind == "lines":
        return (f"{file_key(header['host'], header['path'])}:{header['generation']}:"
                f"{header['offset']}-{header['end']}{again}")
    if kind == "part":
        return (f"{file_key(header['host'], header['path'])}:{header['generation']}:"
                f"{header['offset']}-{header['end']}@{header['at']}{again}")
    if kind == "tail":
        return (f"{file_key(header['host'], header['path'])}:{header['generation']}:"
                f"{header['offset']}-{header['end']}:tail{again}")
    if kind == "deleted":
        return f"{file_key(header['host'], header['path'])}:{header['generation']}:deleted"
    return None


def encode(header: dict, body: bytes = b"") -> bytes:
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


# The longest host name and path a message may carry.
MAX_HOST = 255
MAX_PATH = 4096


def _count(header: dict, name: str, least: int) -> int:
    value = header.get(name)
    if type(value) is not int:   # (not a bool, a float or a string of digits)
        raise BadMessage(f"{name} is {'missing' if value is None else type(value).__name__}, "
                         "not an integer")
    if value < least:
        raise BadMessage(f"{name} {value} is below {least}")
    return value


def decode(payload: bytes) -> tuple[dict, bytes]:
    """(header, body) of a message whose every field the central can use;
    BadMessage (its reason, one line) for anything else: not ours, from a
    newer shipper, damaged or forged."""
    head, sep, body = bytes(payload).partition(b"\n")
    if not sep:
        raise BadMessage("no header line")
    try:
        header = json.loads(head.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadMessage("the header is not UTF-8") from None
    except ValueError:
        raise BadMessage("the header is not JSON") from None
    if not isinstance(header, dict):
        raise BadMessage("the header is not a JSON object")
    kind = header.get("kind")
    if kind not in KINDS:
        raise BadMessage(f"unknown kind {str(kind)[:40]!r}")
    for name, longest in (("host", MAX_HOST), ("path", MAX_PATH)):
        value = header.get(name)
        if not isinstance(value, str) or not value:
            raise BadMessage(f"{name} is {'missing' if value is None else 'not a name'}")
        if len(value) > longest or "\0" in value or not value.isprintable():
            raise BadMessage(f"{name} is longer than {longest} or has control characters")
    if not header["path"].startswith("/"):
        raise BadMessage("path is not absolute")
    if posixpath.normpath(header["path"]) != header["path"] or header["path"].startswith("//"):
        # (a shipper sends each path as os.path.abspath made it: /a/../b
        # and /b would be two files of one host, /p/..//S.jsonl a project ..)
        raise BadMessage("path is not in normal form (a '.', '..' or empty part in it)")
    _count(header, "generation", 1)
    if "agent" in header and header["agent"] not in AGENTS:
        raise BadMessage(f"unknown agent {str(header['agent'])[:40]!r}")
    resend = header.get("resend")
    if resend is not None:
        _count(header, "resend", 1)
    if kind == "deleted":
        if body:
            raise BadMessage("a deleted event with a body")
        return header, body
    offset, end = _count(header, "offset", 0), _count(header, "end", 1)
    _count(header, "line", 1)
    if end <= offset:
        raise BadMessage(f"end {end} is not past offset {offset}")
    if not body or len(body) > MESSAGE_BYTES:
        raise BadMessage(f"a body of {len(body)} bytes (from 1 to {MESSAGE_BYTES})")
    if kind in ("lines", "tail"):
        if len(body) != end - offset:
            raise BadMessage(f"a body of {len(body)} bytes for offsets {offset}-{end}")
        if kind == "tail" and b"\n" in body:
            raise BadMessage("a last line with a newline")
        if kind == "lines" and not body.endswith(b"\n"):
            raise BadMessage("lines that do not end with a newline")
        return header, body
    at = _count(header, "at", 0)
    if not offset <= at < end or at + len(body) > end:
        raise BadMessage(f"a piece at {at} of {len(body)} bytes outside its line {offset}-{end}")
    if (at + len(body) == end) != body.endswith(b"\n") or b"\n" in body[:-1]:
        raise BadMessage("a piece of a line whose newlines are not at its end")
    return header, body


def subject_host(subject: str) -> str | None:
    """The host token a subject of the stream names (None: not one of ours)."""
    parts = subject.split(".")
    if len(parts) != 3 or parts[0] != SUBJECT_PREFIX:
        return None
    return parts[1]


def cut(data: bytes, offset: int, line: int, limit: int = MESSAGE_BYTES):
    """The messages' (header fields, body) for complete lines ``data`` that
    start at ``offset`` (line number ``line``): whole lines up to ``limit``
    bytes a message, and a line longer than that in pieces. Deterministic:
    the same bytes from the same offset are cut the same way."""
    start = 0
    while start < len(data):
        end = start
        lines = 0
        while end < len(data):
            nl = data.index(b"\n", end)
            if nl + 1 - start > limit and lines:
                break
            end, lines = nl + 1, lines + 1
            if end - start > limit:
                break
        if end - start <= limit:
            yield ({"kind": "lines", "offset": offset + start, "end": offset + end,
                    "line": line}, data[start:end])
        else:  # one line, too long for a message
            for at in range(start, end, limit):
                yield ({"kind": "part", "offset": offset + start, "end": offset + end,
                        "line": line, "at": offset + at}, data[at:min(at + limit, end)])
        line += lines
        start = end


# A heartbeat's time is a Unix time in seconds from this year on, and not
# further ahead of the central's clock than this (clocks drift; a value far
# off is not a time).
EARLIEST_HEARTBEAT = 946684800.0   # 2000-01-01
HEARTBEAT_AHEAD_S = 86400.0


def heartbeat(key: str, value: bytes, now: float) -> tuple[str, float]:
    """(host, at) of a heartbeat under ``key`` of the heartbeat bucket;
    BadMessage (its reason) for a value that is not one: not JSON, no host
    or one whose key is another's, a time that is not a finite number in
    [EARLIEST_HEARTBEAT, now + HEARTBEAT_AHEAD_S]."""
    try:
        beat = json.loads(bytes(value).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadMessage("a heartbeat that is not UTF-8 JSON") from None
    if not isinstance(beat, dict):
        raise BadMessage("a heartbeat that is not a JSON object")
    host, at = beat.get("host"), beat.get("at")
    if not isinstance(host, str) or not host or len(host) > MAX_HOST or not host.isprintable():
        raise BadMessage("a heartbeat without a host name")
    if host_token(host) != key:
        raise BadMessage(f"a heartbeat of host {host[:80]!r} under another host's key")
    if type(at) not in (int, float) or not math.isfinite(at):
        raise BadMessage(f"a heartbeat time that is not a finite number: {str(at)[:40]}")
    if not EARLIEST_HEARTBEAT <= at <= now + HEARTBEAT_AHEAD_S:
        raise BadMessage(f"a heartbeat time out of range: {at!r}")
    return host, float(at)
