"""The long-running commands' log line (``ingest --watch``, ``serve
--watch``, ``ship``, ``ingest --from``): a log that cannot be written loses
the line, never the service. (What reaches stderr is made visible by the
command's Writer, cli/visible.py.)"""

from __future__ import annotations

import sys


def stderr_line(line: str) -> None:
    """One line on stderr. A log that cannot be written (stderr closed, a
    full disk under a redirect) loses the line, never the service: indexing
    goes on."""
    try:
        sys.stderr.write(f"{line}\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):   # None, ENOSPC/EPIPE, closed
        pass


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and its noun, singular for exactly one: "1 file", "3 files"
    (``plural``: when it is not the noun and an s)."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"
