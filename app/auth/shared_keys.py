"""The provider's keys as a worker last loaded them, shared with the workers gunicorn's master
forks later: a worker that starts after the first ones (a reload's, or one replacing a worker that
died) verifies JWTs with them at once, and while the provider cannot be reached, rather than
answering every JWT 503 until its own first fetch succeeds.

An anonymous shared mapping the master makes before it forks (no thread, no file): each worker
writes the keys it loaded; a worker reads them once, as it starts. A record is its source (the
issuer and the URLs its keys come from), the JWKS, and a SHA-256 of both: a record torn by two
workers writing at once, or of another issuer (a reload's `raw_env` may change it), is not read.
Outside gunicorn (an embedded blueprint, `flask run`) there is no mapping, and nothing is shared.
"""

from __future__ import annotations

import hashlib
import mmap
import struct

_HEADER = struct.Struct(">32sII")
#: The largest record: a JWKS of the most `fetch_json` reads, and its source.
SIZE = (1 << 20) + (64 << 10)

_shared: mmap.mmap | None = None


def share() -> None:
    """In gunicorn's master, before it forks: the mapping its workers share (pages are used only
    once written)."""
    global _shared
    if _shared is None:
        _shared = mmap.mmap(-1, SIZE)  # anonymous, MAP_SHARED: every forked worker sees its writes


def remember(source: str, document: bytes) -> None:
    """Keep the JWKS `document` loaded from `source` for the workers that start later (a record
    already whole and the same is left as it is: a write makes it unreadable while it lasts)."""
    shared = _shared
    if shared is None or recall(source) == document:
        return
    origin = source.encode()
    if _HEADER.size + len(origin) + len(document) > SIZE:
        # The record kept would be keys this worker no longer has (a key the provider withdrew
        # among them): a later worker would verify with them. None is shared until one fits.
        shared[: _HEADER.size] = _HEADER.pack(b"\0" * 32, 0, 0)
        return
    body = origin + document
    digest = hashlib.sha256(body).digest()
    shared[: _HEADER.size] = _HEADER.pack(b"\0" * 32, len(origin), len(document))  # torn until done
    shared[_HEADER.size : _HEADER.size + len(body)] = body
    shared[: _HEADER.size] = _HEADER.pack(digest, len(origin), len(document))


def recall(source: str) -> bytes | None:
    """The JWKS a worker last loaded from `source`, or None (none yet, another source, or torn)."""
    shared = _shared
    if shared is None:
        return None
    digest, origin_length, length = _HEADER.unpack(shared[: _HEADER.size])
    if _HEADER.size + origin_length + length > SIZE:
        return None
    body = shared[_HEADER.size : _HEADER.size + origin_length + length]
    if hashlib.sha256(body).digest() != digest or body[:origin_length] != source.encode():
        return None
    return bytes(body[origin_length:])
