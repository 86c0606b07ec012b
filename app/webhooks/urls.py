"""A webhook URL as written: its syntax, its port, and its non-ASCII characters percent-encoded once
(RFC 3986 §2.1), so that every attempt can send it as stored (docs/webhooks.md, "The URL")."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from app.settings import is_dns_name, without_address_dot

MAX_LENGTH = 2048

_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
#: A webhook URL, as the document's pattern says: http or https in any case (RFC 3986 §3.1), a
#: host name (an underscore too: RFC 3986's reg-name takes it, and a compose service's name has
#: one) or an IP address (IPv6 in brackets), a port from 1 to 65535, no credentials, no
#: fragment, no space or control character.
URL_PATTERN = re.compile(
    r"[Hh][Tt][Tt][Pp][Ss]?://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(:"
    + _PORT
    + r")?([/?][^\s#\x00-\x1f\x7f]*)?"
)
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


class UrlRefused(ValueError):
    """`url` is no webhook URL; the message says why, for the `url` field's error."""


def check_url(url: object) -> None:
    """Raise UrlRefused when `url` is no webhook URL, without resolving its host."""
    if not isinstance(url, str) or len(url) > MAX_LENGTH:
        raise UrlRefused(f"Must be an http or https URL of at most {MAX_LENGTH:,} characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
        url.encode()
    except ValueError:
        raise UrlRefused(_port_problem() if _has_port_out_of_range(url) else _syntax_problem()) from None
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("Must not hold credentials: receivers authenticate the service by its signature.")
    if port == 0:
        raise UrlRefused(_port_problem())
    if not (parts.hostname or "").isascii():
        raise UrlRefused(
            f"The host {parts.hostname} is not ASCII: write an internationalized name in its"
            " xn-- (Punycode) form, as DNS knows it."
        )
    if not URL_PATTERN.fullmatch(url):
        raise UrlRefused(_syntax_problem())
    if not is_dns_name(parts.hostname or ""):
        raise UrlRefused(
            f"The host {parts.hostname} is not a valid host name: each of its dot-separated labels"
            " has 1 to 63 characters."
        )
    if len(encoded(url)) > MAX_LENGTH:
        raise UrlRefused(
            f"Must be at most {MAX_LENGTH:,} characters once its non-ASCII characters are percent-encoded."
        )


def normalized(url: str) -> str:
    """A checked `url` with its scheme and host in lower case (RFC 3986 §6.2.2.1: they are
    case-insensitive), an IPv4 address's trailing dot dropped (it is the address, as
    PLANTS_WEBHOOKS_ALLOW_HOSTS reads it), its path and query as written: one endpoint's URL
    reads one way."""
    scheme, separator, rest = url.partition("://")
    end = len(re.split(r"[/?]", rest, maxsplit=1)[0])  # the authority: host and port, no userinfo
    host, colon, port = rest[:end].lower().partition(":")  # an IPv6 address's brackets keep their own
    return scheme.lower() + separator + without_address_dot(host) + colon + port + rest[end:]


def encoded(url: str) -> str:
    """`url` with each non-ASCII character percent-encoded as its UTF-8 bytes (RFC 3986 §2.1).
    What is ASCII already, a `%XX` included, stays as it is: encoding twice changes nothing."""
    return _NON_ASCII.sub(lambda found: "".join(f"%{byte:02X}" for byte in found.group().encode()), url)


def _has_port_out_of_range(url: str) -> bool:
    """Whether the authority ends in a port of digits that is no TCP port (urlsplit refuses it)."""
    authority = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]
    host_and_port = authority.rpartition("]")[2]
    port = host_and_port.rpartition(":")[2] if ":" in host_and_port else ""
    return port.isascii() and port.isdigit() and not 0 < int(port) <= 65535


def _port_problem() -> str:
    return "The port must be a number from 1 to 65535."


def _syntax_problem() -> str:
    return (
        "Must be an http or https URL: a host name or an IP address, an optional port from 1 to"
        " 65535, then a path; no fragment, spaces or control characters."
    )
