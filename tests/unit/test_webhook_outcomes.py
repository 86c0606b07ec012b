"""What a failed webhook attempt leaves its endpoint (app/webhooks/outcomes.py): a 410 Gone
disables it, the last of ATTEMPTS leaves it failing, any other is tried again on the schedule,
after the receiver's Retry-After where it is longer; and the attempt's record as the endpoint
keeps it."""

from __future__ import annotations

import json

import pytest

from app.store.endpoints import DISABLED, FAILING
from app.webhooks.message import ATTEMPTS, RETRY_DELAYS_S
from app.webhooks.outcomes import after_failure, attempt_record, epoch_ms
from app.webhooks.sender import Attempt

POSITION = (7).to_bytes(8, "big")


def test_a_410_disables_the_endpoint_at_once():
    fields = after_failure("msg_1", Attempt(410, None, None, 3), POSITION, 1, 1.0)
    assert fields["status"] == DISABLED
    assert fields["reason"] == "The receiver answered 410 Gone to msg_1."
    assert (fields["position"], fields["tries"], fields["due"]) == (POSITION.hex(), "1", "0")


@pytest.mark.parametrize("outcome", [Attempt(500, None, None, 3), Attempt(None, "timeout", None, 10_000)])
def test_the_last_attempt_leaves_it_failing_where_it_stands(outcome):
    fields = after_failure("msg_2", outcome, POSITION, ATTEMPTS, 1.0)
    assert fields["status"] == FAILING
    assert fields["reason"].startswith(f"{ATTEMPTS} attempts to deliver msg_2 failed")
    assert (fields["position"], fields["tries"]) == (POSITION.hex(), str(ATTEMPTS))


@pytest.mark.parametrize("tries", range(1, ATTEMPTS))
def test_an_earlier_failure_is_due_again_on_the_schedule(tries):
    before = epoch_ms()
    fields = after_failure("msg_3", Attempt(503, None, None, 3), None, tries, 1.0)
    after = epoch_ms()
    assert fields.keys() == {"position", "tries", "due"}  # still enabled, no reason given
    assert (fields["position"], fields["tries"]) == ("-", str(tries))
    scheduled_ms = RETRY_DELAYS_S[tries - 1] * 1000
    assert before + 0.8 * scheduled_ms <= int(fields["due"]) <= after + 1.2 * scheduled_ms


def test_a_longer_retry_after_pushes_the_retry_back():
    before = epoch_ms()
    fields = after_failure("msg_4", Attempt(429, None, 60.0, 3), None, 1, 1.0)
    assert int(fields["due"]) >= before + 60_000  # past the schedule's first 5 s


def test_the_attempt_is_kept_as_a_json_record_timed_now():
    record = json.loads(attempt_record("msg_5", 500, None, 12))
    assert record["webhook_id"] == "msg_5"
    assert (record["status"], record["error"], record["duration_ms"]) == (500, None, 12)
    assert record["time"].endswith("Z")
