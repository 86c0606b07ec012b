"""The environ the packaged worker gives an app has what gunicorn documents: no field whose name
has an underscore (so `X_Forwarded_For` never passes for `X-Forwarded-For`), a field's value
without the optional whitespace around it (RFC 9112 section 5), two `Content-Type` fields as
one value (so a body is never read by the last alone), an absolute-form request
target's path and query alone, and a path under `SCRIPT_NAME` (from the environment) without it.
Served around a host's app written under tmp_path that echoes them.
"""

from __future__ import annotations

import socket

import pytest

from tests import rawhttp
from tests.servers import TOKEN, Gunicorn

HOST_APP = """
import json

from app import create_app

inner = create_app()


def application(environ, start_response):
    if not environ["PATH_INFO"].startswith("/echo"):
        return inner(environ, start_response)
    keys = ("PATH_INFO", "QUERY_STRING", "SCRIPT_NAME")
    echoed = {key: environ[key] for key in keys}
    echoed["fields"] = sorted(key for key in environ if key.startswith("HTTP_"))
    echoed["values"] = {key: environ[key] for key in environ if key.startswith("HTTP_X_")}
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(echoed).encode()]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("environ")
    (directory / "host_environ.py").write_text(HOST_APP)
    env = {"WEB_CONCURRENCY": "1", "SCRIPT_NAME": "/store"}
    server = Gunicorn(env=env, args=("--pythonpath", str(directory), "host_environ:application"))
    yield server
    server.stop()


def echoed(server: Gunicorn, target: str, headers: list[tuple[str, str]] | None = None) -> dict:
    answer = rawhttp.exchange(server.port, rawhttp.request("GET", target, headers=headers))
    assert answer is not None
    assert answer.status == 200, answer.body
    return answer.json()


def test_a_field_whose_name_has_an_underscore_is_not_passed_on(server):
    fields = [("X_Forwarded_For", "198.51.100.7"), ("X-Request-Id", "r1")]
    assert echoed(server, "/echo", fields)["fields"] == ["HTTP_CONNECTION", "HTTP_HOST", "HTTP_X_REQUEST_ID"]


def test_a_fields_value_is_given_without_the_whitespace_around_it(server):
    # llhttp drops the whitespace before a value, not after it: a client's trailing space or tab
    # (RFC 9112 section 5: OWS, not part of the value) would reach the app.
    fields = [("X-Tabbed", "a\tb\t"), ("X-Spaced", "\t a b \t ")]
    assert echoed(server, "/echo", fields)["values"] == {"HTTP_X_TABBED": "a\tb", "HTTP_X_SPACED": "a b"}


@pytest.mark.parametrize("whitespace", [" ", "\t", " \t "])
def test_a_bearer_token_followed_by_whitespace_is_accepted(server, whitespace):
    headers = {"Authorization": f"Bearer {TOKEN}{whitespace}"}
    answer = rawhttp.exchange(server.port, rawhttp.request("GET", "/plants", headers=headers))
    assert answer is not None
    assert answer.status == 200, answer.body


def test_an_expectation_followed_by_whitespace_is_answered_100_continue(server):
    head = rawhttp.request("POST", "/plants", headers={"Expect": "100-continue\t"})
    head = head.replace(b"Content-Length: 0", b"Content-Length: 2")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(head)
        # A client that waits for the 100 before its body (as RFC 9110 section 10.1.1 lets it)
        # would wait for nothing until the server's read timeout.
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n")


TWO_TYPES = [(31031, ("text/plain", "application/json")), (31032, ("application/json", "text/plain"))]


@pytest.mark.parametrize(("plant_id", "types"), TWO_TYPES)
def test_a_body_with_two_content_types_is_refused_whichever_comes_last(server, plant_id, types):
    # Content-Type is one value (RFC 9110 section 8.3): taking the last of two would read a body
    # as JSON that a proxy in front, reading the first, took for text.
    body = b'{"id": %d, "name": "two types"}' % plant_id
    headers = [("Authorization", f"Bearer {TOKEN}"), *(("Content-Type", kind) for kind in types)]
    answer = rawhttp.exchange(server.port, rawhttp.request("POST", "/plants", body, headers))
    assert answer is not None
    assert (answer.status, answer.json()["error"]) == (415, 415)
    read = rawhttp.exchange(server.port, rawhttp.request("GET", f"/plants/{plant_id}", headers=headers[:1]))
    assert read is not None
    assert read.status == 404


def test_an_absolute_form_target_gives_its_path_and_query(server):
    answer = echoed(server, "http://plants.example/echo/a%20b?tag=kept")
    assert (answer["PATH_INFO"], answer["QUERY_STRING"]) == ("/echo/a b", "tag=kept")


def test_a_path_under_script_name_is_given_without_it(server):
    answer = echoed(server, "/store/echo?x=1")
    assert (answer["SCRIPT_NAME"], answer["PATH_INFO"], answer["QUERY_STRING"]) == ("/store", "/echo", "x=1")
