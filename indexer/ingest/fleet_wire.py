"""What ``ship`` sends and ``ingest --from`` reads: the fleet's messages on
NATS JetStream. Neither the NATS client nor SQLite here: both ends import it.

Every message is one JSON header line, a newline, then a body of raw bytes:
- ``lines``: complete lines of one file (each with its newline), byte-exact,
  the bytes from ``offset`` to ``end`` of the file's generation
  ``generation`` on the shipping host; ``line`` is the first one's number.
- ``part``: a piece of one line too long for a message: the line is at
  ``offset``..``end``, this piece starts at ``at``. The central keeps the
  pieces until the last one arrives, then stores the line.
- ``deleted``: the file is gone from the host (its lines stay indexed).

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
import json
import re

# One stream holds every host's messages; subjects session-index.HOST.KIND.
STREAM = "SESSION_INDEX"
SUBJECT_PREFIX = "session-index"
STREAM_SUBJECTS = [SUBJECT_PREFIX + ".>"]
# How long JetStream remembers a message id to drop its re-send.
DUPLICATE_WINDOW_S = 600
# The most bytes of lines in one message (NATS' default max_payload is 1 MB).
MESSAGE_BYTES = 512 << 10
# The durable consumer the central index reads with, unless told another.
DEFAULT_CONSUMER = "session-index-central"

KINDS = ("lines", "part", "deleted")
_TOKEN = re.compile(r"[^A-Za-z0-9_-]")


class BadMessage(Exception):
    """A message that is not one of ours (or from a newer shipper)."""


def host_token(host: str) -> str:
    """``host`` as one subject token (NATS subjects split on dots)."""
    return _TOKEN.sub("_", host) or "_"


def subject(host: str, kind: str) -> str:
    return f"{SUBJECT_PREFIX}.{host_token(host)}.{kind}"


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
    """The id that makes a re-send of this message a duplicate."""
    kind = header["kind"]
    if kind == "lines":
        return (f"{file_key(header['host'], header['path'])}:{header['generation']}:"
                f"{header['offset']}-{header['end']}")
    if kind == "part":
        return (f"{file_key(header['host'], header['path'])}:{header['generation']}:"
                f"{header['offset']}-{header['end']}@{header['at']}")
    if kind == "deleted":
        return f"{file_key(header['host'], header['path'])}:{header['generation']}:deleted"
    return None


def encode(header: dict, body: bytes = b"") -> bytes:
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


def decode(payload: bytes) -> tuple[dict, bytes]:
    """(header, body) of a message; BadMessage if it is not one."""
    head, sep, body = bytes(payload).partition(b"\n")
    try:
        header = json.loads(head) if sep else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("kind") not in KINDS \
            or not isinstance(header.get("host"), str):
        raise BadMessage("not a session-index fleet message")
    if not isinstance(header.get("path"), str):
        raise BadMessage("a fleet message without a path")
    return header, body


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
