"""A Redis failover behind a name that moves (a unix socket path re-pointed, as a DNS name is):
the old primary stays up as a replica, and the service follows the new primary by itself."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app import create_app
from app.auth.rate_limits import RateLimits
from app.extension import plants_state
from app.store import Plant, PlantStore, RenewingPool, StoreUnavailableError, store_from_url
from tests.helpers import assert_error, call, long_poll_woken_by, walk_pages
from tests.integration.test_webhook_delivery import create as create_plants
from tests.integration.test_webhook_delivery import deliverer_on_its_own, endpoint, register
from tests.load import AUTH, create, redis_gunicorn
from tests.receiver import Receiver
from tests.servers import TOKEN, Gunicorn, RedisServer


def _synced(replica: RedisServer) -> None:
    deadline = time.monotonic() + 15
    while "master_link_status:up" not in replica.command("INFO", "replication"):
        assert time.monotonic() < deadline, "the replica did not sync"
        time.sleep(0.05)


def _point(link: Path, server: RedisServer) -> None:
    """The name the service is given now names `server`'s socket (replaced in one step)."""
    staged = link.with_name("redis.sock.new")
    staged.unlink(missing_ok=True)
    staged.symlink_to(server.socket)
    os.replace(staged, link)


class Pair:
    """A primary and its replica, synced, and the name (a socket path) that names the primary."""

    def __init__(self, directory: Path) -> None:
        (directory / "a").mkdir()
        (directory / "b").mkdir()
        self.first = RedisServer(directory / "a")
        self.second = RedisServer(directory / "b", "--replicaof", "127.0.0.1", str(self.first.port))
        self.link = directory / "redis.sock"
        _point(self.link, self.first)
        prefix = f"test-{uuid.uuid4().hex}"
        self.settings = {"PLANTS_STORE_URL": f"unix://{self.link}", "PLANTS_STORE_PREFIX": prefix}
        _synced(self.second)

    def fail_over(self, *, re_point: bool = True) -> None:
        """As an operator (or a Sentinel's script) does it: the replica promoted, the old primary
        made its replica, and the name re-pointed (unless not yet: a DNS name's old record
        cached); the old primary stays up."""
        self.second.command("REPLICAOF", "NO", "ONE")
        self.first.command("REPLICAOF", "127.0.0.1", str(self.second.port))
        if re_point:
            self.re_point()
        _synced(self.first)

    def re_point(self) -> None:
        _point(self.link, self.second)

    def stop(self) -> None:
        self.first.stop()
        self.second.stop()


@pytest.fixture
def pair(tmp_path):
    servers = Pair(tmp_path)
    yield servers
    servers.stop()


def _create_all(port: int, ids: range) -> list[tuple[int, int, bytes]]:
    with ThreadPoolExecutor(8) as pool:
        answers = pool.map(lambda plant_id: create(port, {"id": plant_id, "name": f"plant {plant_id}"}), ids)
        return [(plant_id, status, body) for plant_id, (status, _, body) in zip(ids, answers, strict=True)]


def _woken(server: Gunicorn, write: Callable[[], object]) -> list[int]:
    """The ids of the plants in the events a long-poll parked on `server` answers, once `write`
    was made."""
    answer = long_poll_woken_by(server, TOKEN, write)
    assert answer.status == 200, answer.body
    return [event["plant"]["id"] for event in json.loads(answer.body)["events"]]


def _elsewhere(settings: dict[str, str]) -> PlantStore:
    """Another process's store, through the name, keeping the feed as the service does."""
    url, prefix = settings["PLANTS_STORE_URL"], settings["PLANTS_STORE_PREFIX"]
    return store_from_url(
        url, capacity=1000, prefix=prefix, connect_timeout=1, timeout=1, events_retain=10_000
    )


def test_after_a_failover_behind_the_same_name_writes_reads_and_the_feed_go_on(pair):
    """Every write after the switch is a 200 without a restart (the write that met the old
    primary's READONLY did nothing, and is sent once more on a fresh connection); every plant is
    there; a watch parked across the switch, and one after it, hear writes another process made
    on the new primary, which only the service's feed listener hears. Rate limits on: each
    request's count is a write too, on connections of their own."""
    settings = pair.settings
    server = None
    primary: list[PlantStore] = []
    try:
        # One worker: its feed's listener is started (by the first watch) before the switch.
        server = redis_gunicorn(settings, workers=1, PLANTS_RATE_LIMIT="100000/second")
        before = _create_all(server.port, range(1, 33))
        assert [status for _, status, _ in before] == [200] * 32, before

        def fail_over_then_write_elsewhere() -> None:
            pair.fail_over()
            primary.append(_elsewhere(settings))
            primary[0].create(600, "plant 600", None)

        assert _woken(server, fail_over_then_write_elsewhere) == [600]
        # Ready at once, before any write of its own met the old primary: a probe that kept
        # asking the old primary would keep the service out of its load balancer for good.
        status, _, body = call(server.connection(), "GET", "/readyz")
        assert (status, json.loads(body)) == (200, {"status": "ok"})

        after = _create_all(server.port, range(33, 97))
        assert [(plant_id, status, body) for plant_id, status, body in after if status != 200] == []
        expected = [(plant_id, Plant(f"plant {plant_id}", None)) for plant_id in [*range(1, 97), 600]]
        assert walk_pages(primary[0], 100) == expected
        for plant_id in (1, 32, 33, 96, 600):
            status, _, body = call(server.connection(), "GET", f"/plants/{plant_id}", headers=AUTH)
            assert (status, json.loads(body)["name"]) == (200, f"plant {plant_id}")
        assert _woken(server, lambda: primary[0].create(500, "plant 500", None)) == [500]
    finally:
        for store in primary:
            store.close()
        if server is not None:
            server.stop()
    assert "Traceback" not in server.output()


def test_a_deliverer_on_its_own_delivers_across_the_failover(pair):
    """`python -m app.webhooks` follows the primary too: its leases, renewals and outcomes are
    writes. Each event is delivered once, in order, and the endpoint stays enabled."""
    settings = {**pair.settings, "PLANTS_API_TOKENS": TOKEN, "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1"}
    app = create_app({**settings, "PLANTS_WEBHOOKS_DELIVER": False})
    client = app.test_client()
    receiver = Receiver()
    process = None
    try:
        hook = register(client, receiver.url)
        process = deliverer_on_its_own(settings)
        create_plants(client, 1, 2)
        receiver.wait_for(2)
        pair.fail_over()
        create_plants(client, 3, 4)
        deliveries = receiver.wait_for(4)
        time.sleep(0.5)  # time for a delivery sent twice to come
        assert [d.verified(hook["secret"])["data"]["id"] for d in receiver.deliveries] == [1, 2, 3, 4]
        assert deliveries[-1].verified(hook["secret"])["type"] == "plant.created"
        assert endpoint(client, hook)["status"] == "enabled"
    finally:
        receiver.stop()
        plants_state(app).close()
        if process is not None:
            process.terminate()
            output, _ = process.communicate(timeout=20)
    assert process.returncode == 0, output
    assert "Traceback" not in output


def test_until_the_name_is_re_pointed_writes_are_the_read_only_503_then_200_without_a_restart(pair):
    """While the name still names the old primary (a cached DNS record), a fresh connection meets
    the replica too: the documented read-only 503, and /readyz says so. Once it names the new
    primary, the next write and the next probe find it."""
    app = create_app({**pair.settings, "PLANTS_API_TOKENS": TOKEN})
    client = app.test_client()
    try:
        assert client.post("/plants", json={"id": 1, "name": "plant 1"}, headers=AUTH).status_code == 200
        pair.fail_over(re_point=False)
        refused = client.post("/plants", json={"id": 2, "name": "plant 2"}, headers=AUTH)
        assert_error(refused.status_code, refused.headers, refused.get_data(), 503)
        assert refused.headers["Retry-After"] == "60"
        assert client.get("/readyz").status_code == 503
        assert client.get("/plants/1", headers=AUTH).status_code == 200  # the replica's reads

        pair.re_point()
        assert client.get("/readyz").json == {"status": "ok"}
        assert client.post("/plants", json={"id": 2, "name": "plant 2"}, headers=AUTH).status_code == 200
        assert client.post("/plants", json={"id": 3, "name": "plant 3"}, headers=AUTH).status_code == 200
        assert (
            pair.second.command("HGET", f"{{{pair.settings['PLANTS_STORE_PREFIX']}}}:b:3", "3") == "7:plant 3"
        )
    finally:
        plants_state(app).close()


def test_a_process_that_only_reads_is_served_by_the_old_primary_until_its_probe_moves_it(pair):
    """The documented choice for reads (docs/operations.md, "A failover behind the same name"):
    a process that writes nothing after the switch reads on from the old primary, a replica of
    the new one now, so its reads are served and hold what the new primary was written (as
    current as the replication); its next /readyz finds the switch (the old server answers
    role:slave), says ok once fresh connections reach the new primary, and moves its reads there:
    detached from the new primary afterwards, the old server is no longer what it reads."""
    app = create_app({**pair.settings, "PLANTS_API_TOKENS": TOKEN})
    client = app.test_client()
    elsewhere: list[PlantStore] = []
    try:
        assert client.post("/plants", json={"id": 1, "name": "plant 1"}, headers=AUTH).status_code == 200
        assert client.get("/plants/1", headers=AUTH).status_code == 200  # its connection is held
        pair.fail_over()
        elsewhere.append(_elsewhere(pair.settings))
        elsewhere[0].create(2, "plant 2", None)
        deadline = time.monotonic() + 15
        while client.get("/plants/2", headers=AUTH).status_code != 200:  # replicated to the old server
            assert time.monotonic() < deadline, "the old primary did not replicate the new one's write"
            time.sleep(0.05)
        assert pair.first.command("ROLE").startswith("slave")
        assert client.get("/readyz").json == {"status": "ok"}
        pair.first.command("REPLICAOF", "NO", "ONE")  # detached: up, and no longer replicating
        elsewhere[0].create(3, "plant 3", None)
        assert client.get("/plants/3", headers=AUTH).json == {"name": "plant 3"}
        assert [plant["id"] for plant in client.get("/plants", headers=AUTH).json["plants"]] == [1, 2, 3]
    finally:
        for store in elsewhere:
            store.close()
        plants_state(app).close()


def _blocked_feed_reader_on(server: RedisServer) -> bool:
    """Whether a client of `server` is blocked reading a stream (a feed's listener)."""
    for line in server.command("CLIENT", "LIST").splitlines():
        client = dict(field.split("=", 1) for field in line.split())
        if client["cmd"] == "xread" and "b" in client["flags"]:
            return True
    return False


def test_a_feed_listener_reading_from_the_old_primary_follows_the_first_write(pair):
    """The name re-pointed after the switch: the feed's listener reads on from the old primary (a
    replica now, its blocked read left as it was, or read again through the name after a full
    sync ended it). The service's next write finds the primary, and the listener follows: once
    the old server stops replicating, though up, a watch still hears the new primary's writes."""
    server = redis_gunicorn(pair.settings, workers=1)
    primary: list[PlantStore] = []
    try:
        assert _woken(server, lambda: _create_all(server.port, range(1, 2))) == [1]
        pair.fail_over(re_point=False)
        time.sleep(1.5)  # a listener whose read the sync ended reads again a second later
        deadline = time.monotonic() + 15
        while not _blocked_feed_reader_on(pair.first):
            assert time.monotonic() < deadline, "the listener does not read from the old primary"
            time.sleep(0.05)
        pair.re_point()
        assert [status for _, status, _ in _create_all(server.port, range(2, 3))] == [200]
        pair.first.command("REPLICAOF", "NO", "ONE")  # detached: up, and no longer replicating
        primary.append(_elsewhere(pair.settings))
        assert _woken(server, lambda: primary[0].create(3, "plant 3", None)) == [3]
    finally:
        for store in primary:
            store.close()
        server.stop()


def _role(pool: RenewingPool) -> str:
    """The role of the server a connection the pool lends now reaches."""
    connection = pool.get_connection()
    try:
        connection.send_command("ROLE")
        return connection.read_response()[0].decode()
    finally:
        pool.release(connection)


def test_a_connection_in_use_across_a_renewal_connects_again_before_its_next_use(pair):
    """The race a count's retry met: another thread's call, under way on the old primary as the
    pool was renewed, puts its connection back after; the pool lends it again only once it has
    connected again, through the name, to the new primary."""
    app = create_app({**pair.settings, "PLANTS_API_TOKENS": TOKEN, "PLANTS_RATE_LIMIT": "100/second"})
    limits = plants_state(app).rate_limits
    assert limits is not None
    pool = limits.counters.get_connection().connection_pool
    assert isinstance(pool, RenewingPool)
    try:
        assert _role(pool) == "master"
        under_way = pool.get_connection()
        pair.fail_over()
        pool.renew()
        pool.release(under_way)
        assert _role(pool) == "master"
        assert limits.check_token(b"a token") is not None
    finally:
        plants_state(app).close()


def _counts_at_once(limits: RateLimits, threads: int) -> list[str]:
    """Each of `threads` threads counts one request at the same moment: the errors they met."""
    start = threading.Barrier(threads)

    def count(index: int) -> str | None:
        start.wait(timeout=10)
        try:
            limits.check_token(f"token {index}".encode())
        except StoreUnavailableError as exc:
            return f"{exc.reason}: {exc}"
        return None

    with ThreadPoolExecutor(threads) as pool:
        return [error for error in pool.map(count, range(threads)) if error is not None]


def test_rate_limit_counts_racing_across_failovers_never_answer_503(pair):
    """Many request threads each hold a connection to the old primary when it becomes a replica,
    and all count at once after the switch: each count that meets READONLY is sent again, and
    the retry never takes a connection another thread has just put back, still on the old
    server (that would be a 503 with the new primary up). Several switches, back and forth."""
    threads = 64
    app = create_app({**pair.settings, "PLANTS_API_TOKENS": TOKEN, "PLANTS_RATE_LIMIT": "1000000/second"})
    limits = plants_state(app).rate_limits
    assert limits is not None
    # Threads switched often, so that their steps interleave as they would on many cores.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        assert _counts_at_once(limits, threads) == []  # a connection per thread, each idle now
        for _ in range(10):
            pair.fail_over()
            assert _counts_at_once(limits, threads) == []
            pair.first, pair.second = pair.second, pair.first
    finally:
        sys.setswitchinterval(interval)
        plants_state(app).close()
