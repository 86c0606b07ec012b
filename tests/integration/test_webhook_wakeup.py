"""The deliverer wakes on a change instead of polling: a write's delivery leaves at once, and an
idle deliverer with endpoints costs the store about one call a second (app/webhooks/deliverer.py).
On the memory store and a real Redis."""

from __future__ import annotations

import statistics
import time

import pytest
import redis

from tests.conftest import STORES, settings_for_store
from tests.integration.test_webhook_delivery import AUTH, deliverer_on_its_own, register
from tests.receiver import Receiver
from tests.servers import TOKEN, RedisServer


@pytest.fixture(params=STORES)
def store_settings(request):
    return settings_for_store(request, request.param)


def test_a_write_is_delivered_within_milliseconds_not_a_poll(make_app):
    client = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1").test_client()
    receiver = Receiver()
    try:
        register(client, receiver.url)
        time.sleep(0.3)  # the deliverer idle: nothing but a wake-up can make it look soon
        delays = []
        for plant_id in range(40):
            response = client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=AUTH)
            answered = time.monotonic()
            assert response.status_code == 200
            delivery = receiver.wait_for(plant_id + 1)[-1]
            delays.append(delivery.at - answered)
            time.sleep(0.05)
        delays.sort()
        # A poll every 2 s would show as a median of about a second.
        assert statistics.median(delays) < 0.05, delays
        assert delays[int(len(delays) * 0.9)] < 0.25, delays
    finally:
        receiver.stop()


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)
def test_an_idle_deliverer_with_ten_endpoints_makes_about_one_redis_call_a_second(make_app, tmp_path):
    # A Redis of its own: every command on it in the window is this deliverer's.
    redis_server = RedisServer(tmp_path)
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_STORE_URL=redis_server.unix_url)
    client = service.test_client()
    for _ in range(10):
        register(client, "http://127.0.0.1:9/hook")
    time.sleep(1.0)  # the look the registrations asked for, done
    admin = redis.Redis(unix_socket_path=str(redis_server.socket))
    try:
        admin.config_resetstat()
        time.sleep(6.0)
        stats = admin.info("commandstats")
    finally:
        admin.close()
        service.extensions["plants"].deliverer.stop()
        redis_server.stop()
    calls = sum(
        value["calls"]
        for name, value in stats.items()
        if name not in ("cmdstat_info", "cmdstat_config|resetstat")
    )
    # One look at the feed's position every 2 s (two commands), and no poll of the endpoints.
    assert calls <= 8, stats


def test_a_write_made_as_a_drain_ends_is_not_left_for_the_next_refresh(make_app):
    """The drain's last wake-up can reach the coordinator before the drain's future is done: the
    coordinator then sees the endpoint still busy and the feed already moved. The write must still
    go out at the next look, not at the 30 s refresh."""
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1")
    plants = service.extensions["plants"]
    deliverer, endpoints = plants.deliverer, plants.store.endpoints
    client = service.test_client()
    receiver = Receiver()
    release, drain = endpoints.release, deliverer.drains.drain
    written = []

    def release_after_a_write(endpoint_id, owner):
        if not written:  # event 2 lands after the drain read the feed, before it lets go
            written.append(plants.store.create(2, "Fern 2", None))
            plants.count_event(0)
        return release(endpoint_id, owner)

    def drain_that_ends_late(endpoint):
        drain(endpoint)
        time.sleep(0.3)  # the future is done only after the coordinator looked

    endpoints.release = release_after_a_write
    deliverer.drains.drain = drain_that_ends_late
    try:
        register(client, receiver.url)
        assert client.post("/plants", json={"id": 1, "name": "Fern 1"}, headers=AUTH).status_code == 200
        deliveries = receiver.wait_for(2, timeout=3.0)
        assert [delivery.event["data"]["id"] for delivery in deliveries] == [1, 2]
    finally:
        deliverer.stop()
        receiver.stop()


def _switches(thread) -> int:
    """The context switches of one thread of this process, as the kernel counts them."""
    with open(f"/proc/self/task/{thread.native_id}/status") as status:
        return sum(int(line.split()[1]) for line in status if "ctxt_switches:" in line)


def test_writes_do_not_wake_a_deliverer_without_endpoints(make_app):
    """With no endpoint a write has nothing to deliver: its thread sleeps through 300 creates
    (the look at the feed every 2 s aside), then an endpoint registered is sent the next write."""
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1")
    deliverer = service.extensions["plants"].deliverer
    client = service.test_client()
    receiver = Receiver()
    try:
        assert deliverer.start()
        time.sleep(0.3)  # its first look, done
        before = _switches(deliverer._thread)
        for plant_id in range(300):
            response = client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=AUTH)
            assert response.status_code == 200
        assert _switches(deliverer._thread) - before < 20
        register(client, receiver.url)
        assert client.post("/plants", json={"id": 1000, "name": "Fern"}, headers=AUTH).status_code == 200
        (delivery,) = receiver.wait_for(1, timeout=3.0)
        assert delivery.event["data"]["id"] == 1000
    finally:
        deliverer.stop()
        receiver.stop()


def delays_of_writes(writer, receiver: Receiver, plant_ids: range) -> list[float]:
    """Create each plant through `writer`, one at a time: the seconds from each answer to its
    delivery, the receiver holding one delivery per plant created before."""
    delays = []
    for plant_id in plant_ids:
        response = writer.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=AUTH)
        answered = time.monotonic()
        assert response.status_code == 200
        delivery = receiver.wait_for(plant_id + 1, timeout=5.0)[-1]
        assert delivery.event["data"]["id"] == plant_id
        delays.append(delivery.at - answered)
    return delays


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)
def test_another_processs_writes_reach_an_endpoint_at_once_not_at_the_next_poll(make_app):
    """The deliverer hears other processes' writes once it has an endpoint (the feed's listener
    starts then, not at the first write): a write made by another service on the same Redis is
    delivered about at once, not at the look every 2 s."""
    delivering = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1")
    writer = make_app(PLANTS_WEBHOOKS_DELIVER="false").test_client()
    receiver = Receiver()
    try:
        register(delivering.test_client(), receiver.url)
        time.sleep(0.5)  # its first look, done: the listener starts with the endpoint seen
        delays = delays_of_writes(writer, receiver, range(12))
        # A look every 2 s would show as a median of about a second.
        assert statistics.median(delays) < 0.5, delays
    finally:
        receiver.stop()


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)
def test_a_deliverer_on_its_own_hears_the_web_workers_writes_at_once(make_app, store_settings):
    """`python -m app.webhooks`, the web workers not delivering (docs/webhooks.md, "Where it
    runs"): every write is another process's, and reaches the endpoint about at once through the
    feed's listener, not at the deliverer's look every 2 s."""
    writer = make_app(PLANTS_WEBHOOKS_DELIVER="false", PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1").test_client()
    receiver = Receiver()
    deliverer = deliverer_on_its_own(
        {**store_settings, "PLANTS_API_TOKENS": TOKEN, "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1"}
    )
    try:
        register(writer, receiver.url)
        # The first write may wait for the deliverer's look, which finds the endpoint.
        assert writer.post("/plants", json={"id": 0, "name": "Fern"}, headers=AUTH).status_code == 200
        receiver.wait_for(1, timeout=20.0)
        delays = delays_of_writes(writer, receiver, range(1, 13))
        # A look every 2 s would show as a median of about a second.
        assert statistics.median(delays) < 0.5, delays
    finally:
        receiver.stop()
        deliverer.terminate()
        output, _ = deliverer.communicate(timeout=20)
    assert deliverer.returncode == 0, output
    assert "Traceback" not in output
