"""app/http/client_address.py: which forwarded values are addresses, and the middleware's choice."""

from __future__ import annotations

import logging

import pytest
from werkzeug.middleware.proxy_fix import ProxyFix

from app.http.client_address import ForwardedAddress, parsed_address
from app.telemetry.request_ids import RequestIds


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ("198.51.100.7", "198.51.100.7"),
        ("2001:DB8::0:1", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("::ffff:198.51.100.7", "::ffff:198.51.100.7"),  # as a dual-stack proxy logs it
        ("[::FFFF:c633:6407]", "::ffff:198.51.100.7"),
        ("::ffff:198.51.100.7%eth0", "::ffff:198.51.100.7"),
        # A client's port, as Azure Application Gateway and other load balancers add it: dropped.
        ("198.51.100.7:5050", "198.51.100.7"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("[::ffff:198.51.100.7]:1", "::ffff:198.51.100.7"),
        ("[fe80::1%eth0]:65535", "fe80::1"),
        ("2001:db8::1:443", "2001:db8::1:443"),  # with no brackets, the last group is the address's
        # A port that is none, or a malformed entry, makes no address.
        ("198.51.100.7:0", None),
        ("198.51.100.7:65536", None),
        ("198.51.100.7:123456", None),
        ("198.51.100.7:", None),
        ("198.51.100.7:http", None),
        ("198.51.100.7:80:80", None),
        ("[2001:db8::1]:", None),
        ("[2001:db8::1]443", None),
        ("2001:db8::1]:443", None),
        ("[host.example]:443", None),
        ("host.example:443", None),
        ("[198.51.100.7:80]", None),
        ("unknown", None),
        ("", None),
        ("1" * 9000, None),
        ("[198.51.100.7", None),
    ],
)
def test_a_forwarded_value_is_kept_only_as_an_address(value, address):
    assert parsed_address(value) == address


def remote_addr_seen(forwarded: str | None, peer: str = "127.0.0.1", proxies: int = 1) -> str:
    seen = {}

    def app(environ, start_response):
        seen["address"] = environ["REMOTE_ADDR"]
        start_response("204 No Content", [])
        return []

    environ = {"REMOTE_ADDR": peer, "wsgi.url_scheme": "http", "HTTP_HOST": "x"}
    if forwarded is not None:
        environ["HTTP_X_FORWARDED_FOR"] = forwarded
    ProxyFix(ForwardedAddress(app, proxies), x_for=proxies)(environ, lambda *_: None)
    return seen["address"]


def test_behind_proxyfix_the_peer_counts_unless_the_value_is_an_address():
    assert remote_addr_seen("198.51.100.7") == "198.51.100.7"
    assert remote_addr_seen("10.0.0.1, [2001:db8::5]") == "2001:db8::5"  # the one the proxy added
    assert remote_addr_seen("x" * 8000) == "127.0.0.1"
    assert remote_addr_seen("198.51.100.7, evil") == "127.0.0.1"
    assert remote_addr_seen("10.0.0.1:80, 198.51.100.7:51234") == "198.51.100.7"
    assert remote_addr_seen("[2001:db8::5]:443") == "2001:db8::5"
    assert remote_addr_seen("198.51.100.7:99999") == "127.0.0.1"
    # A client's lone quote, which Werkzeug's list parser reads as swallowing the proxy's entry:
    # the entry the proxy added still counts, never the proxy itself.
    assert remote_addr_seen('"6.6.6.6, 198.51.100.10') == "198.51.100.10"
    assert remote_addr_seen('9.9.9.9, ", 198.51.100.11') == "198.51.100.11"
    assert remote_addr_seen('"a, b", 198.51.100.12, 10.0.0.1', proxies=2) == "198.51.100.12"
    assert remote_addr_seen("198.51.100.13", proxies=2) == "127.0.0.1"  # fewer entries than proxies
    assert remote_addr_seen(None) == "127.0.0.1"


@pytest.mark.parametrize(
    ("forwarded", "warned"), [('"6.6.6.6, 198.51.100.7, 10.0.0.1', False), ("10.0.0.1", True)]
)
def test_the_proxies_warning_counts_entries_as_the_address_is_found(caplog, forwarded, warned):
    """Two trusted proxies and three entries (a client's lone quote among them) are enough: the
    warning that the header names fewer addresses than proxies counted none there."""
    middleware = RequestIds(lambda environ, start_response: [], trusted_proxies=2)
    environ = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": forwarded}
    with caplog.at_level(logging.WARNING, logger="app.telemetry.request_ids"):
        middleware(environ, lambda *_: None)
    assert any("naming" in record.getMessage() for record in caplog.records) is warned


def url_seen(headers: dict[str, str], proxies: int = 1) -> tuple[str, str, str, str, str]:
    """The scheme, Host, SERVER_NAME, SERVER_PORT and SCRIPT_NAME the app sees behind ProxyFix."""
    seen = {}

    def app(environ, start_response):
        keys = ("wsgi.url_scheme", "HTTP_HOST", "SERVER_NAME", "SERVER_PORT", "SCRIPT_NAME")
        seen["url"] = tuple(environ[key] for key in keys)
        start_response("204 No Content", [])
        return []

    environ = {
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "HTTP_HOST": "peer.example:8000",
        "SERVER_NAME": "peer.example",
        "SERVER_PORT": "8000",
        "SCRIPT_NAME": "",
        **{"HTTP_X_FORWARDED_" + name.upper(): value for name, value in headers.items()},
    }
    fix = {f"x_{name}": proxies for name in ("for", "proto", "host", "port", "prefix")}
    ProxyFix(ForwardedAddress(app, proxies), **fix)(environ, lambda *_: None)
    return seen["url"]


PEERS = ("http", "peer.example:8000", "peer.example", "8000", "")


@pytest.mark.parametrize(
    ("headers", "proxies", "url"),
    [
        ({"proto": '", https'}, 1, ("https", *PEERS[1:])),
        ({"proto": 'https", https'}, 1, ("https", *PEERS[1:])),
        ({"host": '", shop.example'}, 1, ("http", "shop.example", "shop.example", "8000", "")),
        ({"host": '"x, shop.example:8443'}, 1, ("http", "shop.example:8443", "shop.example", "8443", "")),
        ({"port": '", 8443'}, 1, ("http", "peer.example:8443", "peer.example", "8443", "")),
        ({"prefix": '", /store'}, 1, (*PEERS[:4], "/store")),
        ({"prefix": '"/x, /store, /edge'}, 2, (*PEERS[:4], "/store")),
        # Every header at once, one of them quoted: the others as ProxyFix read them.
        (
            {"proto": "https", "host": "shop.example", "port": '", 443', "prefix": "/store"},
            1,
            ("https", "shop.example:443", "shop.example", "443", "/store"),
        ),
        # The entry the proxy added is no value (a quote of its own): the peer's, as for junk.
        ({"proto": 'https, "'}, 1, PEERS),
        ({"host": '", shop.example'}, 2, PEERS),  # fewer entries than proxies
        # No quote: ProxyFix's reading, unchanged.
        (
            {"proto": "http, https", "host": "a.example, shop.example"},
            1,
            ("https", "shop.example", "shop.example", "8000", ""),
        ),
    ],
)
def test_a_clients_lone_quote_leaves_the_proxys_scheme_host_port_and_prefix(headers, proxies, url):
    """A client's lone `"` in `X-Forwarded-Proto`, `-Host`, `-Port` or `-Prefix`, before the entry
    a trusted proxy appended: Werkzeug's list parser read it as a string swallowing that entry, found
    none, and the header counted as not sent, so the URLs handed out named the peer's scheme, host,
    port or prefix."""
    assert url_seen(headers, proxies) == url
