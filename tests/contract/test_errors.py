"""Every error of the standalone app is the JSON Error record: never HTML, never a stack trace."""

from __future__ import annotations

import logging
import re

import pytest
from werkzeug.debug import DebuggedApplication
from werkzeug.test import Client

from app import create_app
from app.plants.routes import ROUTES
from app.store import Plant
from tests.helpers import ON_A_PLANT, ON_PLANTS, error_of


@pytest.fixture
def production_app():
    """TESTING off, so unhandled exceptions take the production path instead of propagating."""
    return create_app({"PLANTS_API_TOKENS": "test-token-1"})


@pytest.mark.parametrize("path", ["/", "/plant", "/plants/", "/plants/1/x", "/api/v1/plants", "/healthz/x"])
def test_unknown_path_is_json_404(client, auth, path):
    response = client.post(path, json={"id": 1, "name": "Fern"}, headers=auth)
    error_of(response, 404)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/events//tickets"),
        ("POST", "/events//tickets"),
        ("DELETE", "/plants//1"),
        ("GET", "/docs//init.js"),
    ],
)
def test_a_doubled_slash_inside_a_path_is_a_json_error_not_an_html_redirect(client, auth, method, path):
    """werkzeug would answer a 308 in HTML whose Location echoes the query (a watch ticket too),
    or a 405 naming the merged path's methods."""
    response = client.open(path + "?ticket=plwt_AAAA", method=method, headers=auth)
    error_of(response, 404)
    assert "Location" not in response.headers


#: Every operation of the service once: its method, and its rule with each variable part filled in.
EVERY_ROUTE = [
    *[(route.method, re.sub(r"<[^>]+>", "1", route.rule)) for route in ROUTES],
    ("GET", "/healthz"),
    ("GET", "/readyz"),
]


@pytest.mark.parametrize(("method", "path"), EVERY_ROUTE)
@pytest.mark.parametrize("slashes", ["//", "///"])
def test_a_path_that_starts_with_a_doubled_slash_is_a_json_404(client, auth, store, method, path, slashes):
    """werkzeug's router strips leading slashes: `//plants` would be `/plants`. Nothing is done."""
    response = client.open(
        "/",
        method=method,
        json={"id": 1, "name": "Fern"},
        headers=auth,
        environ_overrides={"PATH_INFO": slashes + path[1:]},
    )
    error_of(response, 404)
    assert "Location" not in response.headers
    assert store.get(1) is None


@pytest.mark.parametrize(
    "path", ["//plants", "//plants/1", "/plants//1", "/plants/", "/plants/1/", "/healthz/"]
)
def test_a_preflight_to_a_path_with_a_doubled_or_trailing_slash_is_a_json_404(client, path):
    response = client.options(
        "/",
        headers={"Origin": "https://page.example", "Access-Control-Request-Method": "GET"},
        environ_overrides={"PATH_INFO": path},
    )
    error_of(response, 404)


@pytest.mark.parametrize("host", ["hooks..example", ".example", f"{'a' * 64}.example", "a..b:8000"])
def test_a_host_header_that_names_no_host_is_json_400_saying_so(client, auth, host):
    response = client.get("/plants", headers={**auth, "Host": host})
    assert error_of(response, 400)["message"] == (
        "The Host header does not name a valid host: each dot-separated label has 1 to 63 characters."
    )


@pytest.mark.parametrize(
    ("path", "method", "allow"),
    [
        *[("/plants", method, ON_PLANTS) for method in ("PUT", "PATCH", "DELETE", "TRACE")],
        *[("/plants/1", method, ON_A_PLANT) for method in ("POST", "TRACE")],
        ("/plants/not-a-number", "POST", ON_A_PLANT),
    ],
)
@pytest.mark.parametrize("authenticated", [True, False], ids=["token", "no-token"])
def test_other_methods_are_json_405_with_allow_before_authentication(
    client, auth, store, path, method, allow, authenticated
):
    store.create(1, "Fern", None)
    response = client.open(path, method=method, headers=auth if authenticated else {})
    assert response.status_code == 405
    assert response.headers["Allow"] == allow == client.options(path).headers["Allow"]
    assert "WWW-Authenticate" not in response.headers
    error_of(response, 405)
    assert store.get(1) == Plant("Fern")


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/plants", "GET, HEAD, POST, OPTIONS"),
        ("/plants/1", "GET, HEAD, PUT, PATCH, DELETE, OPTIONS"),
        ("/events", "GET, HEAD, OPTIONS"),
        ("/webhooks", "GET, HEAD, POST, OPTIONS"),
    ],
)
def test_a_method_no_rule_names_is_405_with_what_the_path_serves(client, auth, path, allow):
    """PROPFIND: Werkzeug's Allow joined every rule of the path, the methods each operation names
    only to refuse them (TRACE, and PUT on /plants) included. It is what OPTIONS says instead."""
    response = client.open(path, method="PROPFIND", headers=auth)
    error_of(response, 405)
    assert response.headers["Allow"] == allow == client.options(path).headers["Allow"]


#: Werkzeug's messages, which these answers have always carried.
NOT_FOUND = (
    "The requested URL was not found on the server. If you entered the URL manually please check"
    " your spelling and try again."
)
NOT_ALLOWED = "The method is not allowed for the requested URL."


@pytest.mark.parametrize(
    ("method", "path", "status", "message", "allow"),
    [
        ("GET", "//plants", 404, NOT_FOUND, None),
        ("GET", "/docs/assets/no-such-asset.js", 404, NOT_FOUND, None),
        ("GET", "/no-such-path", 404, NOT_FOUND, None),
        ("PUT", "/plants", 405, NOT_ALLOWED, "GET, HEAD, POST, OPTIONS"),
        ("PROPFIND", "/plants", 405, NOT_ALLOWED, "GET, HEAD, POST, OPTIONS"),
        ("POST", "/healthz", 405, NOT_ALLOWED, "GET, HEAD, OPTIONS"),
    ],
)
def test_a_path_or_method_not_served_is_answered_as_the_router_answers(
    client, auth, method, path, status, message, allow
):
    """Whether the router refused it, or the service after the router matched it: one answer."""
    response = client.open(path, method=method, headers=auth)
    assert error_of(response, status) == {"error": status, "message": message}
    assert response.headers.get("Allow") == allow


@pytest.mark.parametrize(
    ("declared", "status", "message"),
    [
        (64 * 1024 + 1, 413, "The request body is larger than the limit of 65536 bytes."),
        (100, 408, "The request body was not received in full before the client stopped sending."),
    ],
    ids=["over-the-limit", "cut-short"],
)
def test_a_sized_body_over_the_limit_or_cut_short_is_answered_saying_so(
    client, auth, store, declared, status, message
):
    """The body is shorter than its Content-Length: the declared length alone is refused, or the
    read ends short of it."""
    response = client.post(
        "/plants",
        data=b'{"id": 1, "name": "Fern"}',
        headers={**auth, "Content-Type": "application/json"},
        environ_overrides={"CONTENT_LENGTH": str(declared)},
    )
    assert error_of(response, status) == {"error": status, "message": message}
    assert len(store) == 0


def test_wrong_method_on_healthz_is_json_405(client):
    response = client.post("/healthz")
    error_of(response, 405)
    assert set(response.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}


def test_unexpected_exception_is_generic_json_500_and_logged(production_app, auth, monkeypatch, caplog):
    def explode(*args, **kwargs):
        raise RuntimeError("internal detail that must not leak")

    monkeypatch.setattr(production_app.extensions["plants"].store, "create", explode)
    with caplog.at_level(logging.ERROR):
        response = production_app.test_client().post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    record = error_of(response, 500)
    assert b"internal detail" not in response.get_data()
    assert b"Traceback" not in response.get_data()
    assert "Internal Server Error" in record["message"] or "internal" in record["message"].lower()
    logged = [r for r in caplog.records if r.exc_info]
    assert logged
    assert "internal detail that must not leak" in str(logged[0].exc_info[1])


def test_exception_in_a_route_of_the_app_is_json_500(production_app):
    @production_app.get("/boom")
    def boom():
        raise ValueError("x")

    error_of(production_app.test_client().get("/boom"), 500)


def test_under_flask_debug_an_unexpected_error_is_json_500_not_the_debuggers_page(auth, monkeypatch, caplog):
    """`flask run --debug` wraps the app in Werkzeug's debugger, which shows a client the traceback
    and its frames' locals (the configured tokens among them) of any exception the app lets out."""
    app = create_app({"PLANTS_API_TOKENS": "test-token-1", "DEBUG": True})

    def explode(*args, **kwargs):
        raise RuntimeError("internal detail that must not leak")

    monkeypatch.setattr(app.extensions["plants"].store, "create", explode)
    client = Client(DebuggedApplication(app, evalex=True))
    with caplog.at_level(logging.ERROR):
        response = client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    error_of(response, 500)
    assert b"internal detail" not in response.get_data()
    assert [r for r in caplog.records if r.exc_info]


def test_healthz_needs_no_auth(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json == {"status": "ok"}
    assert response.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    "path",
    [
        "/openapi.json",
        "/docs",
        "/docs/init.js",
        "/docs/assets/swagger-ui.css",
        "/docs/assets/swagger-ui-bundle.js",
        "/docs/assets/favicon-32x32.png",
        "/metrics",
    ],
)
def test_every_document_served_says_nosniff(client, auth, path):
    """A browser must take each document as the type it is served as, never sniff it for another
    (the document's text as a script, the metrics' as HTML)."""
    response = client.get(path, headers=auth)
    assert response.status_code == 200
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_openapi_json_needs_no_auth(client):
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.json["openapi"] == "3.1.0"
    assert response.json["info"]["version"] == "1.6.0"
