"""The deliverer wakes on a change instead of polling (app/webhooks/deliverer.py): a write's
delivery goes out because the write woke it, not at its next look; an idle deliverer with endpoints
costs the store one look at the feed's position every IDLE_S. On the memory store and a real Redis.

The tests of the wake-up put the deliverer's own looks out of their reach (`looks_only_when_woken`:
IDLE_S and REFRESH_S longer than any test runs), so a delivery they see at all was woken: with the
wake-up broken, it never comes and the test fails at its wait's bound, however fast the machine."""

from __future__ import annotations

import threading
import time

import pytest
import redis

import app.webhooks.deliverer as deliverer_module
from app.store import CREATED_EVENT
from app.webhooks.deliverer import Deliverer
from tests.conftest import STORES, settings_for_store
from tests.integration.test_webhook_delivery import AUTH, deliverer_on_its_own, register, wait_until
from tests.receiver import Receiver
from tests.servers import TOKEN, RedisServer

#: Longer than any test here runs: a look that only the deliverer's timer would make never comes.
OUT_OF_REACH_S = 3600.0
#: The bound on each wait: a hang guard only, far below OUT_OF_REACH_S.
WAIT_S = 20.0


@pytest.fixture(params=STORES)
def store_settings(request):
    return settings_for_store(request, request.param)


@pytest.fixture
def looks_only_when_woken(monkeypatch):
    """The deliverers made from here on look at the store only when something wakes them (a
    write, a drain that ended, the feed's listener), or every POLL_S while a drain is in flight."""
    monkeypatch.setattr(deliverer_module, "IDLE_S", OUT_OF_REACH_S)
    monkeypatch.setattr(deliverer_module, "REFRESH_S", OUT_OF_REACH_S)


def settled(deliverer: Deliverer, since: float) -> None:
    """Until the deliverer has read the endpoints in a look begun after `since` (monotonic), and
    no drain is in flight: from then on, under `looks_only_when_woken`, only a wake-up makes it
    look at the store again (a drain's end looks too: it might have sent the next write)."""
    wait_until(
        lambda: (
            deliverer.schedule.refresh_at - deliverer_module.REFRESH_S >= since and not deliverer.drains.busy
        ),
        timeout=WAIT_S,
        what="the deliverer idle",
    )


def delivered_one_by_one(
    writer, receiver: Receiver, plant_ids: range, deliverer: Deliverer | None = None, since: float = 0.0
) -> None:
    """Create each plant through `writer` and wait for its delivery (`receiver` holds one
    delivery per plant created before); each once the `deliverer`, when it is in this process, is
    `settled` (the first time, `since` the endpoint was registered)."""
    for plant_id in plant_ids:
        if deliverer is not None:
            settled(deliverer, since)
        response = writer.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=AUTH)
        assert response.status_code == 200
        delivery = receiver.wait_for(plant_id + 1, timeout=WAIT_S)[-1]
        assert delivery.event["data"]["id"] == plant_id
        since = delivery.at  # the drain that sent it ends after this: the look that reaps it too


@pytest.mark.usefixtures("looks_only_when_woken")
def test_each_write_wakes_the_deliverer_it_does_not_wait_for_a_look(make_app):
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1")
    client = service.test_client()
    receiver = Receiver()
    try:
        registered = time.monotonic()
        register(client, receiver.url)
        delivered_one_by_one(client, receiver, range(20), service.extensions["plants"].deliverer, registered)
    finally:
        receiver.stop()


#: How long the idle deliverer's calls are counted: a few of its looks.
WINDOW_S = 3 * deliverer_module.IDLE_S


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)
def test_an_idle_deliverer_with_ten_endpoints_only_looks_at_the_feeds_position(make_app, tmp_path):
    """Idle, with ten endpoints, a deliverer reads none of them: every IDLE_S it asks for the
    feed's position alone (one script, two commands), whatever the number of endpoints."""
    # A Redis of its own: every command on it in the window is this deliverer's.
    redis_server = RedisServer(tmp_path)
    registrar = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1",
        PLANTS_WEBHOOKS_DELIVER="false",
        PLANTS_STORE_URL=redis_server.unix_url,
    ).test_client()
    for _ in range(10):
        register(registrar, "http://127.0.0.1:9/hook")
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_STORE_URL=redis_server.unix_url)
    plants = service.extensions["plants"]
    deliverer = plants.deliverer
    for thread in threading.enumerate():
        if thread.name == "plants-cursor-key":  # each app's one read as it starts, done
            thread.join(WAIT_S)
    admin = redis.Redis(unix_socket_path=str(redis_server.socket))
    try:
        # The feed's listener first (the deliverer starts it with its first endpoint): its start,
        # heard as a change, would else make the deliverer read the endpoints in the window.
        plants.feed_signal.listen()
        wait_until(
            lambda: plants.feed_signal.version > 0 and admin.info("clients")["blocked_clients"] > 0,
            timeout=WAIT_S,
            what="the listener",
        )
        started = time.monotonic()
        assert deliverer.start()
        settled(deliverer, started)  # its first look, which reads the ten endpoints, done
        admin.config_resetstat()
        time.sleep(WINDOW_S)  # the window counted: nothing to wait for, it is idle
        stats = admin.info("commandstats")
    finally:
        admin.close()
        deliverer.stop()
        redis_server.stop()
    calls = {
        name: value["calls"]
        for name, value in stats.items()
        # The test's own, and the listener's blocking read (one every BLOCK_MS while idle).
        if name not in ("cmdstat_info", "cmdstat_config|resetstat", "cmdstat_xread")
    }
    assert "cmdstat_hgetall" not in calls, calls  # no endpoint read
    # A look at the feed's position every IDLE_S (two commands: the script and its read).
    assert sum(calls.values()) <= 2 * (WINDOW_S / deliverer_module.IDLE_S + 1), calls


@pytest.mark.usefixtures("looks_only_when_woken")
def test_a_write_made_as_a_drain_ends_is_not_left_for_the_next_refresh(make_app):
    """The drain's last wake-up can reach the coordinator before the drain's future is done: the
    coordinator then sees the endpoint still busy and the feed already moved. The write must still
    go out at the next look (the one that finds the drain ended), not at the refresh."""
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
            plants.count_event(CREATED_EVENT, 2, (None,))
        return release(endpoint_id, owner)

    def drain_that_ends_late(endpoint):
        drain(endpoint)
        # The future is done only once the coordinator looked, the endpoint still busy, and saw
        # the feed where event 2 left it.
        wait_until(
            lambda: deliverer.schedule.seen_position == plants.store.events_now(),
            timeout=WAIT_S,
            what="the coordinator's look at the moved feed",
        )

    endpoints.release = release_after_a_write
    deliverer.drains.drain = drain_that_ends_late
    try:
        registered = time.monotonic()
        register(client, receiver.url)
        settled(deliverer, registered)
        assert client.post("/plants", json={"id": 1, "name": "Fern 1"}, headers=AUTH).status_code == 200
        deliveries = receiver.wait_for(2, timeout=WAIT_S)
        assert [delivery.event["data"]["id"] for delivery in deliveries] == [1, 2]
    finally:
        deliverer.stop()
        receiver.stop()


def _switches(thread) -> int:
    """The context switches of one thread of this process, as the kernel counts them."""
    with open(f"/proc/self/task/{thread.native_id}/status") as status:
        return sum(int(line.split()[1]) for line in status if "ctxt_switches:" in line)


@pytest.mark.usefixtures("looks_only_when_woken")
def test_writes_do_not_wake_a_deliverer_without_endpoints(make_app):
    """With no endpoint a write has nothing to deliver: its thread sleeps through 300 creates
    (its own looks out of reach, however long they take), then an endpoint registered is sent the
    next write."""
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1")
    deliverer = service.extensions["plants"].deliverer
    client = service.test_client()
    receiver = Receiver()
    try:
        assert deliverer.start()
        settled(deliverer, 0.0)  # its first look, done: it then sleeps until something wakes it
        before = _switches(deliverer._thread)
        for plant_id in range(300):
            response = client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=AUTH)
            assert response.status_code == 200
        assert _switches(deliverer._thread) - before < 20
        registered = time.monotonic()
        register(client, receiver.url)
        settled(deliverer, registered)
        assert client.post("/plants", json={"id": 1000, "name": "Fern"}, headers=AUTH).status_code == 200
        (delivery,) = receiver.wait_for(1, timeout=WAIT_S)
        assert delivery.event["data"]["id"] == 1000
    finally:
        deliverer.stop()
        receiver.stop()


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)
@pytest.mark.usefixtures("looks_only_when_woken")
def test_another_processs_writes_wake_the_deliverer_through_the_feeds_listener(make_app):
    """The deliverer hears other processes' writes once it has an endpoint (the feed's listener
    starts then, not at the first write): a write made by another service on the same Redis wakes
    it, though nothing in its own process wrote."""
    delivering = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1")
    writer = make_app(PLANTS_WEBHOOKS_DELIVER="false").test_client()
    receiver = Receiver()
    try:
        registered = time.monotonic()
        register(delivering.test_client(), receiver.url)
        delivered_one_by_one(
            writer, receiver, range(12), delivering.extensions["plants"].deliverer, registered
        )
    finally:
        receiver.stop()


#: `python -m app.webhooks`, its looks out of reach as under `looks_only_when_woken`.
ONLY_WHEN_WOKEN = (
    "-c",
    "import runpy, app.webhooks.deliverer as d;"
    f" d.IDLE_S = d.REFRESH_S = {OUT_OF_REACH_S};"
    " runpy.run_module('app.webhooks', run_name='__main__', alter_sys=True)",
)


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)
def test_a_deliverer_on_its_own_is_woken_by_the_web_workers_writes(make_app, store_settings, tmp_path):
    """`python -m app.webhooks`, the web workers not delivering (docs/webhooks.md, "Where it
    runs"): every write is another process's, and wakes the deliverer through the feed's
    listener, which starts once its first look found the endpoint."""
    # A Redis of its own: the only client blocked on it is the deliverer's listener.
    redis_server = RedisServer(tmp_path)
    settings = {
        **store_settings,
        "PLANTS_STORE_URL": redis_server.unix_url,
        "PLANTS_API_TOKENS": TOKEN,
        "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1",
    }
    writer = make_app(PLANTS_WEBHOOKS_DELIVER="false", **settings).test_client()
    receiver = Receiver()
    admin = redis.Redis(unix_socket_path=str(redis_server.socket))
    try:
        register(writer, receiver.url)
        deliverer = deliverer_on_its_own(settings, ONLY_WHEN_WOKEN)
        try:
            # Listening: its first look, which found the endpoint, is done, so the writes from
            # here on reach the endpoint only by waking it.
            wait_until(
                lambda: admin.info("clients")["blocked_clients"] > 0, timeout=WAIT_S, what="the listener"
            )
            delivered_one_by_one(writer, receiver, range(12))
        finally:
            deliverer.terminate()
            output, _ = deliverer.communicate(timeout=20)
    finally:
        receiver.stop()
        admin.close()
        redis_server.stop()
    assert deliverer.returncode == 0, output
    assert "Traceback" not in output


@pytest.mark.usefixtures("looks_only_when_woken")
def test_a_write_made_during_the_look_that_first_finds_an_endpoint_is_a_wake_up(make_app):
    """The first look after a registration reads the feed's position, then finds the endpoint
    enabled; a write that lands between the two found the deliverer not yet delivering, which a
    write does not wake (`Deliverer.wake`). That write still goes out, woken: it waited for the
    next look (IDLE_S). On Redis the feed's listener runs already (a watcher's, say) and has
    heard the write before the look goes on, so its wake-up came too early as well."""
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1")
    plants = service.extensions["plants"]
    deliverer, endpoints, signal = plants.deliverer, plants.store.endpoints, plants.feed_signal
    client = service.test_client()
    receiver = Receiver()
    read_all = endpoints.all
    written: list[int] = []

    def all_after_a_write():
        found = read_all()
        if found and not written:  # the look that first finds the endpoint
            before = signal.version
            written.append(client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH).status_code)
            if plants.store.shared:  # heard by the listener too: its wake-up comes before the look ends
                wait_until(lambda: signal.version >= before + 2, timeout=WAIT_S, what="the listener")
        return found

    endpoints.all = all_after_a_write
    try:
        if plants.store.shared:
            signal.listen()
            wait_until(lambda: signal.version > 0, timeout=WAIT_S, what="the listener's start")
        register(client, receiver.url)
        (delivery,) = receiver.wait_for(1, timeout=WAIT_S)
        assert written == [200]
        assert delivery.event["data"]["id"] == 1
    finally:
        deliverer.stop()
        receiver.stop()
        signal.close()
