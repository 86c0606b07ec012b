"""Slow receivers cannot hold the deliverer (app/webhooks/lanes.py): receivers that answer 2xx just
under the timeout share a bounded lane, and an honest endpoint's events still go out at once,
through a real gunicorn. They are still delivered too, in order, each its turn.

`python -m bench slow-receivers` runs the full size (8 and 32 slow receivers) and measures."""

from __future__ import annotations

import json
import time

import pytest

from tests.receiver import Receiver
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
#: The attempts' timeout, and how long a slow receiver takes to answer 2xx: just under it.
TIMEOUT_S = 2.0
SLOW_ANSWER_S = 1.7
EVENTS = 10


@pytest.fixture
def server():
    server = Gunicorn(
        env={"PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1", "PLANTS_WEBHOOKS_TIMEOUT": str(TIMEOUT_S)}
    )
    yield server
    server.stop()


def call(server: Gunicorn, method: str, path: str, body: dict) -> dict:
    connection = server.connection()
    try:
        connection.request(method, path, body=json.dumps(body), headers=AUTH)
        response = connection.getresponse()
        answer = json.loads(response.read())
        assert response.status in (200, 201), answer
        return answer
    finally:
        connection.close()


def slow_receivers(count: int) -> list[Receiver]:
    return [Receiver(lambda delivery, number: (204, {}, SLOW_ANSWER_S)) for _ in range(count)]


def lateness(server: Gunicorn, slow: list[Receiver], honest: Receiver) -> list[float]:
    """Each event's time from its write to the honest receiver, beside the `slow` receivers
    (registered first: without lanes, they would take every thread first)."""
    for receiver in [*slow, honest]:
        call(server, "POST", "/webhooks", {"url": receiver.url})
    written = []
    for plant_id in range(EVENTS):
        written.append(time.monotonic())
        call(server, "POST", "/plants", {"id": plant_id, "name": f"Fern {plant_id}"})
        time.sleep(0.1)
    deliveries = honest.wait_for(EVENTS, timeout=15)
    # In the order written; behind the slow receivers' backlog the honest one would wait about
    # EVENTS x SLOW_ANSWER_S (17 s) for the last.
    assert [d.event["data"]["id"] for d in deliveries] == list(range(EVENTS))
    return [delivery.at - at for delivery, at in zip(deliveries, written, strict=True)]


@pytest.mark.parametrize("slow", [8, 24])
def test_an_honest_endpoint_is_delivered_at_once_beside_slow_receivers(server, slow):
    honest, slow_ones = Receiver(), slow_receivers(slow)
    try:
        late = lateness(server, slow_ones, honest)
        assert max(late) < 1.5 * TIMEOUT_S, late
        # The slow receivers get their events too, in order, each in its turn.
        time.sleep(2 * TIMEOUT_S)
        for receiver in slow_ones:
            ids = [d.event["data"]["id"] for d in receiver.deliveries]
            assert ids == list(range(len(ids))), ids
            assert ids, "a slow receiver never had its turn"
    finally:
        for receiver in [*slow_ones, honest]:
            receiver.stop()


def test_an_honest_endpoint_slow_once_is_not_left_behind_the_slow_ones(server):
    """Its third answer takes a third of the timeout (a pause, a cold start): it shares the slow
    lane for a while, and gets a turn before the receivers that take most of the timeout."""
    honest = Receiver(lambda delivery, number: (204, {}, TIMEOUT_S / 3 if number == 3 else 0.0))
    slow_ones = slow_receivers(24)
    try:
        late = lateness(server, slow_ones, honest)
        # Behind a round of the slow ones' turns (24 of 1.7 s, 8 at a time) it would wait 5 s.
        assert max(late) < 2 * TIMEOUT_S, late
    finally:
        for receiver in [*slow_ones, honest]:
            receiver.stop()
