"""The client behind trusted proxies: a forwarded value counts only when it is an address, a scheme,
a host or a path prefix.

Werkzeug's ProxyFix (PLANTS_TRUSTED_PROXIES) takes the `X-Forwarded-For` entry the trusted proxies
added as REMOTE_ADDR, whatever it holds. A client that reaches the service past its proxy sends
its own header, and anything in it became the client's address: the key its failed
authentications were counted under, so random 8 KB strings meant a new counter (and 8 KB of
memory) a request, and never a 429. This middleware, inside ProxyFix, keeps the forwarded value
only when it parses as an IP address (the `ipaddress` module; an IPv6 one may come in brackets,
and loses its zone id; an IPv4-mapped one keeps its dotted tail), and otherwise restores the
peer's address, which ProxyFix keeps in `werkzeug.proxy_fix.orig`. An address may come with the
client's port (`203.0.113.7:51234`, `[2001:db8::1]:443`), as Azure Application Gateway and other
load balancers write it: the address counts, the port goes. Taken as junk, it put every client
behind such a proxy on the proxy's one failed-login budget, and out of the access log.

The same holds for what builds the URLs the service hands out (`Location`, `Link`): a forwarded
scheme counts only as `http` or `https`, a host (with `X-Forwarded-Port`'s port) only as one Werkzeug
builds URLs with, a prefix only as a path (app/settings/fields.py: its percent-encodings valid, no
`.` or `..` segment); otherwise the peer's own value stays (`X-Forwarded-Proto: javascript` made
`Link: <javascript://...>`, `X-Forwarded-Prefix: /%zz` a `Location` that is no URL). Werkzeug
takes a host of its own characters with a port of 1 to 65535 (`host_is_trusted`), and any other as
none at all: `X-Forwarded-Port: 99999`, a host with a space or an underscore made every URL handed
out `http:///plants`, and one with an empty label (`a..b`) a 400 that blamed the client's `Host`.
Each header's entry is the one the trusted proxies added, found by commas (`added_entry`), as for
the address: a client's lone `"` made ProxyFix drop the header whole.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.wsgi import host_is_trusted

from app.settings.fields import is_path_prefix

#: Where ProxyFix keeps the environ's values as the peer sent them (documented by Werkzeug).
_ORIGINAL = "werkzeug.proxy_fix.orig"
#: No IP address is longer, with an IPv4 tail, a short zone id, brackets and a port.
_LONGEST = 72
#: An IPv4 address, or anything in brackets, then a port: one of 1 to 65535 (checked after). An
#: IPv6 address with a port takes brackets (RFC 3986's form): `2001:db8::1:443` is an address.
_WITH_PORT = re.compile(r"([0-9.]+|\[[^\]]*\]):([0-9]{1,5})")
#: The environ keys a forwarded host sets (ProxyFix's `x_host` and `x_port`).
_HOST_KEYS = ("HTTP_HOST", "SERVER_NAME", "SERVER_PORT")
#: The headers that move the URLs handed out, in ProxyFix's order: scheme, host, port, prefix.
_URL_HEADERS = (
    "HTTP_X_FORWARDED_PROTO",
    "HTTP_X_FORWARDED_HOST",
    "HTTP_X_FORWARDED_PORT",
    "HTTP_X_FORWARDED_PREFIX",
)


def ip_address_of(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`value` as an IP address, without its brackets, port or zone id; None when it is none."""
    if not value or len(value) > _LONGEST:
        return None
    with_port = _WITH_PORT.fullmatch(value)
    if with_port is not None:
        if not 0 < int(with_port[2]) < 65536:
            return None
        value = with_port[1]
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
    return address


def parsed_address(value: str) -> str | None:
    """`value` as an IP address, in its compressed form; None when it is none."""
    address = ip_address_of(value)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        # An IPv4 client of a dual-stack proxy: its address as the proxy writes it (and its own
        # log), where Python before 3.13 writes `::ffff:c633:6407`, which no search for the
        # IPv4 address finds.
        return f"::ffff:{address.ipv4_mapped}"
    return None if address is None else str(address)


class ForwardedAddress:
    """WSGI middleware, directly inside ProxyFix: REMOTE_ADDR is an IP address, the scheme, host and
    prefix are valid, or each is the peer's."""

    def __init__(self, app: Callable[..., Iterable[bytes]], proxies: int = 1) -> None:
        self.app = app
        self.proxies = proxies

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        original = environ.get(_ORIGINAL)
        if original is not None:
            peer = original.get("REMOTE_ADDR")
            forwarded = environ.get("HTTP_X_FORWARDED_FOR")
            if forwarded:
                environ["REMOTE_ADDR"] = parsed_address(added_entry(forwarded, self.proxies) or "") or peer
            if any('"' in environ.get(key, "") for key in _URL_HEADERS):
                _url_by_commas(environ, original, self.proxies)
            _keep_valid_url(environ, original)
        return self.app(environ, start_response)


def added_entry(value: str | None, proxies: int) -> str | None:
    """The entry of a forwarded list (`X-Forwarded-*`) that the trusted proxies added: the
    `proxies`-th from the end, found as ProxyFix finds it but by commas alone. No proxy quotes an
    entry, and Werkzeug's list parser reads a client's lone `"` as a string that swallows the
    entries after it, the proxies' too: it then found none, and the header counted as not sent (the
    client's address as the proxy's, the proxy's scheme, host, port or prefix dropped)."""
    if not value:
        return None
    entries = [entry for entry in (part.strip() for part in value.split(",")) if entry]
    return entries[-proxies] if len(entries) >= proxies else None


def _url_by_commas(environ: dict[str, Any], original: dict[str, Any], proxies: int) -> None:
    """ProxyFix's scheme, host, port and prefix again, from the peer's, each with the entry its
    header's trusted proxies added (`added_entry`): for a header with a quote, where Werkzeug's
    parse and the commas differ. The values are checked after, as any forwarded one is."""
    environ.update((key, original[key]) for key in ("wsgi.url_scheme", "SCRIPT_NAME", *_HOST_KEYS))
    proto, host, port, prefix = (added_entry(environ.get(key), proxies) for key in _URL_HEADERS)
    if proto:
        environ["wsgi.url_scheme"] = proto
    if host:
        environ["HTTP_HOST"] = environ["SERVER_NAME"] = host
        if ":" in host and not host.endswith("]"):  # a port, not an IPv6 address's last group
            environ["SERVER_NAME"], environ["SERVER_PORT"] = host.rsplit(":", 1)
    if port:
        named = environ.get("HTTP_HOST")
        if named:
            if ":" in named and not named.endswith("]"):
                named = named.rsplit(":", 1)[0]
            environ["HTTP_HOST"] = f"{named}:{port}"
        environ["SERVER_PORT"] = port
    if prefix:
        environ["SCRIPT_NAME"] = prefix


def _keep_valid_url(environ: dict[str, Any], original: dict[str, Any]) -> None:
    scheme = environ.get("wsgi.url_scheme")
    if scheme != original["wsgi.url_scheme"]:
        scheme = str(scheme).lower()
        environ["wsgi.url_scheme"] = scheme if scheme in ("http", "https") else original["wsgi.url_scheme"]
    host = environ.get("HTTP_HOST")
    if host != original["HTTP_HOST"] and not _url_host(host or ""):
        environ.update((key, original[key]) for key in _HOST_KEYS)
    prefix = environ.get("SCRIPT_NAME")
    if prefix != original["SCRIPT_NAME"] and not is_path_prefix(prefix or "", encoded=True):
        environ["SCRIPT_NAME"] = original["SCRIPT_NAME"]


def _url_host(host: str) -> bool:
    """Whether Werkzeug builds URLs on `host` as it is: its characters and port, then its name's
    labels as its URL map encodes them (IDNA: each of 1 to 63 characters)."""
    if not host_is_trusted(host):
        return False
    try:
        host.partition(":")[0].encode("idna")
    except UnicodeError:
        return False
    return True
