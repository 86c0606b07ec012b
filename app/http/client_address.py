"""The client's address behind trusted proxies: a forwarded value counts only when it is an address.

Werkzeug's ProxyFix (PLANTS_TRUSTED_PROXIES) takes the `X-Forwarded-For` entry the trusted proxies
added as REMOTE_ADDR, whatever it holds. A client that reaches the service past its proxy sends
its own header, and anything in it became the client's address: the key its failed
authentications were counted under, so random 8 KB strings meant a new counter (and 8 KB of
memory) a request, and never a 429. This middleware, inside ProxyFix, keeps the forwarded value
only when it parses as an IP address (the `ipaddress` module; an IPv6 one may come in brackets,
and loses its zone id), and otherwise restores the peer's address, which ProxyFix keeps in
`werkzeug.proxy_fix.orig`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Any

#: Where ProxyFix keeps the environ's values as the peer sent them (documented by Werkzeug).
_ORIGINAL = "werkzeug.proxy_fix.orig"
#: No IP address is longer (an IPv6 one with an IPv4 tail and a zone id is under 64 characters).
_LONGEST = 64


def parsed_address(value: str) -> str | None:
    """`value` as an IP address, in its compressed form; None when it is none."""
    if not value or len(value) > _LONGEST:
        return None
    if value[0] == "[" and value[-1] == "]":
        value = value[1:-1]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        # A zone id names an interface of the proxy's own host, and may be any text (spaces,
        # quotes, control-free Unicode) that would reach the access log as the client's address.
        address = ipaddress.IPv6Address(int(address))
    return str(address)


class ForwardedAddress:
    """WSGI middleware, directly inside ProxyFix: REMOTE_ADDR is an IP address or the peer's."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        original = environ.get(_ORIGINAL)
        if original is not None:
            peer = original.get("REMOTE_ADDR")
            forwarded = environ.get("REMOTE_ADDR")
            if forwarded != peer:
                environ["REMOTE_ADDR"] = parsed_address(forwarded or "") or peer
        return self.app(environ, start_response)
