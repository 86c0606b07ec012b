"""A request whose body is in a transfer coding before `chunked` (`Transfer-Encoding: gzip, chunked`)
is a JSON 501 and writes nothing, on the packaged worker (its parser refuses it) as on gunicorn's
gthread, whose parser takes gzip, deflate and compress and hands the app the chunks' bytes still
coded: read as JSON, a labelled body of plain JSON was stored as if unlabelled, and a DELETE,
whose body is never read, deleted its plant.
"""

from __future__ import annotations

import gzip
import json
import uuid

import pytest

from tests import rawhttp
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module", params=["app.server.worker.PlantsWorker", "gthread"])
def server(request):
    server = Gunicorn(env={"WEB_CONCURRENCY": "1", "GUNICORN_WORKER_CLASS": request.param})
    yield server
    server.stop()


def _coded_write(method: str, path: str, codings: str, body: bytes) -> bytes:
    """`method path` with `body` as one chunk, sent as `Transfer-Encoding: codings`."""
    head = [
        f"{method} {path} HTTP/1.1",
        "Host: 127.0.0.1",
        f"Authorization: Bearer {TOKEN}",
        "Content-Type: application/json",
        f"Transfer-Encoding: {codings}",
        "Connection: close",
    ]
    chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return "\r\n".join([*head, "", ""]).encode("latin-1") + chunk


def _status_of(server: Gunicorn, path: str) -> int:
    answer = rawhttp.exchange(server.port, rawhttp.request("GET", path, headers=AUTH))
    assert answer is not None
    return answer.status


def _created(server: Gunicorn) -> int:
    """The id of a plant just created, named Fern."""
    plant_id = uuid.uuid4().int % 10**12
    created = rawhttp.exchange(
        server.port,
        rawhttp.request(
            "POST",
            "/plants",
            json.dumps({"id": plant_id, "name": "Fern"}).encode(),
            {**AUTH, "Content-Type": "application/json"},
        ),
    )
    assert created is not None
    assert created.status == 200
    return plant_id


@pytest.mark.parametrize(
    ("codings", "coded"),
    [
        ("gzip, chunked", False),  # a label the body does not match: plain JSON
        ("gzip, chunked", True),
        ("deflate, chunked", False),
        ("compress, chunked", False),
        ("GZIP, chunked", False),
    ],
    ids=["gzip-label-only", "gzip", "deflate", "compress", "upper-case"],
)
def test_a_create_in_a_transfer_coding_is_501_and_writes_nothing(server, codings, coded):
    plant_id = uuid.uuid4().int % 10**12
    body = json.dumps({"id": plant_id, "name": "Fern"}).encode()
    data = _coded_write("POST", "/plants", codings, gzip.compress(body) if coded else body)
    answer = rawhttp.exchange(server.port, data)
    assert answer is not None
    assert answer.status == 501, answer.body
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["error"] == 501
    assert "chunked" in answer.json()["message"]
    assert _status_of(server, f"/plants/{plant_id}") == 404


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_change_in_a_transfer_coding_is_501_and_changes_nothing(server, method):
    plant_id = _created(server)
    data = _coded_write(method, f"/plants/{plant_id}", "gzip, chunked", b'{"name": "Changed"}')
    answer = rawhttp.exchange(server.port, data)
    assert answer is not None
    assert answer.status == 501, answer.body
    assert answer.json()["error"] == 501
    read = rawhttp.exchange(server.port, rawhttp.request("GET", f"/plants/{plant_id}", headers=AUTH))
    assert read is not None
    assert read.json() == {"name": "Fern"}


def test_a_chunked_body_is_read_as_it_is(server):
    # gunicorn's gthread leaves `Transfer-Encoding: chunked` in the environ: no coding to refuse.
    plant_id = uuid.uuid4().int % 10**12
    body = json.dumps({"id": plant_id, "name": "Fern"}).encode()
    answer = rawhttp.exchange(server.port, _coded_write("POST", "/plants", "chunked", body))
    assert answer is not None
    assert answer.status == 200, answer.body
    assert _status_of(server, f"/plants/{plant_id}") == 200


def test_a_delete_in_a_transfer_coding_is_501_and_deletes_nothing(server):
    # A DELETE's body is never read, so the coding was never looked at under gthread: the plant
    # was deleted (204), where the packaged worker and the shipped nginx refuse the request.
    plant_id = _created(server)
    data = _coded_write("DELETE", f"/plants/{plant_id}", "gzip, chunked", b"{}")
    answer = rawhttp.exchange(server.port, data)
    assert answer is not None
    assert answer.status == 501, answer.body
    assert answer.json()["error"] == 501
    assert _status_of(server, f"/plants/{plant_id}") == 200


@pytest.mark.parametrize(("method", "path"), [("GET", "/plants"), ("POST", "/events/tickets")])
def test_any_request_in_a_transfer_coding_is_501(server, method, path):
    answer = rawhttp.exchange(server.port, _coded_write(method, path, "deflate, chunked", b"{}"))
    assert answer is not None
    assert answer.status == 501, answer.body
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["error"] == 501
