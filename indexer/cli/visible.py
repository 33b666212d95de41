"""What the command prints, with the control characters of transcripts made visible.

Transcript text is hostile: a prompt, a title, a cwd or a file name holding
an escape sequence, printed as it is, can retitle the terminal or write its
clipboard (OSC), move the cursor and rewrite what is on screen (CSI, a
carriage return), or reorder what is read (bidirectional overrides). Every
write of the ``session-index`` command to stdout and stderr passes through
a :class:`Writer` (installed by ``entry.main``), which replaces each C0
control but tab and newline, DEL, each C1 control and each bidirectional
override or isolate with its ``\\uXXXX`` escape. That form is also a JSON
string escape, so ``--json`` output stays valid and decodes to the same
text (JSON escapes C0 itself; ``show --format json`` keeps C1 and bidi as
they are, for this to escape).

Let through: the SGR sequences the command itself styles with (bold,
reset, the foreground colours but black and white: they can neither move
the cursor, hide text nor talk to the terminal), and on stderr the progress
bar's carriage return and its cursor hide/show. Bytes written to
``.buffer`` (``export --out -``: the transcript byte for byte) pass
untouched."""

from __future__ import annotations

import re
import sys

_CONTROL = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
# The styles the command prints: bold, reset and a foreground colour
# (click.style: ingest's red bold WARNING, search's bold matches; uvicorn's
# coloured log levels under serve). Black and white, which hide text on a
# terminal of that background, and every other SGR (conceal, background,
# blink...) can only be a transcript's, and are escaped.
_STYLE = r"\x1b\[(?:0|1|3[1-6]|9[1-6])m"
_PROGRESS = r"\x1b\[\?25[hl]|\r"
STDOUT = re.compile(f"({_STYLE})|{_CONTROL}")
STDERR = re.compile(f"({_STYLE}|{_PROGRESS})|{_CONTROL}")


def _escape(match: re.Match) -> str:
    return match.group(0) if match.group(1) else f"\\u{ord(match.group(0)):04x}"


def escape(text: str, pattern: re.Pattern = STDOUT) -> str:
    """``text`` with its control characters as ``\\uXXXX`` (but what
    ``pattern`` lets through)."""
    return pattern.sub(_escape, text)


class Writer:
    """A text stream that escapes what it is given, then writes it to
    ``stream``; everything else (``buffer``, ``isatty``, ``encoding``...) is
    the stream's."""

    def __init__(self, stream, pattern: re.Pattern = STDOUT):
        self._stream, self._pattern = stream, pattern

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._stream.write(self._pattern.sub(_escape, text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def install() -> None:
    """Put Writers in front of sys.stdout and sys.stderr (once)."""
    if not isinstance(sys.stdout, Writer) and sys.stdout is not None:
        sys.stdout = Writer(sys.stdout, STDOUT)
    if not isinstance(sys.stderr, Writer) and sys.stderr is not None:
        sys.stderr = Writer(sys.stderr, STDERR)
