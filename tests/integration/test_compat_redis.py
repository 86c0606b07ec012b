"""app/compat/redis.py: where redis-py's internals are not as it expects, the store takes redis-py's
public path (plain connections, `execute_command`) and answers as before."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from redis.connection import Connection, ConnectionPool
from redis.exceptions import TimeoutError as RedisTimeoutError

import app.compat.redis
from tests.dropping_proxy import DroppingProxy
from tests.helpers import in_time, reloaded
from tests.servers import RedisServer, free_port, self_signed_certificate

PLANT = {"id": 7, "name": "Boston fern", "tag": "fern"}
#: How late each reply comes through the slow proxy (and redis-py's own timeouts here): an hour,
#: so that a call which waited for a reply, or for its socket's timeout, hangs the test's
#: `in_time`; and the time a bounded call is given.
REPLY_LATE_S = 3600.0
GIVEN_S = 0.2


@pytest.fixture
def store_settings(redis_server):
    # Over TCP: a unix socket's connections are not made abortive.
    return {"PLANTS_STORE_URL": redis_server.url, "PLANTS_STORE_PREFIX": f"test-{uuid.uuid4().hex}"}


@pytest.fixture
def public_path(monkeypatch):
    """app.compat.redis as imported beside a redis-py whose internals changed; redis-py itself is
    put back at once, so only the module's checks saw the change."""
    monkeypatch.setattr(Connection, "_connect", lambda self, timeout: None)
    monkeypatch.setattr(ConnectionPool, "get_connection", lambda self, command_name, *keys: None)
    with reloaded(app.compat.redis) as compat:
        monkeypatch.undo()
        yield compat


def test_the_checks_accept_the_installed_redis_py():
    assert app.compat.redis.ABORTIVE_CLOSE
    assert app.compat.redis.HELD_CONNECTIONS
    assert app.compat.redis.READ_TIMEOUT


def test_a_read_without_a_timeout_of_its_own_is_found(monkeypatch):
    """redis-py before 8.0: held connections still, and no bound for a lost write's steps
    (tests/integration/test_lost_replies.py runs them so)."""
    monkeypatch.setattr(Connection, "read_response", lambda self, disable_decoding=False: None)
    with reloaded(app.compat.redis) as compat:
        monkeypatch.undo()
        assert compat.HELD_CONNECTIONS
        assert not compat.READ_TIMEOUT


def test_the_store_answers_on_redis_pys_public_path(public_path, make_app, auth):
    assert not public_path.ABORTIVE_CLOSE
    assert not public_path.HELD_CONNECTIONS
    assert public_path.connection_class(tls=False) is Connection
    client = make_app().test_client()
    created = client.post("/plants", json=PLANT, headers=auth)
    assert created.status_code == 200, created.get_data()
    read = client.get(f"/plants/{PLANT['id']}", headers=auth)
    assert read.status_code == 200
    assert read.get_json() == {"name": PLANT["name"], "tag": PLANT["tag"]}
    changed = client.put(
        f"/plants/{PLANT['id']}", json={"name": "Renamed"}, headers={**auth, "If-Match": read.headers["ETag"]}
    )
    assert changed.status_code == 200
    assert client.get("/plants?limit=10", headers=auth).get_json()["plants"] == [
        {"id": PLANT["id"], "name": "Renamed"}
    ]
    assert client.delete(f"/plants/{PLANT['id']}", headers=auth).status_code == 204
    assert client.get(f"/plants/{PLANT['id']}", headers=auth).status_code == 404


HELD = pytest.mark.parametrize("held", [False, True], ids=["a new connection", "the thread's held one"])


def bounded_ping_times_out(url: str, *, held: bool, slow: Callable[[], None], **transport: bool) -> None:
    """A PING given GIVEN_S on `url` times out by then, once `slow()` has made every reply an
    hour late; first, with `held`, the thread holds a connection of the client. Waited for with
    `in_time`: a PING that waited for its reply, or for redis-py's timeouts, would take an hour."""
    client = redis.Redis.from_url(
        url,
        connection_class=app.compat.redis.connection_class(**transport),
        socket_timeout=REPLY_LATE_S + 1,
        socket_connect_timeout=REPLY_LATE_S + 1,
    )
    connections = app.compat.redis.HeldConnections()
    try:
        if held:
            assert connections.call(client, "PING") in (True, b"PONG")
        slow()
        with pytest.raises(RedisTimeoutError):
            in_time(lambda: connections.call(client, "PING", until=time.monotonic() + GIVEN_S))
    finally:
        client.close()


@HELD
def test_a_call_given_an_end_ends_by_then_though_every_reply_is_late(redis_server, held):
    """A lost write's later steps each get only what is left of its time (app/store/redis/lost.py):
    a call given an end times out by then whatever its replies take, on a connection the thread
    takes new from the pool too (on a cluster, a node it had not written to: a slot moved), whose
    connect and handshake redis-py makes before any command is sent."""
    proxy = DroppingProxy(redis_server.port)
    try:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        bounded_ping_times_out(url, held=held, slow=lambda: proxy.slow_replies(REPLY_LATE_S), tls=False)
    finally:
        proxy.slow_replies(0)
        proxy.close()


def stopped_redis_url(directory: Path, transport: str) -> tuple[RedisServer, str]:
    """A redis-server of its own (it is stopped) and its URL over `transport`: unix or tls."""
    if transport == "unix":
        server = RedisServer(directory)
        return server, server.unix_url
    cert, key = self_signed_certificate(directory)
    port = free_port()
    server = RedisServer(
        directory,
        *("--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key)),
        *("--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"),
    )
    return server, f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=none"


@HELD
@pytest.mark.parametrize("transport", ["unix", "tls"])
def test_a_call_given_an_end_ends_by_then_though_redis_is_stopped(tmp_path, held, transport):
    """Every connection the store makes is its own class, a unix socket's too: a call given an end
    times out by then on a stopped Redis (SIGSTOP: its sockets still take connections), a new
    connection's handshakes (TLS's, then redis-py's) included."""
    server, url = stopped_redis_url(tmp_path, transport)
    try:
        bounded_ping_times_out(
            url, held=held, slow=lambda: server.signal(signal.SIGSTOP), **{transport: True}
        )
    finally:
        server.stop()  # wakes it first
