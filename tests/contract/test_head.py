"""HEAD on every GET route answers as GET would, without the body (RFC 9110 §9.3.2), through a
real gunicorn: the same status and headers, 304 for a matching If-None-Match, and counted."""

from __future__ import annotations

import socket

import pytest

from tests.servers import TOKEN, Gunicorn

AUTH = f"Authorization: Bearer {TOKEN}\r\n"
# The headers that describe the body or the resource, which HEAD must give as GET does.
SAME = ("content-length", "content-type", "etag", "link", "allow", "www-authenticate", "retry-after")


@pytest.fixture(scope="module")
def server():
    server = Gunicorn()
    for plant_id in (1, 2, 3):
        create = f'{{"id": {plant_id}, "name": "Fern {plant_id}", "tag": "fern"}}'
        head, _ = exchange(server, "POST", "/plants", create)
        assert head.startswith(b"HTTP/1.1 200 ")
    yield server
    server.stop()


def exchange(server, method: str, path: str, body: str = "", extra: str = "", auth: bool = True):
    """One request on a new connection, then a GET /healthz on the same one: HEAD's answer must
    end where its headers do, or the second answer would be misread."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        content = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if body else ""
        sock.sendall(
            f"{method} {path} HTTP/1.1\r\nHost: x\r\n{AUTH if auth else ''}{extra}{content}\r\n{body}"
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    body_bytes = b"" if method == "HEAD" or head.split()[1] in (b"204", b"304") else rest[:length]
    after = rest[len(body_bytes) :]
    assert after.startswith(b"HTTP/1.1 200 "), (head, rest[:200])  # the next answer starts right there
    return head, body_bytes


def headers_of(head: bytes) -> dict[str, str]:
    lines = head.decode().split("\r\n")[1:]
    return {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}


@pytest.mark.parametrize(
    ("path", "auth"),
    [
        ("/plants", True),
        ("/plants?limit=1&tags=fern", True),
        ("/plants/1", True),
        ("/plants/404", True),
        ("/plants/abc", True),
        ("/plants", False),
        ("/events?limit=1", True),
        ("/healthz", False),
        ("/readyz", False),
        ("/openapi.json", False),
        ("/docs", False),
        ("/metrics", True),
    ],
)
def test_head_answers_as_get_without_the_body(server, path, auth):
    get_head, get_body = exchange(server, "GET", path, auth=auth)
    head_head, head_body = exchange(server, "HEAD", path, auth=auth)
    assert head_head.split(b"\r\n")[0] == get_head.split(b"\r\n")[0]  # the same status line
    assert head_body == b""
    got, expected = headers_of(head_head), headers_of(get_head)
    for name in SAME:
        if name == "content-length" and path == "/metrics":
            continue  # the counts themselves changed between the two
        if name == "link" and "link" in expected:
            assert got[name].split("after=")[0] == expected[name].split("after=")[0]
            continue
        assert got.get(name) == expected.get(name), name
    if path == "/plants":
        assert int(got["content-length"]) == len(get_body)


def test_head_with_a_matching_if_none_match_is_304(server):
    head, _ = exchange(server, "HEAD", "/plants/1")
    etag = headers_of(head)["etag"]
    head, body = exchange(server, "HEAD", "/plants/1", extra=f"If-None-Match: {etag}\r\n")
    assert head.startswith(b"HTTP/1.1 304 ")
    assert headers_of(head)["etag"] == etag
    assert body == b""


def test_head_is_counted_in_the_metrics(server):
    exchange(server, "HEAD", "/plants/2")
    _, body = exchange(server, "GET", "/metrics")
    assert (
        'plants_http_requests_total{method="HEAD",route="/plants/<plant_id>",status="200"}' in body.decode()
    )


@pytest.mark.parametrize(
    ("accept", "kind"),
    [
        ("text/event-stream", "text/event-stream"),
        ("text/event-stream;charset=utf-8", "text/event-stream"),  # as the stream is sent
        ("text/event-stream; charset=UTF-8, application/json;q=0.5", "text/event-stream"),
        ("text/event-stream;charset=iso-8859-1, application/json;q=0.5", "application/json"),
        ("application/json", "application/json"),
    ],
)
def test_head_of_the_feed_has_the_type_get_would_answer(server, accept, kind):
    """`Accept: text/event-stream` asks GET /events for a stream, which never ends by itself: its
    head is read alone. HEAD answers that head (the stream's type, no Content-Length) and holds no
    watch; with JSON asked, the page's."""
    extra = f"Accept: {accept}\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(f"GET /events HTTP/1.1\r\nHost: x\r\n{AUTH}{extra}\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
    get_head = data.partition(b"\r\n\r\n")[0]
    head_head, head_body = exchange(server, "HEAD", "/events", extra=extra)
    assert head_head.split(b"\r\n")[0] == get_head.split(b"\r\n")[0] == b"HTTP/1.1 200 OK"
    assert head_body == b""
    got, expected = headers_of(head_head), headers_of(get_head)
    assert got["content-type"].split(";")[0] == kind
    for name in (*SAME, "cache-control", "x-accel-buffering"):
        if name == "content-length" and kind == "application/json":
            continue  # the page's `next` is a new cursor each time
        assert got.get(name) == expected.get(name), name


def test_head_of_a_long_poll_that_would_wait_has_the_watch_headers(server):
    """A GET that finds no event after `now` waits, and its answer (a watch) has no ETag; its HEAD
    answers those headers at once and holds no watch. Its length, known only once the watch
    answers, it may leave out (RFC 9110 §9.3.2)."""
    get_head, _ = exchange(server, "GET", "/events?after=now&wait=1")
    head_head, head_body = exchange(server, "HEAD", "/events?after=now&wait=30")
    assert head_head.split(b"\r\n")[0] == get_head.split(b"\r\n")[0] == b"HTTP/1.1 200 OK"
    assert head_body == b""
    got, expected = headers_of(head_head), headers_of(get_head)
    assert "etag" not in got
    assert "content-length" not in got
    for name in (*SAME, "cache-control", "vary"):
        if name != "content-length":
            assert got.get(name) == expected.get(name), name
