"""The addresses a webhook may go to: a row for each entry of the IANA special-purpose address
registries (IPv4 and IPv6), and for each IPv6 form that wraps an IPv4 address, through the same
check a registration and every delivery make (app/webhooks/addresses.py)."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from app.webhooks.addresses import AddressRefused, target
from app.webhooks.reachable import IPV4_BLOCKS, IPV6_BLOCKS, globally_reachable, never_allowed

#: (an address in the entry, whether a webhook may go there); the first and the last address
#: of each entry are tried too.
IPV4_ROWS = [
    ("0.0.0.1", False),  # "This network"
    ("0.0.0.0", False),  # noqa: S104 ("This host on this network": an address, not a bind)
    ("10.20.30.40", False),  # Private-Use
    ("100.64.0.1", False),  # Shared Address Space (carrier NAT, Tailscale)
    ("100.100.100.200", False),  # Shared Address Space: Alibaba Cloud's metadata service
    ("127.0.0.1", False),  # Loopback
    ("169.254.169.254", False),  # Link Local: cloud metadata
    ("172.16.0.1", False),  # Private-Use
    ("192.0.0.192", False),  # IETF Protocol Assignments: Oracle Cloud's legacy metadata
    ("192.0.0.1", False),  # IPv4 Service Continuity Prefix
    ("192.0.0.8", False),  # IPv4 dummy address
    ("192.0.0.9", True),  # Port Control Protocol Anycast
    ("192.0.0.10", True),  # Traversal Using Relays around NAT Anycast
    ("192.0.0.170", False),  # NAT64/DNS64 Discovery
    ("192.0.0.171", False),  # NAT64/DNS64 Discovery
    ("192.0.2.1", False),  # Documentation (TEST-NET-1)
    ("192.31.196.1", True),  # AS112-v4
    ("192.52.193.1", True),  # AMT
    ("192.88.99.1", False),  # Deprecated 6to4 Relay Anycast
    ("192.168.1.1", False),  # Private-Use
    ("192.175.48.1", True),  # Direct Delegation AS112 Service
    ("198.18.0.1", False),  # Benchmarking
    ("198.19.255.255", False),  # Benchmarking (its last address)
    ("198.51.100.1", False),  # Documentation (TEST-NET-2)
    ("203.0.113.1", False),  # Documentation (TEST-NET-3)
    ("224.0.0.1", False),  # Multicast
    ("240.0.0.1", False),  # Reserved
    ("255.255.255.255", False),  # Limited Broadcast
    ("8.8.8.8", True),  # in no entry: global
    ("100.63.255.255", True),  # just below Shared Address Space
    ("100.128.0.0", True),  # just above it
    ("198.20.0.0", True),  # just above Benchmarking
]

IPV6_ROWS = [
    ("::1", False),  # Loopback
    ("::", False),  # Unspecified
    ("::ffff:10.0.0.1", False),  # IPv4-mapped: its IPv4 address decides
    ("64:ff9b::808:808", True),  # IPv4-IPv6 Translation, of a global address
    ("64:ff9b:1::1", False),  # Local-use IPv4/IPv6 Translation
    ("100::1", False),  # Discard-Only
    ("100:0:0:1::1", False),  # Dummy IPv6 Prefix
    ("2001:4::1", False),  # IETF Protocol Assignments
    ("2001:2::1", False),  # Benchmarking
    ("2001:10::1", False),  # Deprecated ORCHID
    ("2001:db8::1", False),  # Documentation
    ("3fff::1", False),  # Documentation
    ("5f00::1", False),  # Segment Routing SIDs
    ("fc00::1", False),  # Unique-Local
    ("fd12:3456::1", False),  # Unique-Local
    ("fe80::1", False),  # Link-Local Unicast
    ("fec0::1", False),  # outside 2000::/3 (site-local, deprecated)
    ("ff02::1", False),  # Multicast
    ("4000::1", False),  # outside 2000::/3 (unassigned)
    ("2620:4f:8000::1", True),  # Direct Delegation AS112 Service
    ("2606:4700:4700::1111", True),  # Global Unicast
    ("2a00:1450:4001::1", True),  # Global Unicast
]

#: Rows the registries call globally reachable and Python 3.11.7's `is_global` does not (3.11.10
#: and 3.12.4 follow the registries): the service refuses where either says no.
PYTHON_DISAGREES = [
    "2001:1::1",  # Port Control Protocol Anycast
    "2001:1::2",  # Traversal Using Relays around NAT Anycast
    "2001:1::3",  # DNS-SD Service Registration Protocol Anycast
    "2001:3::1",  # AMT
    "2001:4:112::1",  # AS112-v6
    "2001:20::1",  # ORCHIDv2
    "2001:30::1",  # Drone Remote ID Protocol Entity Tags
]

#: Each IPv6 form that wraps an IPv4 address, with a global address inside and with refused ones.
WRAPPED_ROWS = [
    ("::ffff:8.8.8.8", True),  # IPv4-mapped
    ("::ffff:127.0.0.1", False),
    ("::ffff:100.100.100.200", False),
    ("::ffff:192.0.0.192", False),
    ("::8.8.8.8", False),  # IPv4-compatible: deprecated (RFC 4291 §2.5.5.1), outside 2000::/3
    ("::127.0.0.1", False),
    ("2002:808:808::", True),  # 6to4 of 8.8.8.8
    ("2002:a9fe:a9fe::", False),  # 6to4 of 169.254.169.254
    ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
    ("2002:6464:64c8::1", False),  # 6to4 of 100.100.100.200
    ("2002:c000:c0::", False),  # 6to4 of 192.0.0.192
    # Teredo: server 65.54.227.120 (global), client 8.8.8.8 written inverted (f7f7:f7f7).
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", True),
    ("2001:0:a00:1::f7f7:f7f7", False),  # server 10.0.0.1
    ("2001:0:4136:e378::80ff:fffe", False),  # client 127.0.0.1
    ("2001:0:4136:e378::5601:5601", False),  # client 169.254.169.254 (0xa9fe inverted)
    ("64:ff9b::808:808", True),  # NAT64 of 8.8.8.8
    ("64:ff9b::a9fe:a9fe", False),  # NAT64 of 169.254.169.254
    ("64:ff9b::7f00:1", False),  # NAT64 of 127.0.0.1
    ("64:ff9b::c0a8:101", False),  # NAT64 of 192.168.1.1
    ("64:ff9b:1:808:8:800::", False),  # Local-use NAT64 of 8.8.8.8: the prefix is not global
    ("64:ff9b:1:a9fe:a9:fe00::", False),  # Local-use NAT64 of 169.254.169.254
]

ALL_ROWS = IPV4_ROWS + IPV6_ROWS + WRAPPED_ROWS


def verdict(address: str, allowed: tuple[str, ...] = ()) -> bool:
    """Whether a webhook may go to `address` written in its URL."""
    host = f"[{address}]" if ":" in address else address
    try:
        target(f"http://{host}:8080/hook", allowed)
    except AddressRefused:
        return False
    return True


@pytest.mark.parametrize(("address", "allowed"), ALL_ROWS)
def test_each_registry_entry_and_wrapped_form(address, allowed):
    assert verdict(address) is allowed
    assert globally_reachable(ipaddress.ip_address(address)) is allowed


@pytest.mark.parametrize("address", PYTHON_DISAGREES)
def test_where_the_registries_and_python_disagree_the_service_refuses_only_if_python_does(address):
    parsed = ipaddress.ip_address(address)
    assert verdict(address) is parsed.is_global


@pytest.mark.parametrize("block", IPV4_BLOCKS + IPV6_BLOCKS, ids=lambda block: str(block.network))
def test_every_table_entry_has_a_row_and_its_edges_follow_it(block):
    rows = {ipaddress.ip_address(address) for address, _ in ALL_ROWS}
    rows |= {ipaddress.ip_address(address) for address in PYTHON_DISAGREES}
    assert any(row in block.network for row in rows), f"no row for {block.network} ({block.name})"
    if not block.reachable:
        # Refused from its first address to its last, unless a more specific entry says otherwise.
        for edge in (block.network[0], block.network[-1]):
            if edge.version == 4 and not str(edge).startswith("192.0.0."):
                assert not globally_reachable(edge), edge


#: What Python 3.11.7's `is_global` calls global and the table refuses: ranges it does not know
#: (192.0.0.0/24's, 192.88.99.0/24, newer IPv6 entries, outside 2000::/3) and every wrapped form.
#: A later Python may agree with the table about more of them, never about fewer.
TABLE_STRICTER = {
    *("192.0.0.192", "192.0.0.8", "192.88.99.1", "224.0.0.1"),
    *("64:ff9b:1::1", "100:0:0:1::1", "3fff::1", "5f00::1", "fec0::1", "ff02::1", "4000::1"),
    *("::ffff:100.100.100.200", "::ffff:192.0.0.192", "::8.8.8.8", "::127.0.0.1"),
    *("2002:a9fe:a9fe::", "2002:7f00:1::", "2002:6464:64c8::1", "2002:c000:c0::"),
    *("64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::c0a8:101"),
    *("64:ff9b:1:808:8:800::", "64:ff9b:1:a9fe:a9:fe00::"),
}


def test_python_is_global_is_a_second_opinion_the_table_overrules_only_to_refuse():
    rows = [(address, allowed, ipaddress.ip_address(address).is_global) for address, allowed in ALL_ROWS]
    lenient = {address for address, allowed, python in rows if python and not allowed}
    assert lenient <= TABLE_STRICTER
    # The one row the table allows and Python does not: Teredo, whose two ends decide.
    stricter = {address for address, allowed, python in rows if allowed and not python}
    assert stricter <= {"2001:0:4136:e378:8000:63bf:f7f7:f7f7"}


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://127.0.0.1:9/x", ("127.0.0.1",)),
        ("http://10.1.2.3/x", ("10.0.0.0/8",)),
        ("http://100.64.0.1/x", ("100.64.0.0/10",)),
        ("http://[fd00::1]/x", ("fd00::/8",)),
        ("http://100.100.100.200/x", ("100.100.100.200",)),
        ("http://[fd00:ec2::254]/x", ("fd00:ec2::254/128",)),
    ],
)
def test_the_allowance_allows_what_it_names(url, allowed):
    target(url, allowed)
    with pytest.raises(AddressRefused):
        target(url, ())


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("169.254.169.254", ("169.254.0.0/16",)),
        ("0.0.0.0", ("0.0.0.0/0",)),  # noqa: S104 (an address to refuse, not a bind)
        ("fe80::1", ("::/0",)),
        ("::", ("::/0",)),
        ("::ffff:169.254.169.254", ("::/0",)),
        ("2002:a9fe:a9fe::", ("2002::/16",)),
        ("64:ff9b::a9fe:a9fe", ("64:ff9b::/96",)),
        ("2001:0:4136:e378::5601:5601", ("2001::/32",)),
        ("2002::", ("2002::/16",)),  # 6to4 of 0.0.0.0
    ],
)
def test_link_local_and_unspecified_stay_refused_whatever_the_allowance(address, allowed):
    assert never_allowed(ipaddress.ip_address(address))
    assert not verdict(address, allowed)


def test_a_name_is_checked_by_every_address_it_resolves_to():
    with pytest.raises(AddressRefused, match="Loopback"):
        target("http://localhost:9/x", ())
    target("http://localhost:9/x", ("localhost",))


def test_port_0_is_never_connected_to():
    """A URL stored before port 0 was refused at registration goes nowhere, not to port 80."""
    with pytest.raises(AddressRefused, match="Port 0"):
        target("http://8.8.8.8:0/x", ())


def resolver(*addresses: str):
    """A resolver answering `addresses` for any name, in getaddrinfo's shape."""

    def resolve(host, port, **_):
        return [(None, None, None, "", (address, port)) for address in addresses]

    return resolve


def failing_resolver(host, port, **_):
    raise OSError("Name or service not known")


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("http://8.8.8.8/x", ("8.8.8.8", 80, "8.8.8.8", False, "/x", "8.8.8.8")),
        ("https://8.8.8.8", ("8.8.8.8", 443, "8.8.8.8", True, "/", "8.8.8.8")),
        ("http://8.8.8.8:8080/a/b?q=1&r", ("8.8.8.8", 8080, "8.8.8.8", False, "/a/b?q=1&r", "8.8.8.8:8080")),
        ("http://user:pw@8.8.8.8/x", ("8.8.8.8", 80, "8.8.8.8", False, "/x", "8.8.8.8")),  # no userinfo
        ("https://[2001:4860:4860::8888]:8443/h", ("2001:4860:4860::8888", 8443, "2001:4860:4860::8888", True,
                                                   "/h", "[2001:4860:4860::8888]:8443")),
        ("http://8.8.8.8/café?q=☃", ("8.8.8.8", 80, "8.8.8.8", False, "/caf%C3%A9?q=%E2%98%83", "8.8.8.8")),
    ],
)  # fmt: skip
def test_a_target_holds_what_the_request_needs(url, parts):
    found = target(url, ())
    assert (found.address, found.port, found.host, found.https, found.path, found.authority) == parts
    assert found.addresses == (parts[0],)


def test_a_named_host_goes_to_its_first_address_and_every_one_is_checked():
    found = target("https://Hooks.Example/x", (), resolver("8.8.8.8", "8.8.4.4", "8.8.8.8"))
    assert (found.host, found.address, found.addresses) == (
        "hooks.example",
        "8.8.8.8",
        ("8.8.8.8", "8.8.4.4"),
    )
    assert found.authority == "Hooks.Example"
    with pytest.raises(AddressRefused, match=r"resolves to 10\.0\.0\.1, in Private-Use"):
        target("https://hooks.example/x", (), resolver("8.8.8.8", "10.0.0.1"))
    # A scoped IPv6 address is checked without its zone.
    with pytest.raises(AddressRefused, match="fe80::1"):
        target("https://hooks.example/x", ("hooks.example",), resolver("fe80::1%eth0"))


@pytest.mark.parametrize("resolve", [failing_resolver, resolver()], ids=["error", "no-address"])
def test_a_host_that_does_not_resolve_is_refused_as_such(resolve):
    with pytest.raises(AddressRefused, match="does not resolve") as refused:
        target("https://hooks.example/x", (), resolve)
    assert refused.value.reason == "name_not_resolved"


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://100.100.100.200/latest/meta-data/", ("100.64.0.0/10",)),  # Alibaba Cloud's
        ("http://192.0.0.192/opc/v2/instance/", ("192.0.0.0/24",)),  # Oracle Cloud's
        ("http://[fd00:ec2::254]/latest/meta-data/", ("fd00::/8",)),  # AWS's over IPv6
        ("http://[::ffff:100.100.100.200]/", ("::ffff:0:0/96",)),
        ("http://metadata.internal/", ("metadata.internal",)),  # an allowed name resolving to one
    ],
)
def test_a_network_allowed_for_other_hosts_does_not_open_a_cloud_metadata_address(url, allowed):
    def resolve(host, port, **_):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("100.100.100.200", port))]

    with pytest.raises(AddressRefused, match="cloud metadata"):
        target(url, allowed, resolve)


def test_a_host_name_with_an_underscore_is_resolved_and_allowed_by_name():
    """`hook_receiver`, a compose service on a private network, allowed by its name."""
    found = target("http://hook_receiver:8080/hook", ("hook_receiver",), resolver("172.18.0.5"))
    assert (found.host, found.address, found.port, found.authority) == (
        "hook_receiver",
        "172.18.0.5",
        8080,
        "hook_receiver:8080",
    )
    with pytest.raises(AddressRefused, match="not a globally reachable"):
        target("http://hook_receiver:8080/hook", (), resolver("172.18.0.5"))


def test_a_name_with_a_trailing_dot_is_allowed_as_written():
    """`hooks.internal.` is looked up as it stands, `hooks.internal` perhaps under the resolver's
    search domains (another host): each is allowed by its own spelling, and a refusal of the first
    says how to list it."""
    private = resolver("10.0.0.5")
    found = target("https://hooks.internal./x", ("hooks.internal.",), private)
    assert (found.host, found.address, found.authority) == ("hooks.internal.", "10.0.0.5", "hooks.internal.")
    with pytest.raises(AddressRefused, match=r"list hooks\.internal\. with its trailing dot"):
        target("https://hooks.internal./x", ("hooks.internal",), private)
    with pytest.raises(AddressRefused, match="not a globally reachable") as refused:
        target("https://hooks.internal/x", ("hooks.internal.",), private)
    assert "trailing dot" not in str(refused.value)


@pytest.mark.parametrize(
    ("url", "allowed", "address", "entry"),
    [
        ("http://localhost:9000/plant-events", ("127.0.0.1",), "127.0.0.1", "127.0.0.1"),
        ("http://hook_receiver:8080/hook", ("172.16.0.0/12",), "172.18.0.5", "172.16.0.0/12"),
    ],
)
def test_a_name_resolving_into_an_allowed_address_is_told_that_the_entry_allows_only_addresses(
    url, allowed, address, entry
):
    """An address or a network listed allows a URL that writes an address in it, not a name that
    resolves to one: the refusal of the name says so, and to list the name, rather than sending
    an operator who has listed the address to PLANTS_WEBHOOKS_ALLOW_HOSTS as if it lacked it."""
    host = url.split("//")[1].split(":")[0]
    with pytest.raises(AddressRefused) as refused:
        target(url, allowed, resolver(address))
    assert f"its entry {entry} allows a URL that writes an address in it, not a name" in str(refused.value)
    assert f"list {host} itself" in str(refused.value)
    with pytest.raises(AddressRefused) as unlisted:
        target(url, ("10.0.0.0/8",), resolver(address))
    assert "its entry" not in str(unlisted.value)
    target(url, (host,), resolver(address))
