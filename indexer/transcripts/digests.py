"""The hash functions the index uses, taken from CPython's own modules:
``import hashlib`` loads OpenSSL (about 5 ms of every process's start-up)
even for the algorithms CPython builds in, and a check or a no-op ingest
is mostly start-up. The digests are the same either way."""

try:
    from _sha256 import sha256          # Python 3.11
except ImportError:  # pragma: no cover
    try:
        from _sha2 import sha256        # Python 3.12+
    except ImportError:
        from hashlib import sha256
try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover
    from hashlib import blake2b

__all__ = ["blake2b", "sha256"]
