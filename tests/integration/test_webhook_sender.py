"""One attempt against receivers that answer anything at all: a real socket on 127.0.0.1 writes
arbitrary status lines and header bytes, and every attempt ends in a documented outcome, never
an exception (app/webhooks/sender.py). And the kept-alive connection of an endpoint
(app/webhooks/keepalive.py): reused while it may be, replaced when the host moves or the
receiver closes it, closed after any answer but a plain 2xx, and every attempt on it still bounded."""

from __future__ import annotations

import logging
import math
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.webhooks import keepalive
from app.webhooks.keepalive import Slot
from app.webhooks.sender import Attempt, Watchdog, send
from tests.helpers import in_time
from tests.receiver import ClosingReceiver, RawReceiver, Receiver, StalledReceiver

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


def attempt(
    url: str, slot: Slot, *, timeout: float = 5.0, watchdog: Watchdog | None = None, **options
) -> Attempt:
    options.setdefault("allowed", ("127.0.0.1",))
    return send(
        url, b"{}", dict(HEADERS), timeout=timeout, watchdog=watchdog or Watchdog(), slot=slot, **options
    )


def in_turn(
    receiver: Receiver | ClosingReceiver, count: int, pause: float = 0.0
) -> tuple[list[Attempt], Slot]:
    """`count` attempts to `receiver`, one endpoint's, `pause` seconds apart; then it stops."""
    slot, outcomes = Slot(), []
    try:
        for number in range(count):
            time.sleep(pause if number else 0.0)
            outcomes.append(attempt(receiver.url, slot))
    finally:
        slot.close()
        receiver.stop()
    return outcomes, slot


def test_consecutive_attempts_to_an_endpoint_go_on_one_connection():
    receiver = Receiver()
    outcomes, slot = in_turn(receiver, 5)
    assert all(outcome.delivered for outcome in outcomes)
    assert len(set(receiver.connections())) == 1
    assert slot.opened == 1


def test_a_host_that_resolves_to_another_address_gets_a_new_connection():
    """An allowed name, resolved by the attempt's resolver (as getaddrinfo would answer), moves
    from 127.0.0.1 to 127.0.0.2: the kept connection to the first is not used for the second."""
    receiver, slot = Receiver(hosts=("127.0.0.1", "127.0.0.2")), Slot()
    resolved = ["127.0.0.1"]

    def resolve(host: str, port: int, **_: object) -> list[tuple]:
        assert host == "hooks.example"
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (resolved[0], port))]

    url = f"http://hooks.example:{receiver.port}/hook"
    try:
        outcomes = [attempt(url, slot, allowed=("hooks.example",), resolve=resolve) for _ in range(2)]
        resolved[0] = "127.0.0.2"
        outcomes += [attempt(url, slot, allowed=("hooks.example",), resolve=resolve) for _ in range(2)]
        # Moved to an address never sent to: refused, and the kept connection is closed.
        resolved[0] = "169.254.169.254"
        refused = attempt(url, slot, allowed=("hooks.example",), resolve=resolve)
    finally:
        slot.close()
        receiver.stop()
    assert all(outcome.delivered for outcome in outcomes)
    assert [delivery.local for delivery in receiver.deliveries] == ["127.0.0.1"] * 2 + ["127.0.0.2"] * 2
    assert {delivery.headers["host"] for delivery in receiver.deliveries} == {
        f"hooks.example:{receiver.port}"
    }
    first, second, third, fourth = receiver.connections()
    assert first == second
    assert third == fourth
    assert first != third
    assert refused.error == "address"
    assert slot.connection is None


def test_a_kept_connection_is_left_once_its_address_is_no_longer_among_the_hosts():
    """The host resolves to 127.0.0.1, then to 127.0.0.2 and 127.0.0.1 (the kept connection to
    127.0.0.1 is still one of its addresses: reused), then to 127.0.0.2 alone: the connection to
    127.0.0.1 is not used again, although the answer before listed 127.0.0.2 first."""
    receiver, slot = Receiver(hosts=("127.0.0.1", "127.0.0.2")), Slot()
    answers = [["127.0.0.1"], ["127.0.0.2", "127.0.0.1"], ["127.0.0.2"]]

    def resolve(host: str, port: int, **_: object) -> list[tuple]:
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (a, port)) for a in answers[0]]

    url = f"http://hooks.example:{receiver.port}/hook"
    try:
        outcomes = []
        for _ in range(3):
            outcomes.append(attempt(url, slot, allowed=("hooks.example",), resolve=resolve))
            if len(answers) > 1:
                answers.pop(0)
    finally:
        slot.close()
        receiver.stop()
    assert all(outcome.delivered for outcome in outcomes)
    assert [delivery.local for delivery in receiver.deliveries] == ["127.0.0.1", "127.0.0.1", "127.0.0.2"]
    first, second, third = receiver.connections()
    assert first == second != third


@pytest.mark.parametrize(
    ("answer", "status", "error"),
    [
        ((500, {}, 0.0), 500, None),
        ((429, {"Retry-After": "1"}, 0.0), 429, None),
        ((302, {"Location": "http://127.0.0.1:9/"}, 0.0), 302, "redirect"),
        ((204, {}, 6.0), None, "timeout"),
        ((204, {"Connection": "close"}, 0.0), 204, None),
    ],
    ids=["500", "429", "redirect", "timeout", "connection-close"],
)
def test_an_answer_other_than_a_plain_2xx_closes_the_connection(answer, status, error):
    receiver = Receiver(lambda delivery, number: answer if number == 2 else (204, {}, 0.0))
    slot = Slot()
    try:
        # A timeout a loaded machine's receiver meets only when it is meant to (its 6 s answer).
        first = attempt(receiver.url, slot, timeout=3)
        second = attempt(receiver.url, slot, timeout=3)
        assert slot.connection is None
        third = attempt(receiver.url, slot, timeout=3)
    finally:
        slot.close()
        receiver.stop()
    assert first.delivered
    assert third.delivered
    assert (second.status, second.error) == (status, error)
    connections = receiver.connections()
    assert connections[0] == connections[1] != connections[2]
    assert slot.opened == 2


def test_a_connection_the_receiver_closed_while_idle_is_replaced_and_nothing_is_sent_twice():
    receiver = Receiver(idle_timeout=0.1)
    # The receiver closes the idle connection between the two.
    (first, second), _ = in_turn(receiver, 2, pause=0.4)
    assert first.delivered
    assert second.delivered
    assert len(receiver.deliveries) == 2
    assert len(set(receiver.connections())) == 2


def test_a_kept_connection_that_fails_while_the_request_is_written_is_retried_once_on_a_new_one(monkeypatch):
    """The receiver reset the connection, and the attempt did not see it before writing (the
    race the idle check cannot close): the write fails, so the receiver cannot have the request,
    and it goes at once on a new connection."""
    monkeypatch.setattr(keepalive, "_closed_by_peer", lambda connection: False)
    receiver = ClosingReceiver(reset=True)
    (first, second), _ = in_turn(receiver, 2, pause=0.3)
    assert first.delivered
    assert second.delivered
    assert (receiver.connections, receiver.requests) == (2, 2)


def test_a_kept_connection_that_fails_after_the_request_was_written_is_a_failed_attempt():
    """The receiver reads the second request on the connection whole, then closes it unanswered.
    It might have acted on it, so it is not sent again at once: the attempt failed, and the
    schedule sends it again (at least once, never a second copy at once)."""
    receiver = ClosingReceiver()
    (first, second, third), _ = in_turn(receiver, 3)
    assert first.delivered
    assert third.delivered
    assert (second.status, second.error) == (None, "connection")
    assert (receiver.connections, receiver.requests) == (2, 3)


def trickling(
    head: bytes, trickled: bytes, *, before: tuple[bytes, ...] = ()
) -> tuple[str, threading.Event, socket.socket]:
    """A receiver on one connection: each request answered with `before`'s answers in turn, then
    the next with `head` at once and `trickled` a byte every 0.05 s, until stopped. Its URL, its
    stop and its listener (to close)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            for answer in (*before, head):
                RawReceiver._read_request(connection)
                connection.sendall(answer)
            for byte in trickled:
                if stop.is_set():
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.05)

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/hook", stop, listener


def test_the_watchdog_ends_an_attempt_on_a_kept_connection_that_trickles():
    """The second answer on the connection comes a byte at a time: the watchdog (the deliverer
    calls `expire` at every look) ends the attempt at its timeout."""
    url, stop, listener = trickling(
        b"",
        b"HTTP/1.1 204 No Content\r\nX-Slow: " + b"a" * 1000,
        before=(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",),
    )

    def expire() -> None:
        while not stop.is_set():
            watchdog.expire()
            time.sleep(0.05)

    watchdog, slot = Watchdog(), Slot()
    threading.Thread(target=expire, daemon=True).start()
    try:
        first = attempt(url, slot, timeout=1.0, watchdog=watchdog)
        # Not the trickle's end (50 s, a 204 delivered), within a wait generous for a loaded machine.
        second = in_time(lambda: attempt(url, slot, timeout=1.0, watchdog=watchdog))
    finally:
        stop.set()
        slot.close()
        listener.close()
    assert first.delivered
    assert second.error == "timeout"
    assert slot.connection is None


def test_an_answer_whose_body_trickles_past_the_timeout_is_a_timeout_whoever_notices():
    """The status line and headers come at once, then the body a byte at a time, never all of it
    by the timeout. The attempt is a `timeout` (and the event is sent again), whether the
    watchdog cuts the socket or the reading loop sees the deadline first: not a 200 delivered
    or a timeout by the luck of the watchdog's poll. Without a watchdog, only the loop sees it."""
    url, stop, listener = trickling(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", b"x" * 1000)
    try:
        # Not the trickle's end (50 s, a 200 delivered), within a wait generous for a loaded machine.
        outcome = in_time(lambda: send(url, b"{}", dict(HEADERS), timeout=0.5, allowed=("127.0.0.1",)))
    finally:
        stop.set()
        listener.close()
    assert (outcome.status, outcome.error) == (None, "timeout")
    assert not outcome.delivered


@pytest.mark.parametrize(
    "interim",
    [
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
        b"HTTP/1.1 102 Processing\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
    ],
)
def test_interim_1xx_answers_before_the_final_one_are_skipped(interim):
    """RFC 9110 §15.2: a client must parse one or more 1xx answers before the final one. A
    receiver (or its proxy) that sends 103 Early Hints, then 204, has the event: delivered, once,
    not a failed attempt retried ten times."""
    final = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
    receiver = RawReceiver(lambda: interim + final)
    try:
        outcome = send(receiver.url, b"{}", dict(HEADERS), timeout=5.0, allowed=("127.0.0.1",))
    finally:
        receiver.stop()
    assert (outcome.status, outcome.error) == (204, None)
    assert outcome.delivered
    assert receiver.requests == 1


def test_an_interim_answer_with_no_final_one_is_a_failed_attempt():
    receiver = RawReceiver(lambda: b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
    try:
        outcome = send(receiver.url, b"{}", dict(HEADERS), timeout=5.0, allowed=("127.0.0.1",))
    finally:
        receiver.stop()
    assert not outcome.delivered
    assert (outcome.status, outcome.error) == (None, "connection")


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 200 OK\r\n",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Len",
        b"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\n",
        b"ICY 200 OK\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\n\r\nnot http\r\n\r\n",
    ],
    ids=[
        "content-length",
        "chunked",
        "head-after-status",
        "head-after-a-header",
        "head-mid-line",
        "head-after-1xx",
        "status-not-http",
        "status-not-http-after-1xx",
    ],
)
def test_an_answer_cut_short_by_the_receivers_close_is_a_failed_attempt_whatever_its_framing(answer):
    """The receiver closes after 3 of the 100 bytes its Content-Length promised: cut short, as a
    chunked body that never ends is, and as a head that never reached its blank line is, whatever
    status came first (it is sent again). A status line that is not HTTP's fails on the
    connection too (http.client's BadStatusLine), not in the service ("internal")."""
    receiver = RawReceiver(lambda: answer)
    try:
        outcome = send(receiver.url, b"{}", dict(HEADERS), timeout=5.0, allowed=("127.0.0.1",))
    finally:
        receiver.stop()
    assert (outcome.status, outcome.error) == (None, "connection")
    assert not outcome.delivered


def test_a_whole_head_then_the_close_is_an_answer_of_no_body():
    """HTTP/1.1 allows an answer with neither Content-Length nor chunked framing, its body ended by
    the close (RFC 9112 §6.3): a whole head, its blank line then the close, is delivered."""
    receiver = RawReceiver(lambda: b"HTTP/1.1 200 OK\r\n\r\n")
    try:
        outcome = send(receiver.url, b"{}", dict(HEADERS), timeout=5.0, allowed=("127.0.0.1",))
    finally:
        receiver.stop()
    assert (outcome.status, outcome.error) == (200, None)


@pytest.mark.parametrize(("interim", "expected"), [(8, (204, None)), (9, (103, None))])
def test_at_most_8_interim_answers_are_skipped(interim, expected):
    """A receiver sending 1xx answers without end is answered by its own ninth: a failed attempt."""
    early = b"HTTP/1.1 103 Early Hints\r\n\r\n"
    receiver = RawReceiver(lambda: early * interim + b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
    try:
        outcome = send(receiver.url, b"{}", dict(HEADERS), timeout=5.0, allowed=("127.0.0.1",))
    finally:
        receiver.stop()
    assert (outcome.status, outcome.error) == expected


def test_https_to_a_fully_qualified_name_verifies_the_name_without_its_trailing_dot(tmp_path):
    """`https://hooks.internal./hook`: the certificate is for `hooks.internal`, the name TLS sends
    (SNI) too; the trailing dot is the lookup's. It failed every attempt as a TLS error."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=hooks.internal", "-addext", "subjectAltName=DNS:hooks.internal",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    names: list[str | None] = []
    server_side.sni_callback = lambda _sock, name, _context: names.append(name)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    heads: list[bytes] = []

    def receive() -> None:
        with listener, server_side.wrap_socket(listener.accept()[0], server_side=True) as tls:
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"{}"):
                data += tls.recv(65536)
            heads.append(data.partition(b"\r\n\r\n")[0])
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    def resolve(host: str, port: int, **_: object) -> list[tuple]:
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", port))]

    port = listener.getsockname()[1]
    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()
    url = f"https://hooks.internal.:{port}/hook"
    outcome = send(
        url, b"{}", HEADERS, timeout=10, allowed=("hooks.internal.",),
        context=ssl.create_default_context(cafile=str(cert)), resolve=resolve,
    )  # fmt: skip
    receiver.join(10)
    assert (outcome.status, outcome.error) == (200, None)
    assert names == ["hooks.internal"]
    assert f"\r\nHost: hooks.internal.:{port}".encode() in heads[0]


def resolving(*addresses: str) -> Callable[..., list[tuple]]:
    """A resolver that answers every name with `addresses`, in that order, as getaddrinfo would."""

    def resolve(host: str, port: int, **_: object) -> list[tuple]:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))
            for address in addresses
        ]

    return resolve


#: 127.0.0.2 first, where no test's receiver listens, then 127.0.0.1.
DOWN_FIRST = resolving("127.0.0.2", "127.0.0.1")


def test_a_host_whose_first_address_refuses_is_reached_at_its_next_one():
    """The host resolves to two addresses, the first one's receiver down (nothing listens on
    127.0.0.2: refused) and the second up, as a name with an A record per server, one of them
    down, or an AAAA record the network cannot reach, answers: the attempt connects to the next
    address checked, as HTTP clients do, rather than failing at every attempt while the
    receiver is up; and its connection is kept, and reused, at the address that answered."""
    receiver, slot = Receiver(hosts=("127.0.0.1",)), Slot()
    url = f"http://hooks.example:{receiver.port}/hook"
    try:
        outcomes = [attempt(url, slot, allowed=("hooks.example",), resolve=DOWN_FIRST) for _ in range(2)]
    finally:
        slot.close()
        receiver.stop()
    assert [(outcome.status, outcome.error) for outcome in outcomes] == [(204, None)] * 2
    assert [delivery.local for delivery in receiver.deliveries] == ["127.0.0.1"] * 2
    first, second = receiver.connections()
    assert first == second


def test_an_attempt_whose_every_address_refuses_is_refused():
    """Every address the host resolves to refuses the connection: one failed attempt, `refused`."""
    with socket.socket() as probe:  # a port nothing listens on, on either address
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    slot = Slot()
    try:
        outcome = attempt(
            f"http://hooks.example:{port}/hook", slot, allowed=("hooks.example",), resolve=DOWN_FIRST
        )
    finally:
        slot.close()
    assert (outcome.status, outcome.error) == (None, "refused")
    assert slot.connection is None


def test_a_host_whose_first_address_never_answers_is_reached_at_its_next_one_in_time():
    """The first address drops the connection (its accept queue full: the SYNs go unanswered,
    as behind a firewall that drops them, or an IPv6 address the network does not carry), the
    second answers: the first gets its share of the attempt's time, half of it here, and the
    attempt is delivered at the second within its timeout, rather than a timeout at every try."""
    stalled = StalledReceiver()
    receiver, slot = Receiver(hosts=("127.0.0.2",), port=stalled.port), Slot()

    try:
        outcome = attempt(
            f"http://hooks.example:{stalled.port}/hook",
            slot,
            timeout=2.0,
            allowed=("hooks.example",),
            resolve=resolving("127.0.0.1", "127.0.0.2"),
        )
    finally:
        slot.close()
        receiver.stop()
        stalled.stop()
    assert (outcome.status, outcome.error) == (204, None)
    assert [delivery.local for delivery in receiver.deliveries] == ["127.0.0.2"]
    assert stalled.ids == []
