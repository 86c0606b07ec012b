"""A request's head fields answered alike on every server the service runs under (the packaged
worker, gunicorn's stock gthread worker, `flask --app wsgi run`), each reached directly:

- a comma in `Host` is two `Host` fields joined (gunicorn 23 and Werkzeug join repeated fields so):
  the JSON 400 the packaged worker answers two fields with (RFC 9112 section 3.2);
- `Connection: close` among other options closes the connection after the answer;
- a transfer coding other than `chunked` is the JSON 501 on every path (/healthz, an unknown one),
  `chunked` not last and `Transfer-Encoding` in HTTP/1.0 the 400, then the connection closes;
- an expectation other than `100-continue` is the 417 RFC 9110 section 10.1.1 allows;
- an absolute request line whose authority's port is no number, or whose IP literal is unclosed,
  is the JSON 400 under `flask run` too, and its line is logged.

gunicorn 27's own parser refuses two `Host` fields, `chunked` not last, HTTP/1.0's
`Transfer-Encoding` and an unknown expectation before the app, with its HTML page: the status is
the same, the body is gunicorn's (docs/operations.md, the worker)."""

from __future__ import annotations

import contextlib
import re
import socket

import pytest

from tests.integration.test_request_host import flask_run  # noqa: F401  (the fixture)
from tests.rawhttp import exchange, responses

SERVERS = ("packaged worker", "gthread", "flask run")


@pytest.fixture(params=SERVERS)
def served(request, gunicorns) -> tuple[str, int]:
    """The server's name and the port it serves on."""
    if request.param == "flask run":
        return request.param, request.getfixturevalue("flask_run").port
    return request.param, gunicorns("memory" if request.param == "packaged worker" else "stock-worker").port


def answered(port: int, head: str) -> tuple[int, str, dict]:
    """Status, Content-Type and JSON body (or {}) of `head` (its lines, CRLF-ended) sent alone."""
    answer = exchange(port, f"{head}Connection: close\r\n\r\n".encode("latin-1"))
    assert answer is not None
    kind = answer.headers["Content-Type"]
    return answer.status, kind, answer.json() if kind == "application/json" else {}


def parser_or_json(name: str, kind: str, record: dict, status: int) -> None:
    """The JSON Error of `status`, or, under gthread, gunicorn's own page where its parser answers."""
    if name == "gthread" and kind.startswith("text/html"):
        return
    assert kind == "application/json"
    assert record["error"] == status


@pytest.mark.parametrize("host", ["a.example,b.example", "a.example, b.example", ",a.example"])
def test_a_comma_in_host_reads_as_two_host_fields_the_json_400(served, host):
    """RFC 3986's reg-name allows a comma, but no DNS name has one; gunicorn 23 and Werkzeug hand
    two fields on as one joined by a comma, which was served."""
    _, port = served
    status, kind, record = answered(port, f"GET /plants HTTP/1.1\r\nHost: {host}\r\n")
    assert (status, kind) == (400, "application/json")
    assert "one Host field" in record["message"]


def test_two_host_fields_are_the_400(served):
    name, port = served
    status, kind, record = answered(port, "GET /healthz HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n")
    assert status == 400
    parser_or_json(name, kind, record, 400)


@pytest.mark.parametrize("options", ["close, X-Trace", "X-Trace, Close", "keep-alive, close"])
def test_connection_close_among_other_options_closes_after_the_answer(served, options):
    """gthread read only a field that was `close` alone, and kept the connection open."""
    _, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: {options}\r\nX-Trace: 1\r\n\r\n".encode()
        )
        answers = responses(sock, 1)
        sock.settimeout(5)  # well short of the keep-alive (GUNICORN_KEEPALIVE)
        assert sock.recv(1) == b""  # closed: an open connection's read times out
    assert [(answer.status, answer.headers["Connection"]) for answer in answers] == [(200, "close")]


def test_connection_keep_alive_among_other_options_keeps_it(served):
    """(Werkzeug's development server closes after every answer.)"""
    name, port = served
    statuses = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for options in ("keep-alive, X-Trace", "close"):
            with contextlib.suppress(OSError):  # the development server closed after the first
                sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: {options}\r\n\r\n".encode())
            statuses += [answer.status for answer in responses(sock, 1)]
    assert statuses == ([200] if name == "flask run" else [200, 200])


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/nowhere", "/plants"])
def test_a_transfer_coding_besides_chunked_is_the_json_501_on_every_path(served, path):
    """/healthz and an unknown path were served (200, 404) under gthread and `flask run`: only the
    plants blueprint refused the coding."""
    _, port = served
    sent = (
        f"GET {path} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n"
        "0\r\n\r\n"
    )
    answer = exchange(port, sent.encode())
    assert answer is not None
    assert (answer.status, answer.headers["Content-Type"]) == (501, "application/json")
    assert answer.json()["error"] == 501


@pytest.mark.parametrize(
    ("version", "codings"), [("HTTP/1.1", "chunked, gzip"), ("HTTP/1.0", "chunked")], ids=["last", "1.0"]
)
def test_a_framing_no_length_can_be_read_from_is_the_400_and_the_connection_closes(served, version, codings):
    """RFC 9112 section 6.3 (`chunked` not last) and section 6.1 (HTTP/1.0 has no transfer coding):
    `flask run` served them, and read what followed as a request."""
    name, port = served
    first = f"GET /healthz {version}\r\nHost: a\r\nTransfer-Encoding: {codings}\r\n\r\n0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"{first}GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n".encode())
        answers = responses(sock, 2)
    assert [answer.status for answer in answers] == [400]
    (answer,) = answers
    kind = answer.headers["Content-Type"]
    parser_or_json(name, kind, answer.json() if kind == "application/json" else {}, 400)


@pytest.mark.parametrize("expectation", ["nothing", "100-continue, nothing", "200-ok"])
def test_an_expectation_besides_100_continue_is_the_417(served, expectation):
    """RFC 9110 section 10.1.1 lets a server answer 417; gunicorn 27's parser does, so every server
    does: the packaged worker and `flask run` served it."""
    name, port = served
    status, kind, record = answered(port, f"GET /healthz HTTP/1.1\r\nHost: a\r\nExpect: {expectation}\r\n")
    assert status == 417
    parser_or_json(name, kind, record, 417)


@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
def test_expect_100_continue_is_served(served, version):
    """In HTTP/1.0, RFC 9110 section 10.1.1 has the expectation ignored."""
    _, port = served
    status, _, record = answered(port, f"GET /healthz {version}\r\nHost: a\r\nExpect: 100-Continue\r\n")
    assert (status, record) == (200, {"status": "ok"})


@pytest.mark.parametrize(
    "target", ["http://b.example:8x/healthz", "http://b.example:-1/healthz?a=1", "http://[::1/healthz"]
)
def test_an_absolute_target_whose_authority_is_unreadable_is_the_400(served, target):
    """Werkzeug's development server dropped such a request: an unclosed IP literal before the app
    (its `urlsplit` raises), a port that is no number as it wrote the answer's request line (its
    `uri_to_iri` raises), and closed the connection without the 400."""
    name, port = served
    status, kind, record = answered(port, f"GET {target} HTTP/1.1\r\nHost: a\r\n")
    assert status == 400
    parser_or_json(name, kind, record, 400)


@pytest.mark.parametrize("authority", ["b.example:9x", "[::2"])
def test_flask_run_logs_the_line_of_an_unreadable_target(flask_run, authority):  # noqa: F811
    target = f"http://{authority}/events?ticket=plwt_s3cr3t"
    assert answered(flask_run.port, f"GET {target} HTTP/1.1\r\n")[0] == 400
    output = re.sub(r"\x1b\[[0-9;]*m", "", flask_run.output())
    assert f'"GET http://{authority}/events?ticket=plwt_[redacted] HTTP/1.1" 400' in output
    assert "s3cr3t" not in output
    assert "Error on request" not in output
    assert "Exception occurred" not in output
