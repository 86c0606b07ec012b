"""Shared fixtures: the app and its test client (as in Flask's tutorial), and a real gunicorn."""

from __future__ import annotations

import pytest

from app import create_app
from tests.servers import TOKEN, Gunicorn


@pytest.fixture
def app():
    return create_app({"TESTING": True, "PLANTS_API_TOKENS": [TOKEN, "second-token"]})


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
def gunicorn():
    """One real gunicorn for the session; tests use ids of their own."""
    server = Gunicorn()
    yield server
    server.stop()
