"""Which client a failed authentication counts against, and a bound on how many are counted.

An address is a client's (`client_key`): an IPv4 address, an IPv4-mapped IPv6 address's IPv4
one, or an IPv6 address's /64, which one subscriber holds whole (RFC 6177). An IPv6 client is
counted against its /48 too (`wide_key`): a site commonly gets a whole /48, and with it 65,536
/64s, each a budget of its own. Each counter is kept for its limit's whole window, in the worker
or in Redis, so `AddressKeys` bounds how many one process opens in a window: past the bound, a
new address counts against one key that every newcomer shares, so that a flood of invented
addresses meets the limit together, and neither memory nor Redis grows with it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
from collections import deque

from app.http.client_address import ip_address_of

#: The key every address beyond the bound counts against, within a window.
OVERFLOW = "address:newcomers"


def client_key(address: str | None) -> str:
    """The client an address stands for: an IPv4 address (an IPv4-mapped IPv6 one's too), or an
    IPv6 address's /64, whatever port or zone id comes with it (an embedding app's own ProxyFix
    may hand over `203.0.113.7:51234`, a new port a connection). Anything else (a Unix socket's
    peer, or an embedding app's own idea of an address) by a short hash of it, so that a key's
    length is bounded."""
    if not address:
        return "-"
    parsed = ip_address_of(address)
    if parsed is None:
        return "other:" + hashlib.sha256(address.encode(errors="replace")).hexdigest()[:24]
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


def wide_key(address: str | None) -> str | None:
    """An IPv6 address's /48 (None for an IPv4 one, or no address): the network a site holds."""
    parsed = ip_address_of(address) if address else None
    if not isinstance(parsed, ipaddress.IPv6Address) or parsed.ipv4_mapped is not None:
        return None
    return str(ipaddress.IPv6Network((parsed, 48), strict=False))


class AddressKeys:
    """The address keys counted within the current window, at most `most` of them."""

    def __init__(self, most: int, window_s: float) -> None:
        self._most = most
        self._window_s = window_s
        # Key -> when this process stops counting it as open, and the same in the order they were
        # opened, which is expiry order since each is open for `window_s`: the ended ones are
        # forgotten from the front.
        self._open: dict[str, float] = {}
        self._ends: deque[tuple[float, str]] = deque()
        self._lock = threading.Lock()

    def key(self, key: str, now: float) -> str:
        """`key`, or OVERFLOW when `most` others are open in this window."""
        with self._lock:
            open_keys, ends = self._open, self._ends
            until = open_keys.get(key)
            if until is not None and until > now:
                return key
            while ends and ends[0][0] <= now:
                ended, ended_key = ends.popleft()
                if open_keys.get(ended_key) == ended:  # not opened again since
                    del open_keys[ended_key]
            if len(open_keys) >= self._most:
                return OVERFLOW
            until = open_keys[key] = now + self._window_s
            ends.append((until, key))
            return key

    def opened(self, key: str, now: float) -> str | None:
        """`key` when it is open in this window, else None: asked without opening it."""
        with self._lock:
            until = self._open.get(key)
        return key if until is not None and until > now else None

    def __len__(self) -> int:
        return len(self._open)
