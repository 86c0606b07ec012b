"""Slow and hostile clients never hold a request thread: a real gunicorn with one request thread
(two on Redis) keeps answering an honest client while it is attacked (bench/slow_clients.py).

Bounded: the attack is held 12 s with 1,000 idle connections, 50 dribbling heads, 20 dribbling
bodies (with and without a valid token) and 10 pipelining clients that never read, with a read
timeout of an hour (none is let go, and every probe is answered); then 6 s with a 2 s read
timeout, where each slow client meets its deadline (408) and comes back.
"""

from __future__ import annotations

import select
import socket
import time

import pytest

from bench.slow_clients import hold
from tests.conftest import redis_settings
from tests.servers import TOKEN, Gunicorn

# Behaviour, not speed (the probes' latencies are figures of `python -m bench slow-clients`, in
# bench/README.md): with the slow clients' read timeout an hour, a request thread a slow client
# held would leave the honest client's probes unanswered past their 5 s socket timeout.
AN_HOUR = "3600"


@pytest.fixture(params=["memory", "redis"])
def attacked(request):
    """A server under attack, on each store, made with its read timeout."""
    servers = []

    def start(read_timeout: str) -> Gunicorn:
        env = {"GUNICORN_READ_TIMEOUT": read_timeout}
        if request.param == "redis":
            env.update(redis_settings(request.getfixturevalue("redis_server")))
        servers.append(Gunicorn(env=env, args=("--worker-connections", "1000")))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def attacked_server(attacked):
    return attacked("2")


def test_an_honest_client_is_answered_while_slow_clients_hold_their_connections(attacked):
    server = attacked(AN_HOUR)
    summary = hold(server.port, 12, token=TOKEN).summary()
    # Every probe answered, each within its 5 s socket timeout, though no slow client is let go.
    assert summary["failure_count"] == 0, summary
    # A probe pair every 0.25 s and its answers: about 90 in 12 s on an idle machine, fewer on a
    # loaded one; a service held by the attack would answer a handful.
    assert summary["probes"] >= 24, summary
    assert "Traceback" not in server.output()


def test_slow_clients_meet_their_read_timeout_and_the_service_answers_on(attacked_server):
    summary = hold(attacked_server.port, 6, token=TOKEN).summary()
    assert summary["failure_count"] == 0, summary
    # The slow clients met their 2 s deadlines and were closed (then came back): 80 of them,
    # about twice each in 6 s.
    assert summary["reconnects"] >= 70, summary
    log = attacked_server.output()
    assert "Answered 408" in log
    assert "Traceback" not in log


def test_a_refused_request_whose_body_dribbles_holds_no_thread(attacked_server):
    # A bad token, `Content-Length: 1000`, and a body byte at a time: the service reads the
    # body on the poller, not on its one thread, so another client is served at once.
    sock = socket.create_connection(("127.0.0.1", attacked_server.port))
    sock.sendall(
        b"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Length: 1000\r\n\r\n{"
    )
    try:
        for _ in range(3):
            conn = attacked_server.connection()
            conn.request("GET", "/healthz")
            assert conn.getresponse().status == 200
            # Answered while the attacker's request is still being read: a thread held by it
            # would serve /healthz only once the attacker's 2 s read timeout had answered it 408.
            assert select.select([sock], [], [], 0)[0] == []
            sock.send(b" ")
            time.sleep(0.3)
    finally:
        sock.close()


def test_idle_connections_never_lock_a_new_client_out():
    # At the cap, the oldest idle connection is closed for the new client.
    server = Gunicorn(args=("--worker-connections", "50"))
    try:
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(120)]
        # Served, not locked out: a client locked out would wait out the connection's 10 s timeout.
        conn = server.connection()
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        oldest = idle[0]
        oldest.settimeout(2)
        assert oldest.recv(1) == b""  # closed by the service
        for sock in idle:
            sock.close()
    finally:
        server.stop()
