"""A request that asks to upgrade to a websocket is answered as the plain HTTP request it also is
(RFC 9110 section 7.8 lets a server ignore Upgrade; the service serves no websocket), on the
packaged worker as on gunicorn's gthread: werkzeug's router matched it only to websocket rules,
so every route answered 405.
"""

from __future__ import annotations

import pytest

from tests import rawhttp
from tests.servers import TOKEN, Gunicorn

WEBSOCKET = [
    ("Connection", "Upgrade"),
    ("Upgrade", "websocket"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("Sec-WebSocket-Version", "13"),
]


@pytest.fixture(scope="module", params=["app.server.worker.PlantsWorker", "gthread"])
def server(request):
    server = Gunicorn(env={"WEB_CONCURRENCY": "1", "GUNICORN_WORKER_CLASS": request.param})
    yield server
    server.stop()


def upgrade_request(path: str, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A GET that asks for a websocket; without rawhttp's `Connection: close`, which would replace
    the `Connection: Upgrade` that makes it one."""
    lines = [
        f"GET {path} HTTP/1.1",
        "Host: 127.0.0.1",
        *(f"{name}: {value}" for name, value in [*headers, *WEBSOCKET]),
    ]
    return "\r\n".join([*lines, "", ""]).encode("latin-1")


def test_healthz_asked_to_upgrade_is_answered_as_http(server):
    answer = rawhttp.exchange(server.port, upgrade_request("/healthz"))
    assert answer is not None
    assert answer.status == 200, answer.body
    assert answer.json() == {"status": "ok"}
    assert "Upgrade" not in answer.headers  # no protocol is switched


def test_an_operation_asked_to_upgrade_is_answered_as_http(server):
    answer = rawhttp.exchange(
        server.port, upgrade_request("/plants", (("Authorization", f"Bearer {TOKEN}"),))
    )
    assert answer is not None
    assert answer.status == 200, answer.body
    assert "plants" in answer.json()


def test_an_unknown_path_asked_to_upgrade_is_the_json_404(server):
    answer = rawhttp.exchange(server.port, upgrade_request("/chat"))
    assert answer is not None
    assert answer.status == 404
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["error"] == 404
