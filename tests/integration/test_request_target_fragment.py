"""A request target's fragment (`GET /healthz#top`: clients should not send one, some do) is no
part of the path (RFC 9110 section 4.2.5): PATH_INFO and QUERY_STRING leave it out on the packaged
worker as on gunicorn's gthread.
"""

from __future__ import annotations

import pytest

from tests import rawhttp
from tests.servers import Gunicorn


@pytest.fixture(scope="module", params=["app.server.worker.PlantsWorker", "gthread"])
def server(request):
    server = Gunicorn(env={"WEB_CONCURRENCY": "1", "GUNICORN_WORKER_CLASS": request.param})
    yield server
    server.stop()


@pytest.mark.parametrize("target", ["/healthz#top", "/healthz#top?x=1"])
def test_a_fragment_in_the_request_target_is_not_part_of_the_path(server, target):
    answer = rawhttp.exchange(server.port, rawhttp.request("GET", target))
    assert answer is not None
    assert answer.status == 200, answer.body
