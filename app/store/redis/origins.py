"""A write's origin as the feed keeps it: the caller's (the request's id, and a trace's parent),
and a mark of this one write.

A change or a delete whose reply was lost is learnt from its event, found by its origin
(lost.py). The request's id alone does not name one write: behind a trusted proxy it is the
proxy's, or one a client set and may send again with another write. So each write's origin ends
in a random mark of its own; readers of the feed (webhook attempts' `X-Request-Id`) see the
caller's origin without it.
"""

from __future__ import annotations

import random

#: Between the caller's origin and the write's mark: in neither a request id ([A-Za-z0-9._:-])
#: nor a traceparent (hex digits and '-'), which is all a caller's origin holds.
_MARK = "#"
_MARK_BYTES = _MARK.encode()


def marked(origin: str) -> str:
    """`origin` with a mark no other write's has; '' (no origin) stays '', as lost.py expects."""
    # Unique, not secret: the random module's generator is reseeded in each forked process.
    return f"{origin}{_MARK}{random.getrandbits(64):016x}" if origin else origin


def unmarked(raw: bytes) -> str:
    """The caller's origin of a feed entry's `o` field, with or without a write's mark."""
    return raw.decode().partition(_MARK)[0]


def mark_of(origin: bytes) -> bytes | None:
    """The write's own mark in a marked origin (`marked`'s, encoded, or an entry's `o` field); None
    for an origin without one (no origin, or an entry an earlier version wrote)."""
    _, found, mark = origin.rpartition(_MARK_BYTES)
    return mark if found else None
