"""Where a webhook may be sent: the SSRF rules (docs/webhooks.md, "The URL").

A URL's host must resolve only to public addresses: never to a loopback, private, link-local,
multicast or unspecified one (cloud metadata endpoints, the service's own Redis), unless
PLANTS_WEBHOOKS_ALLOW_HOSTS allows it. A name there allows that name; an address or CIDR allows a
URL whose host is such an address, written as one. Link-local and unspecified addresses are
refused whatever it says. Each delivery resolves and checks again, and connects to the address
it checked, so a name cannot change between the check and the connection.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import urlsplit

from app.settings import is_dns_name

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefused(Exception):
    """The URL may not be sent to; the message says why, for the `url` field's error."""

    def __init__(self, message: str, *, reason: str = "address") -> None:
        super().__init__(message)
        #: An attempt's `error`: `address`, or `name_not_resolved`.
        self.reason = reason


class Target(NamedTuple):
    """Where one attempt goes: the checked address, and the URL's parts the request needs."""

    address: str
    port: int
    host: str
    https: bool
    #: The path and query, as the request line carries them.
    path: str
    #: The Host header's value.
    authority: str


def _refused_always(address: IPAddress) -> bool:
    return address.is_link_local or address.is_unspecified


def _refused(address: IPAddress) -> bool:
    return (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_unspecified
        or address.is_reserved
    )


#: A webhook URL, as the document's pattern says: a host name or an IP address (IPv6 in brackets),
#: a port up to 65535, no credentials, no fragment, no space.
URL_PATTERN = re.compile(
    r"https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?([/?][^\s#\x00-\x1f\x7f]*)?"
)


def url_problem(url: object) -> str | None:
    """What is wrong with `url` as a webhook URL, without resolving it; None when nothing."""
    if not isinstance(url, str) or len(url) > 2048:
        return "Must be an http or https URL of at most 2,048 characters."
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is not None and (parts.username is not None or parts.password is not None):
        return "Must not hold credentials: receivers authenticate the service by its signature."
    if parts is None or not URL_PATTERN.fullmatch(url):
        return (
            "Must be an http or https URL: a host name or an IP address, an optional port up to"
            " 65535, then a path; no fragment, spaces or control characters."
        )
    if not is_dns_name(parts.hostname or ""):
        return (
            f"The host {parts.hostname} is not a valid host name: each of its dot-separated labels"
            " has 1 to 63 characters."
        )
    return None


def target(url: str, allowed: Iterable[str]) -> Target:
    """Resolve `url`'s host and check every address it resolves to; the one to connect to.
    Raises AddressRefused."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    allow = {entry.lower() for entry in allowed}
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    else:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise AddressRefused(f"The host {host} does not resolve.", reason="name_not_resolved") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found))
    if not addresses:
        raise AddressRefused(f"The host {host} does not resolve.", reason="name_not_resolved")
    for address in addresses:
        checked = address.ipv4_mapped or address if isinstance(address, ipaddress.IPv6Address) else address
        if _refused_always(checked) or (_refused(checked) and not _allows(allow, host, literal)):
            raise AddressRefused(
                f"The host {host} resolves to {address}, a loopback, private, link-local, multicast"
                " or unspecified address, which webhooks are not sent to (PLANTS_WEBHOOKS_ALLOW_HOSTS"
                " lists the hosts allowed anyway)."
            )
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    authority = parts.netloc.rpartition("@")[2]
    return Target(str(addresses[0]), port, host, https, path, authority)


def _allows(allow: set[str], host: str, literal: IPAddress | None) -> bool:
    """Whether PLANTS_WEBHOOKS_ALLOW_HOSTS allows the URL's host: a name only by itself, an
    address written in the URL by an entry that is that address or a network holding it."""
    if literal is None:
        return host in allow
    for entry in allow:
        try:
            if literal in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False
