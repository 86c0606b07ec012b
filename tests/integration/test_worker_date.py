"""RFC 9110 section 6.6.1: an origin server with a clock sends Date in every 2xx to 4xx answer,
the worker's own refusals and the answers it sends after parking included."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import pytest

from tests.helpers import parked_long_poll
from tests.rawhttp import exchange
from tests.servers import TOKEN, Gunicorn


@pytest.fixture(scope="module")
def server():
    server = Gunicorn(env={"GUNICORN_THREADS": "1", "PLANTS_EVENTS_HEARTBEAT": "1"})
    yield server
    server.stop()


def assert_fresh_date(value: str | None) -> None:
    assert value is not None, "no Date field"
    sent = parsedate_to_datetime(value)
    assert abs((datetime.now(UTC) - sent).total_seconds()) < 60, value


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
    ],
    ids=["414", "400"],
)
def test_the_workers_refusals_carry_a_date(server, data, status):
    answer = exchange(server.port, data)
    assert answer is not None
    assert answer.status == status
    assert_fresh_date(answer.headers["Date"])


def test_a_parked_long_polls_answer_carries_a_date(server):
    answer = parked_long_poll(server, TOKEN, 61_001)
    assert answer is not None
    assert answer.status == 200, answer.body
    assert [event["plant"]["id"] for event in answer.json()["events"]] == [61_001]  # woken, after parking
    assert_fresh_date(answer.headers["Date"])


def test_a_streams_head_carries_a_date(server):
    lines = ["GET /events HTTP/1.1", "Host: x", f"Authorization: Bearer {TOKEN}", "Accept: text/event-stream"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(("\r\n".join([*lines, "", ""])).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
    lines_in = head.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    assert lines_in[0].startswith("HTTP/1.1 200 "), lines_in
    fields = dict(line.split(": ", 1) for line in lines_in[1:])
    assert fields["Content-Type"].startswith("text/event-stream")
    assert fields["Transfer-Encoding"] == "chunked"
    assert_fresh_date(fields.get("Date"))
