"""gunicorn's `pre_request` and `post_request` hooks get, from the packaged worker, a request with
the attributes gunicorn documents for its own: read here against gunicorn's parser, on the same bytes."""

from __future__ import annotations

import socket

import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser

from app.server.worker.connection import Conn, Context, RequestLimits
from app.server.worker.cycle import Answer

REQUESTS = [
    b"GET /plants?limit=5&tag=x HTTP/1.1\r\nHost: a\r\nX-Thing: 1\r\n\r\n",
    b"POST /plants HTTP/1.0\r\nHost: a\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}",
    b"GET /docs/assets/x.js#frag HTTP/1.1\r\nHost: a\r\naccept: */*\r\n\r\n",
    b"GET http://a/plants?limit=5#f HTTP/1.1\r\nHost: a\r\n\r\n",  # absolute-form (RFC 9112 section 3.2.2)
    b"GET http://a:80 HTTP/1.1\r\nHost: a\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
]


@pytest.mark.parametrize("data", REQUESTS)
def test_the_hooks_request_reads_as_gunicorns(data):
    limits = RequestLimits(4094, 100, 8190, 65536, 65536)
    with socket.socket() as sock:  # never connected: only the parser is fed
        conn = Conn(sock, None, None, Context(None, None, print, None, 10.0, limits))
        conn.incoming.feed(data)
    ours = conn.incoming.ready.popleft()
    theirs = next(iter(RequestParser(Config(), iter([data]), ("127.0.0.1", 1))))
    for name in ("method", "uri", "path", "query", "fragment", "version", "headers", "trailers", "scheme"):
        assert getattr(ours, name) == getattr(theirs, name), name


def test_the_hooks_response_has_gunicorns_status_code():
    answer = Answer()
    answer.start_response("404 NOT FOUND", [])
    assert answer.status_code == 404
