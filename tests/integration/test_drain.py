"""A graceful drain on SIGTERM, through a real gunicorn on memory and on a real Redis: /readyz is
503 at once, requests in flight finish with their answers, a kept-alive connection closes after
its answer, a webhook mid-delivery is not lost, and (on Redis) nothing acknowledged is lost."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
import uuid

import pytest

from tests.conftest import redis_settings
from tests.helpers import call
from tests.receiver import Receiver
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def creator(
    port: int, first: int, acknowledged: list[int], failures: list[str], stop: threading.Event
) -> None:
    """Creates one plant per connection until the server refuses connections: every request that
    was accepted must get its whole answer."""
    plant_id = first
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            conn.connect()
        except OSError:
            return  # the server no longer accepts: the drain began
        try:
            conn.request("POST", "/plants", body=json.dumps({"id": plant_id, "name": "Fern"}), headers=AUTH)
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                acknowledged.append(plant_id)
            else:
                failures.append(f"{plant_id}: {response.status}")
        except (ConnectionError, http.client.HTTPException) as exc:
            # Sent before the listener closed, or after: only a request the server read must be answered.
            failures.append(f"{plant_id}: {exc!r}")
        finally:
            conn.close()
        plant_id += 1


def drain_begun(server: Gunicorn) -> bool:
    """A new connection's /readyz is 503, or the connection is reset or refused: the master closes
    its copy of the listening socket before it signals the worker, so the socket goes (its queued
    connections reset, new ones refused) only once the worker has closed its own, in its drain."""
    try:
        return call(server.connection(), "GET", "/readyz")[0] == 503
    except (ConnectionResetError, ConnectionRefusedError):
        return True


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_sigterm_drains(request, store):
    env = {
        "GUNICORN_THREADS": "4",
        "GUNICORN_GRACEFUL_TIMEOUT": "10",
        "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1",
    }
    if store == "redis":
        redis_server = request.getfixturevalue("redis_server")
        env |= {"PLANTS_STORE_URL": redis_server.url, "PLANTS_STORE_PREFIX": uuid.uuid4().hex}
    # The receiver holds the first delivery for 1.5 s: it is mid-delivery when SIGTERM comes.
    receiver = Receiver(lambda delivery, number: (204, {}, 1.5) if number == 1 else (204, {}, 0))
    server = Gunicorn(env=env)
    try:
        kept = server.connection()
        kept.request("GET", "/readyz")
        answer = kept.getresponse()
        assert (answer.status, json.loads(answer.read())) == (200, {"status": "ok"})
        status, _, body = call(server.connection(), "POST", "/webhooks", {"url": receiver.url}, AUTH)
        assert status == 201, body
        assert call(server.connection(), "POST", "/plants", {"id": 1, "name": "Hooked"}, AUTH)[0] == 200
        receiver.wait_for(1)  # the delivery is in flight

        acknowledged: list[int] = []
        failures: list[str] = []
        stop = threading.Event()
        threads = [
            threading.Thread(target=creator, args=(server.port, 1000 * (n + 1), acknowledged, failures, stop))
            for n in range(4)
        ]
        for thread in threads:
            thread.start()
        # Creates under way (and answered) before the stop, however slowly a loaded machine runs them.
        deadline = time.monotonic() + 30
        while len(acknowledged) <= 10:
            assert time.monotonic() < deadline, (acknowledged, failures)
            time.sleep(0.02)
        server.process.send_signal(signal.SIGTERM)
        # The worker has had its SIGTERM once a new connection's /readyz is 503: with its one
        # worker, the kept-alive connection's too. The master passes the signal on when it runs,
        # which a loaded machine can put off past any fixed sleep.
        deadline = time.monotonic() + 10
        while not drain_begun(server):
            assert time.monotonic() < deadline, "the worker never began its drain"
            time.sleep(0.02)
        # The kept-alive connection's next request: not ready, and the connection closes after it.
        kept.request("GET", "/readyz")
        answer = kept.getresponse()
        body = json.loads(answer.read())
        assert answer.status == 503
        assert body["message"] == "Not ready: the server is stopping; its requests in flight finish."
        assert answer.getheader("Connection") == "close"
        for thread in threads:
            thread.join(20)
        stop.set()
        assert server.process.wait(20) == 0
        assert [
            failure for failure in failures if "Refused" not in failure and "Reset" not in failure
        ] == [], failures
        print(f"{len(acknowledged)} acknowledged, {len(failures)} refused or reset at the listener")
    finally:
        server.stop()

    output = server.output()
    assert "Traceback" not in output
    if store == "memory":
        receiver.stop()
        return
    # On Redis, after a restart: every acknowledged create is there, and the webhook that was
    # mid-delivery was sent (at least once), so its event was not lost either.
    again = Gunicorn(env=env)
    try:
        for plant_id in acknowledged:
            assert call(again.connection(), "GET", f"/plants/{plant_id}", None, AUTH)[0] == 200, plant_id
        deliveries = receiver.wait_for(1)
        assert {d.event["data"]["id"] for d in deliveries if d.event["type"] == "plant.created"} >= {1}
    finally:
        again.stop()
        receiver.stop()


def test_a_gthread_worker_recycled_at_max_requests_ends_its_streams_and_is_replaced(redis_server):
    """gthread stops itself at --max-requests: a feed stream it held kept it (and, with one worker,
    every client) from being replaced for a minute, and was then cut without its end. The stream
    now ends with its `retry:`, and a request after the limit is answered by the next worker."""
    env = {**redis_settings(redis_server), "GUNICORN_WORKER_CLASS": "gthread", "WEB_CONCURRENCY": "1",
           "GUNICORN_THREADS": "4", "GUNICORN_GRACEFUL_TIMEOUT": "10"}  # fmt: skip
    server = Gunicorn(env=env, args=("-c", "python:app.server.gunicorn_conf", "--max-requests", "8"))
    try:
        stream = socket.create_connection(("127.0.0.1", server.port), timeout=20)
        stream.sendall(
            b"GET /events?after=now HTTP/1.1\r\nHost: plants\r\nAccept: text/event-stream\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        received = stream.recv(4096)
        assert received.startswith(b"HTTP/1.1 200 "), received
        statuses = []
        for plant_id in range(8):  # past the limit: the worker stops after one of these
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
            statuses.append(call(conn, "POST", "/plants", {"id": 7000 + plant_id, "name": "Fern"}, AUTH)[0])
        assert statuses == [200] * 8
        while chunk := stream.recv(4096):  # the stream's end, well within the graceful timeout
            received += chunk
        stream.close()
        assert b"retry: " in received
        assert received.endswith(b"0\r\n\r\n")  # ended, not cut off
    finally:
        server.stop()
