"""Cursors: where the next page starts, signed, so that a client can pass one back but not make one.

A cursor is base64url (no padding) of a kind byte, the store's position and the first 12 bytes of
an HMAC-SHA256 over both and the page's filter (`scope()`).
A page of plants (kind 1) has a position of 1 to 16
bytes: the last id as 8 bytes, and on a cluster a group byte. A page of the change feed (kind 2)
has one of up to 1,024 bytes: where each bucket group's feed was left (app/store/redis/feed.py).
The key is the store's own (`cursor_key()`), so a cursor from one worker or host is good on every
other that shares the store, and a cursor of one `tags` filter is refused on another.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Collection

#: The kinds of cursor, and the longest position of each.
PAGES, EVENTS = b"\x01", b"\x02"
_MAX_POSITION = {PAGES: 16, EVENTS: 1024}
_MAC_BYTES = 12
_MALFORMED = "Not a cursor: pass back the `next` of a page unchanged."
_OTHER_QUERY = {
    PAGES: "Not a cursor this service made for these tags (or one made before an upgrade): start"
    " the walk again from the first page.",
    EVENTS: "Not a cursor this service made for the feed (or one made before an upgrade): start"
    " again from `after=now` or the feed's first page.",
}


class InvalidCursor(ValueError):
    """Not a cursor this service made for this query."""


class MalformedCursor(InvalidCursor):
    """Not the shape of any cursor: no position this service ever handed out."""


def scope(tags: Collection[str] | None) -> bytes:
    """The filter a cursor is signed for, encoded so that no two filters share it: `-` for none,
    else `=` then each distinct tag, sorted, as its UTF-8 length (4 bytes) and its bytes."""
    if tags is None:
        return b"-"
    encoded = sorted({tag.encode("utf-8", "surrogatepass") for tag in tags})
    return b"=" + b"".join(len(tag).to_bytes(4, "big") + tag for tag in encoded)


def _mac(key: bytes, payload: bytes, tags: Collection[str] | None) -> bytes:
    # "v2": cursors signed before the scope was length-prefixed are refused, not misread.
    return hmac.new(key, b"v2\x1f" + payload + b"\x1f" + scope(tags), hashlib.sha256).digest()[:_MAC_BYTES]


def encode_cursor(key: bytes, position: bytes, tags: Collection[str] | None, kind: bytes = PAGES) -> str:
    payload = kind + position
    return base64.urlsafe_b64encode(payload + _mac(key, payload, tags)).rstrip(b"=").decode()


def decode_cursor(key: bytes, cursor: str, tags: Collection[str] | None, kind: bytes = PAGES) -> bytes:
    """The position a cursor names; InvalidCursor when it is malformed, forged or for other tags."""
    try:
        # validate=True: characters outside the alphabet are refused, not skipped.
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise MalformedCursor(_MALFORMED) from None
    # A last character may carry unused bits that decoding ignores; only the one spelling this
    # service writes is a cursor, so that no two strings name the same position.
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != cursor:
        raise MalformedCursor(_MALFORMED)
    if not 1 < len(raw) - _MAC_BYTES <= 1 + _MAX_POSITION[kind] or raw[:1] != kind:
        raise MalformedCursor(_MALFORMED)
    payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
    if not hmac.compare_digest(mac, _mac(key, payload, tags)):
        raise InvalidCursor(_OTHER_QUERY[kind])
    return payload[1:]
