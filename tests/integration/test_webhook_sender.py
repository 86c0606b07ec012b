"""One attempt against receivers that answer anything at all: a real socket on 127.0.0.1 writes
arbitrary status lines and header bytes, and every attempt ends in a documented outcome, never
an exception (app/webhooks/sender.py)."""

from __future__ import annotations

import logging
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.webhooks.sender import Attempt, Watchdog, send
from tests.receiver import RawReceiver

ERRORS = {"timeout", "refused", "redirect", "tls", "address", "name_not_resolved", "connection", "internal"}
HEADERS = {"Content-Type": "application/json", "webhook-id": "msg_1"}

#: Retry-After values a receiver might send, from valid to hostile.
RETRY_AFTERS = st.one_of(
    st.from_regex(rb"\A[0-9]{1,30}\Z"),
    st.sampled_from(
        [b"\xb2", b"\xd9\xa1", b"1e3", b"-1", b"Wed, 25 Nov 2026 10:01:00 GMT", b"Wed Nov 25 10:03:00 2026"]
    ),
    st.binary(max_size=40),
)
STATUSES = st.one_of(st.integers(100, 599), st.integers(0, 99), st.integers(600, 10**6))
HEADER_LINES = st.lists(st.tuples(st.binary(min_size=0, max_size=20), st.binary(max_size=60)), max_size=5)


def answer_bytes(status: int | bytes, retry_after: bytes | None, lines: list[tuple[bytes, bytes]]) -> bytes:
    status_text = status if isinstance(status, bytes) else str(status).encode()
    head = b"HTTP/1.1 " + status_text + b" Whatever\r\n"
    if retry_after is not None:
        head += b"Retry-After: " + retry_after + b"\r\n"
    for name, value in lines:
        head += name + b": " + value + b"\r\n"
    return head + b"Content-Length: 0\r\n\r\n"


def check(outcome: Attempt, status: object) -> None:
    assert outcome.error in ERRORS or outcome.error is None
    if outcome.error is None:
        assert outcome.status is not None
        assert 100 <= outcome.status <= 999
    if outcome.status is not None and 300 <= outcome.status < 400:
        assert outcome.error == "redirect"
    if outcome.retry_after is not None:
        assert outcome.status in (429, 503)
        assert outcome.retry_after >= 0
        assert not math.isnan(outcome.retry_after)
    assert outcome.duration_ms >= 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    status=st.one_of(STATUSES, st.binary(max_size=8)),
    retry_after=st.one_of(st.none(), RETRY_AFTERS),
    lines=HEADER_LINES,
)
def test_any_answer_ends_in_a_documented_outcome(status, retry_after, lines):
    receiver = RawReceiver(lambda: answer_bytes(status, retry_after, lines))
    try:
        outcome = send(
            receiver.url, b"{}", dict(HEADERS), timeout=5.0, allowed=("127.0.0.1",), watchdog=Watchdog()
        )
    finally:
        receiver.stop()
    check(outcome, status)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbage=st.binary(max_size=300))
def test_any_bytes_at_all_end_in_a_documented_outcome(garbage):
    receiver = RawReceiver(lambda: garbage)
    try:
        outcome = send(receiver.url, b"{}", dict(HEADERS), timeout=5.0, allowed=("127.0.0.1",))
    finally:
        receiver.stop()
    check(outcome, None)


def test_a_superscript_two_retry_after_on_a_200_is_delivered():
    receiver = RawReceiver(lambda: answer_bytes(200, b"\xb2", []))
    try:
        outcome = send(receiver.url, b"{}", dict(HEADERS), timeout=5.0, allowed=("127.0.0.1",))
    finally:
        receiver.stop()
    assert outcome.delivered
    assert outcome.retry_after is None


def test_retry_after_is_read_only_on_429_and_503():
    for status, expected in [(429, 30.0), (503, 30.0), (500, None), (200, None), (301, None)]:
        receiver = RawReceiver(lambda status=status: answer_bytes(status, b"30", []))
        try:
            outcome = send(receiver.url, b"{}", dict(HEADERS), timeout=5.0, allowed=("127.0.0.1",))
        finally:
            receiver.stop()
        assert (outcome.status, outcome.retry_after) == (status, expected)


def test_an_exception_inside_the_attempt_is_an_internal_failure_in_one_log_line(caplog):
    """A URL stored before registration refused it (a port out of range): urlsplit raises."""
    with caplog.at_level(logging.WARNING, logger="app.webhooks.sender"):
        outcome = send(
            "http://127.0.0.1:99999/hook", b"{}", dict(HEADERS), timeout=1.0, allowed=("127.0.0.1",)
        )
    assert (outcome.status, outcome.error) == (None, "internal")
    (record,) = caplog.records
    assert record.exc_info is None
    assert "\n" not in record.getMessage()
    assert "msg_1" in record.getMessage()
