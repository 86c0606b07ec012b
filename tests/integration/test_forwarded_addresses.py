"""Behind trusted proxies (PLANTS_TRUSTED_PROXIES), a forwarded client address counts only when it
is an IP address (app/http/client_address.py); failed authentications count per address, per /64
and per /48 (app/auth/address_keys.py). On a real gunicorn, the forwarded values sent as a client
that reaches gunicorn past its proxy would send them."""

from __future__ import annotations

import random
import string
import time

import pytest

from tests.helpers import assert_error, call
from tests.servers import TOKEN, Gunicorn

JSON_TOKEN = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@pytest.fixture
def start():
    """Start a gunicorn behind (as it believes) one trusted proxy, with these failed-login limits."""
    started = []

    def serve(per_address: str, per_48: str | None = None) -> Gunicorn:
        env = {"PLANTS_AUTH_FAILURE_LIMIT": per_address, "PLANTS_TRUSTED_PROXIES": "1"}
        if per_48 is not None:
            env["PLANTS_AUTH_FAILURE_LIMIT_PER_48"] = per_48
        started.append(Gunicorn(env=env))
        return started[-1]

    yield serve
    for gunicorn in started:
        gunicorn.stop()


def refused_from(server: Gunicorn, forwarded: str) -> tuple[int, dict, bytes]:
    headers = {"Authorization": "Bearer guess", "X-Forwarded-For": forwarded}
    status, answer_headers, body = call(server.connection(), "GET", "/plants", None, headers)
    return status, dict(answer_headers), body


def logged_addresses(server: Gunicorn, count: int) -> list[str]:
    """The client addresses of the first `count` access lines of `GET /plants`, once logged."""
    deadline = time.monotonic() + 10
    while len(lines := [line for line in server.output().splitlines() if "GET /plants " in line]) < count:
        assert time.monotonic() < deadline, lines
        time.sleep(0.05)
    return [line.split("gunicorn.access: ")[1].split(" ")[0] for line in lines]


def test_forwarded_values_that_are_no_address_count_as_the_peers(start):
    server = start("10/hour")
    junk = ["".join(random.choices(string.ascii_letters + string.digits, k=8000)) for _ in range(13)]
    answers = [refused_from(server, value) for value in junk]
    # All of them the peer's (127.0.0.1) failures: ten 401s, then 429 with Retry-After.
    assert [status for status, _, _ in answers] == [401] * 10 + [429] * 3
    record = assert_error(*answers[-1], 429)
    assert int(answers[-1][1]["Retry-After"]) >= 1
    assert "address" in record["message"]
    assert refused_from(server, "127.0.0.1")[0] == 429  # the peer, named
    # A forwarded value that is an address is the client's: another client is not held back.
    assert refused_from(server, "198.51.100.20")[0] == 401
    assert refused_from(server, "[2001:db8::20]")[0] == 401
    # Nor does the junk reach the access log: the lines carry the peer's address.
    assert junk[0][:64] not in server.output()


def test_forty_64s_of_one_48_meet_the_48s_budget(start):
    """Each /64 is one client with its own budget (5/hour here), and the /48 around them one
    site with a larger one: four times as large unless PLANTS_AUTH_FAILURE_LIMIT_PER_48 says."""
    gunicorn = start("5/hour")
    answers = [refused_from(gunicorn, f"2001:db8:7:{n:x}::1") for n in range(40)]
    assert [status for status, _, _ in answers] == [401] * 20 + [429] * 20
    record = assert_error(*answers[-1], 429)
    assert "/48" in record["message"]
    assert int(answers[-1][1]["Retry-After"]) >= 1
    # Another /48 is another site; an IPv4 client has no /48.
    assert refused_from(gunicorn, "2001:db8:8::1")[0] == 401
    assert refused_from(gunicorn, "198.51.100.30")[0] == 401


def test_the_48s_budget_is_a_setting(start):
    gunicorn = start("5/hour", per_48="7/hour")
    statuses = [refused_from(gunicorn, f"2001:db8:9:{n:x}::1")[0] for n in range(9)]
    assert statuses == [401] * 7 + [429] * 2


def test_a_forwarded_zone_id_is_dropped_not_logged(start):
    """`fe80::5%<zone>` parses as an address whatever the zone's text: the zone goes, the address
    counts (one budget whatever the zone), and the access line carries no text of the client's."""
    server = start("3/hour")
    zones = ["z0 evil", "z1", "z2", "\xe9 spoof"]
    assert [refused_from(server, f"fe80::5%{zone}")[0] for zone in zones] == [401, 401, 401, 429]
    lines = [line for line in server.output().splitlines() if "gunicorn.access" in line]
    assert sum(" fe80::5 http " in line for line in lines) == 4
    assert not [line for line in lines if "evil" in line or "spoof" in line or "%z" in line]


def test_an_ipv4_client_of_a_dual_stack_proxy_is_logged_as_the_proxy_writes_it(start):
    """A dual-stack nginx forwards an IPv4 client as `::ffff:198.51.100.7`: the access line names it
    so (a search for the IPv4 address finds it), and it counts as that IPv4 client."""
    server = start("2/hour")
    forwarded = ("::ffff:198.51.100.7", "198.51.100.7", "::FFFF:c633:6407")
    assert [refused_from(server, value)[0] for value in forwarded] == [401, 401, 429]
    assert logged_addresses(server, 3) == [
        "::ffff:198.51.100.7",
        "198.51.100.7",
        "::ffff:198.51.100.7",
    ]


def test_a_forwarded_address_with_its_port_is_that_client(start):
    """Azure Application Gateway and other load balancers forward `address:port` (an IPv6 one in
    brackets): each client keeps its own failed-login budget whatever its port, another client is
    not held back by it, and the access line names the address alone. A port out of range is no
    address: the peer's."""
    server = start("2/hour")
    first = ["203.0.113.7:51234", "203.0.113.7:51235", "203.0.113.7:60000"]
    assert [refused_from(server, value)[0] for value in first] == [401, 401, 429]
    assert refused_from(server, "203.0.113.8:51234")[0] == 401  # another client
    ipv6 = ["[2001:db8:5::1]:443", "[2001:db8:5::1]:444", "2001:db8:5::1"]
    assert [refused_from(server, value)[0] for value in ipv6] == [401, 401, 429]
    assert [refused_from(server, "203.0.113.9:70000")[0] for _ in range(3)] == [401, 401, 429]
    assert refused_from(server, "127.0.0.1")[0] == 429  # the junk was the peer's
    assert logged_addresses(server, 11) == [
        *["203.0.113.7"] * 3,
        "203.0.113.8",
        *["2001:db8:5::1"] * 3,
        *["127.0.0.1"] * 4,
    ]


def test_a_clients_lone_quote_does_not_make_it_the_proxy(start):
    """A client that sends `X-Forwarded-For: "6.6.6.6` past an appending proxy: Werkzeug's list
    parser read the quote as a string swallowing the proxy's entry, found none, and the client
    counted and was logged as the proxy (its failures on the proxy's budget, its address lost)."""
    server = start("2/hour")
    forwarded = ['"6.6.6.6, 198.51.100.40', '6.6.6.6", 198.51.100.40', '", 198.51.100.40']
    assert [refused_from(server, value)[0] for value in forwarded] == [401, 401, 429]
    assert refused_from(server, "127.0.0.1")[0] == 401  # the peer's budget untouched
    assert logged_addresses(server, 4) == [*["198.51.100.40"] * 3, "127.0.0.1"]


def test_a_forwarded_prefix_that_is_no_path_leaves_the_urls_on_the_peers(start):
    """`X-Forwarded-Prefix` from a trusted proxy moves the URLs handed out only when it is a path a
    URL can start with: a bad percent-encoding (`/%zz`, no URL) or a `.` or `..` segment (which a
    client resolves out of the prefix) leaves them on the peer's."""
    server = start("10/hour")
    base = f"http://127.0.0.1:{server.port}"
    prefixes = {"/%zz": "", "/store%2": "", "/store/..": "", "/store/%2E/x": "", "/st%6Fre": "/st%6Fre"}
    for number, (prefix, kept) in enumerate(prefixes.items(), start=1):
        headers = {**JSON_TOKEN, "X-Forwarded-Prefix": prefix}
        status, answer, _ = call(server.connection(), "PUT", f"/plants/{number}", {"name": "Fern"}, headers)
        assert (status, dict(answer)["Location"]) == (201, f"{base}{kept}/plants/{number}"), prefix


@pytest.mark.parametrize(
    ("trusted", "sent", "base"),
    [
        ("0", {"Host": "xn--e1afmkfd.example:8080"}, "http://xn--e1afmkfd.example:8080"),
        ("0", {"Host": "xn--zz.example"}, "http://xn--zz.example"),  # no IDNA: it raised as decoded
        (
            "1",
            {"X-Forwarded-Host": "xn--e1afmkfd.example", "X-Forwarded-Prefix": "/%E2%82%AC"},
            "http://xn--e1afmkfd.example/%E2%82%AC",
        ),
        ("1", {"X-Forwarded-Prefix": "/caf%C3%A9/st%6Fre"}, "http://127.0.0.1:{port}/caf%C3%A9/st%6Fre"),
    ],
    ids=["idna-host", "no-idna-host", "forwarded-host-and-prefix", "forwarded-prefix"],
)
def test_a_pages_link_names_the_host_and_prefix_as_sent(trusted, sent, base):
    """Werkzeug writes a request's URL as an IRI (its IDNA host and percent-encoded UTF-8 decoded),
    and a page's `Link` came out with `пример.example` or `/€` in a header, or raised on a label
    that is no IDNA: a 500 with a traceback, whether from a client's `Host` or a trusted proxy."""
    server = Gunicorn(env={"PLANTS_TRUSTED_PROXIES": trusted})
    try:
        for number in (1, 2):
            assert (
                call(server.connection(), "PUT", f"/plants/{number}", {"name": "Fern"}, JSON_TOKEN)[0] == 201
            )
        status, headers, _ = call(server.connection(), "GET", "/plants?limit=1", None, {**JSON_TOKEN, **sent})
        assert status == 200
        assert headers["Link"].startswith(f"<{base.format(port=server.port)}/plants?limit=1&after=")
        assert "Traceback" not in server.output()
    finally:
        server.stop()


def test_a_clients_lone_quote_does_not_drop_the_proxys_url(start):
    """A client's `"` in `X-Forwarded-Proto`, `-Host`, `-Port` or `-Prefix`, before the entry an
    appending trusted proxy added: the header counted as not sent, and the `Location` handed out
    named the peer's scheme, host, port or prefix instead of the proxy's."""
    server = start("10/hour")
    peer = f"127.0.0.1:{server.port}"
    cases = {
        "X-Forwarded-Proto": ('", https', f"https://{peer}"),
        "X-Forwarded-Host": ('", shop.example', "http://shop.example"),
        "X-Forwarded-Port": ('", 8443', "http://127.0.0.1:8443"),
        "X-Forwarded-Prefix": ('", /store', f"http://{peer}/store"),
    }
    for number, (name, (value, base)) in enumerate(cases.items(), start=1):
        headers = {**JSON_TOKEN, name: value}
        status, answer, _ = call(server.connection(), "PUT", f"/plants/{number}", {"name": "Fern"}, headers)
        assert (status, dict(answer)["Location"]) == (201, f"{base}/plants/{number}"), name
