"""A PATCH that adds a type to an endpoint's `events` while its drain passes over events of that
type (docs/webhooks.md, "events"): the drain's store of where it passed to is made only while the
endpoint is as the drain decided from, so the events after where the deliveries stood when the
PATCH landed, those written after it above all, go by the types it lists. A real receiver on
127.0.0.1; on the memory store and a real Redis."""

from __future__ import annotations

import threading

import pytest

from app.extension import plants_state
from tests.conftest import STORES, settings_for_store
from tests.integration.test_webhook_delivery import AUTH, create, register, wait_until
from tests.receiver import Receiver


@pytest.fixture(params=STORES)
def store_settings(request):
    return settings_for_store(request, request.param)


@pytest.mark.parametrize("creation_in_the_batch", [False, True], ids=["batch_ends", "before_a_delivery"])
def test_an_update_written_after_its_type_was_added_is_not_passed_over(make_app, creation_in_the_batch):
    """The endpoint takes creations only. An update wakes the deliverer, which leases the endpoint
    as it stands; then, before its drain reads the feed, the endpoint is patched to take updates
    too and a second update is written. The drain, still deciding from the endpoint it leased,
    passes over both: its store of where it passed to is refused (the endpoint changed), so it
    reads the endpoint again and sends both updates, then the next creation. Where they passed
    to is stored when the batch ends, or, when the creation was written with the second update,
    before the creation is sent. Unchecked, both updates were passed over, and the receiver got
    the creation alone."""
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1")
    client = service.test_client()
    plants = plants_state(service)
    deliverer, endpoints = plants.deliverer, plants.store.endpoints
    lease = endpoints.lease
    changed: list[int] = []
    done = threading.Event()  # the lease's change made: `changed` holds all it answered

    def lease_then_add_the_type(endpoint_id, owner, ttl_ms):
        leased = lease(endpoint_id, owner, ttl_ms)
        if leased is not None and not changed:
            both = {"events": ["plant.created", "plant.updated"]}
            changed.append(client.patch(f"/webhooks/{endpoint_id}", json=both, headers=AUTH).status_code)
            changed.append(client.patch("/plants/1", json={"name": "Second"}, headers=AUTH).status_code)
            if creation_in_the_batch:
                create(client, 2)
            done.set()
        return leased

    receiver = Receiver()
    try:
        create(client, 1)  # before the endpoint: not its to send
        register(client, receiver.url, events=["plant.created"])
        endpoints.lease = lease_then_add_the_type
        assert client.patch("/plants/1", json={"name": "First"}, headers=AUTH).status_code == 200
        wait_until(done.is_set, what="the endpoint's lease")
        assert changed == [200, 200]
        if not creation_in_the_batch:  # once the drain that leased it ended: a batch of its own
            wait_until(lambda: not deliverer.drains.busy, what="the drain's end")
            create(client, 2)
        sent = wait_until(
            lambda: (
                [(d.event["type"], d.event["data"]["name"]) for d in receiver.deliveries]
                if any(d.event["type"] == "plant.created" for d in receiver.deliveries)
                else None
            ),
            what="the creation's delivery",
        )
        assert sent == [("plant.updated", "First"), ("plant.updated", "Second"), ("plant.created", "Fern 2")]
    finally:
        receiver.stop()
