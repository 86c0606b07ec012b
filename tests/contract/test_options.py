"""OPTIONS on every route answers alike, through a real gunicorn: 204 with `Allow` (the route's
methods and OPTIONS), no body and so no Content-Type, and no token needed (app/http/options.py)."""

from __future__ import annotations

import pytest

from app.plants.routes import ROUTES, allowed_methods
from tests.contract.test_cors import concrete
from tests.helpers import call
from tests.servers import Gunicorn


@pytest.fixture(scope="module")
def server():
    server = Gunicorn()
    yield server
    server.stop()


RULES = [
    *[
        (rule, ", ".join([*allowed_methods(rule), "OPTIONS"]))
        for rule in dict.fromkeys(r.rule for r in ROUTES)
    ],
    ("/healthz", "GET, HEAD, OPTIONS"),
    ("/readyz", "GET, HEAD, OPTIONS"),
]


@pytest.mark.parametrize(("rule", "allow"), RULES, ids=[rule for rule, _ in RULES])
def test_options_is_204_with_allow_and_no_token(server, rule, allow):
    path = concrete(rule).replace("<name>", "swagger-ui.css")
    status, headers, body = call(server.connection(), "OPTIONS", path)
    assert status == 204, body
    assert headers["Allow"] == allow
    assert "Content-Type" not in headers
    assert "WWW-Authenticate" not in headers
    assert body == b""
