"""A private key published in the JWKS is warned of once while the provider publishes it, and the
digests a worker keeps to know it has warned are the current document's only: a provider that
publishes a new private key at each refresh does not grow them for as long as the worker lives."""

from __future__ import annotations

import logging

import pytest

from app.auth.jwks import usable_keys

REFRESHES = 40


def _leaked(number: int) -> dict[str, str]:
    """A member with a private part (`d`): left out before it is loaded, so it need not be a key."""
    return {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": f"public-{number}",
        "d": f"private-{number}",
        "kid": f"k{number}",
    }


def _kids(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The kid each WARNING of a private key names, in order."""
    messages = [record.getMessage() for record in caplog.records]
    return [
        message.split("(kid ")[1].split(")")[0]
        for message in messages
        if "publishes a private key" in message
    ]


def test_a_new_private_key_at_every_refresh_is_warned_of_once_and_not_kept_after(caplog):
    warned: set[str] = set()
    with caplog.at_level(logging.WARNING, logger="app.auth.jwks"):
        for number in range(REFRESHES):
            for _ in range(2):  # each document read twice: one warning a key
                assert usable_keys({"keys": [_leaked(number)]}, warned) == []
    assert _kids(caplog) == [f"'k{number}'" for number in range(REFRESHES)]
    assert len(warned) == 1  # the last document's key, not one a refresh


def test_a_private_key_withdrawn_then_published_again_is_warned_of_again(caplog):
    warned: set[str] = set()
    with caplog.at_level(logging.WARNING, logger="app.auth.jwks"):
        usable_keys({"keys": [_leaked(1)]}, warned)
        usable_keys({"keys": [_leaked(1), _leaked(2)]}, warned)
        usable_keys({"keys": [_leaked(2)]}, warned)  # the provider withdrew k1
        usable_keys({"keys": [_leaked(1), _leaked(2)]}, warned)  # and published it again
    assert _kids(caplog) == ["'k1'", "'k2'", "'k1'"]
    assert "private-1" not in caplog.text
