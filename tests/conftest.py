"""Shared fixtures: the app and its test client (as in Flask's tutorial), real gunicorn and Redis.

The contract runs against both stores: `app`, `client`, `store` and `gunicorn` are parametrized
over the in-memory store and a real redis-server (one per session, a fresh key prefix per test).
"""

from __future__ import annotations

import uuid

import pytest

from app import create_app
from tests.servers import TOKEN, Gunicorn, RedisServer

STORES = ["memory", "redis"]


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
    """The settings that choose the store under test."""
    if request.param == "memory":
        return {}
    return redis_settings(request.getfixturevalue("redis_server"))


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
        close = getattr(app.extensions["plants"].store, "close", None)
        if close:
            close()


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


@pytest.fixture(scope="session", params=STORES)
def gunicorn(request):
    """One real gunicorn per store for the session (two workers on Redis); tests use ids of their own."""
    env = {}
    if request.param == "redis":
        env = {**redis_settings(request.getfixturevalue("redis_server")), "WEB_CONCURRENCY": "2"}
    server = Gunicorn(env=env)
    yield server
    server.stop()
