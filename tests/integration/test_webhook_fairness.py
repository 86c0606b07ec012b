"""Slow receivers cannot hold the deliverer (app/webhooks/lanes.py), through a real gunicorn:
receivers that answer 2xx but take their time share a bounded lane, and an honest endpoint's
events still go out meanwhile. They are still delivered too, in order, each its turn.

The slow receivers here hold each answer until the test opens their gate (under the attempts'
timeout: a 2xx, never a timeout), so what the tests assert is an order, not a speed: every event
of the honest endpoint arrives while the slow ones still hold theirs. Without the lanes, the
honest endpoint would wait behind them, and its events would arrive only after they answered.

`python -m bench slow-receivers` runs the full size (8 and 32 slow receivers) and measures."""

from __future__ import annotations

import json
import threading
import time

import pytest

from app.webhooks.drain import BATCH
from app.webhooks.lanes import SLOW, SLOW_S
from tests.receiver import Answer, Delivery, Receiver
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
#: The attempts' timeout: the gates below hold an answer for at most half of it.
TIMEOUT_S = 20.0
EVENTS = 10
#: The bound on each wait: a hang guard only.
WAIT_S = 30.0


@pytest.fixture
def server():
    server = Gunicorn(
        env={"PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1", "PLANTS_WEBHOOKS_TIMEOUT": str(TIMEOUT_S)}
    )
    yield server
    server.stop()


def call(server: Gunicorn, method: str, path: str, body: dict | None = None) -> dict:
    connection = server.connection()
    try:
        connection.request(method, path, body=None if body is None else json.dumps(body), headers=AUTH)
        response = connection.getresponse()
        answer = json.loads(response.read())
        assert response.status in (200, 201), answer
        return answer
    finally:
        connection.close()


def write(server: Gunicorn, plant_id: int) -> None:
    call(server, "POST", "/plants", {"id": plant_id, "name": f"Fern {plant_id}"})


def ids(deliveries: list[Delivery]) -> list[int]:
    return [delivery.event["data"]["id"] for delivery in deliveries]


class Gate:
    """Slow receivers' answers, each held until `open` (at most half the timeout: it is still a
    2xx), then 204 at once; when each was given (monotonic), in `answered`."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self.answered: list[float] = []

    def answer(self, delivery: Delivery, number: int) -> Answer:
        self._open.wait(TIMEOUT_S / 2)
        self.answered.append(time.monotonic())
        return 204, {}, 0.0

    def open(self) -> None:
        self._open.set()

    def receivers(self, count: int) -> list[Receiver]:
        return [Receiver(self.answer) for _ in range(count)]


def registered(server: Gunicorn, receivers: list[Receiver]) -> list[str]:
    """Each receiver registered, in order (the slow ones first: without lanes, they would take
    every thread first): the endpoints' ids."""
    return [call(server, "POST", "/webhooks", {"url": receiver.url})["id"] for receiver in receivers]


def assert_all_delivered_in_order(receivers: list[Receiver]) -> None:
    for receiver in receivers:
        assert ids(receiver.wait_for(EVENTS, timeout=WAIT_S))[:EVENTS] == list(range(EVENTS))


@pytest.mark.parametrize("slow", [8, 24])
def test_an_honest_endpoint_is_delivered_while_slow_receivers_hold_their_answers(server, slow):
    gate, honest = Gate(), Receiver()
    slow_ones = gate.receivers(slow)
    try:
        registered(server, [*slow_ones, honest])
        for plant_id in range(EVENTS):
            write(server, plant_id)
            honest.wait_for(plant_id + 1, timeout=WAIT_S)
        assert ids(honest.deliveries) == list(range(EVENTS))
        # All of it before any slow receiver answered: none of them held the honest one back.
        assert not [at for at in gate.answered if at <= honest.deliveries[-1].at]
        assert all(len(receiver.deliveries) <= 1 for receiver in slow_ones)
        # The slow receivers get their events too, in order, once they answer.
        gate.open()
        assert_all_delivered_in_order(slow_ones)
    finally:
        gate.open()
        for receiver in [*slow_ones, honest]:
            receiver.stop()


def test_an_honest_endpoint_slow_once_is_not_left_behind_the_slow_ones(server):
    """Its third answer is slow (a pause, a cold start): it shares the slow lane for a while, and
    its next turn comes before the turns of receivers whose slow answers ended after its own."""
    honest = Receiver(lambda delivery, number: (204, {}, 1.5 * SLOW_S if number == 3 else 0.0))
    gate = Gate()
    slow_ones = gate.receivers(24)
    try:
        honest_id = registered(server, [*slow_ones, honest])[-1]
        for plant_id in range(3):
            write(server, plant_id)
            honest.wait_for(plant_id + 1, timeout=WAIT_S)
        deadline = time.monotonic() + WAIT_S
        # Its slow attempt recorded: it ended before any slow receiver's answer.
        while len(call(server, "GET", f"/webhooks/{honest_id}/attempts")["attempts"]) < 3:
            assert time.monotonic() < deadline, "the honest endpoint's third attempt was not recorded"
            time.sleep(0.05)
        for plant_id in range(3, EVENTS):
            write(server, plant_id)
        gate.open()
        fourth = honest.wait_for(4, timeout=WAIT_S)[3]
        # It takes the slow lane's first free thread: at most the others that started beside it
        # (the lane holds SLOW) may have had a second delivery first, not a round of all 24.
        ahead = [r for r in slow_ones if len([d for d in r.deliveries if d.at < fourth.at]) >= 2]
        assert len(ahead) < SLOW, [len(r.deliveries) for r in slow_ones]
        assert_all_delivered_in_order([honest, *slow_ones])
    finally:
        gate.open()
        for receiver in [*slow_ones, honest]:
            receiver.stop()


def test_receivers_just_under_the_hold_with_a_backlog_do_not_keep_the_fast_lane():
    """Eight receivers answering in 0.1 s, under the hold (0.25 s at a 4 s timeout), are fast. With
    a backlog of more than a batch, a drain of theirs lasting until it read less than a batch would
    send them a whole batch (BATCH x 0.1 s) while the honest endpoint's events wait behind it. A
    drain ends after its turn (1 s) instead: the honest endpoint has all its events while each of
    the eight is still short of one batch."""
    server = Gunicorn(env={"PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1", "PLANTS_WEBHOOKS_TIMEOUT": "4"})
    steady = [Receiver(lambda delivery, number: (204, {}, 0.1)) for _ in range(8)]
    honest = Receiver()
    backlog = BATCH + 50
    try:
        endpoint_ids = registered(server, [*steady, honest])
        write(server, 0)  # one attempt each: the lanes know them all as fast
        for receiver in [*steady, honest]:
            receiver.wait_for(1, timeout=WAIT_S)
        # The backlog, made while they are disabled (each holds its position): enabled again,
        # the steady ones first, each has it all at once.
        for endpoint_id in endpoint_ids:
            call(server, "PATCH", f"/webhooks/{endpoint_id}", {"status": "disabled"})
        for plant_id in range(1, backlog + 1):
            write(server, plant_id)
        for endpoint_id in endpoint_ids:
            call(server, "PATCH", f"/webhooks/{endpoint_id}", {"status": "enabled"})
        last = honest.wait_for(backlog + 1, timeout=WAIT_S)[-1]
        assert last.event["data"]["id"] == backlog
        sent = [len([d for d in r.deliveries if d.at <= last.at]) - 1 for r in steady]
        assert max(sent) < BATCH, sent
        assert_all_delivered_in_order(steady)
    finally:
        for receiver in [*steady, honest]:
            receiver.stop()
        server.stop()
