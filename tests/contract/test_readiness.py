"""/readyz tells the truth, and a store URL of the wrong kind stops the start: through a real
gunicorn, on a real redis-server, a replica of it, and Redis Clusters (the session's, and one of
this module's own that loses a primary)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from app.store.redis.groups import CLUSTER_GROUPS
from tests.helpers import assert_error, call
from tests.servers import ROOT, TOKEN, Gunicorn, RedisClusterServers, RedisServer, free_port

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def start(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gunicorn"],
        cwd=ROOT,
        env={**os.environ, "PLANTS_API_TOKENS": TOKEN, "GUNICORN_BIND": f"127.0.0.1:{free_port()}", **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def one_line_refusal(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    (line,) = [line for line in output.splitlines() if "configuration error" in line]
    return line


def test_a_cluster_node_given_as_redis_stops_the_start_naming_redis_cluster(redis_cluster):
    node = redis_cluster.nodes[0]
    line = one_line_refusal(start({"PLANTS_STORE_URL": f"redis://:secret-pw@127.0.0.1:{node.port}/0"}))
    assert line.endswith(
        "Plant Store: configuration error: PLANTS_STORE_URL names the wrong kind of store: it is a"
        " node of a Redis Cluster, which serves only its own slots: set PLANTS_STORE_URL to"
        " redis+cluster://host:port (rediss+cluster:// for TLS)"
    )
    assert "secret-pw" not in line


def test_a_plain_redis_given_as_redis_cluster_stops_the_start_naming_redis(redis_server):
    line = one_line_refusal(start({"PLANTS_STORE_URL": f"redis+cluster://127.0.0.1:{redis_server.port}"}))
    assert line.endswith(
        "PLANTS_STORE_URL names the wrong kind of store: it is a Redis without cluster mode"
        " (Redis: cluster_enabled:0): set PLANTS_STORE_URL to redis://host:port/db (rediss:// for TLS)"
    )


@pytest.mark.parametrize("where", ["redis://127.0.0.1:{port}/99", "unix://{socket}?db=16"])
def test_a_database_index_past_the_servers_databases_stops_the_start(redis_server, where):
    """Redis has 16 databases unless told otherwise: /99 was taken, and every request then failed."""
    url = where.format(port=redis_server.port, socket=redis_server.socket)
    line = one_line_refusal(start({"PLANTS_STORE_URL": url}))
    assert line.endswith(
        "Plant Store: configuration error: PLANTS_STORE_URL names a database the Redis server does"
        " not have: its database index is past the server's count (Redis: DB index is out of range):"
        " use one from 0 to the server's `databases` less one (0 to 15 by default)"
    )


def readyz(server: Gunicorn) -> tuple[int, dict]:
    status, _, body = call(server.connection(), "GET", "/readyz")
    return status, json.loads(body)


def not_ready(server: Gunicorn) -> str:
    status, headers, body = call(server.connection(), "GET", "/readyz")
    return assert_error(status, headers, body, 503)["message"]


def test_a_store_that_is_down_is_not_ready_and_says_why():
    server = Gunicorn(env={"PLANTS_STORE_URL": f"redis://127.0.0.1:{free_port()}/0"})
    try:
        assert not_ready(server) == (
            "Not ready: the plant store cannot serve: connection refused (is Redis running on that"
            " port?) (Redis: ConnectionError)."
        )
    finally:
        server.stop()
    assert "did not answer: connection refused" in server.output()


def test_a_wrong_password_is_not_ready(redis_server):
    user = f"plants-{uuid.uuid4().hex[:8]}"
    redis_server.command("ACL", "SETUSER", user, "on", ">right-password", "~*", "+@all")
    url = redis_server.url.replace("redis://", f"redis://{user}:wrong-password@")
    server = Gunicorn(env={"PLANTS_STORE_URL": url})
    try:
        message = not_ready(server)
        assert message.startswith("Not ready: the plant store cannot serve: authentication failed")
    finally:
        server.stop()
        redis_server.command("ACL", "DELUSER", user)
    assert "wrong-password" not in server.output()


def test_a_database_redis_does_not_have_is_named_once_redis_answers(tmp_path):
    """Redis down at the start, the URL's database could not be checked then (the start stops for
    it otherwise): once Redis answers, /readyz and each request's 503 name it, in Redis's words."""
    redis = RedisServer(tmp_path)
    redis.stop()
    server = Gunicorn(env={"PLANTS_STORE_URL": redis.url.replace("/0", "/99")})
    try:
        redis.start()
        assert not_ready(server) == (
            "Not ready: the plant store cannot serve: its database index is past the server's count"
            " (Redis: DB index is out of range): use one from 0 to the server's `databases` less one"
            " (0 to 15 by default)."
        )
        status, headers, body = call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, AUTH)
        assert_error(status, headers, body, 503)
    finally:
        server.stop()
        redis.stop()
    assert "(Redis: DB index is out of range)" in server.output()


def test_a_read_only_replica_is_not_ready(redis_server, tmp_path):
    replica = RedisServer(tmp_path, "--replicaof", "127.0.0.1", str(redis_server.port))
    try:
        server = Gunicorn(env={"PLANTS_STORE_URL": replica.url, "PLANTS_STORE_PREFIX": uuid.uuid4().hex})
        try:
            assert not_ready(server) == (
                "Not ready: the plant store cannot serve: it is a read-only replica (Redis:"
                " role:slave): set PLANTS_STORE_URL to its primary."
            )
        finally:
            server.stop()
    finally:
        replica.stop()


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_store_that_serves_is_ready(gunicorns, store):
    """The session's gunicorn on each store: readiness only reads."""
    assert readyz(gunicorns(store)) == (200, {"status": "ok"})


def test_a_cluster_that_serves_is_ready(redis_cluster):
    env = {"PLANTS_STORE_URL": redis_cluster.url, "PLANTS_STORE_PREFIX": uuid.uuid4().hex}
    server = Gunicorn(env=env)
    try:
        assert readyz(server) == (200, {"status": "ok"})
    finally:
        server.stop()


@pytest.fixture
def partial_cluster(tmp_path):
    """Three primaries without replicas, set to serve the slots they hold while another is down
    (cluster-require-full-coverage no, as a shared store that prefers partial service is)."""
    cluster = RedisClusterServers(tmp_path, nodes=3, replicas=0)
    for node in cluster.nodes:
        node.command("CONFIG", "SET", "cluster-require-full-coverage", "no")
    yield cluster
    cluster.stop()


def test_a_cluster_with_a_primary_down_is_degraded_naming_the_node_and_its_groups(partial_cluster):
    server = Gunicorn(env={"PLANTS_STORE_URL": partial_cluster.url, "PLANTS_STORE_PREFIX": "partial"})
    try:
        assert readyz(server) == (200, {"status": "ok"})
        # A plant in every group first: the worker then knows each group's page hints (one slot's
        # keys, app/store/redis/hints.py), and a create needs only its own group's node.
        for plant_id in range(CLUSTER_GROUPS):
            assert (
                call(server.connection(), "POST", "/plants", {"id": plant_id, "name": "Fern"}, AUTH)[0] == 200
            )
        down = partial_cluster.nodes[1]
        down.kill()
        deadline = time.monotonic() + 15
        while (answer := readyz(server))[1]["status"] != "degraded":
            assert time.monotonic() < deadline, answer
            time.sleep(0.2)
        status, body = answer
        assert status == 200
        (failed,) = body["failing"]
        assert failed["node"] == f"127.0.0.1:{down.port}"
        # The groups are spread evenly over the slots: a third of them were on that node.
        assert len(failed["groups"]) == CLUSTER_GROUPS // 3
        assert failed["cause"].startswith(("connection refused", "the cluster is failing over", "timed out"))
        # The others' plants are served; creates on the failing groups are 503.
        statuses = {
            (plant_id % CLUSTER_GROUPS in failed["groups"], status)
            for plant_id in range(CLUSTER_GROUPS, 2 * CLUSTER_GROUPS)
            for status, _, _ in [
                call(server.connection(), "POST", "/plants", {"id": plant_id, "name": "Fern"}, AUTH)
            ]
        }
        assert statuses == {(False, 200), (True, 503)}, server.output()[-3000:]
        # Each 503's log line names the node that failed and why, not the whole cluster's URL.
        lines = [line for line in server.output().splitlines() if "The plant store" in line]
        assert lines
        for line in lines:
            assert f"The plant store's node 127.0.0.1:{down.port} did not answer: connection refused" in line
            assert partial_cluster.url not in line
        for node in partial_cluster.nodes:
            if node is not down:
                node.kill()
        deadline = time.monotonic() + 15
        while (status := call(server.connection(), "GET", "/readyz")[0]) != 503:
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        assert not_ready(server).startswith("Not ready: the plant store cannot serve: no node of the cluster")
    finally:
        server.stop()
