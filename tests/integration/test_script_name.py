"""The service under a path prefix (`SCRIPT_NAME` in gunicorn's environment), on the packaged
worker and on gunicorn's stock gthread, with each store: the two workers answer alike. The probes
(`/healthz`, `/readyz`, as deploy/ sends them, without the prefix) are served; a path that is
none of the service's, in the prefix or out of it, is the JSON 404; the URLs handed out name the
prefix."""

from __future__ import annotations

import json

import pytest

from tests.conftest import redis_settings
from tests.helpers import assert_error, call
from tests.servers import TOKEN, Gunicorn

HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
WORKERS = {"packaged": "app.server.worker.PlantsWorker", "gthread": "gthread"}


@pytest.fixture(scope="module", params=[(w, s) for w in WORKERS for s in ("memory", "redis")], ids="-".join)
def server(request):
    worker, store = request.param
    env = {"SCRIPT_NAME": "/store", "GUNICORN_WORKER_CLASS": WORKERS[worker], "GUNICORN_THREADS": "3"}
    if store == "redis":
        env.update(redis_settings(request.getfixturevalue("redis_server")))
    server = Gunicorn(env=env)
    yield server
    server.stop()


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/store/healthz", "/st%6fre/readyz"])
def test_the_probes_are_served_outside_the_prefix_and_in_it(server, path):
    status, headers, body = call(server.connection(), "GET", path)
    assert (status, headers["Content-Type"], json.loads(body)["status"]) == (200, "application/json", "ok")


@pytest.mark.parametrize(
    "path",
    ["/other", "/storefront", "/store/other", "/store", "/storeplants", "/storeplants/1", "/store//plants"],
)
def test_a_path_that_is_none_of_the_services_is_the_json_404(server, path):
    """`/storeplants` is no path under `/store` (it was served as `/plants`: the prefix was taken off
    the front of any path that started with its characters), and `/store//plants` has a doubled
    slash, the JSON 404 as `//plants` is."""
    assert_error(*call(server.connection(), "GET", path, headers=HEADERS), 404)


def test_the_urls_handed_out_name_the_prefix(server):
    base = f"http://127.0.0.1:{server.port}/store"
    body = json.dumps({"name": "Prefixed", "tag": "prefixed"})
    status, headers, _ = call(server.connection(), "PUT", "/store/plants/71000001", body, HEADERS)
    assert (status, headers["Location"]) == (201, f"{base}/plants/71000001")
    assert call(server.connection(), "PUT", "/store/plants/71000002", body, HEADERS)[0] == 201
    status, headers, _ = call(
        server.connection(), "GET", "/store/plants?tags=prefixed&limit=1", None, HEADERS
    )
    assert status == 200
    assert headers["Link"].startswith(f"<{base}/plants?tags=prefixed&limit=1&after=")
    status, _, data = call(server.connection(), "GET", "/store/openapi.json")
    assert (status, json.loads(data)["servers"]) == (200, [{"url": "/store"}])
    status, _, data = call(server.connection(), "GET", "/store/docs")
    assert status == 200
    assert b'src="docs/init.js"' in data  # relative: /store/docs/init.js
    assert call(server.connection(), "GET", "/store/docs/init.js")[0] == 200


def test_a_watch_under_the_prefix_is_answered(server):
    status, headers, data = call(server.connection(), "GET", "/store/events?after=now&wait=1", None, HEADERS)
    assert (status, headers["Content-Type"]) == (200, "application/json")
    assert json.loads(data)["events"] == []


@pytest.mark.parametrize("worker", WORKERS)
def test_a_prefix_with_a_trailing_slash_is_the_same_prefix(worker):
    """`SCRIPT_NAME=/store/` serves as `/store` does: `/store//plants` was served as `/plants` (the
    prefix taken off left its slash behind), where a doubled slash is the JSON 404 everywhere else."""
    server = Gunicorn(env={"SCRIPT_NAME": "/store/", "GUNICORN_WORKER_CLASS": WORKERS[worker]})
    try:
        assert_error(*call(server.connection(), "GET", "/store//plants", headers=HEADERS), 404)
        status, headers, _ = call(server.connection(), "PUT", "/store/plants/1", '{"name": "Fern"}', HEADERS)
        assert (status, headers["Location"]) == (201, f"http://127.0.0.1:{server.port}/store/plants/1")
        status, _, data = call(server.connection(), "GET", "/store/openapi.json")
        assert (status, json.loads(data)["servers"]) == (200, [{"url": "/store"}])
        assert call(server.connection(), "GET", "/plants/1", headers=HEADERS)[0] == 200
    finally:
        server.stop()
