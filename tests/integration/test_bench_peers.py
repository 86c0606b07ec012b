"""The FastAPI contract peer (bench/apps/fastapi_contract_peer.py) holds the service's create
contract, so that `python -m bench floor` compares like with like: each assertion runs against
the service and the peer side by side, each started as the benchmark starts it (its access line
read from a file here rather than /dev/null)."""

from __future__ import annotations

import http.client
import itertools
import json
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.store import plant_etag
from bench.harness import TOKEN
from bench.harness.servers import Server, gunicorn, peer

ids = itertools.count(1)


@pytest.fixture(scope="module", params=["service", "contract peer"])
def server(request, tmp_path_factory):
    make = (
        gunicorn
        if request.param == "service"
        else lambda name: peer(name, False, contract=True, access_log=True)
    )
    started = make(request.param)
    started.pin = False  # no core of its own in the tests
    started.stdout = tmp_path_factory.mktemp("peer") / "stdout.log"
    started.start()
    yield started
    started.stop()


def call(
    server: Server, body: object, token: str | None = TOKEN, method: str = "POST", path: str = "/plants"
):
    """One request on a new connection: the status, the headers (lower-cased names) and the body."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    payload = body if isinstance(body, str) or body is None else json.dumps(body)
    conn.request(method, path, body=payload, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, {name.lower(): value for name, value in response.getheaders()}, data


def assert_error(status: int, headers: dict[str, str], data: bytes, expected: int) -> None:
    assert status == expected
    assert headers["content-type"] == "application/json"
    error = json.loads(data)
    assert error["error"] == expected
    assert isinstance(error["message"], str)
    assert error["message"]


def test_create_answers_the_plant_with_its_etag(server):
    status, headers, data = call(server, {"id": next(ids), "name": "Boston fern", "tag": "fern"})
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert headers["etag"] == f'"{plant_etag("Boston fern", "fern")}"'  # the service's own ETag
    assert json.loads(data) == {"name": "Boston fern", "tag": "fern"}

    status, headers, data = call(server, {"id": next(ids), "name": "Aloe vera"})
    assert status == 200
    assert headers["etag"] == f'"{plant_etag("Aloe vera", None)}"'
    assert json.loads(data) == {"name": "Aloe vera"}  # no tag: none in the answer


def test_identical_replay_answers_200_and_a_conflict_409(server):
    plant = {"id": next(ids), "name": "Jade plant", "tag": "succulent"}
    first = call(server, plant)
    replay = call(server, plant)
    assert first[0] == replay[0] == 200
    assert replay[1]["etag"] == first[1]["etag"]
    assert json.loads(replay[2]) == json.loads(first[2])
    assert_error(*call(server, {**plant, "name": "Rubber plant"}), 409)
    assert_error(*call(server, {"id": plant["id"], "name": "Jade plant"}), 409)  # the tag differs


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_create_without_an_accepted_token_is_refused_401(server, token):
    status, headers, data = call(server, {"id": next(ids), "name": "Calathea"}, token=token)
    assert_error(status, headers, data, 401)
    assert headers["www-authenticate"].startswith('Bearer realm="plants"')


@pytest.mark.parametrize(
    "body",
    [
        {"id": 1, "name": "Calathea", "colour": "green"},  # an extra field
        {"id": "1", "name": "Calathea"},  # not strictly an integer
        {"id": 2**63, "name": "Calathea"},  # past int64
        {"id": 1, "name": ""},
        {"name": "Calathea"},
        "{not json",
    ],
)
def test_a_bad_body_is_refused_400(server, body):
    assert_error(*call(server, body), 400)


def scrape(server: Server) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics by its name and labels."""
    status, _, data = call(server, None, method="GET", path="/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(data.decode())
        for sample in family.samples
    }


def test_metrics_count_each_create_and_each_new_plant(server):
    created = ("plants_http_requests_total", (("method", "POST"), ("route", "/plants"), ("status", "200")))
    appended = ("plants_events_appended_total", (("type", "plant.created"),))
    timed = ("plants_http_request_duration_seconds_count", (("route", "/plants"),))
    before = scrape(server)
    plant = {"id": next(ids), "name": "Peace lily", "tag": "flowering"}
    assert call(server, plant)[0] == call(server, plant)[0] == 200  # a create and its replay
    after = scrape(server)
    assert after[created] - before.get(created, 0) == 2
    assert after[timed] - before.get(timed, 0) >= 2
    assert after[appended] - before.get(appended, 0) == 1  # the replay changes nothing


def access_lines(server: Server) -> list[str]:
    assert server.stdout is not None
    return [line for line in server.stdout.read_text().splitlines() if '"POST /plants HTTP/1.1"' in line]


def test_each_request_writes_one_access_line(server):
    before = len(access_lines(server))
    plant_id = next(ids)
    assert call(server, {"id": plant_id, "name": "Spider plant"})[0] == 200
    assert call(server, {"id": plant_id, "name": "Other"})[0] == 409
    deadline = time.monotonic() + 10
    while len(access_lines(server)) < before + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)  # a third line, were there one per request more, would be written by now
    lines = access_lines(server)
    assert len(lines) == before + 2
    assert '"POST /plants HTTP/1.1" 200' in lines[-2]
    assert '"POST /plants HTTP/1.1" 409' in lines[-1]
