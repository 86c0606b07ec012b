"""RFC 9112 framing on a real gunicorn: a request that cannot be framed is a JSON 400 and the
connection closes, so the bytes after it never run as a request of their own (request
smuggling, RFC 9112 section 11.2)."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time

import pytest

from app.server.worker.tally import LOG_PERIOD
from tests.rawhttp import exchange, request
from tests.servers import TOKEN, Gunicorn

AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
CHUNKED_CREATE = (
    b"POST /plants HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Content-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
# Each a body whose chunk framing gunicorn refuses; a lenient reading would take `{}` or more.
BAD_CHUNKS = {
    "hex-prefix": b"0x2\r\n{}\r\n0\r\n\r\n",
    "underscore": b"1_0\r\n" + b" " * 16 + b"\r\n0\r\n\r\n",
    "plus-sign": b"+2\r\n{}\r\n0\r\n\r\n",
    "spaces-around-size": b" 2 \r\n{}\r\n0\r\n\r\n",
    "bare-lf-in-extension": b"2;a\nb\r\n{}\r\n0\r\n\r\n",
    "no-crlf-after-data": b"2\r\n{}XX0\r\n\r\n",
    "size-overflow": b"fffffffffffffffff\r\n{}\r\n0\r\n\r\n",
}
OTHER_FRAMING = {
    # RFC 9112 section 3: one SP between the request line's words, none before or after it.
    "tab-after-method": b"GET\t/healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    "tab-before-version": b"GET /healthz\tHTTP/1.1\r\nHost: x\r\n\r\n",
    "leading-space": b" GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    "trailing-space": b"GET /healthz HTTP/1.1 \r\nHost: x\r\n\r\n",
    "content-length-and-chunked": b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "chunked-not-last": b"POST /plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
    "conflicting-content-lengths": b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
    b"Content-Length: 20\r\n\r\n{}",
    "http-1.0-chunked": b"POST /plants HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "space-before-colon": b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length : 2\r\n\r\n{}",
    "bare-lf-line-ends": b"POST /plants HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}",
}
# RFC 9112 section 3.2: exactly one Host in HTTP/1.1; section 6.1: an unknown coding is a 501.
OTHER_REFUSALS = {
    "no-host": (b"POST /plants HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 400, "one Host field"),
    "two-hosts": (
        b"POST /plants HTTP/1.1\r\nHost: x\r\nHost: y\r\nContent-Length: 2\r\n\r\n{}",
        400,
        "one Host",
    ),
    "gzip-then-chunked": (
        b"POST /plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        501,
        "only transfer coding served is chunked",
    ),
    # Chunked twice is framing llhttp refuses before the coding is looked at.
    "chunked-twice": (
        b"POST /plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
        "framing is malformed",
    ),
    # A tunnel (RFC 9110 section 9.3.6) is no request to this server: llhttp would hand it the
    # connection's bytes after the head.
    "connect": (
        b"CONNECT plants.example:443 HTTP/1.1\r\nHost: plants.example:443\r\n\r\n",
        400,
        "CONNECT is not served",
    ),
}
# The worker's line for the first 408 of a period, and for those it counted since its last line.
CUT_SHORT_LINE = re.compile(
    r"Answered 408 to (a client|(?P<count>\d+) clients, each one) "
    r"that closed before its request's body was whole"
)
DELETE = b"DELETE /plants/%d HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n"


# RFC 9112 section 3: a run of spaces between two words of the request line is read as one (the
# section's MAY, llhttp's reading, as uvicorn's): the line still ends at its CRLF, so no request
# begins elsewhere. A tab, or a space before or after the line, is refused (OTHER_FRAMING).
SPACED_REQUEST_LINES = {
    "two-spaces-after-method": b"GET  /healthz HTTP/1.1",
    "two-spaces-before-version": b"GET /healthz  HTTP/1.1",
    "three-spaces-after-method": b"GET   /healthz HTTP/1.1",
}


@pytest.fixture(scope="module")
def server():
    server = Gunicorn(env={"GUNICORN_READ_TIMEOUT": "2"})
    yield server
    server.stop()


def create(server: Gunicorn, plant_id: int) -> None:
    body = json.dumps({"id": plant_id, "name": "kept"}).encode()
    sent = request(
        body=body, headers=[("Authorization", f"Bearer {TOKEN}"), ("Content-Type", "application/json")]
    )
    assert exchange(server.port, sent).status == 200


def read_until_closed(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def assert_refused_then_closed(answer: bytes, status: int = 400, words: str = "framing is malformed") -> None:
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), answer[:200]
    assert b"\r\nConnection: close" in head
    assert b"\r\nContent-Type: application/json" in head
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    record = json.loads(rest[:length])
    assert record["error"] == status
    assert words in record["message"]
    # Written as the app writes its own Error records: compact, ending in a newline.
    assert rest[:length] == json.dumps(record, separators=(",", ":")).encode() + b"\n"
    assert rest[length:] == b"", "a second answer followed the refusal"


@pytest.mark.parametrize("body", list(BAD_CHUNKS.values()), ids=list(BAD_CHUNKS))
def test_a_bad_chunk_is_400_and_close_and_the_next_request_never_runs(server, body):
    plant_id = 555_000 + list(BAD_CHUNKS.values()).index(body)
    create(server, plant_id)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(CHUNKED_CREATE + body + DELETE % plant_id)
        assert_refused_then_closed(read_until_closed(sock))
    conn = server.connection()
    conn.request("GET", f"/plants/{plant_id}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert conn.getresponse().status == 200  # not deleted


@pytest.mark.parametrize("data", list(OTHER_FRAMING.values()), ids=list(OTHER_FRAMING))
def test_other_framing_errors_are_400_and_close(server, data):
    plant_id = 556_000 + list(OTHER_FRAMING.values()).index(data)
    create(server, plant_id)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(data + DELETE % plant_id)
        assert_refused_then_closed(read_until_closed(sock))
    conn = server.connection()
    conn.request("GET", f"/plants/{plant_id}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert conn.getresponse().status == 200


@pytest.mark.parametrize("line", list(SPACED_REQUEST_LINES.values()), ids=list(SPACED_REQUEST_LINES))
def test_a_run_of_spaces_in_a_request_line_is_one_request_and_the_next_begins_after_it(server, line):
    plant_id = 559_100 + list(SPACED_REQUEST_LINES.values()).index(line)
    create(server, plant_id)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            line + b"\r\nHost: x\r\n\r\n" + DELETE % plant_id + b"GET /healthz HTTP/1.1\r\n"
            b"Host: x\r\nConnection: close\r\n\r\n"
        )
        answers = read_until_closed(sock)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answers)
    assert statuses == [b"200", b"204", b"200"], answers[:600]
    assert answers.count(b'{"status":"ok"}') == 2
    conn = server.connection()
    conn.request("GET", f"/plants/{plant_id}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert conn.getresponse().status == 404  # the pipelined DELETE was read as the request it is


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_client_that_closes_its_side_mid_body_gets_a_408_and_nothing_is_created(server, chunked):
    """As the service answers under gthread, whose app reads the body cut short."""
    plant_id = 559_200 + chunked
    body = json.dumps({"id": plant_id, "name": "cut"}).encode()
    head = (
        CHUNKED_CREATE
        if chunked
        else CHUNKED_CREATE.replace(b"Transfer-Encoding: chunked", b"Content-Length: %d" % len(body))
    )
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head + (b"%x\r\n%s" % (len(body), body[:10]) if chunked else body[:10]))
        sock.shutdown(socket.SHUT_WR)
        assert_refused_then_closed(read_until_closed(sock), 408, "not received in full")
    conn = server.connection()
    conn.request("GET", f"/plants/{plant_id}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert conn.getresponse().status == 404


def cut_short_counts(output: str) -> list[int]:
    """The clients each "Answered 408" line of the worker counts, in the log's order."""
    counts = []
    for line in output.splitlines():
        if "Answered 408" in line:
            match = CUT_SHORT_LINE.search(line)
            assert match, line
            counts.append(int(match["count"] or 1))
    return counts


def test_a_flood_of_clients_that_close_mid_body_is_answered_each_and_logged_once():
    """Each gets its 408; the log gets the first, and the rest are counted into the next line of
    the kind (one per 5 s at most): a half-open flood (bench/attacks.py) is not a flood of log
    lines, which took the worker more of its time than the answers did."""
    # The default read timeout (10 s): a loaded machine's late close is still a close, not a stall.
    flood = Gunicorn()
    head = CHUNKED_CREATE.replace(b"Transfer-Encoding: chunked", b"Content-Length: 100")

    def cut_short(count: int) -> None:
        socks = [socket.create_connection(("127.0.0.1", flood.port), timeout=5) for _ in range(count)]
        for sock in socks:
            sock.sendall(head + b'{"id": 5592')
        for sock in socks:
            sock.shutdown(socket.SHUT_WR)
        for sock in socks:
            assert_refused_then_closed(read_until_closed(sock), 408, "not received in full")
            sock.close()

    try:
        started = time.monotonic()
        cut_short(30)
        # Each line is written before its 408 is sent: every line of the flood is in by now.
        answered = time.monotonic()
        counts = cut_short_counts(flood.output())
        assert counts[0] == 1  # the first, at once
        # The rest counted, a line per period at most: one line, unless a loaded machine took
        # more than a period over the 30 answers.
        assert len(counts) <= 1 + (answered - started) // LOG_PERIOD, counts
        # A period after the last line, the next 408 logs the count of those not yet logged with it.
        time.sleep(max(0.0, answered + LOG_PERIOD - time.monotonic()) + 0.1)
        cut_short(1)
        assert cut_short_counts(flood.output())[len(counts) :] == [31 - sum(counts)]
    finally:
        flood.stop()


@pytest.mark.parametrize("upgrade", [False, True], ids=["plain", "asking-to-upgrade"])
def test_a_whole_request_larger_than_one_read_sent_with_its_close_is_served(server, upgrade):
    """A client that sends its whole create (a body near the limit: more than one read of the
    worker) and then closes its side is served: the close says nothing more will come, not that
    what came is all that was read."""
    plant_id = 559_210 + upgrade
    body = json.dumps({"id": plant_id, "name": "whole"}).encode()
    body += b" " * (64 * 1024 - len(body))  # at the body limit, so head and body pass 64 KiB
    head = CHUNKED_CREATE.replace(b"Transfer-Encoding: chunked", b"Content-Length: %d" % len(body))
    if upgrade:
        head = head.replace(b"Host: x\r\n", b"Host: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head + body)
        sock.shutdown(socket.SHUT_WR)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    conn = server.connection()
    conn.request("GET", f"/plants/{plant_id}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert conn.getresponse().status == 200


def test_a_client_that_closes_its_side_mid_head_is_closed_without_an_answer(server):
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        sock.shutdown(socket.SHUT_WR)
        assert read_until_closed(sock) == b""


def test_a_chunk_framing_past_the_body_limit_plus_its_allowance_is_413_and_close(server):
    # Tiny chunks with long extensions: the body stays small, its framing does not.
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(CHUNKED_CREATE + (b"1;e=" + b"a" * 100 + b"\r\nx\r\n") * 5000)
        answer = read_until_closed(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ")
    assert b"Connection: close" in head
    record = json.loads(body)
    assert record["error"] == 413
    assert "chunk sizes, extensions and trailers" in record["message"]  # not its body's size alone


def test_pipelined_requests_are_answered_in_order_on_one_connection(server):
    create(server, 557_000)
    get = b"GET /plants/557000 HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n"
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(get * 3 + b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + last)
        answer = read_until_closed(sock)
    heads = [part.split(b"\r\n", 1)[0] for part in answer.split(b"HTTP/1.1 ")[1:]]
    assert heads == [b"200 OK"] * 5
    assert answer.count(b'{"name":"kept"}') == 3
    assert answer.endswith(b'\r\n\r\n{"status":"ok"}\n')  # the HEAD's answer had no body; the last closed


def test_a_request_that_asked_to_upgrade_is_answered_then_the_connection_closed(server):
    # No protocol is switched: the request is answered as HTTP (the app ignores Upgrade), and
    # what follows it on the connection is never read as a request.
    upgrade = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(upgrade + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.count(b"HTTP/1.1 ") == 1
    assert answer.endswith(b'{"status":"ok"}\n')


@pytest.mark.parametrize("case", list(OTHER_REFUSALS.values()), ids=list(OTHER_REFUSALS))
def test_host_and_transfer_coding_refusals_close_the_connection(server, case):
    data, status, words = case
    plant_id = 558_000 + list(OTHER_REFUSALS.values()).index(case)
    create(server, plant_id)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(data + DELETE % plant_id)
        assert_refused_then_closed(read_until_closed(sock), status, words)
    conn = server.connection()
    conn.request("GET", f"/plants/{plant_id}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert conn.getresponse().status == 200


def test_empty_lines_do_not_keep_an_idle_connection_open():
    # RFC 9112 section 2.2 lets a server skip CRLFs before a request; they start no request, so
    # the keep-alive time runs on.
    server = Gunicorn(env={"GUNICORN_KEEPALIVE": "2"})
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            started = time.monotonic()  # idle from here: closed after 2 s, whatever CRLFs come
            closed = False
            while time.monotonic() - started < 8 and not closed:
                try:
                    sock.sendall(b"\r\n")
                    sock.settimeout(0.5)
                    closed = sock.recv(1) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
            # Closed at the 2 s idle timeout: CRLFs that kept it open would keep it open all 8 s.
            assert closed
    finally:
        server.stop()
