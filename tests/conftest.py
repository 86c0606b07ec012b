"""Shared fixtures: the app and its test client (as in Flask's tutorial), real gunicorn and Redis.

The contract runs against both stores: `app`, `client`, `store` and `gunicorn` are parametrized
over the in-memory store and a real redis-server (one per session, a fresh key prefix per test).
The contract's own modules also run on a real Redis Cluster (one per session).
"""

from __future__ import annotations

import os
import uuid

import pytest

from app import create_app
from app.extension import plants_state
from tests.servers import TOKEN, Gunicorn, RedisClusterServers, RedisServer

# The tests name webhook hosts that never resolve, and these machines' name server drops about one
# query in 25 (glibc then waits 5 s, past the 2 s a URL's lookup is given: a 503 by design,
# app/webhooks/lookups.py). Their resolver, and every server's they start, gives up after 1 s.
os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")
# A registration waits for its host's lookup PLANTS_WEBHOOKS_LOOKUP_WAIT (0.2 s), then answers 503
# while it goes on: a dropped query (1 s) would be a 503 the tests did not ask for, so they wait 2 s.
# The tests of the wait itself (test_webhook_lookups.py) set it back.
os.environ.setdefault("PLANTS_WEBHOOKS_LOOKUP_WAIT", "2")

STORES = ["memory", "redis"]
#: Each directory's marker (registered in setup.cfg): `pytest -m "unit or contract"` is the fast subset.
KINDS = ("unit", "contract", "integration")


#: The modules whose tests take half a minute or more each (schemathesis, valgrind, the benchmarks'
#: smoke runs, chromium). They run first, so that the short ones fill in at the end instead of
#: one worker finishing a two-minute test alone. `.ci/run` has pytest-xdist hand out one test at a
#: time (`--maxschedchunk=1`), so these go to whichever worker is free first; with xdist's default
#: first handout (a run of consecutive tests to each worker) they would all go to the first.
SLOW_MODULES = (
    "test_contract.py",
    "test_instruction_budget.py",
    "test_bench_smoke.py",
    "test_browser.py",
    "test_browser_page.py",
    "test_sse_clients.py",
    "test_seams.py",
    "test_partitions.py",
    "test_earlier_interfaces.py",
    "test_browser_filtered_list.py",
)


def pytest_collection_modifyitems(items):
    """Mark every test with its directory's kind; the slow modules' tests first."""
    for item in items:
        kind = item.path.parent.name
        if kind in KINDS:
            item.add_marker(getattr(pytest.mark, kind))
    order = {name: number for number, name in enumerate(SLOW_MODULES)}
    items.sort(key=lambda item: order.get(item.path.name, len(order)))


STORES_AND_CLUSTER = [*STORES, "cluster"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """One real redis-server for the session; tests keep apart by key prefix."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


def redis_settings(server: RedisServer) -> dict[str, str]:
    return {"PLANTS_STORE_URL": server.unix_url, "PLANTS_STORE_PREFIX": f"test-{uuid.uuid4().hex}"}


@pytest.fixture(params=STORES)
def store_settings(request):
    """The settings that choose the store under test. The contract's modules add "cluster" by
    overriding this fixture with `params=STORES_AND_CLUSTER`: once on the cluster, not every test."""
    return settings_for_store(request, request.param)


@pytest.fixture
def make_app(store_settings):
    """Build a service on the store under test; keyword arguments are more settings."""
    apps = []

    def make(**settings):
        app = create_app(
            {"TESTING": True, "PLANTS_API_TOKENS": [TOKEN, "second-token"], **store_settings, **settings}
        )
        apps.append(app)
        return app

    yield make
    for app in apps:
        plants_state(app).close()  # its threads ended, its connections closed (docs/embedding.md)


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def auth():
    return {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def store(app):
    return app.extensions["plants"].store


@pytest.fixture(scope="session")
def gunicorns(request):
    """The session's real gunicorns, started on first use: one per store on the packaged worker
    (two workers on Redis), and one on gunicorn's stock gthread worker, which
    GUNICORN_WORKER_CLASS=gthread chooses."""
    servers: dict[str, Gunicorn] = {}

    def get(kind: str) -> Gunicorn:
        if kind not in servers:
            if kind == "redis":
                env = {**redis_settings(request.getfixturevalue("redis_server")), "WEB_CONCURRENCY": "2"}
                servers[kind] = Gunicorn(env=env)
            elif kind == "stock-worker":
                servers[kind] = Gunicorn(args=("--worker-class", "gthread"))
            else:
                servers[kind] = Gunicorn()
        return servers[kind]

    yield get
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="session", params=STORES)
def gunicorn(request, gunicorns):
    """One real gunicorn per store for the session; tests use ids of their own."""
    return gunicorns(request.param)


@pytest.fixture(scope="session", params=[*STORES, "stock-worker"])
def either_worker(request, gunicorns):
    """`gunicorn`, and the memory store on gunicorn's stock gthread worker too: for the contract
    tests that hold whichever worker serves the app."""
    return gunicorns(request.param)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """One real Redis Cluster (3 primaries, 3 replicas) for the session; tests keep apart by prefix."""
    cluster = RedisClusterServers(tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.stop()


def cluster_settings(cluster: RedisClusterServers) -> dict[str, str]:
    return {"PLANTS_STORE_URL": cluster.url, "PLANTS_STORE_PREFIX": f"test-{uuid.uuid4().hex}"}


def settings_for_store(request, store: str) -> dict[str, str]:
    """The settings of one store under test: memory, redis or cluster."""
    if store == "memory":
        return {}
    if store == "redis":
        return redis_settings(request.getfixturevalue("redis_server"))
    return cluster_settings(request.getfixturevalue("redis_cluster"))
