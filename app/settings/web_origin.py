"""A web origin as a browser writes it in `Origin` (RFC 6454 §6.2, the WHATWG URL serialisation):
the setting's spelling of an origin is read as the browser's, so that the two compare equal."""

from __future__ import annotations

import ipaddress
import re

#: Scheme, host and port, nothing after. An IPv6 host in brackets; a name may end in a dot (a page
#: on `https://app.example./` sends it so); a port of decimal digits.
_ORIGIN = re.compile(
    r"(https?)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?\.?)(?::([0-9]{1,5}))?",
    re.IGNORECASE,
)
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: A last label that makes a host an IPv4 address to a browser (WHATWG URL, "ends in a number"):
#: decimal digits, or `0x` and hexadecimal ones.
_ENDS_IN_A_NUMBER = re.compile(r"[0-9]+|0x[0-9a-f]*")


def serialise(origin: str) -> str:
    """`origin` as a browser serialises it: scheme and host in lowercase, the scheme's default port
    left out, an IPv6 address compressed. ValueError, naming the form to write, if it is none."""
    matched = _ORIGIN.fullmatch(origin)
    if matched is None or (matched[4] is not None and (matched[4][0] == "0" or int(matched[4]) > 65535)):
        raise ValueError(
            f"must list exact origins such as https://app.example.com (scheme, host and port, no path,"
            f" no pattern), or `*` alone, and {origin!r} is not one"
        )
    scheme, host = matched[1].lower(), matched[2].lower()
    if host.startswith("["):
        host = f"[{_ipv6(host[1:-1], origin)}]"
    elif _ENDS_IN_A_NUMBER.fullmatch(host.removesuffix(".").rpartition(".")[2]):
        host = _ipv4(host.removesuffix("."), origin)
    port = "" if matched[4] is None or int(matched[4]) == _DEFAULT_PORTS[scheme] else f":{matched[4]}"
    return f"{scheme}://{host}{port}"


def _ipv4(host: str, origin: str) -> str:
    """A host whose last label is a number is an IPv4 address to a browser, which rewrites its
    shorter forms (`127.1`): only the four decimal numbers it writes are taken."""
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        raise ValueError(
            f"names {origin!r}, whose host a browser reads as an IPv4 address: write it as four"
            " decimal numbers without leading zeros (127.0.0.1)"
        ) from None


def _ipv6(text: str, origin: str) -> str:
    """The compressed form a browser writes: hexadecimal pieces without leading zeros, the first
    longest run of two or more zero pieces as `::` (RFC 5952, as `compressed` writes it), and an
    IPv4-mapped address in hexadecimal pieces too (`[::ffff:7f00:1]`)."""
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        raise ValueError(f"names {origin!r}, whose host in brackets is not an IPv6 address") from None
    mapped = address.ipv4_mapped
    if mapped is None:
        return address.compressed
    # Written by hand: from Python 3.13 `compressed` writes an IPv4-mapped address dotted
    # (`::ffff:127.0.0.1`), which no browser sends in `Origin` (WHATWG URL serialises every IPv6
    # address in hexadecimal pieces), so a setting so written would never match.
    high, low = divmod(int(mapped), 1 << 16)
    return f"::ffff:{high:x}:{low:x}"
