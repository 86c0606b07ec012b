"""app/compat/: where a library's internals are not as a compat module expects, the service takes
the library's public path and answers exactly as before."""

from __future__ import annotations

import http.client
import io
import logging
from types import SimpleNamespace

import pytest
from flask import request
from gunicorn.config import Config
from gunicorn.http.message import Message
from gunicorn.http.parser import RequestParser
from marshmallow import Schema
from werkzeug.serving import WSGIRequestHandler
from werkzeug.wrappers import Request

import app.compat.flask
import app.compat.gunicorn
import app.compat.http_client
import app.compat.marshmallow
import app.compat.werkzeug
from app.errors import BodyReadByHost, BodyTooLarge
from app.http.body import read_through_get_data
from tests.contract.test_embedded_host import AUTH, make_host


@pytest.fixture
def store_settings():
    return {"PLANTS_STORE_URL": "memory://"}


def answers(client, auth):
    """Status and body of creates, changes and refusals that load and dump every record schema."""
    requests = [
        ("post", "/plants", {"id": 1, "name": "Boston fern", "tag": "fern"}),
        ("post", "/plants", {"id": 2, "name": "Snake plant"}),
        ("post", "/plants", {"id": "3", "name": 5, "tags": "x"}),
        ("post", "/plants", {"id": 2**63, "name": "", "tag": "t" * 101}),
        ("post", "/plants", {"id": True, "name": None}),
        ("put", "/plants/1", {"name": "Fern", "tag": "green"}),
        ("put", "/plants/1", {"id": 9, "name": "Fern"}),
        ("patch", "/plants/1", {"tag": None}),
        ("patch", "/plants/1", {"name": 7, "colour": "red"}),
        ("get", "/plants/1", None),
        ("get", "/plants?limit=10", None),
    ]
    found = []
    for method, path, body in requests:
        headers = {**auth, "Content-Type": "application/merge-patch+json"} if method == "patch" else auth
        response = getattr(client, method)(path, json=body, headers=headers)
        found.append((method, path, response.status_code, response.get_json()))
    return found


def test_the_checks_accept_the_installed_libraries():
    assert app.compat.marshmallow.marshmallow_fits()
    assert app.compat.marshmallow.FLAT


def test_the_marshmallow_check_sees_a_changed_method(monkeypatch):
    monkeypatch.setattr(Schema, "handle_error", lambda self, error, data: None)
    assert not app.compat.marshmallow.marshmallow_fits()


def test_records_answer_the_same_on_marshmallows_own_path(make_app, auth, monkeypatch):
    flat = answers(make_app().test_client(), auth)
    monkeypatch.setattr(app.compat.marshmallow, "FLAT", False)
    assert answers(make_app().test_client(), auth) == flat
    assert [status for _, _, status, _ in flat] == [200, 200, 400, 400, 400, 200, 400, 200, 400, 200, 200]


def test_the_flask_check_accepts_the_installed_library():
    assert app.compat.flask.SPEC_FITS


def test_the_http_client_check_accepts_the_installed_library():
    assert app.compat.http_client.http_client_fits()
    assert app.compat.http_client.FinalAnswerConnection.response_class is app.compat.http_client.FinalResponse


@pytest.mark.parametrize(
    ("owner", "name", "changed"),
    [
        (http.client.HTTPResponse, "begin", lambda self, strict: None),
        (http.client.HTTPResponse, "begin", lambda self: None),
        (http.client.HTTPConnection, "response_class", http.client.HTTPResponse.__base__),
    ],
)
def test_the_http_client_check_sees_a_changed_library(monkeypatch, owner, name, changed):
    monkeypatch.setattr(owner, name, changed)
    assert not app.compat.http_client.http_client_fits()


def test_on_http_clients_own_response_a_1xx_is_a_failed_attempt_and_a_2xx_delivered(monkeypatch):
    """The fallback: the plain HTTPResponse takes a 103 for the answer (retried on the schedule)."""
    from app.webhooks.sender import send
    from tests.receiver import RawReceiver

    monkeypatch.setattr(
        app.compat.http_client.FinalAnswerConnection, "response_class", http.client.HTTPResponse
    )
    final = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
    outcomes = []
    for answer in (b"HTTP/1.1 103 Early Hints\r\n\r\n" + final, final):
        receiver = RawReceiver(lambda answer=answer: answer)
        try:
            outcomes.append(send(receiver.url, b"{}", {}, timeout=5.0, allowed=("127.0.0.1",)))
        finally:
            receiver.stop()
    assert [(outcome.status, outcome.delivered) for outcome in outcomes] == [(103, False), (204, True)]


def test_the_werkzeug_check_accepts_the_installed_library():
    assert app.compat.werkzeug.body_cache_fits()
    assert app.compat.werkzeug.FITS


def test_the_werkzeug_check_sees_a_body_cache_moved(monkeypatch):
    monkeypatch.setattr(Request, "get_data", lambda self, cache=True: self.stream.read())
    assert not app.compat.werkzeug.body_cache_fits()


def test_the_werkzeug_check_sees_a_stream_no_longer_kept_on_the_request(monkeypatch):
    """Made anew at each access, the stream a host's hook read would look unread."""
    monkeypatch.setattr(Request, "stream", property(lambda self: io.BytesIO()))
    assert not app.compat.werkzeug.body_cache_fits()


def test_bodies_answer_the_same_through_get_data(make_app, auth, monkeypatch):
    """The fallback reads every body through Werkzeug's get_data: the same answers, a body over
    the limit and a host's earlier read of the body included."""
    direct = answers(make_app().test_client(), auth)
    monkeypatch.setattr(app.compat.werkzeug, "FITS", False)
    assert answers(make_app().test_client(), auth) == direct
    big = {"id": 1, "name": "x" * 70_000}
    assert make_app().test_client().post("/plants", json=big, headers=auth).status_code == 413
    host = make_host()

    @host.before_request
    def audit():
        request.get_data()

    created = host.test_client().post(
        "/api/v1/plants",
        json={"id": 1, "name": "Fern"},
        headers=AUTH,
        base_url="http://shop.example:8080/shop/",
    )
    assert (created.status_code, created.json) == (200, {"name": "Fern"})


LIMIT = 100


def request_context(body: bytes, *, chunked: bool):
    """A host's request (MAX_CONTENT_LENGTH = LIMIT) whose body is `body`, chunked as a WSGI server
    hands one over (no length, `wsgi.input_terminated`) or sized."""
    host = make_host()
    host.config["MAX_CONTENT_LENGTH"] = LIMIT
    if chunked:
        return host.test_request_context(
            "/api/v1/plants",
            method="POST",
            input_stream=io.BytesIO(body),
            headers={"Transfer-Encoding": "chunked"},
            environ_overrides={"wsgi.input_terminated": True},
        )
    return host.test_request_context("/api/v1/plants", method="POST", data=body)


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "sized"])
@pytest.mark.parametrize("host_read", [False, True], ids=["alone", "after the host's get_data"])
def test_the_get_data_path_reads_a_body_up_to_the_limit_whole(chunked, host_read):
    """The public path (app/compat/werkzeug.py's fallback), run: a body of the limit's size is the
    body, whether or not the host's hook read it first."""
    body = b"x" * LIMIT
    with request_context(body, chunked=chunked):
        if host_read:
            request.get_data()
        assert read_through_get_data(request, LIMIT) == body
        assert request.get_data() == body  # kept for the host's later readers


@pytest.mark.parametrize("host_read", [False, True], ids=["alone", "after the host's get_data"])
def test_the_get_data_path_refuses_a_chunked_body_past_the_limit(host_read):
    """The host's get_data stops a chunked body at its MAX_CONTENT_LENGTH without an error and
    keeps what it read: the public path took that cut-short body as whole. A byte past it is a 413."""
    with request_context(b"x" * (LIMIT + 1), chunked=True):
        if host_read:
            assert len(request.get_data()) == LIMIT
        with pytest.raises(BodyTooLarge):
            read_through_get_data(request, LIMIT)


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "sized"])
def test_the_get_data_path_refuses_a_body_the_host_read_and_did_not_keep(chunked):
    """Not an empty body (a 400 blaming the client): the JSON 500 that says the host read it."""
    with request_context(b'{"id": 1, "name": "Fern"}', chunked=chunked):
        request.stream.read()
        with pytest.raises(BodyReadByHost):
            read_through_get_data(request, LIMIT)


def gunicorn_request(connection: str):
    """A request as gunicorn's own parser (gthread's) reads it."""
    source = iter([f"GET / HTTP/1.1\r\nHost: a\r\nConnection: {connection}\r\n\r\n".encode()])
    return next(RequestParser(Config(), source, ("127.0.0.1", 1)))


def test_the_gunicorn_check_accepts_the_installed_library():
    assert app.compat.gunicorn.closes_on_must_close()
    assert app.compat.gunicorn.CLOSES


def test_the_gunicorn_check_sees_a_changed_close(monkeypatch):
    monkeypatch.setattr(Message, "should_close", lambda self: False)
    assert not app.compat.gunicorn.closes_on_must_close()


@pytest.mark.parametrize("closes", [True, False])
def test_the_close_among_other_options_is_read_only_where_gunicorn_is_as_expected(monkeypatch, closes):
    """Where it is not, the request is left as gunicorn read it (the connection stays open)."""
    monkeypatch.setattr(app.compat.gunicorn, "CLOSES", closes)
    worker = SimpleNamespace(log=logging.getLogger("test"))
    for connection, asked in [("close, X-Trace", True), ("X-Trace", False), ("keep-alive", False)]:
        req = gunicorn_request(connection)
        app.compat.gunicorn.pre_request(worker, req)
        assert req.should_close() is (asked and closes)


def test_the_werkzeug_request_line_check_sees_a_changed_log_request(monkeypatch):
    assert app.compat.werkzeug.request_line_fits()
    monkeypatch.setattr(WSGIRequestHandler, "log_request", lambda self: None)
    assert not app.compat.werkzeug.request_line_fits()
