"""app/webhooks/lookups.py on its own, with a resolver of the test's that answers when told: a
lookup goes on in the background while its request is answered, one per client and a bounded
number in all, and its outcome is kept for the retry."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from app.webhooks.lookups import Lookups, NotResolvedInTime

WAIT_S = 0.05
FOUND = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.10", 443))]


class Resolver:
    """Answers a `slow` name only once released; any other at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked: list[str] = []

    def __call__(self, host: str, port: int, **kwargs):
        self.asked.append(host)
        if host.startswith("slow"):
            assert self.release.wait(10)
        if host.startswith("slow-missing"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return FOUND


@pytest.fixture
def resolver():
    resolver = Resolver()
    yield resolver
    resolver.release.set()


def wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_slow_lookup_answers_at_once_and_the_retry_finds_it(resolver):
    lookups = Lookups(resolver)
    alice, bob = lookups.for_owner(b"alice", WAIT_S), lookups.for_owner(b"bob", WAIT_S)
    with pytest.raises(NotResolvedInTime) as raised:
        alice("slow.example", 443)
    assert raised.value.busy is False
    # The same host again, by anyone: still under way, no second lookup, no wait.
    for client in (alice, bob):
        with pytest.raises(NotResolvedInTime) as raised:
            client("slow.example", 443)
        assert raised.value.busy is False
    # Alice may not start another meanwhile; Bob may, and a quick name answers him at once.
    with pytest.raises(NotResolvedInTime) as raised:
        alice("quick.example", 443)
    assert raised.value.busy is True
    assert bob("quick.example", 443) == FOUND
    assert resolver.asked == ["slow.example", "quick.example"]

    resolver.release.set()
    wait_for(lambda: _answers(alice, "slow.example"))
    assert bob("slow.example", 443) == FOUND  # kept: no lookup again
    assert alice("quick.example", 443) == FOUND  # Alice's turn came back
    assert resolver.asked == ["slow.example", "quick.example"]


def test_a_failed_lookup_is_kept_as_a_failure(resolver):
    lookups = Lookups(resolver)
    alice = lookups.for_owner(b"alice", WAIT_S)
    with pytest.raises(NotResolvedInTime):
        alice("slow-missing.example", 80)
    resolver.release.set()
    wait_for(lambda: resolver.asked and not lookups.under_way)
    for _ in range(2):  # a new exception each time, as a lookup of its own would raise
        with pytest.raises(socket.gaierror):
            alice("slow-missing.example", 80)
    assert resolver.asked == ["slow-missing.example"]


def test_lookups_at_once_and_names_kept_are_bounded(resolver):
    lookups = Lookups(resolver, at_once=2, cache_size=3)
    for owner in (b"a", b"b"):
        with pytest.raises(NotResolvedInTime):
            lookups.for_owner(owner, WAIT_S)(f"slow-{owner.decode()}.example", 80)
    with pytest.raises(NotResolvedInTime) as raised:
        lookups.for_owner(b"c", WAIT_S)("slow-c.example", 80)
    assert raised.value.busy is True  # two under way: no third thread
    resolver.release.set()
    wait_for(lambda: not lookups.under_way)
    for n in range(5):
        assert lookups.for_owner(b"c", WAIT_S)(f"name-{n}.example", 80) == FOUND
    assert lookups.names_kept == 3


def _answers(resolve, host: str) -> bool:
    try:
        return resolve(host, 443) == FOUND
    except NotResolvedInTime:
        return False
