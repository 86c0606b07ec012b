"""A write's `Content-Encoding` as servers hand it on: two fields are read as one list (RFC 9110
section 5.3), so a coding in the second is refused as in the first (415, nothing written); an
empty list (`,`) is the identity. On the packaged worker, on gunicorn's gthread, and behind the
shipped nginx site (which passes both fields on)."""

from __future__ import annotations

import json
import uuid

import pytest

from tests import rawhttp
from tests.servers import TOKEN, Gunicorn, Nginx

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module", params=["packaged", "gthread", "nginx"])
def port(request, tmp_path_factory):
    worker = "gthread" if request.param == "gthread" else "app.server.worker.PlantsWorker"
    app = Gunicorn(
        env={"WEB_CONCURRENCY": "1", "GUNICORN_WORKER_CLASS": worker, "PLANTS_TRUSTED_PROXIES": "1"}
    )
    nginx = Nginx(app.port, tmp_path_factory.mktemp("nginx")) if request.param == "nginx" else None
    yield nginx.port if nginx else app.port
    if nginx:
        nginx.stop()
    app.stop()


def _create(port: int, codings: list[str]) -> tuple[rawhttp.RawResponse, int]:
    """A create of a fresh plant with one `Content-Encoding` field per member of `codings`."""
    plant_id = uuid.uuid4().int % 10**12
    body = json.dumps({"id": plant_id, "name": "Fern"}).encode()
    fields = [*AUTH.items(), ("Content-Type", "application/json")]
    fields += [("Content-Encoding", coding) for coding in codings]
    answer = rawhttp.exchange(port, rawhttp.request("POST", "/plants", body, fields))
    assert answer is not None
    return answer, plant_id


def _stored(port: int, plant_id: int) -> bool:
    answer = rawhttp.exchange(port, rawhttp.request("GET", f"/plants/{plant_id}", headers=AUTH))
    assert answer is not None
    return answer.status == 200


@pytest.mark.parametrize("codings", [["identity", "gzip"], ["gzip", "identity"], ["Identity", "BR"]])
def test_a_coding_in_any_of_two_fields_is_415_and_writes_nothing(port, codings):
    answer, plant_id = _create(port, codings)
    assert answer.status == 415, answer.body
    assert answer.headers["Accept-Encoding"] == "identity"
    refused = next(coding for coding in codings if coding.lower() != "identity")
    assert f"'{refused}'" in answer.json()["message"]
    assert not _stored(port, plant_id)


@pytest.mark.parametrize("codings", [[","], ["identity", "identity"], [" , identity ,"]])
def test_fields_that_name_only_the_identity_are_read_as_sent(port, codings):
    answer, plant_id = _create(port, codings)
    assert answer.status == 200, answer.body
    assert _stored(port, plant_id)
