"""What one delivery sends (app/webhooks/message.py): the body, the message id, the headers and
their Standard Webhooks signatures, checked with the `standardwebhooks` package's own verifier,
as a receiver checks them."""

from __future__ import annotations

import base64
import json
import time

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from app.store import CREATED_EVENT, DELETED_EVENT, UPDATED_EVENT, Event, FeedEntry
from app.webhooks.message import message_id, new_secret, origin_of, payload, signed_headers, utc_text

REQUEST_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def entry(origin: str = "") -> FeedEntry:
    event = Event(CREATED_EVENT, 7, "Fern", "fern", 1732530000000)
    return FeedEntry(event, "1732530000000-3", b"position", origin)


@pytest.mark.parametrize(
    ("time_ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1732530000007, "2024-11-25T10:20:00.007Z"),
        (1732530000999, "2024-11-25T10:20:00.999Z"),
        (951782400000, "2000-02-29T00:00:00.000Z"),
    ],
)
def test_times_are_rfc_3339_in_utc_with_milliseconds(time_ms, text):
    assert utc_text(time_ms) == text


def test_the_message_id_is_the_events_own_so_every_attempt_repeats_it():
    assert message_id(entry()) == "msg_1732530000000-3"
    assert message_id(entry()) == message_id(entry(origin=REQUEST_ID))


@pytest.mark.parametrize(
    ("kind", "tag", "body"),
    [
        (CREATED_EVENT, "fern", {"id": 7, "name": "Fern", "tag": "fern"}),
        (UPDATED_EVENT, None, {"id": 7, "name": "Fern"}),
        (DELETED_EVENT, "fern", {"id": 7, "name": "Fern", "tag": "fern"}),
    ],
)
def test_the_body_is_the_event_with_the_plant_as_data(kind, tag, body):
    sent = json.loads(payload(Event(kind, 7, "Fern", tag, 1732530000007)))
    assert sent == {
        "type": ("plant.created", "plant.updated", "plant.deleted")[kind],
        "timestamp": "2024-11-25T10:20:00.007Z",
        "data": body,
    }


@pytest.mark.parametrize(
    ("origin", "found"),
    [
        ("", (None, None)),
        (REQUEST_ID, (REQUEST_ID, None)),
        (f"{REQUEST_ID} {TRACEPARENT}", (REQUEST_ID, TRACEPARENT)),
        (f" {TRACEPARENT}", (None, TRACEPARENT)),
        # What no header may carry is dropped, not sent to fail every attempt.
        ("bad\r\nid", (None, None)),
        (f"{REQUEST_ID} 00-not-a-traceparent", (REQUEST_ID, None)),
        (f"{REQUEST_ID} {TRACEPARENT.upper()}", (REQUEST_ID, None)),
    ],
)
def test_the_origin_gives_the_writes_request_id_and_traceparent_when_fit_for_a_header(origin, found):
    assert origin_of(entry(origin)) == found


def test_a_new_secret_is_whsec_and_32_random_bytes():
    secrets = {new_secret() for _ in range(20)}
    assert len(secrets) == 20
    for secret in secrets:
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32


def test_the_headers_verify_with_each_current_secret_as_a_receiver_checks_them():
    old, new = new_secret(), new_secret()
    body = payload(entry().event)
    before = int(time.time())
    headers = signed_headers("msg_1-0", body, [old, new], "PlantStore/1 (+webhooks)")
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"] == "PlantStore/1 (+webhooks)"
    assert headers["webhook-id"] == "msg_1-0"
    assert before <= int(headers["webhook-timestamp"]) <= time.time()
    signatures = headers["webhook-signature"].split(" ")
    assert len(signatures) == 2
    assert all(signature.startswith("v1,") for signature in signatures)
    for secret in (old, new):  # a receiver that knows either secret accepts the delivery
        assert Webhook(secret).verify(body, headers) == json.loads(body)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(body + b" ", headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(body, {**headers, "webhook-id": "msg_2-0"})
