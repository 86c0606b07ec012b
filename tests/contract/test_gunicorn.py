"""The core contract again, through a real gunicorn started with the shipped gunicorn.conf.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers import assert_error, call
from tests.servers import ROOT, TOKEN, Gunicorn, free_port, wait_until_serving

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def test_create_retry_and_conflict(either_worker):
    plant = {"id": 1001, "name": "Fern", "tag": "fern"}
    status, headers, body = call(either_worker.connection(), "POST", "/plants", plant, AUTH)
    assert (status, headers["Content-Type"], json.loads(body)) == (
        200,
        "application/json",
        {"name": "Fern", "tag": "fern"},
    )
    assert call(either_worker.connection(), "POST", "/plants", plant, AUTH)[:1] == (200,)
    assert_error(*call(either_worker.connection(), "POST", "/plants", {**plant, "name": "Other"}, AUTH), 409)


@pytest.mark.parametrize(
    "path", ["//plants", "//plants/1", "/plants//1", "//healthz", "//events", "/plants/"]
)
def test_a_doubled_or_trailing_slash_is_a_json_404_through_the_server(either_worker, path):
    """The server passes the path as sent (no merged slashes), and the app refuses it."""
    assert_error(*call(either_worker.connection(), "GET", path, headers=AUTH), 404)


def test_authentication_rows(either_worker):
    status, headers, body = call(either_worker.connection(), "POST", "/plants", {"id": 1002, "name": "Fern"})
    assert_error(status, headers, body, 401)
    assert headers["WWW-Authenticate"] == 'Bearer realm="plants"'
    status, headers, body = call(
        either_worker.connection(),
        "POST",
        "/plants",
        {"id": 1002, "name": "Fern"},
        {"Authorization": "Bearer wrong"},
    )
    assert_error(status, headers, body, 401)
    assert headers["WWW-Authenticate"] == 'Bearer realm="plants", error="invalid_token"'
    status, headers, body = call(
        either_worker.connection(),
        "POST",
        "/plants",
        {"id": 1002, "name": "Fern"},
        {"Authorization": "Bearer "},
    )
    assert_error(status, headers, body, 400)
    assert headers["WWW-Authenticate"] == 'Bearer realm="plants", error="invalid_request"'


def test_body_errors(either_worker):
    assert_error(*call(either_worker.connection(), "POST", "/plants", b"{", AUTH), 400)
    record = assert_error(
        *call(either_worker.connection(), "POST", "/plants", {"id": 1003, "name": "F", "tags": "x"}, AUTH),
        400,
    )
    assert record["details"] == {"tags": ["Unknown field."]}
    assert_error(
        *call(either_worker.connection(), "POST", "/plants", "{}", {**AUTH, "Content-Type": "text/plain"}),
        415,
    )
    big = json.dumps({"id": 1003, "name": "x" * 70_000})
    assert_error(*call(either_worker.connection(), "POST", "/plants", big, AUTH), 413)


def test_unknown_path_and_method_are_json(either_worker):
    assert_error(*call(either_worker.connection(), "GET", "/nowhere"), 404)
    status, headers, body = call(either_worker.connection(), "PUT", "/plants", headers=AUTH)
    assert_error(status, headers, body, 405)
    assert headers["Allow"] == "GET, HEAD, POST, OPTIONS"
    status, headers, body = call(either_worker.connection(), "POST", "/plants/1", headers=AUTH)
    assert_error(status, headers, body, 405)
    assert headers["Allow"] == "GET, HEAD, PUT, PATCH, DELETE, OPTIONS"


def test_healthz_and_openapi(either_worker):
    status, _, body = call(either_worker.connection(), "GET", "/healthz")
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    status, _, body = call(either_worker.connection(), "GET", "/openapi.json")
    assert (status, json.loads(body)["openapi"]) == (200, "3.1.0")


def test_access_log_has_requests_but_never_the_token(gunicorn):
    call(gunicorn.connection(), "POST", "/plants", {"id": 1004, "name": "Fern"}, AUTH)
    call(
        gunicorn.connection(),
        "POST",
        "/plants",
        {"id": 1004, "name": "Fern"},
        {"Authorization": "Bearer wrong-secret"},
    )
    time.sleep(0.2)
    log = gunicorn.output()
    assert '"POST /plants HTTP/1.1" 200' in log
    assert '"POST /plants HTTP/1.1" 401' in log
    assert TOKEN not in log
    assert "wrong-secret" not in log
    assert "Bearer" not in log


def start_short_read_timeout_server() -> Gunicorn:
    return Gunicorn(env={"GUNICORN_READ_TIMEOUT": "1", "GUNICORN_THREADS": "2"})


@pytest.fixture(scope="module")
def short_read_timeout_server():
    """One for the module's stalled clients: each test closes its own, which the server answers
    408 and forgets within the read timeout. (Not the log line's test: that line is written once
    in 5 s at most, for every 408 in them.)"""
    server = start_short_read_timeout_server()
    yield server
    server.stop()


@pytest.fixture
def own_short_read_timeout_server():
    server = start_short_read_timeout_server()
    yield server
    server.stop()


STALLED_HEADERS = b"POST /plants HTTP/1.1\r\nHost: x\r\n"
STALLED_BODY = (
    b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b'Authorization: Bearer test-token-1\r\nContent-Length: 100\r\n\r\n{"id": 1'
)


def stall_clients(server, partial, count):
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(partial)
        sockets.append(sock)
    return sockets


def answered(sock: socket.socket) -> bool:
    """Whether the server has sent `sock` anything yet (or closed it), without waiting."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    return True


def read_all(sock, timeout=5.0):
    sock.settimeout(timeout)
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("partial", [STALLED_HEADERS, STALLED_BODY], ids=["stalled-headers", "stalled-body"])
def test_stalled_clients_release_their_threads(short_read_timeout_server, partial):
    server = short_read_timeout_server
    stalled = stall_clients(server, partial, 3)  # more stalled clients than the 2 threads
    try:
        status, _, body = call(server.connection(), "GET", "/healthz")
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        # They never held a thread: served while each still waits for its deadline's 408 (with
        # the 2 threads held, it would be served only once two of them had theirs).
        assert not [sock for sock in stalled if answered(sock)]
        for sock in stalled:  # past the deadline each gets a 408, and the connection closes
            assert read_all(sock).startswith(b"HTTP/1.1 408 ")
    finally:
        for sock in stalled:
            sock.close()


def test_stalled_headers_are_408_with_one_log_line(own_short_read_timeout_server):
    (sock,) = stall_clients(own_short_read_timeout_server, STALLED_HEADERS, 1)
    with sock:
        # The head's deadline, the 1 s read timeout, answers within read_all's 5 s: a 408 comes
        # from that deadline alone.
        head, _, body = read_all(sock).partition(b"\r\n\r\n")  # closed after the 408
    assert head.startswith(b"HTTP/1.1 408 ")
    assert json.loads(body)["error"] == 408
    time.sleep(0.2)
    log = own_short_read_timeout_server.output()
    assert "Answered 408 to a client that did not send its whole request within 1.0s" in log
    assert "Traceback" not in log


def test_stalled_body_is_408_and_the_connection_closes(short_read_timeout_server):
    (sock,) = stall_clients(short_read_timeout_server, STALLED_BODY, 1)
    with sock:
        # read_all returns only at end of stream: the server closes the connection,
        # since the rest of the body cannot be drained.
        response = read_all(sock)
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"\r\nContent-Type: application/json" in head
    assert json.loads(body)["error"] == 408


def test_flask_run_for_local_development():
    port = free_port()
    env = {**os.environ, "PLANTS_API_TOKENS": TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "wsgi", "run", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_serving(port, process)
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/plants", body=json.dumps({"id": 1, "name": "Fern"}), headers=AUTH)
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())) == (200, {"name": "Fern"})
    finally:
        process.terminate()
        process.wait(10)


def test_expect_100_continue_is_answered_before_the_body_is_read(gunicorn):
    """The worker reads bodies on its poller: a client that waits for `100 Continue` (curl does,
    for large bodies) gets it once the head is in, then its answer once the body is."""
    body = b'{"id": 100100, "name": "Patient fern"}'
    with socket.create_connection(("127.0.0.1", gunicorn.port), timeout=5) as sock:
        sock.sendall(
            b"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-token-1\r\n"
            b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        answer = sock.recv(1000)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b'{"name":"Patient fern"}\n')


def test_gunicorn_worker_class_gthread_runs_the_stock_worker():
    """GUNICORN_WORKER_CLASS=gthread: gunicorn's stock threaded worker serves the same service."""
    server = Gunicorn(env={"GUNICORN_WORKER_CLASS": "gthread"})
    try:
        status, _, body = call(server.connection(), "POST", "/plants", {"id": 1090, "name": "Fern"}, AUTH)
        assert (status, json.loads(body)) == (200, {"name": "Fern"})
        assert_error(*call(server.connection(), "POST", "/plants", b"{", AUTH), 400)
    finally:
        server.stop()
    assert "Using worker: gthread" in server.output()
