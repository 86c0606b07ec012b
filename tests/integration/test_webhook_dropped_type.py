"""A PATCH that drops the type of the event a delivery holds while its attempt is under way
(docs/webhooks.md, "events"): the attempt then fails, and the event is skipped with no retry,
the last allowed attempt's too; and the skip is stored only while the endpoint is as it was
decided from, so that a change between (the type listed again) is not overwritten. A real
receiver on 127.0.0.1, the PATCH made from its handler while it holds the attempt's answer; on
the memory store and a real Redis."""

from __future__ import annotations

import pytest

from app.extension import plants_state
from app.webhooks.message import ATTEMPTS
from tests.conftest import settings_for_store
from tests.integration.test_webhook_delivery import AUTH, attempts, create, endpoint, register, wait_until
from tests.receiver import Receiver


@pytest.fixture(params=["memory", "redis"])
def store_settings(request):
    return settings_for_store(request, request.param)


def dropping(service, hook: dict, on_attempt: int, then=None):
    """A receiver that answers every creation 503 and the rest 204; during the creation's attempt
    number `on_attempt` (before answering it) the endpoint stops listing creations, through the
    API, and `then` is called."""

    def answer(delivery, number):
        if delivery.event["type"] != "plant.created":
            return 204, {}, 0
        if number == on_attempt:
            patch = {"events": ["plant.deleted"]}
            changed = service.test_client().patch(f"/webhooks/{hook['id']}", json=patch, headers=AUTH)
            assert changed.status_code == 200, changed.json
            if then is not None:
                then()
        return 503, {}, 0

    return Receiver(answer)


def test_a_type_dropped_during_its_last_attempt_is_skipped_rather_than_failing(make_app):
    """The tenth attempt, the schedule's last, is under way when its type is dropped, and fails:
    the event is skipped (the endpoint stays enabled, with no retry pending and no reason), and
    the next event of a type it lists goes at once. It was left `failing`, held at that event."""
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_RETRY_SCALE=0.00001)
    client = service.test_client()
    hook: dict = {}
    receiver = dropping(service, hook, ATTEMPTS)
    try:
        hook.update(register(client, receiver.url))
        create(client, 1)
        wait_until(lambda: len(attempts(client, hook)) == ATTEMPTS, what="the last attempt's failure")
        assert client.delete("/plants/1", headers=AUTH).status_code == 204
        deliveries = receiver.wait_for(ATTEMPTS + 1)
        assert [d.event["type"] for d in deliveries] == ["plant.created"] * ATTEMPTS + ["plant.deleted"]
        after = endpoint(client, hook)
        assert (after["status"], after["status_reason"], after["next_attempt"]) == ("enabled", None, None)
    finally:
        receiver.stop()


def test_the_skip_of_a_dropped_type_does_not_overwrite_a_change_stored_before_it(make_app, monkeypatch):
    """The first attempt is under way when its type is dropped; once the deliverer has read the
    endpoint again to decide on the attempt's failure, and before it stores that decision, the
    type is listed again (a second PATCH). The event is then not skipped: it waits its retry, and
    is sent again before the next event. Unchecked, the skip overwrote the second PATCH."""
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_RETRY_SCALE=0.001)
    client = service.test_client()
    endpoints = plants_state(service).store.endpoints
    read = endpoints.get
    armed: list[bool] = []
    listed_again: list[int] = []

    def get(endpoint_id, until=None):
        found = read(endpoint_id, until)
        if armed:  # the deliverer's read, after the first PATCH: the type is listed again now
            armed.clear()
            every = {"events": None}
            changed = service.test_client().patch(f"/webhooks/{endpoint_id}", json=every, headers=AUTH)
            listed_again.append(changed.status_code)
        return found

    hook: dict = {}
    receiver = dropping(service, hook, 1, then=lambda: armed.append(True))
    try:
        hook.update(register(client, receiver.url))
        monkeypatch.setattr(endpoints, "get", get)
        create(client, 1)
        first, again = receiver.wait_for(2, timeout=15)
        assert listed_again == [200], "the type was listed again while the failure was decided"
        assert (first.id, again.id, again.event["type"]) == (first.id, first.id, "plant.created")
        assert endpoint(client, hook)["events"] == ["plant.created", "plant.updated", "plant.deleted"]
        recorded = wait_until(lambda: len(attempts(client, hook)) >= 2 and attempts(client, hook))
        assert [(a["webhook_id"], a["status"]) for a in recorded[-2:]] == [(first.id, 503)] * 2
    finally:
        receiver.stop()
