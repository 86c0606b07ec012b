"""A PATCH of a webhook endpoint racing a delivery's outcome (docs/webhooks.md): the outcome is
stored, by a real acknowledgement on the real store (memory, Redis, Redis Cluster), between the
PATCH's read of the endpoint and its write, where a deliverer's answer from the receiver may
land. Neither loses the other's write: an event delivered is not sent again, a receiver's 410
keeps its reason.
"""

from __future__ import annotations

import pytest

from app.extension import plants_state
from app.store.endpoints import delivery_fields
from app.webhooks.message import message_id
from app.webhooks.outcomes import after_failure, outcome_record
from app.webhooks.sender import Attempt
from tests.conftest import STORES_AND_CLUSTER, settings_for_store

HOOK = "http://127.0.0.1:9/hook"
OWNER = "a-deliverer"
LEASE_MS = 10_000


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    return settings_for_store(request, request.param)


@pytest.fixture
def app(make_app):
    # This test is the deliverer: the service's own stays off.
    return make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_DELIVER=False)


@pytest.fixture
def held(app, client, auth):
    """An endpoint and the event it holds (a plant's creation), its lease taken by OWNER."""
    hook = client.post("/webhooks", json={"url": HOOK}, headers=auth).json
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth).status_code == 200
    store = plants_state(app).store
    leased = store.endpoints.lease(hook["id"], OWNER, LEASE_MS)
    assert leased is not None
    (entry,), _ = store.feed_entries(leased.position, 10, read_on=True)
    return hook, leased, entry


def outcome_after_the_next_read(monkeypatch, app, leased, fields, attempt):
    """Store a delivery's outcome, as the deliverer holding the lease does, just after the next
    read of the endpoint: the PATCH's, before it writes what it made of it."""
    endpoints = plants_state(app).store.endpoints
    read = endpoints.get
    stored = []

    def get(endpoint_id, until=None):
        endpoint = read(endpoint_id, until)
        if not stored:
            stored.append(endpoints.ack(endpoint_id, OWNER, LEASE_MS, leased.epoch, fields, attempt))
        return endpoint

    monkeypatch.setattr(endpoints, "get", get)
    return stored


def a_failure_after_every_read(monkeypatch, endpoints, leased, entry) -> list:
    """A busy endpoint: after every read of it, the deliverer holding the lease stores an
    outcome (a retry's failure of `entry`, each a try more); the answers of those acks."""
    msg_id = message_id(entry)
    read = endpoints.get
    stored: list = []

    def get(endpoint_id, until=None):
        endpoint = read(endpoint_id, until)
        failed = Attempt(503, None, None, 3)
        fields = after_failure(msg_id, failed, leased.position, len(stored) + 1, 1.0)
        stored.append(
            endpoints.ack(endpoint_id, OWNER, LEASE_MS, leased.epoch, fields, outcome_record(msg_id, failed))
        )
        return endpoint

    monkeypatch.setattr(endpoints, "get", get)
    return stored


def test_a_new_url_does_not_send_again_the_event_delivered_meanwhile(monkeypatch, app, client, auth, held):
    hook, leased, entry = held
    delivered = outcome_record(message_id(entry), Attempt(204, None, None, 3))
    stored = outcome_after_the_next_read(
        monkeypatch, app, leased, delivery_fields(entry.position, 0, 0), delivered
    )
    changed = client.patch(f"/webhooks/{hook['id']}", json={"url": HOOK + "?v=2"}, headers=auth)
    monkeypatch.undo()
    assert changed.status_code == 200, changed.json
    assert stored[0] is not None, "the outcome was stored"
    assert (changed.json["url"], changed.json["next_attempt"]) == (HOOK + "?v=2", None)
    # The delivery's position stands: the new URL gets the events after it, not that one again.
    assert plants_state(app).store.endpoints.get(hook["id"]).position == entry.position
    attempts = client.get(f"/webhooks/{hook['id']}/attempts", headers=auth).json["attempts"]
    assert [(a["webhook_id"], a["status"]) for a in attempts] == [(message_id(entry), 204)]


def test_disabling_keeps_the_receivers_410_that_came_meanwhile(monkeypatch, app, client, auth, held):
    hook, leased, entry = held
    msg_id = message_id(entry)
    gone = Attempt(410, None, None, 3)
    fields = after_failure(msg_id, gone, leased.position, 1, 1.0)
    stored = outcome_after_the_next_read(monkeypatch, app, leased, fields, outcome_record(msg_id, gone))
    changed = client.patch(f"/webhooks/{hook['id']}", json={"status": "disabled"}, headers=auth)
    monkeypatch.undo()
    assert changed.status_code == 200, changed.json
    assert stored[0] is not None, "the outcome was stored"
    assert changed.json["status"] == "disabled"
    assert changed.json["status_reason"] == f"The receiver answered 410 Gone to {msg_id}."
    again = client.get(f"/webhooks/{hook['id']}", headers=auth).json
    assert (again["status"], again["status_reason"]) == ("disabled", changed.json["status_reason"])


def test_a_replay_is_taken_whatever_outcomes_a_busy_endpoint_stores_meanwhile(
    monkeypatch, app, client, auth, held
):
    """The endpoint stores an outcome between every read of it and the next write (a retry's
    failure, each a try more): a replay still takes effect at once (202), where it was answered
    409 once its tries were spent. It sets where the deliveries stand whatever they stored; the
    attempts they recorded stay listed, and an attempt's outcome after the replay is not stored."""
    hook, leased, entry = held
    endpoints = plants_state(app).store.endpoints
    stored = a_failure_after_every_read(monkeypatch, endpoints, leased, entry)
    replayed = client.post(f"/webhooks/{hook['id']}/replay", json={"after": "start"}, headers=auth)
    monkeypatch.undo()
    assert replayed.status_code == 202, replayed.json
    assert replayed.json["next_attempt"] is None
    assert stored[0] is not None, "an outcome was stored between the replay's read and its write"
    assert stored[-1] is None, "the outcome of an attempt under way is not stored after the replay"
    after = endpoints.get(hook["id"])
    assert (after.position, after.tries, after.epoch) == (None, 0, leased.epoch + 1)
    kept = client.get(f"/webhooks/{hook['id']}/attempts", headers=auth).json["attempts"]
    assert len(kept) == sum(answer is not None for answer in stored)


@pytest.mark.parametrize(
    "patch", [{"url": HOOK + "?v=2"}, {"status": "disabled"}], ids=["new_url", "disabled"]
)
def test_a_patch_is_taken_whatever_outcomes_a_busy_endpoint_stores_meanwhile(
    monkeypatch, app, client, auth, held, patch
):
    """The endpoint stores an outcome between every read of it and the next write (a retry's
    failure, each a try more): a new URL, which moves where the deliveries stand, and a disable
    still take effect at once (200), where they were answered 409 once their tries were spent.
    The new URL gets the event held at once, its tries anew, and the outcome of an attempt to
    the old one after it is not stored; the failures recorded meanwhile stay listed."""
    hook, leased, entry = held
    endpoints = plants_state(app).store.endpoints
    stored = a_failure_after_every_read(monkeypatch, endpoints, leased, entry)
    changed = client.patch(f"/webhooks/{hook['id']}", json=patch, headers=auth)
    monkeypatch.undo()
    assert changed.status_code == 200, changed.json
    assert stored[0] is not None, "an outcome was stored between the PATCH's read and its write"
    after = endpoints.get(hook["id"])
    assert after.position == leased.position  # the event held: neither skipped nor sent again
    if "url" in patch:
        assert (changed.json["url"], changed.json["status"], changed.json["next_attempt"]) == (
            patch["url"],
            "enabled",
            None,
        )
        assert (after.tries, after.due_ms, after.epoch) == (0, 0, leased.epoch + 1)
        assert stored[-1] is None, "the outcome of an attempt under way is not stored after the change"
    else:
        assert (changed.json["status"], changed.json["status_reason"]) == (
            "disabled",
            "Disabled through the API.",
        )
    kept = client.get(f"/webhooks/{hook['id']}/attempts", headers=auth).json["attempts"]
    assert len(kept) == sum(answer is not None for answer in stored)


def test_a_resume_starts_after_the_event_delivered_meanwhile(monkeypatch, app, client, auth, held):
    """Disabled while its attempt was under way, the endpoint stores that attempt's success just
    after the resume's read: the resume, which writes no position, starts after that event
    rather than sending it again, and the attempt stays listed."""
    hook, leased, entry = held
    disabled = client.patch(f"/webhooks/{hook['id']}", json={"status": "disabled"}, headers=auth)
    assert disabled.status_code == 200, disabled.json
    delivered = outcome_record(message_id(entry), Attempt(204, None, None, 3))
    stored = outcome_after_the_next_read(
        monkeypatch, app, leased, delivery_fields(entry.position, 0, 0), delivered
    )
    resumed = client.patch(f"/webhooks/{hook['id']}", json={"status": "enabled"}, headers=auth)
    monkeypatch.undo()
    assert resumed.status_code == 200, resumed.json
    assert stored[0] is not None, "the outcome was stored"
    assert (resumed.json["status"], resumed.json["status_reason"], resumed.json["next_attempt"]) == (
        "enabled",
        None,
        None,
    )
    after = plants_state(app).store.endpoints.get(hook["id"])
    assert (after.position, after.tries, after.epoch) == (entry.position, 0, leased.epoch + 1)
    attempts = client.get(f"/webhooks/{hook['id']}/attempts", headers=auth).json["attempts"]
    assert [(a["webhook_id"], a["status"]) for a in attempts] == [(message_id(entry), 204)]
