"""Watching the feed through faults, on Redis: a worker killed with SIGKILL drops its watchers,
who reconnect with `Last-Event-ID` and miss nothing; a Redis that goes away ends every stream
with a `retry:` hint (then the client's reconnect gets the 503), never a hang."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import threading
import time
from pathlib import Path

from tests.conftest import redis_settings
from tests.integration.test_watch import read_stream
from tests.integration.test_watch_reconnects import Client, pump, write
from tests.servers import TOKEN, Gunicorn, RedisServer


def busiest_worker(master_pid: int) -> int:
    """The worker holding the most descriptors: the one most watchers are on."""
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    return max((int(pid) for pid in children), key=lambda pid: len(os.listdir(f"/proc/{pid}/fd")))


def test_a_killed_workers_watchers_reconnect_and_miss_nothing(redis_server):
    server = Gunicorn(env={**redis_settings(redis_server), "WEB_CONCURRENCY": "2"})
    try:
        conn = server.connection()
        conn.request("GET", "/events?after=now", headers={"Authorization": f"Bearer {TOKEN}"})
        cursor = json.loads(conn.getresponse().read())["next"]
        clients = [Client(server.port, cursor) for _ in range(40)]
        selector = selectors.DefaultSelector()
        for client in clients:
            selector.register(client.connect(), selectors.EVENT_READ, client)
        stop, written = threading.Event(), []
        writer = threading.Thread(target=write, args=(server.port, 740_000_000, stop, written))
        writer.start()
        killed = False
        started = time.monotonic()
        while time.monotonic() - started < 12:
            if not killed and time.monotonic() - started > 2:
                os.kill(busiest_worker(server.process.pid), signal.SIGKILL)
                killed = True
            if time.monotonic() - started > 5:
                stop.set()
            pump(selector)
            if stop.is_set() and not writer.is_alive() and all(len(c.ids) >= len(written) for c in clients):
                break
        writer.join(10)
        for key in list(selector.get_map().values()):
            key.fileobj.close()
        assert killed
        assert sum(client.reconnects for client in clients) > 0  # the killed worker's watchers
        for client in clients:
            assert client.ids == written
    finally:
        server.stop()


def test_redis_going_away_ends_each_stream_with_a_retry_hint(tmp_path):
    redis = RedisServer(tmp_path)
    server = Gunicorn(env={"PLANTS_STORE_URL": redis.unix_url, "PLANTS_STORE_PREFIX": "faults"})
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=15)
        sock.sendall(
            f"GET /events?after=now HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        data = read_stream(sock, until=b"retry:", seconds=15)  # under way, its position read from Redis
        assert data.startswith(b"HTTP/1.1 200 "), data[:300]
        redis.kill()
        gone = time.monotonic()
        while not data.endswith(b"\r\n0\r\n\r\n") and time.monotonic() - gone < 12:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        sock.close()
        assert data.endswith(b"\r\n0\r\n\r\n"), data[-200:]  # a clean end, not a cut or a hang
        assert time.monotonic() - gone < 10
        assert b"retry: 3000" in data.rpartition(b"retry:")[1] + data.rpartition(b"retry:")[2]
    finally:
        server.stop()
        redis.stop()
