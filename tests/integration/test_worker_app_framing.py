"""An app whose answer would break HTTP's framing (a field with a line break, a Content-Length its
body does not have) never has it sent as is by the packaged worker: a small answer is the worker's
own JSON 500 in its place, a large one is cut and its connection closed, so that no client reads
a forged field or takes the bytes of one answer for the next's. Served around a host's app written
under tmp_path."""

from __future__ import annotations

import http.client

import pytest

from tests import rawhttp
from tests.servers import Gunicorn

HOST_APP = """
from app import create_app

inner = create_app()
ANSWERS = {
    "/line-break": ([("X-Note", "a\\r\\nSet-Cookie: forged=1")], [b"{}"]),
    "/declared-longer": ([("Content-Length", "10")], [b"12345"]),
    "/declared-shorter": ([("Content-Length", "3")], [b"12345"]),
    "/large-declared-shorter": ([("Content-Length", "100000")], [b"a" * 40_000] * 5),
}


def application(environ, start_response):
    if environ["PATH_INFO"] not in ANSWERS:
        return inner(environ, start_response)
    fields, body = ANSWERS[environ["PATH_INFO"]]
    start_response("200 OK", [("Content-Type", "application/json"), *fields])
    return iter(body)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("app_framing")
    (directory / "host_app_framing.py").write_text(HOST_APP)
    server = Gunicorn(
        env={"WEB_CONCURRENCY": "1"}, args=("--pythonpath", str(directory), "host_app_framing:application")
    )
    yield server
    server.stop()


@pytest.mark.parametrize("path", ["/line-break", "/declared-longer", "/declared-shorter"])
def test_a_small_answer_that_would_break_the_framing_is_a_500(server, path):
    answer = rawhttp.exchange(server.port, rawhttp.request("GET", path), timeout=5)
    assert answer is not None
    assert answer.status == 500, answer.body
    assert answer.json()["error"] == 500
    assert "Set-Cookie" not in answer.headers


def test_a_large_answer_longer_than_its_content_length_is_cut_and_its_connection_closed(server):
    conn = server.connection(timeout=5)
    conn.request("GET", "/large-declared-shorter")
    response = conn.getresponse()
    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead):  # never all of its 100,000 bytes, then more
        response.read()
    conn.close()
