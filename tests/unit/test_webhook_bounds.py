"""What one deliverer holds is bounded: the lanes of its threads (app/webhooks/lanes.py) and its
idle kept-alive connections (app/webhooks/keepalive.py). The end-to-end behaviour is
tests/integration/test_webhook_fairness.py's."""

from __future__ import annotations

import http.client
import time

from app.webhooks.keepalive import KEPT_MAX, KeptAlive, Slot
from app.webhooks.lanes import FAST, RECOVER, SLOW, THREADS, Lanes

#: A timeout whose slow threshold is a quarter of it: 0.05 s.
TIMEOUT = 0.2


def attempt(lanes: Lanes, endpoint_id: str, seconds: float = 0.0) -> bool:
    lanes.begin(endpoint_id)
    if seconds:
        time.sleep(seconds)
    return lanes.end(endpoint_id)


def test_an_attempt_past_the_threshold_makes_its_endpoint_slow_until_it_recovers():
    lanes = Lanes(TIMEOUT)
    assert lanes.slow_s == TIMEOUT / 4
    assert not lanes.slow("new")
    assert not attempt(lanes, "a")
    assert attempt(lanes, "a", lanes.slow_s)
    assert lanes.slow("a")
    for _ in range(RECOVER - 1):
        assert not attempt(lanes, "a")
        assert lanes.slow("a")
    assert not attempt(lanes, "a")
    assert not lanes.slow("a")


def test_the_threshold_is_at_most_a_second_whatever_the_timeout():
    assert Lanes(15.0).slow_s == 1.0


def test_slow_endpoints_share_their_lane_and_the_fast_lane_stays_open():
    lanes = Lanes(TIMEOUT)
    slow = [f"slow{n}" for n in range(SLOW + 4)]
    for endpoint_id in slow:
        attempt(lanes, endpoint_id, lanes.slow_s)
    attempt(lanes, "honest")
    busy = slow[:SLOW]
    assert not lanes.admits(slow[SLOW], busy)
    assert lanes.admits("honest", busy)
    assert lanes.admits("never-sent", busy)


def in_flight(lanes: Lanes, count: int) -> list[str]:
    """`count` endpoints that were fast, each with an attempt going out now."""
    busy = [f"sleeper{n}" for n in range(count)]
    for endpoint_id in busy:
        attempt(lanes, endpoint_id)
        lanes.begin(endpoint_id)
    return busy


def test_a_drain_that_turns_slow_in_flight_leaves_the_fast_lane_then_fills_the_slow_one():
    lanes = Lanes(TIMEOUT)
    attempt(lanes, "honest")
    attempt(lanes, "slow", lanes.slow_s)
    busy = in_flight(lanes, FAST)
    assert not lanes.admits("honest", busy)
    assert lanes.admits("slow", busy)
    time.sleep(lanes.hold_s)
    assert lanes.admits("honest", busy)
    time.sleep(lanes.slow_s - lanes.hold_s)
    assert lanes.admits("honest", busy)
    assert not lanes.admits("slow", busy)


def test_unknown_endpoints_start_beside_the_lanes_leaving_the_fast_lane_its_threads():
    lanes = Lanes(TIMEOUT)
    busy = [f"new{n}" for n in range(THREADS - FAST)]
    for endpoint_id in busy:
        lanes.begin(endpoint_id)
    assert lanes.admits("new", busy[:-1])
    assert not lanes.admits("new", busy)
    attempt(lanes, "honest")
    assert lanes.admits("honest", busy)


def test_no_more_drains_than_threads_whatever_the_lanes_say():
    lanes = Lanes(TIMEOUT)
    attempt(lanes, "honest")
    busy = in_flight(lanes, THREADS)
    time.sleep(lanes.slow_s)
    assert not lanes.admits("honest", busy)
    assert lanes.admits("honest", busy[:-1])


def test_the_order_is_fast_then_unknown_then_slow_each_longest_waiting_first():
    lanes = Lanes(TIMEOUT)
    for endpoint_id in ("fast1", "fast2"):
        attempt(lanes, endpoint_id)
    for endpoint_id in ("slow1", "slow2"):
        attempt(lanes, endpoint_id, lanes.slow_s)
    lanes.started("fast1")
    lanes.started("slow1")
    order = lanes.order(["slow1", "new", "slow2", "fast1", "fast2"])
    assert order == ["fast2", "fast1", "new", "slow2", "slow1"]


def test_a_slow_endpoint_that_took_less_comes_back_sooner():
    lanes = Lanes(TIMEOUT)
    attempt(lanes, "long", 4 * lanes.slow_s)
    attempt(lanes, "short", lanes.slow_s)
    lanes.started("long")
    lanes.started("short")
    assert lanes.order(["long", "short"]) == ["short", "long"]


def test_deleted_endpoints_are_forgotten():
    lanes = Lanes(TIMEOUT)
    attempt(lanes, "gone", lanes.slow_s)
    lanes.started("gone")
    lanes.keep_only({"kept"})
    assert not lanes.slow("gone")
    assert lanes.order(["gone", "kept"]) == ["gone", "kept"]


def test_at_most_kept_max_idle_connections_are_kept_the_longest_idle_closed_first():
    kept = KeptAlive()
    connections = []
    for number in range(KEPT_MAX + 3):
        slot = Slot()
        connection = http.client.HTTPConnection("127.0.0.1", 9)
        slot.connection, slot.idle_since = connection, float(number)
        connections.append(connection)
        kept.give_back(f"wh_{number}", slot)
    assert len(kept) == KEPT_MAX
    oldest, newest = kept.take("wh_0"), kept.take(f"wh_{KEPT_MAX + 2}")
    assert oldest is not None
    assert oldest.connection is None  # closed: a fresh slot
    assert newest is not None
    assert newest.connection is connections[-1]
    kept.close_all()
