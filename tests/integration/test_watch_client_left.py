"""A watch whose client left gives its place back without waiting out its wait or its next heartbeat,
under gunicorn's stock gthread worker as under the packaged one: it held its request thread and its
token's place (PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN) until its long-poll's `wait` ran out or a
heartbeat's send failed, so a client that reconnected after a dropped connection (a page reloaded,
a client's own timeout) was refused 429 for up to a minute, and its gthread worker's threads held."""

from __future__ import annotations

import http.client
import json
import socket
import time

import pytest

from tests.helpers import watches_started
from tests.servers import TOKEN, Gunicorn

HEAD = f"Host: x\r\nAuthorization: Bearer {TOKEN}\r\n"
LONG_POLL = f"GET /events?after=now&wait=55 HTTP/1.1\r\n{HEAD}\r\n"
STREAM = f"GET /events?after=now HTTP/1.1\r\n{HEAD}Accept: text/event-stream\r\n\r\n"


@pytest.fixture(scope="module", params=["packaged", "gthread"])
def server(request):
    args = ("--worker-class", "gthread") if request.param == "gthread" else ()
    env = {
        "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "2",
        "PLANTS_EVENTS_HEARTBEAT": "60",  # no heartbeat's failed send finds the stream's client gone
        "GUNICORN_THREADS": "4",
    }
    server = Gunicorn(env=env, args=args)
    yield server
    server.stop()


def short_watch(server: Gunicorn) -> tuple[int, bytes]:
    """A long-poll of a second: 200 once admitted, 429 while the token's places are all held."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=15)
    try:
        conn.request("GET", "/events?after=now&wait=1", headers={"Authorization": f"Bearer {TOKEN}"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("watch", [LONG_POLL, STREAM], ids=["long-poll", "stream"])
def test_a_watch_whose_client_left_gives_its_place_back(server, watch):
    before = watches_started(server, TOKEN)
    clients = []
    for number in range(2):
        client = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        client.sendall(watch.encode())
        clients.append(client)
        deadline = time.monotonic() + 20
        while watches_started(server, TOKEN) < before + number + 1:
            assert time.monotonic() < deadline, "the watch was not held"
            time.sleep(0.05)
    status, body = short_watch(server)
    assert status == 429, body  # both places held
    assert json.loads(body)["error"] == 429
    for client in clients:
        client.close()
    # Well within the long-poll's 55 s and the stream's 60 s heartbeat: the places come back as
    # the server notices its clients gone, not when their watches run their course.
    deadline = time.monotonic() + 20
    while True:
        status, body = short_watch(server)
        if status == 200:
            break
        assert status == 429, body
        assert time.monotonic() < deadline, "the watches whose clients left still hold their places"
        time.sleep(0.2)
    assert json.loads(body)["events"] == []
