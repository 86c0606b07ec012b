"""A request with a body that asks to upgrade (`Connection: Upgrade`, `Upgrade: websocket` or
`h2c`) is answered as the HTTP/1.1 request it also is (README's error table, the served document):
its body is read and served, so a `POST /plants` creates its plant, once. gunicorn's gthread does
so; the packaged worker must too, and may close the connection after the answer, but never read
the bytes after it as a request.
"""

from __future__ import annotations

import json
import socket

import pytest

from tests import rawhttp
from tests.servers import TOKEN, Gunicorn

WEBSOCKET = [
    ("Upgrade", "websocket"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("Sec-WebSocket-Version", "13"),
]
H2C = [("Upgrade", "h2c"), ("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")]


@pytest.fixture(scope="module", params=["app.server.worker.PlantsWorker", "gthread"])
def server(request):
    server = Gunicorn(env={"WEB_CONCURRENCY": "1", "GUNICORN_WORKER_CLASS": request.param})
    yield server
    server.stop()


def upgrade_post(
    plant_id: int, upgrade: list[tuple[str, str]], chunked: bool = False, version: str = "HTTP/1.1"
) -> bytes:
    """A POST /plants with a NewPlant body, asking to upgrade; no `Connection: close`, which
    would replace the `Connection: Upgrade` that makes it an upgrade request."""
    body = json.dumps({"id": plant_id, "name": "upgraded"}).encode()
    framing = [("Transfer-Encoding", "chunked")] if chunked else [("Content-Length", str(len(body)))]
    fields = [
        ("Host", "127.0.0.1"),
        ("Authorization", f"Bearer {TOKEN}"),
        ("Content-Type", "application/json"),
        *framing,
        ("Connection", "Upgrade" if upgrade is WEBSOCKET else "Upgrade, HTTP2-Settings"),
        *upgrade,
    ]
    head = f"POST /plants {version}\r\n" + "".join(f"{name}: {value}\r\n" for name, value in fields) + "\r\n"
    return head.encode("latin-1") + (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if chunked else body)


def status_of(server: Gunicorn, plant_id: int) -> int:
    conn = server.connection()
    try:
        conn.request("GET", f"/plants/{plant_id}", headers={"Authorization": f"Bearer {TOKEN}"})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("plant_id", "upgrade", "chunked"),
    [(7101, WEBSOCKET, False), (7102, WEBSOCKET, True), (7103, H2C, False)],
    ids=["websocket", "websocket-chunked", "h2c"],
)
def test_a_create_asking_to_upgrade_creates_its_plant(server, plant_id, upgrade, chunked):
    answer = rawhttp.exchange(server.port, upgrade_post(plant_id, upgrade, chunked))
    assert answer is not None
    assert answer.status == 200, answer.body
    assert answer.json() == {"name": "upgraded"}
    assert "Upgrade" not in answer.headers  # no protocol is switched
    assert status_of(server, plant_id) == 200


def test_a_delete_pipelined_after_an_upgrading_create_is_never_read_first(server):
    """The create is served whole before anything after it: on the packaged worker the connection
    then closes, so the DELETE behind it is never read. What gthread does with it is gunicorn's
    (27 runs and answers it; 23 may run it and leave it unanswered): only that the create came
    first is checked there, and that an answered DELETE took effect."""
    delete = b"DELETE /plants/7104 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=3) as sock:
        sock.sendall(upgrade_post(7104, WEBSOCKET) + delete % TOKEN.encode())
        statuses = [answer.status for answer in rawhttp.responses(sock, 2)]
    if server.env["GUNICORN_WORKER_CLASS"] != "gthread":
        assert statuses == [200]
        assert status_of(server, 7104) == 200
    else:  # gunicorn's to decide whether the DELETE runs, and whether it is answered
        assert statuses in ([200], [200, 204])
        if statuses == [200, 204]:
            assert status_of(server, 7104) == 404


def test_an_http_1_0_create_asking_to_upgrade_creates_its_plant(server):
    """HTTP/1.0 without keep-alive: nothing may follow its head on the connection, its body aside."""
    answer = rawhttp.exchange(server.port, upgrade_post(7105, WEBSOCKET, version="HTTP/1.0"))
    assert answer is not None
    assert answer.status == 200, answer.body
    assert answer.json() == {"name": "upgraded"}
    assert status_of(server, 7105) == 200


@pytest.mark.parametrize(
    "trailers",
    [b"".join(b"X-T%d: 1\r\n" % i for i in range(101)), b"X-Long: " + b"a" * 9000 + b"\r\n"],
    ids=["101-trailer-fields", "a-trailer-field-past-its-limit"],
)
def test_a_body_refused_is_refused_alike_whether_or_not_its_request_asks_to_upgrade(server, trailers):
    """The same refusal, with its status, as the same chunked create without Upgrade: a body that
    follows its head in the same read is refused as one that comes later."""
    answers = []
    for plant_id, upgrade in ((7106, WEBSOCKET), (7107, None)):
        data = upgrade_post(plant_id, upgrade or WEBSOCKET, chunked=True)
        if upgrade is None:
            data = data.replace(b"Connection: Upgrade\r\nUpgrade: websocket\r\n", b"")
        answer = rawhttp.exchange(server.port, data.replace(b"0\r\n\r\n", b"0\r\n" + trailers + b"\r\n"))
        assert answer is not None
        answers.append((answer.status, answer.json()))
        assert status_of(server, plant_id) == 404
    assert answers[0] == answers[1]
    assert answers[0][0] in (400, 431)
