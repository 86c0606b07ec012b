"""Receivers and stored URLs that could make a sender spin, end to end on the memory store and a
real Redis: each attempt ends recorded in the attempts log and is retried on the schedule, never
at once, and later events are not held behind it for ever."""

from __future__ import annotations

import calendar
import logging
import re
import time

import pytest

from app.store.endpoints import Endpoint
from app.webhooks.message import new_secret
from tests.conftest import STORES, settings_for_store
from tests.integration.test_webhook_delivery import AUTH, attempts, create, endpoint, register, wait_until
from tests.receiver import Receiver, StalledReceiver

TIME = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")


@pytest.fixture(params=STORES)
def store_settings(request):
    return settings_for_store(request, request.param)


@pytest.fixture
def service(make_app):
    """Delivering from this process to 127.0.0.1, the schedule at a thousandth (5 ms, 0.3 s...)."""
    return make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_RETRY_SCALE=0.001)


@pytest.fixture
def client(service):
    return service.test_client()


def test_a_superscript_retry_after_on_a_200_is_one_delivery(client):
    receiver = Receiver(lambda delivery, number: (200, {"Retry-After": "²"}, 0))
    try:
        hook = register(client, receiver.url)
        create(client, 1, 2)
        first, second = receiver.wait_for(2)
        assert [first.event["data"]["id"], second.event["data"]["id"]] == [1, 2]
        time.sleep(0.5)
        assert len(receiver.deliveries) == 2
        recorded = wait_until(lambda: len(attempts(client, hook)) == 2 and attempts(client, hook))
        assert [attempt["status"] for attempt in recorded] == [200, 200]
    finally:
        receiver.stop()


def test_a_superscript_retry_after_on_a_503_is_ignored_and_the_schedule_holds(client):
    receiver = Receiver(
        lambda delivery, number: (503, {"Retry-After": "²"}, 0) if number <= 2 else (204, {}, 0)
    )
    try:
        hook = register(client, receiver.url)
        create(client, 1)
        deliveries = receiver.wait_for(3)
        assert len({delivery.id for delivery in deliveries}) == 1
        # The second wait is 0.3 s within ±20%: not at once, and not what "²" might be read as.
        assert 0.23 <= deliveries[2].at - deliveries[1].at < 1.5
        recorded = wait_until(lambda: len(attempts(client, hook)) == 3 and attempts(client, hook))
        assert [attempt["status"] for attempt in reversed(recorded)] == [503, 503, 204]
    finally:
        receiver.stop()


def test_a_non_ascii_path_and_query_are_sent_percent_encoded(client):
    receiver = Receiver()
    try:
        hook = register(client, receiver.url + "/café?q=☃")
        assert hook["url"] == receiver.url + "/caf%C3%A9?q=%E2%98%83"
        create(client, 1)
        (delivery,) = receiver.wait_for(1)
        assert delivery.path == "/hook/caf%C3%A9?q=%E2%98%83"
        # Recorded once its answer came, after the receiver counted it: waited for.
        recorded = wait_until(lambda: attempts(client, hook), what="the attempt's record")
        assert [attempt["status"] for attempt in recorded] == [204]
        time.sleep(0.3)  # time for a second delivery, were there one without a cause
        assert len(receiver.deliveries) == 1
    finally:
        receiver.stop()


def test_an_attempt_that_raises_is_recorded_and_retried_on_schedule(client, service, caplog):
    """A URL stored before the registration checks refused it: the sender cannot even parse it."""
    store = service.extensions["plants"].store
    hook = Endpoint(
        id="wh_stored_before",
        url="http://127.0.0.1:99999/café",
        events=None,
        description="",
        created_ms=time.time_ns() // 1_000_000,
        secrets=((new_secret(), None),),
        position=store.events_now(),
    )
    assert store.endpoints.add(hook, 50)
    service.extensions["plants"].deliverer.start()
    with caplog.at_level(logging.WARNING):
        create(client, 1)
        recorded = wait_until(
            lambda: len(attempts(client, {"id": hook.id})) >= 3 and attempts(client, {"id": hook.id})
        )
        assert {attempt["error"] for attempt in recorded} == {"internal"}
        assert {attempt["status"] for attempt in recorded} == {None}
        # At once, 5 ms, 0.3 s, then 1.8 s: a fourth attempt within the next second would be a spin.
        shown = endpoint(client, {"id": hook.id})
        assert shown["status"] == "enabled"
        assert TIME.match(shown["next_attempt"])
        time.sleep(0.8)
        assert len(attempts(client, {"id": hook.id})) <= 4
    sender_lines = [record for record in caplog.records if record.name == "app.webhooks.sender"]
    assert sender_lines
    assert all(record.exc_info is None for record in sender_lines)
    assert not [record for record in caplog.records if record.exc_info]


def test_next_attempt_shows_while_a_retry_is_pending_then_clears(make_app):
    client = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_RETRY_SCALE=0.01).test_client()
    receiver = Receiver(lambda delivery, number: (500, {}, 0) if number <= 2 else (204, {}, 0))
    try:
        hook = register(client, receiver.url)
        assert hook["next_attempt"] is None
        create(client, 1)
        receiver.wait_for(2)
        wait_until(lambda: len(attempts(client, hook)) == 2, what="two attempts recorded")
        # After the second failure the wait is 3 s (300 s at a hundredth) within ±20%.
        shown = endpoint(client, hook)
        due = calendar.timegm(time.strptime(shown["next_attempt"][:19], "%Y-%m-%dT%H:%M:%S"))
        # Shown to the second, so up to 1 s early; and up to 1 s more for the reads on a loaded machine.
        assert 0.4 < due - time.time() < 4.0
        receiver.wait_for(3, timeout=10)
        wait_until(lambda: endpoint(client, hook)["next_attempt"] is None, what="no next_attempt")
        assert client.get("/webhooks", headers=AUTH).json["webhooks"][0]["next_attempt"] is None
    finally:
        receiver.stop()


@pytest.mark.parametrize("change", ["delete", "disable"])
def test_an_endpoint_deleted_or_disabled_while_its_attempt_connects_gets_nothing(client, change):
    """The receiver's accept queue is full: the attempt hangs in its connection's handshake. The
    endpoint is deleted (or disabled) meanwhile, and its answer given; then the receiver accepts.
    The connection that comes carries no request; a disabled endpoint, enabled again, gets the
    event then, as its position held at it."""
    receiver = StalledReceiver()
    try:
        hook = register(client, receiver.url)
        create(client, 1)
        # The attempt is connecting (its SYN sent), however late a loaded machine starts it: a
        # change made before would leave no connection to come.
        wait_until(receiver.senders_stalled, what="the attempt's handshake")
        path = f"/webhooks/{hook['id']}"
        if change == "delete":
            assert client.delete(path, headers=AUTH).status_code == 204
        else:
            assert client.patch(path, json={"status": "disabled"}, headers=AUTH).status_code == 200
        receiver.release()
        # The sender's handshake is retried a second after its first SYN, then at 3 s.
        wait_until(lambda: receiver.connections >= 1, timeout=10, what="the attempt's connection")
        time.sleep(0.5)
        assert receiver.ids == []
        if change == "disable":
            assert attempts(client, hook) == []
            assert client.patch(path, json={"status": "enabled"}, headers=AUTH).status_code == 200
            wait_until(lambda: len(receiver.ids) == 1, what="the event, once enabled")
            assert receiver.ids[0].startswith("msg_")
    finally:
        receiver.stop()
