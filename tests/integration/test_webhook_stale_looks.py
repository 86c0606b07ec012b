"""A deliverer's look decides which endpoints to drain from a read of them, and leases each a
moment later: an endpoint disabled, or given a retry's wait, in between (by a PATCH, or by
another process's failed attempt) is leased as it now stands, and gets nothing it would not get
as it now stands. On the memory store, a real Redis and a Redis Cluster."""

from __future__ import annotations

import pytest

from app.extension import plants_state
from app.webhooks.deliverer import Deliverer
from tests.conftest import STORES_AND_CLUSTER, settings_for_store
from tests.integration.test_webhook_delivery import AUTH, attempts, create, register
from tests.receiver import Receiver


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    return settings_for_store(request, request.param)


@pytest.fixture
def receiver():
    server = Receiver(lambda delivery, number: (500, {}, 0.0))
    yield server
    server.stop()


@pytest.fixture
def looking(make_app):
    """The service, its own delivery off, and a deliverer of the test's on its store, which looks
    as another process's would."""
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_DELIVER=False)
    state = plants_state(service)
    other = Deliverer(state.store, state.settings, user_agent="plant-store/test")
    other.drains.open()
    yield service.test_client(), other
    other.stop(timeout=5.0)


def drained(deliverer: Deliverer, hook: dict) -> None:
    """Drain `hook` as a look that found it enabled, due and behind decided: its drain, if it
    leased one, ended."""
    deliverer.drains.start([hook["id"]])
    future = deliverer.drains.busy.get(hook["id"])
    if future is not None:
        future.result(timeout=20)


def test_an_endpoint_disabled_after_the_look_read_it_gets_nothing(looking, receiver):
    client, deliverer = looking
    hook = register(client, receiver.url)
    create(client, 1)
    patched = client.patch(f"/webhooks/{hook['id']}", json={"status": "disabled"}, headers=AUTH)
    assert patched.status_code == 200, patched.json
    drained(deliverer, hook)
    assert receiver.deliveries == []
    assert attempts(client, hook) == []


def test_a_retry_stored_after_the_look_read_the_endpoint_waits_its_turn(looking, receiver):
    client, deliverer = looking
    hook = register(client, receiver.url)
    create(client, 1)
    drained(deliverer, hook)  # the first attempt: 500, its retry due in 5 s (4 to 6)
    assert len(receiver.deliveries) == 1
    assert client.get(f"/webhooks/{hook['id']}", headers=AUTH).json["next_attempt"] is not None
    drained(deliverer, hook)  # as decided from a read made before that failure was stored
    assert len(receiver.deliveries) == 1
    assert len(attempts(client, hook)) == 1
