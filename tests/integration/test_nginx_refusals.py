"""What nginx itself refuses, in front of the service with the shipped site: the JSON Error record."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

import pytest

from app.plants.routes import ROUTES, allowed_methods
from tests.contract.test_cors import concrete
from tests.helpers import assert_error
from tests.servers import TOKEN, Gunicorn, Nginx

LONG = "a" * 9000  # over one of nginx's 8 KiB header buffers


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    app = Gunicorn(env={"PLANTS_TRUSTED_PROXIES": "1", "GUNICORN_THREADS": "2"})
    nginx = Nginx(app.port, tmp_path_factory.mktemp("nginx-refusals"))
    yield nginx
    nginx.stop()
    app.stop()


def exchange(port: int, request: bytes, method: str = "GET") -> tuple[int, http.client.HTTPMessage, bytes]:
    """`request`'s bytes on a new connection: the status, headers and body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        return response.status, response.headers, response.read()


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        pytest.param(
            b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
            id="content-length-with-transfer-encoding",
        ),
        pytest.param(
            b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            400,
            id="two-content-lengths",
        ),
        pytest.param(
            b"POST /plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
            501,
            id="chunked-then-identity",
        ),
        pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400, id="obs-fold"),
        pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400, id="bare-cr"),
        pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, id="two-hosts"),
        pytest.param(b"GET /healthz HTTP/1.1 extra\r\nHost: x\r\n\r\n", 400, id="bad-request-line"),
        pytest.param(b"GARBAGE\r\n\r\n", 400, id="no-request-line"),
        pytest.param(b"GET /plants/%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, id="bad-percent-encoding"),
        pytest.param(b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, id="http-2-line"),
        pytest.param(f"GET /plants?q={LONG} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), 414, id="long-line"),
        pytest.param(
            f"GET /healthz HTTP/1.1\r\nHost: x\r\nX-B: {LONG}\r\n\r\n".encode(), 431, id="long-field"
        ),
    ],
)
def test_nginxs_own_refusals_are_the_json_error_record(proxy, request_bytes, expected):
    status, headers, body = exchange(proxy.port, request_bytes)
    assert_error(status, headers, body, expected)
    assert headers["X-Content-Type-Options"] == "nosniff"  # as every answer of the service
    assert headers["Connection"] == "close"  # nothing after a refused request is read as another


#: Each path, and the Allow of the service's 405 to TRACE there (None: the service's 404).
TRACED = [
    *[
        (concrete(rule).replace("<name>", "swagger-ui.css"), ", ".join([*allowed_methods(rule), "OPTIONS"]))
        for rule in dict.fromkeys(route.rule for route in ROUTES)
    ],
    ("/healthz", "GET, HEAD, OPTIONS"),
    ("/nowhere", None),
    ("/plants/", None),
]


@pytest.mark.parametrize(("path", "allow"), TRACED, ids=[path for path, _ in TRACED])
def test_trace_is_answered_as_the_service_answers_it(proxy, path, allow):
    """nginx refuses TRACE itself, with a 405 that has no Allow (RFC 9110 §15.5.6 asks one): the
    site passes it on, so the client gets the service's own answer, a body sent with it dropped."""
    for framing in (
        b"",
        b"Content-Length: 5\r\n\r\nhello",
        b"Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
    ):
        request = f"TRACE {path}?ticket=x HTTP/1.1\r\nHost: x\r\n".encode() + (framing or b"\r\n")
        status, headers, body = exchange(proxy.port, request)
        assert_error(status, headers, body, 404 if allow is None else 405)
        assert headers.get("Allow") == allow
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert len(headers["X-Request-Id"]) == 32  # the service's answer, with nginx's id


def test_trace_with_the_service_down_is_the_json_503(tmp_path):
    app = Gunicorn()
    proxy = Nginx(app.port, tmp_path)
    try:
        app.stop()
        status, headers, body = exchange(proxy.port, b"TRACE /plants HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_error(status, headers, body, 503)
        assert headers["Retry-After"] == "5"
    finally:
        proxy.stop()


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST"])
def test_the_error_page_is_not_reachable_itself(proxy, method):
    request = f"{method} /.plants-error HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode()
    status, headers, body = exchange(proxy.port, request, method)
    if method == "HEAD":
        assert (status, headers["Content-Type"], body) == (404, "application/json", b"")
    else:
        assert_error(status, headers, body, 404)


def test_an_http_1_0_request_without_host_is_served_with_links_to_the_listener(proxy):
    # RFC 9112 asks a Host of HTTP/1.1 only: the worker reached directly serves such a request,
    # and behind nginx it must not be refused for the Host nginx itself left out.
    body = b'{"name": "hostless"}'
    head = (
        f"PUT /plants/9301 HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    status, headers, data = exchange(proxy.port, head.encode() + body)
    assert status == 201, data
    assert headers["Location"] == f"http://127.0.0.1:{proxy.port}/plants/9301"


def test_an_http_0_9_request_is_refused_as_the_worker_refuses_it(proxy):
    # HTTP/0.9 has no status line nor headers: the answer is the Error record's bytes alone.
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=15) as sock:
        sock.sendall(b"GET /healthz\r\n")
        answer = sock.makefile("rb").read()
    assert json.loads(answer)["error"] == 400


@pytest.mark.parametrize(("own_fields", "expected"), [(95, 200), (96, 431)])
def test_a_client_has_95_header_fields_of_its_own_through_nginx(proxy, own_fields, expected):
    # The worker takes 100; nginx adds X-Forwarded-For, -Proto, -Host, -Port and X-Request-Id.
    fields = "".join(f"X-Field-{n}: v\r\n" for n in range(own_fields - 1))
    status, headers, body = exchange(proxy.port, f"GET /healthz HTTP/1.1\r\nHost: x\r\n{fields}\r\n".encode())
    if expected == 200:
        assert status == 200, body
    else:
        assert_error(status, headers, body, expected)


def test_a_body_that_looks_like_a_request_never_becomes_one_upstream(proxy):
    """Pipelined requests, each with a body that is itself a request, on clients sharing nginx's
    kept-alive upstream connections: every answer is the one its request asked for."""
    names = {n: f"pipelined-{n}" for n in range(9401, 9405)}
    for number, name in names.items():
        body = json.dumps({"name": name}).encode()
        head = f"PUT /plants/{number} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        assert exchange(proxy.port, head.encode() + body)[0] == 201
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    order = [9401, 9402, 9403, 9404, 9402, 9401]
    requests = b""
    for number in order:
        inner = b"GET /plants/9404 HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n"
        requests += f"GET /plants/{number} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(inner)}\r\n".encode()
        requests += auth + b"\r\n" + inner
    requests += b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    clients = [socket.create_connection(("127.0.0.1", proxy.port), timeout=15) for _ in range(3)]
    for sock in clients:
        sock.sendall(requests)
    for sock in clients:
        with sock, sock.makefile("rb") as stream:
            for number in [*order, None]:
                status, body = next_answer(stream)
                assert status == 200, body
                expected = {"status": "ok"} if number is None else {"name": names[number]}
                assert json.loads(body) == expected


def next_answer(stream: Any) -> tuple[int, bytes]:
    """The status and body of the next answer on a connection (each has a Content-Length)."""
    status = int(stream.readline().split()[1])
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, stream.read(length)


@pytest.mark.parametrize("head", ["OPTIONS * HTTP/1.1\r\nHost: x", "GET /plants HTTP/1.1\r\nHost: a b"])
def test_star_and_a_host_that_is_no_host_stay_nginxs_400(proxy, head):
    """The service answers each itself reached directly (test_request_host.py); nginx first."""
    status, headers, body = exchange(proxy.port, f"{head}\r\nConnection: close\r\n\r\n".encode())
    assert_error(status, headers, body, 400)


def test_behind_nginx_an_unknown_expectation_is_served(proxy):
    """nginx does not hand this `Expect` on: the service's 417 for an expectation besides
    100-continue (reached directly) is not met behind the shipped site."""
    sent = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: nothing\r\nConnection: close\r\n\r\n"
    status, _, body = exchange(proxy.port, sent)
    assert (status, json.loads(body)) == (200, {"status": "ok"})
