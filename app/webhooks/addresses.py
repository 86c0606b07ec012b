"""Where a webhook may be sent: the SSRF rules (docs/webhooks.md, "The URL").

A URL's host must resolve only to globally reachable addresses (reachable.py: the IANA registries,
looking inside the IPv6 forms that wrap an IPv4 address), never to a loopback, private, shared,
link-local or cloud metadata one, unless PLANTS_WEBHOOKS_ALLOW_HOSTS allows it. A name there
allows that name; an address or CIDR allows a URL whose host is such an address, written as one.
Link-local and unspecified addresses, wrapped or not, are refused whatever it says; a cloud
metadata address outside link-local only when it names that address itself. Each delivery
resolves and checks again, and connects to the address it checked, so a name cannot change
between the check and the connection.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from app.webhooks.reachable import (
    IPAddress,
    block_of,
    globally_reachable,
    metadata_inside,
    never_allowed,
    unwrapped,
)
from app.webhooks.urls import encoded


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
    #: Every address the host resolved to, each checked (`address` is the first).
    addresses: tuple[str, ...] = ()


#: How a host name is resolved: `socket.getaddrinfo`'s signature (the tests pass their own, to
#: move a name between addresses without touching /etc/hosts).
Resolver = Callable[..., list[tuple[Any, ...]]]


def target(url: str, allowed: Iterable[str], resolve: Resolver = socket.getaddrinfo) -> Target:
    """Resolve `url`'s host and check every address it resolves to; the one to connect to.
    Raises AddressRefused."""
    parts = urlsplit(encoded(url))
    host = (parts.hostname or "").lower()
    https = parts.scheme == "https"
    port = (443 if https else 80) if parts.port is None else parts.port
    if port == 0:
        raise AddressRefused("Port 0 is no port a connection can go to.")
    allow = {entry.lower() for entry in allowed}
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    else:
        try:
            found = resolve(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise AddressRefused(f"The host {host} does not resolve.", reason="name_not_resolved") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found))
    if not addresses:
        raise AddressRefused(f"The host {host} does not resolve.", reason="name_not_resolved")
    for address in addresses:
        if never_allowed(address):
            raise AddressRefused(
                f"The host {host} resolves to {address}, {_named(address)}: link-local and unspecified"
                " addresses are never sent to, whatever PLANTS_WEBHOOKS_ALLOW_HOSTS says."
            )
        if not globally_reachable(address) and not _allows(allow, host, literal):
            raise AddressRefused(
                f"The host {host} resolves to {address}, {_named(address)}: not a globally reachable"
                " address, and webhooks are sent only to those (PLANTS_WEBHOOKS_ALLOW_HOSTS lists the"
                f" hosts allowed anyway{_as_written(host)}{_as_listed(allow, host, address, literal)})."
            )
        metadata = metadata_inside(address)
        if metadata is not None and not _names_exactly(allow, metadata):
            raise AddressRefused(
                f"The host {host} resolves to {address}, {_named(address)}: a cloud metadata"
                f" service's address, sent to only when PLANTS_WEBHOOKS_ALLOW_HOSTS names {metadata}"
                " itself (a network holding it is not enough)."
            )
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    authority = parts.netloc.rpartition("@")[2]
    return Target(
        str(addresses[0]), port, host, https, path, authority, tuple(str(each) for each in addresses)
    )


def _as_written(host: str) -> str:
    """For a name with a trailing dot: that the allowance names it so. `hooks.example.` is looked
    up as it stands, `hooks.example` perhaps under the resolver's search domains too (another
    host), so neither allows the other."""
    return f"; a name as written, so list {host} with its trailing dot" if host.endswith(".") else ""


def _as_listed(allow: set[str], host: str, address: IPAddress, literal: IPAddress | None) -> str:
    """For a name that resolves into an address or network listed: that such an entry allows a
    URL that writes an address in it, not a name (`127.0.0.1` listed, `http://localhost/`), so
    that an operator who listed the address is not left wondering why the refusal sends them to
    the setting they set."""
    if literal is not None:
        return ""
    for entry in sorted(allow):
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if address in network:
            return (
                f"; its entry {entry} allows a URL that writes an address in it, not a name that"
                f" resolves to one, so list {host} itself"
            )
    return ""


def _named(address: IPAddress) -> str:
    """The registry rows `address`, and each address inside it, fall in: "in 6to4 (RFC 3056),
    holding 127.0.0.1 in Loopback (RFC 1122)"."""
    outer, *inner = unwrapped(address)
    named = f"in {block_of(outer).name}"
    for each in inner:
        named += f", holding {each} in {block_of(each).name}"
    return named


def _names_exactly(allow: set[str], address: IPAddress) -> bool:
    """Whether an entry of PLANTS_WEBHOOKS_ALLOW_HOSTS is `address` alone (as an address or a
    network of one)."""
    for entry in allow:
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if network.num_addresses == 1 and network.network_address == address:
            return True
    return False


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
