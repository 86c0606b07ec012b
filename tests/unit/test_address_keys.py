"""app/auth/address_keys.py: the client an address stands for, and the bound on those counted."""

from __future__ import annotations

import pytest

from app.auth.address_keys import OVERFLOW, AddressKeys, client_key, wide_key


@pytest.mark.parametrize(
    ("address", "client", "site"),
    [
        ("198.51.100.7", "198.51.100.7", None),
        ("::ffff:198.51.100.7", "198.51.100.7", None),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64", "2001:db8:1::/48"),
        ("2001:db8:1:ffff::1", "2001:db8:1:ffff::/64", "2001:db8:1::/48"),
        (None, "-", None),
        # With the client's port, as an embedding app's ProxyFix may hand it over: its client.
        ("198.51.100.7:51234", "198.51.100.7", None),
        ("[2001:db8:1:2::9]:443", "2001:db8:1:2::/64", "2001:db8:1::/48"),
    ],
)
def test_an_address_counts_as_its_client_and_an_ipv6_one_as_its_site_too(address, client, site):
    assert client_key(address) == client
    assert wide_key(address) == site


def test_what_is_no_address_is_a_short_key_of_its_own():
    long_junk = "x" * 8000
    assert client_key(long_junk).startswith("other:")
    assert len(client_key(long_junk)) < 40
    assert client_key(long_junk) != client_key("y" * 8000)
    assert wide_key(long_junk) is None
    # A port out of range makes no address: junk, not the address before it.
    assert client_key("198.51.100.7:0").startswith("other:")
    assert client_key("198.51.100.7:65536").startswith("other:")


def test_past_the_bound_newcomers_share_one_key_until_windows_end():
    keys = AddressKeys(2, window_s=10)
    assert [keys.key(name, now=0) for name in ("a", "b", "c", "d")] == ["a", "b", OVERFLOW, OVERFLOW]
    assert keys.key("a", now=5) == "a"  # still open: its own
    assert len(keys) == 2
    # Once the windows end, they are forgotten and newcomers get keys of their own.
    assert keys.key("c", now=10) == "c"
    assert keys.key("a", now=11) == "a"  # opened again
    assert keys.key("e", now=12) == OVERFLOW
    assert len(keys) == 2
