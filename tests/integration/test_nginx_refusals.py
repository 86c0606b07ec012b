"""What nginx itself refuses, in front of the service with the shipped site: the JSON Error record."""

from __future__ import annotations

import http.client
import json
import socket

import pytest

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
        pytest.param(b"TRACE /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 405, id="trace"),
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
    assert headers["Connection"] == "close"  # nothing after a refused request is read as another


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
