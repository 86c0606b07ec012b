"""Changes on a real Redis: the ETag Lua computes is Python's, lost updates across masters and
workers, and durability of acknowledged changes through a kill -9."""

from __future__ import annotations

import http.client
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from app.store import Plant, plant_etag
from app.store.redis.groups import encode
from tests.conftest import redis_settings
from tests.helpers import call, kill_and_restart
from tests.load import SHORT_TIMEOUTS, open_store, redis_gunicorn
from tests.servers import ROOT, TOKEN, RedisServer

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
LUA_ETAG = "return string.sub(redis.sha1hex(ARGV[1]), 1, 16)"


@settings(max_examples=300, deadline=None)
@given(
    name=st.text(min_size=1, max_size=200),
    tag=st.none() | st.text(min_size=1, max_size=100),
)
def test_lua_and_python_agree_on_every_etag(redis_server, name, tag):
    client = redis.Redis(unix_socket_path=str(redis_server.socket))
    try:
        value = encode(name, tag)
        assert client.eval(LUA_ETAG, 0, value).decode() == plant_etag(name, tag)
    finally:
        client.close()


def test_lua_and_python_agree_on_the_extremes(redis_server):
    client = redis.Redis(unix_socket_path=str(redis_server.socket))
    for name, tag in [
        ("x" * 200, "t" * 100),
        ("🌿" * 200, "é" * 100),
        ("a", None),
        ("名前", "タグ"),
        ("\x00", "\x7f"),
    ]:
        assert client.eval(LUA_ETAG, 0, encode(name, tag)).decode() == plant_etag(name, tag)
    client.close()


def test_forty_clients_over_two_masters_and_four_workers_exactly_one_wins(redis_server):
    settings_ = redis_settings(redis_server)
    servers = [redis_gunicorn(settings_), redis_gunicorn(settings_)]
    try:
        for round_ in range(3):
            plant_id = 77_000 + round_
            status, headers, _ = call(
                servers[0].connection(), "POST", "/plants", {"id": plant_id, "name": "Original"}, AUTH
            )
            assert status == 200
            start = threading.Barrier(40)
            jobs = [(servers[n % 2].port, plant_id, f"Writer {n}", headers["ETag"], start) for n in range(40)]
            with ThreadPoolExecutor(40) as pool:
                answers = list(pool.map(lambda job: _conditional_put(*job), jobs))
            winners = [name for status, name in answers if status == 200]
            assert len(winners) == 1, answers
            assert sorted(status for status, _ in answers) == [200] + [412] * 39
            status, _, body = call(servers[1].connection(), "GET", f"/plants/{plant_id}", None, AUTH)
            assert json.loads(body) == {"name": winners[0]}
    finally:
        for server in servers:
            server.stop()


def _conditional_put(
    port: int, plant_id: int, name: str, etag: str, start: threading.Barrier
) -> tuple[int, str]:
    """One client's PUT under If-Match, sent once every client is ready."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    start.wait()
    status, _, _ = call(connection, "PUT", f"/plants/{plant_id}", {"name": name}, {**AUTH, "If-Match": etag})
    return status, name


def test_kill_9_keeps_every_acknowledged_change(tmp_path):
    own_redis = RedisServer(tmp_path, config_file=ROOT / "deploy" / "redis.conf")
    settings_ = redis_settings(own_redis)
    server = redis_gunicorn(settings_, workers=2, **SHORT_TIMEOUTS)
    ids = range(88_000, 88_008)
    acknowledged: dict[int, str] = {}
    attempted: dict[int, str] = {}
    stop = threading.Event()
    try:
        for plant_id in ids:
            assert call(server.connection(), "PUT", f"/plants/{plant_id}", {"name": "v0"}, AUTH)[0] == 201
            acknowledged[plant_id] = attempted[plant_id] = "v0"

        def change(plant_id: int) -> None:
            version = 0
            while not stop.is_set():
                status, headers, _ = call(server.connection(), "GET", f"/plants/{plant_id}", None, AUTH)
                if status != 200:
                    time.sleep(0.01)
                    continue
                version += 1
                name = f"v{version}"
                attempted[plant_id] = name
                status, _, _ = call(
                    server.connection(), "PATCH", f"/plants/{plant_id}", {"name": name},
                    {**AUTH, "If-Match": headers["ETag"]},
                )  # fmt: skip
                if status == 200:
                    acknowledged[plant_id] = name

        threads = [threading.Thread(target=change, args=(plant_id,)) for plant_id in ids]
        for thread in threads:
            thread.start()
        kill_and_restart(own_redis, before_s=1.5)
        stop.set()
        for thread in threads:
            thread.join(10)
    finally:
        stop.set()
        server.stop()
    store = open_store(settings_)
    try:
        for plant_id in ids:
            assert acknowledged[plant_id] != "v0"  # changes were acknowledged before and after
            # The last acknowledged change, or a later one whose answer was lost with Redis.
            assert store.get(plant_id) in (Plant(acknowledged[plant_id]), Plant(attempted[plant_id]))
    finally:
        store.close()
        own_redis.stop()
