"""Which addresses are globally reachable: the IANA special-purpose address registries (RFC 6890
and its updates), as a table in this module, and the IPv4 addresses wrapped inside IPv6 ones.

The table is the rule. Python's `is_global` is only a second opinion: before 3.11.10 and 3.12.4 it
called 192.0.0.8 and 192.0.0.192 global, and it never looks inside 6to4, Teredo or NAT64 forms.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Block(NamedTuple):
    """One row of a registry: its block, its name, and whether it is globally reachable."""

    network: Network
    name: str
    reachable: bool


def _block(cidr: str, name: str, reachable: bool = False) -> Block:
    return Block(ipaddress.ip_network(cidr), name, reachable)


#: The IPv4 Special-Purpose Address Registry, with multicast (its own registry) beside it. The most
#: specific row holding an address decides; an address in no row is globally reachable.
IPV4_BLOCKS = (
    _block("0.0.0.0/8", '"This network" (RFC 791)'),
    _block("0.0.0.0/32", '"This host on this network" (RFC 1122)'),
    _block("10.0.0.0/8", "Private-Use (RFC 1918)"),
    _block("100.64.0.0/10", "Shared Address Space (RFC 6598)"),
    _block("127.0.0.0/8", "Loopback (RFC 1122)"),
    _block("169.254.0.0/16", "Link Local (RFC 3927)"),
    _block("172.16.0.0/12", "Private-Use (RFC 1918)"),
    _block("192.0.0.0/24", "IETF Protocol Assignments (RFC 6890)"),
    _block("192.0.0.0/29", "IPv4 Service Continuity Prefix (RFC 7335)"),
    _block("192.0.0.8/32", "IPv4 dummy address (RFC 7600)"),
    _block("192.0.0.9/32", "Port Control Protocol Anycast (RFC 7723)", True),
    _block("192.0.0.10/32", "Traversal Using Relays around NAT Anycast (RFC 8155)", True),
    _block("192.0.0.170/32", "NAT64/DNS64 Discovery (RFC 7050)"),
    _block("192.0.0.171/32", "NAT64/DNS64 Discovery (RFC 7050)"),
    _block("192.0.2.0/24", "Documentation (TEST-NET-1, RFC 5737)"),
    _block("192.31.196.0/24", "AS112-v4 (RFC 7535)", True),
    _block("192.52.193.0/24", "AMT (RFC 7450)", True),
    # Deprecated (RFC 7526): the registry gives it no reachability; nothing should be sent there.
    _block("192.88.99.0/24", "Deprecated 6to4 Relay Anycast (RFC 7526)"),
    _block("192.168.0.0/16", "Private-Use (RFC 1918)"),
    _block("192.175.48.0/24", "Direct Delegation AS112 Service (RFC 7534)", True),
    _block("198.18.0.0/15", "Benchmarking (RFC 2544)"),
    _block("198.51.100.0/24", "Documentation (TEST-NET-2, RFC 5737)"),
    _block("203.0.113.0/24", "Documentation (TEST-NET-3, RFC 5737)"),
    _block("224.0.0.0/4", "Multicast (RFC 5771)"),
    _block("240.0.0.0/4", "Reserved (RFC 1112)"),
    _block("255.255.255.255/32", "Limited Broadcast (RFC 919)"),
)

#: The IPv6 Special-Purpose Address Registry, under the IPv6 Address Space registry's rule that
#: only 2000::/3 is global unicast (the first row; 64:ff9b::/96 is the registry's one exception).
IPV6_BLOCKS = (
    _block("::/0", "Not global unicast (outside 2000::/3)"),
    _block("2000::/3", "Global Unicast (RFC 4291)", True),
    _block("::1/128", "Loopback Address (RFC 4291)"),
    _block("::/128", "Unspecified Address (RFC 4291)"),
    _block("::ffff:0:0/96", "IPv4-mapped Address (RFC 4291)"),
    _block("64:ff9b::/96", "IPv4-IPv6 Translation (RFC 6052)", True),
    _block("64:ff9b:1::/48", "Local-use IPv4/IPv6 Translation (RFC 8215)"),
    _block("100::/64", "Discard-Only Address Block (RFC 6666)"),
    _block("100:0:0:1::/64", "Dummy IPv6 Prefix (RFC 9780)"),
    _block("2001::/23", "IETF Protocol Assignments (RFC 2928)"),
    # Teredo and 6to4 have no reachability of their own: the IPv4 addresses inside decide.
    _block("2001::/32", "TEREDO (RFC 4380)", True),
    _block("2001:1::1/128", "Port Control Protocol Anycast (RFC 7723)", True),
    _block("2001:1::2/128", "Traversal Using Relays around NAT Anycast (RFC 8155)", True),
    _block("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast (RFC 9665)", True),
    _block("2001:2::/48", "Benchmarking (RFC 5180)"),
    _block("2001:3::/32", "AMT (RFC 7450)", True),
    _block("2001:4:112::/48", "AS112-v6 (RFC 7535)", True),
    _block("2001:10::/28", "Deprecated ORCHID (RFC 4843)"),
    _block("2001:20::/28", "ORCHIDv2 (RFC 7343)", True),
    _block("2001:30::/28", "Drone Remote ID Protocol Entity Tags (RFC 9374)", True),
    _block("2001:db8::/32", "Documentation (RFC 3849)"),
    _block("2002::/16", "6to4 (RFC 3056)", True),
    _block("2620:4f:8000::/48", "Direct Delegation AS112 Service (RFC 7534)", True),
    _block("3fff::/20", "Documentation (RFC 9637)"),
    _block("5f00::/16", "Segment Routing (SRv6) SIDs (RFC 9602)"),
    _block("fc00::/7", "Unique-Local (RFC 4193)"),
    _block("fe80::/10", "Link-Local Unicast (RFC 4291)"),
    _block("ff00::/8", "Multicast (RFC 4291)"),
)

_ANY_IPV4 = Block(ipaddress.ip_network("0.0.0.0/0"), "Global Unicast", True)
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")


def block_of(address: IPAddress) -> Block:
    """The registry's most specific row holding `address`; an IPv4 address in no row is global."""
    blocks = IPV4_BLOCKS if address.version == 4 else IPV6_BLOCKS
    found = [block for block in blocks if address in block.network]
    if not found:
        return _ANY_IPV4
    return max(found, key=lambda block: block.network.prefixlen)


def embedded(address: IPAddress) -> tuple[IPAddress, ...]:
    """The IPv4 addresses a packet to `address` reaches: those inside an IPv4-mapped,
    IPv4-compatible, 6to4, Teredo (its server and its client) or NAT64 address; else none."""
    if address.version == 4:
        return ()
    assert isinstance(address, ipaddress.IPv6Address)
    value = int(address)
    if address in _MAPPED or (address in _COMPATIBLE and value > 1):
        return (ipaddress.IPv4Address(value & 0xFFFFFFFF),)
    if address.sixtofour is not None:
        return (address.sixtofour,)
    if address.teredo is not None:
        return address.teredo
    if address in _NAT64:
        return (ipaddress.IPv4Address(value & 0xFFFFFFFF),)
    if address in _NAT64_LOCAL:
        # RFC 6052 §2.2 with a /48 prefix: 16 bits, the u octet (bits 64-71), then 16 bits.
        return (ipaddress.IPv4Address(((value >> 64) & 0xFFFF) << 16 | ((value >> 40) & 0xFFFF)),)
    return ()


def unwrapped(address: IPAddress) -> tuple[IPAddress, ...]:
    """`address` and every address wrapped inside it."""
    return (address, *embedded(address))


def globally_reachable(address: IPAddress) -> bool:
    """Whether the registries call `address` globally reachable, and every IPv4 address a packet
    to it reaches too (Python's `is_global` agreeing about each of those)."""
    inner = embedded(address)
    if address in _MAPPED:
        # The mapped form is only a way to write its IPv4 address: that address decides.
        address = inner[0]
        inner = ()
    if not block_of(address).reachable:
        return False
    if not inner:
        return address.is_global
    return all(block_of(each).reachable and each.is_global for each in inner)


def never_allowed(address: IPAddress) -> bool:
    """Link-local or unspecified, itself or inside: refused whatever PLANTS_WEBHOOKS_ALLOW_HOSTS says."""
    return any(each.is_link_local or each.is_unspecified for each in unwrapped(address))


#: Cloud metadata services outside link-local: Alibaba Cloud's (shared space), Oracle Cloud's
#: (192.0.0.0/24) and AWS's IPv6 one (unique-local). A network in PLANTS_WEBHOOKS_ALLOW_HOSTS
#: opened for other reasons (a carrier NAT, a VPN, a ULA) must not open them with it.
METADATA = frozenset(
    ipaddress.ip_address(each) for each in ("100.100.100.200", "192.0.0.192", "fd00:ec2::254")
)


def metadata_inside(address: IPAddress) -> IPAddress | None:
    """The cloud metadata address `address` is or wraps, if any."""
    return next((each for each in unwrapped(address) if each in METADATA), None)
