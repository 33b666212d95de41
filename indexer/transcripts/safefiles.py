"""Reading and writing files where other programs (and attackers) also write.

- Only regular files are read: a FIFO would block a read forever, a symlink
  to /dev/zero or /dev/urandom never ends. ``open_regular`` opens without
  blocking and checks what it opened (``fstat``), so a file swapped for
  something else between a stat and the open is caught too. A symlink is
  followed only to a regular file.
- A file is written through a temporary file made in the target's folder
  with O_EXCL|O_NOFOLLOW and a random name (``tempfile.mkstemp``): a symlink
  planted at a predictable name is never followed; then renamed over the
  target, which replaces a link rather than writing through it.
- A target named by data in the index (a ``files.path``) is written only
  inside the folder asked for: ``inside`` resolves ``..`` and symlinks first.
"""

from __future__ import annotations

import os
import stat

KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
         (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"))


class NotRegular(OSError):
    """The path is (or leads to) something other than a regular file."""

    def __init__(self, path: str, what: str):
        super().__init__(f"{what}, not a regular file")
        self.path, self.what = path, what


def what_is(mode: int) -> str:
    """A file's kind, in words, from its st_mode."""
    return next((name for test, name in KINDS if test(mode)), "not a regular file")


def regular_stat(path: str):
    """``os.stat`` of ``path`` (following symlinks); NotRegular unless it
    is a regular file."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(path, what_is(st.st_mode))
    return st


def open_regular(path: str):
    """``path`` opened for binary reading, if it is a regular file (or a
    symlink to one); else NotRegular. The open never blocks."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, what_is(st.st_mode))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def temp_beside(target: str, suffix: str):
    """(a binary file open for writing, its path): a new file in the
    target's folder, created O_EXCL|O_NOFOLLOW under a random name starting
    ``.<target name>.`` and ending ``suffix``."""
    import tempfile   # (only to write a file: tempfile's start-up time costs every check)

    folder, name = os.path.split(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=suffix)
    return os.fdopen(fd, "wb"), tmp


def inside(root: str, target: str) -> bool:
    """Does ``target`` lie inside the folder ``root``, once ``..`` and every
    symlink on the way are resolved?"""
    root = os.path.realpath(root)
    return os.path.realpath(target).startswith(root.rstrip(os.sep) + os.sep)
