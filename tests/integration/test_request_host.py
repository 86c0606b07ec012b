"""The request's host and target as RFC 9112 section 3.2 reads them, on every server the service
runs under (the packaged worker, gunicorn's stock gthread worker, `flask run`), reached directly:
a `Host` that is no `uri-host [":" port]` is the JSON 400 (it was served, its links made relative),
an absolute request line's authority is the host (its `Host` ignored, section 3.2.2), and
`OPTIONS *` asks about the server as a whole (RFC 9110 section 9.3.7): 204 with every method the
service serves. Behind the shipped nginx site, nginx answers the first and the last itself
(its JSON 400), and names its `server_name` whatever the request line says (test_nginx_refusals.py,
test_nginx.py)."""

from __future__ import annotations

import itertools
import re
import shutil

import pytest

from tests.integration.test_embedded_servers import serve
from tests.rawhttp import exchange
from tests.servers import ROOT, TOKEN

AUTH = f"Authorization: Bearer {TOKEN}\r\n"
#: Ids of this module's plants: the session's servers share one store with other modules.
IDS = itertools.count(73_000_000)
EVERY_METHOD = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"


@pytest.fixture(scope="module")
def flask_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("flask-run")
    shutil.copy(ROOT / "wsgi.py", directory / "wsgi.py")
    server = serve(
        directory, ["-m", "flask", "--app", "wsgi", "run", "--port", "{port}"], {"PLANTS_API_TOKENS": TOKEN}
    )
    yield server
    server.stop()


@pytest.fixture(params=["packaged worker", "gthread", "flask run"])
def port(request, gunicorns) -> int:
    if request.param == "flask run":
        return request.getfixturevalue("flask_run").port
    return gunicorns("memory" if request.param == "packaged worker" else "stock-worker").port


def created(port: int, line: str, host: str | None) -> str:
    """The `Location` of a new plant, PUT with request line `line` (`{id}` in it) and `host`."""
    plant_id = next(IDS)
    body = b'{"name": "Fern"}'
    fields = "" if host is None else f"Host: {host}\r\n"
    sent = (
        f"{line.format(id=plant_id)}\r\n{fields}{AUTH}Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    answer = exchange(port, sent)
    assert (answer and answer.status) == 201
    return answer.headers["Location"].replace(str(plant_id), "{id}")


def error(answer, status: int) -> str:
    assert answer is not None
    assert (answer.status, answer.headers["Content-Type"]) == (status, "application/json")
    record = answer.json()
    assert record["error"] == status
    return record["message"]


@pytest.mark.parametrize(
    "host",
    [
        "a b",
        "a/b",
        "user@a.example",
        "a.example:80x",
        "[::1",
        "[no-address]",
        "caf\xe9.example",
        "a?b",
        "a#b",
    ],
)
def test_a_host_that_is_no_uri_host_is_the_json_400(port, host):
    sent = f"GET /plants HTTP/1.1\r\nHost: {host}\r\n{AUTH}Connection: close\r\n\r\n".encode("latin-1")
    assert "Host header" in error(exchange(port, sent), 400)


def test_a_huge_invalid_host_is_not_echoed(port):
    host = "a b" + "x" * 4000
    sent = f"GET /plants HTTP/1.1\r\nHost: {host}\r\n{AUTH}Connection: close\r\n\r\n".encode()
    answer = exchange(port, sent)
    message = error(answer, 400)
    assert "xxxx" not in message
    assert len(answer.body) < 400


@pytest.mark.parametrize(
    ("host", "location"),
    [
        ("plants.example:8080", "http://plants.example:8080/plants/{id}"),
        ("[2001:db8::1]:8080", "http://[2001:db8::1]:8080/plants/{id}"),
        ("127.0.0.1", "http://127.0.0.1/plants/{id}"),
        ("plant_store:8000", "/plants/{id}"),  # RFC 3986 allows `_`; Werkzeug builds no URL on it
    ],
)
def test_a_valid_host_is_served_and_named_in_location(port, host, location):
    assert created(port, "PUT /plants/{id} HTTP/1.1", host) == location


def test_an_absolute_request_line_names_the_host_of_location_and_link(port):
    for _ in range(2):  # two: the first page of one has a next
        line = "PUT http://b.example:8443/plants/{id} HTTP/1.1"
        assert created(port, line, "a.example") == "http://b.example:8443/plants/{id}"
    sent = (
        f"GET http://b.example/plants?limit=1 HTTP/1.1\r\nHost: a.example\r\n{AUTH}Connection: close\r\n\r\n"
    )
    answer = exchange(port, sent.encode())
    assert (answer and answer.status) == 200
    assert re.fullmatch(
        r"<http://b\.example/plants\?limit=1&after=[^>]+>; rel=\"next\"", answer.headers["Link"]
    )


@pytest.mark.parametrize("target", ["http://user@b.example/plants", "http:///plants"])
def test_an_absolute_request_line_whose_authority_is_no_host_is_the_json_400(port, target):
    """Userinfo (RFC 9110 section 4.2.4: an error, it hides the authority) or no host at all. (The
    packaged worker's parser refuses an empty host itself, with its own 400 naming the target.)"""
    sent = f"GET {target} HTTP/1.1\r\nHost: a.example\r\n{AUTH}Connection: close\r\n\r\n".encode()
    assert "request target" in error(exchange(port, sent), 400)


def test_options_star_is_204_with_every_method_served_and_no_token(port):
    answer = exchange(port, b"OPTIONS * HTTP/1.1\r\nHost: plants.example\r\nConnection: close\r\n\r\n")
    assert answer is not None
    assert (answer.status, answer.body) == (204, b"")
    assert answer.headers["Allow"] == EVERY_METHOD
    assert "Content-Type" not in answer.headers


def test_an_http_1_1_request_without_host_is_the_json_400(port):
    """RFC 9112 section 3.2: the packaged worker refused it already; gthread and `flask run` served it."""
    answer = exchange(port, f"GET /plants HTTP/1.1\r\n{AUTH}Connection: close\r\n\r\n".encode())
    assert "Host" in error(answer, 400)


def test_an_http_1_0_request_without_host_is_served_on_the_listeners_address(port):
    assert created(port, "PUT /plants/{id} HTTP/1.0", None) == f"http://127.0.0.1:{port}/plants/{{id}}"
