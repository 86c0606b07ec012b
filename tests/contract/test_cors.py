"""CORS (PLANTS_CORS_ORIGINS): off by default; preflights without a token, for every operation;
the headers clients read exposed; `Vary: Origin`; an embedding host's own CORS left alone."""

from __future__ import annotations

import pytest
from flask import Flask
from flask_cors import CORS

from app import ConfigurationError
from app.extension import plants_state
from app.plants import bp
from app.plants.routes import ROUTES, allowed_methods
from tests.helpers import call
from tests.servers import TOKEN, Gunicorn

PAGE = "https://page.example"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ASKED_HEADERS = "authorization, content-type, if-match, if-none-match, last-event-id"


@pytest.fixture(params=["memory"])
def store_settings(request):
    return {}


def preflight(client, path: str, method: str, origin: str = PAGE):
    return client.options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": ASKED_HEADERS,
        },
    )


def concrete(rule: str) -> str:
    return rule.replace("<plant_id>", "1").replace("<endpoint_id>", "wh_x")


def test_off_by_default_no_cors_header_even_on_a_preflight(make_app):
    client = make_app().test_client()
    answer = client.get("/plants", headers={**AUTH, "Origin": PAGE})
    assert answer.status_code == 200
    assert "Access-Control-Allow-Origin" not in answer.headers
    assert "Vary" not in answer.headers
    refused = preflight(client, "/plants", "POST")
    assert refused.status_code == 204  # OPTIONS, as on every route (test_options.py)
    assert "Access-Control-Allow-Origin" not in refused.headers


@pytest.mark.parametrize(
    "route", [route for route in ROUTES if route.operation_id], ids=lambda route: route.operation_id
)
def test_every_operation_preflights_without_a_token(make_app, route):
    client = make_app(PLANTS_CORS_ORIGINS=f"{PAGE},http://127.0.0.1:5173").test_client()
    answer = preflight(client, concrete(route.rule), route.method)
    assert answer.status_code == 204
    assert answer.headers["Access-Control-Allow-Origin"] == PAGE
    # The route's own methods, as its Allow names them: not every method of the service.
    assert answer.headers["Access-Control-Allow-Methods"] == ", ".join(allowed_methods(route.rule))
    assert answer.headers["Allow"] == answer.headers["Access-Control-Allow-Methods"] + ", OPTIONS"
    assert answer.headers["Access-Control-Allow-Headers"] == ASKED_HEADERS
    assert answer.headers["Access-Control-Max-Age"] == "600"
    assert "Access-Control-Allow-Credentials" not in answer.headers
    assert "Origin" in answer.headers["Vary"]
    assert answer.get_data() == b""


@pytest.mark.parametrize(("path", "method"), [("/plants", "DELETE"), ("/events/tickets", "PUT")])
def test_a_preflight_for_a_method_the_route_does_not_serve_is_not_told_it_may(make_app, path, method):
    client = make_app(PLANTS_CORS_ORIGINS=PAGE).test_client()
    answer = preflight(client, path, method)
    assert answer.status_code == 204
    assert method not in answer.headers["Access-Control-Allow-Methods"].split(", ")
    assert answer.headers["Access-Control-Allow-Methods"] == answer.headers["Allow"].removesuffix(", OPTIONS")


def test_a_preflight_is_not_rate_limited(make_app):
    client = make_app(PLANTS_CORS_ORIGINS=PAGE, PLANTS_RATE_LIMIT="1/minute").test_client()
    for _ in range(3):
        answer = preflight(client, "/plants", "POST")
        assert answer.status_code == 204
        assert "RateLimit-Limit" not in answer.headers
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH).status_code == 200


def test_answers_carry_the_origin_and_expose_what_clients_read(make_app):
    client = make_app(PLANTS_CORS_ORIGINS=PAGE, PLANTS_RATE_LIMIT="100/minute").test_client()
    answer = client.put("/plants/1", json={"name": "Fern"}, headers={**AUTH, "Origin": PAGE})
    assert answer.status_code == 201
    assert answer.headers["Access-Control-Allow-Origin"] == PAGE
    exposed = answer.headers["Access-Control-Expose-Headers"].split(", ")
    for name in ("ETag", "Link", "Location", "Retry-After", "X-Request-Id", "RateLimit-Limit",
                 "RateLimit-Remaining", "RateLimit-Reset"):  # fmt: skip
        assert name in exposed
    assert answer.headers["Vary"] == "Origin"
    assert "Access-Control-Allow-Credentials" not in answer.headers
    refused = client.get("/plants", headers={"Origin": PAGE})  # a refusal is readable too
    assert refused.status_code == 401
    assert refused.headers["Access-Control-Allow-Origin"] == PAGE


#: The response headers a browser shows a page's script without exposing them (Fetch's
#: CORS-safelisted response-header names).
SAFELISTED = {
    "cache-control",
    "content-language",
    "content-length",
    "content-type",
    "expires",
    "last-modified",
    "pragma",
}


def documented_response_headers(node) -> set[str]:
    """Every response header the served document names."""
    if isinstance(node, list):
        return set().union(*map(documented_response_headers, node))
    if not isinstance(node, dict):
        return set()
    names = set().union(*map(documented_response_headers, node.values()))
    for answer in (node.get("responses") or {}).values():
        if isinstance(answer, dict):
            names |= set(answer.get("headers") or {})
    return names


def test_every_header_the_document_answers_with_is_exposed(make_app):
    client = make_app(PLANTS_CORS_ORIGINS=PAGE).test_client()
    documented = documented_response_headers(client.get("/openapi.json").json)
    assert {"Accept-Patch", "Accept-Encoding", "ETag"} <= documented
    exposed = client.get("/plants", headers={**AUTH, "Origin": PAGE}).headers["Access-Control-Expose-Headers"]
    assert {name for name in documented if name.lower() not in SAFELISTED} <= set(exposed.split(", "))


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status", "header"),
    [
        ("PATCH", "/plants/1", {"Content-Type": "text/plain"}, b"{}", 415, "Accept-Patch"),
        (
            "POST",
            "/plants",
            {"Content-Type": "application/json", "Content-Encoding": "gzip"},
            b"{}",
            415,
            "Accept-Encoding",
        ),
        ("POST", "/plants/1", {}, None, 405, "Allow"),
    ],
)
def test_a_refusal_a_page_can_act_on_exposes_what_it_says(
    make_app, method, path, headers, body, status, header
):
    """The 415's `Accept-Patch` or `Accept-Encoding` (what to send instead), and the 405's `Allow`."""
    client = make_app(PLANTS_CORS_ORIGINS=PAGE).test_client()
    answer = client.open(path, method=method, data=body, headers={**AUTH, "Origin": PAGE, **headers})
    assert answer.status_code == status
    assert header in answer.headers
    assert header in answer.headers["Access-Control-Expose-Headers"].split(", ")


def test_other_origins_get_no_cors_header_and_every_answer_varies_by_origin(make_app):
    client = make_app(PLANTS_CORS_ORIGINS=PAGE).test_client()
    for origin in (
        "https://evil.example",
        "https://page.example.evil.example",
        "null",
        "http://page.example",
    ):
        answer = client.get("/plants", headers={**AUTH, "Origin": origin})
        assert answer.status_code == 200
        assert "Access-Control-Allow-Origin" not in answer.headers
        assert preflight(client, "/plants", "POST", origin).headers.get("Access-Control-Allow-Origin") is None
    plain = client.get("/plants", headers=AUTH)  # no Origin: a cache must still keep them apart
    assert "Access-Control-Allow-Origin" not in plain.headers
    assert plain.headers["Vary"] == "Origin"


def test_each_answer_carries_its_own_origin_however_many_origins_ask(make_app):
    # Each allowed origin's headers are decided once and kept (app/http/cors.py): an answer
    # must never carry another origin's, nor a refused origin the allowed one's.
    client = make_app(PLANTS_CORS_ORIGINS=f"{PAGE},http://127.0.0.1:5173").test_client()
    # More spellings of an allowed origin (its host's case) than are kept: 100 of 4,096.
    host = PAGE.removeprefix("https://")
    variants = [
        "https://" + "".join(c.upper() if mask >> i & 1 else c for i, c in enumerate(host))
        for mask in range(1, 101)
    ]
    askers = [PAGE, "https://evil.example", "http://127.0.0.1:5173", *variants] * 2
    for origin in askers:
        answer = client.get("/plants", headers={**AUTH, "Origin": origin})
        allowed = origin.lower() in (PAGE, "http://127.0.0.1:5173")
        assert answer.headers.get("Access-Control-Allow-Origin") == (origin if allowed else None), origin
        assert answer.headers["Vary"] == "Origin"


def test_a_wildcard_allows_every_origin_never_with_credentials(make_app):
    client = make_app(PLANTS_CORS_ORIGINS="*").test_client()
    answer = client.get("/plants", headers={**AUTH, "Origin": "https://anyone.example"})
    assert answer.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in answer.headers


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        ("*,https://page.example", "alone"),
        ("https://page.example/", "not one"),
        ("https://*.example.com", "not one"),
        ("page.example", "not one"),
        ("null", "not one"),
        ("ftp://page.example", "not one"),
        # A port a browser could not use; a host it reads otherwise than as written.
        ("http://127.0.0.1:05173", "not one"),
        ("http://127.0.0.1:65536", "not one"),
        ("http://127.1", "four decimal numbers"),
        ("http://1.2.3.0x4", "four decimal numbers"),
        ("http://127.000.0.1", "four decimal numbers"),
        ("http://[127.0.0.1]", "not an IPv6 address"),
        ("http://[2001:db8::1::2]", "not an IPv6 address"),
    ],
)
def test_a_bad_origin_stops_the_start(make_app, value, phrase):
    with pytest.raises(ConfigurationError) as caught:
        make_app(PLANTS_CORS_ORIGINS=value)
    assert "PLANTS_CORS_ORIGINS" in str(caught.value)
    assert phrase in str(caught.value)


@pytest.mark.parametrize(
    ("listed", "sent"),
    [
        ("HTTPS://Page.Example", PAGE),
        ("https://page.example:443", PAGE),
        ("HTTP://LOCALHOST:80", "http://localhost"),
        ("http://[2001:DB8:0:0:0:0:0:1]:8080", "http://[2001:db8::1]:8080"),
        ("http://[2001:db8:0:0:1:0:0:1]", "http://[2001:db8::1:0:0:1]"),
        ("http://[::FFFF:127.0.0.1]", "http://[::ffff:7f00:1]"),
        ("http://[::ffff:0.0.0.0]", "http://[::ffff:0:0]"),  # the first longest run of zeros
        ("http://[0:0:0:0:0:0:0:0]", "http://[::]"),
        ("http://[::127.0.0.1]", "http://[::7f00:1]"),  # IPv4-compatible, not mapped
        ("http://[2001:db8:0:1:1:1:1:1]", "http://[2001:db8:0:1:1:1:1:1]"),
        ("https://App.Example.", "https://app.example."),  # a browser keeps a name's trailing dot
        ("http://127.0.0.1.:8080", "http://127.0.0.1:8080"),  # not an address's
    ],
)
def test_an_origin_is_listed_as_a_browser_writes_it(make_app, listed, sent):
    """RFC 6454's serialisation, as a browser sends it in Origin: scheme and host in lowercase, no
    default port, an IPv6 address compressed (a single zero piece is not)."""
    app = make_app(PLANTS_CORS_ORIGINS=f"{listed},http://127.0.0.1:5173")
    client = app.test_client()
    assert plants_state(app).cors.origins == (sent, "http://127.0.0.1:5173")
    assert (
        client.get("/plants", headers={**AUTH, "Origin": sent}).headers["Access-Control-Allow-Origin"] == sent
    )
    assert preflight(client, "/plants", "POST", sent).headers["Access-Control-Allow-Origin"] == sent


def test_embedded_the_hosts_own_cors_is_left_alone():
    host = Flask("host")
    CORS(host, resources={r"/own/*": {"origins": "https://host.example"}})
    host.config.update(PLANTS_API_TOKENS=TOKEN, PLANTS_CORS_ORIGINS=PAGE)

    @host.get("/own/thing")
    def thing():
        return {"ok": True}

    host.register_blueprint(bp, url_prefix="/api/v1")
    client = host.test_client()
    own = client.get("/own/thing", headers={"Origin": "https://host.example"})
    assert own.headers["Access-Control-Allow-Origin"] == "https://host.example"
    assert "Vary" not in own.headers or "Origin" in own.headers["Vary"]
    assert "Access-Control-Allow-Origin" not in client.get("/own/thing", headers={"Origin": PAGE}).headers
    plants = client.get("/api/v1/plants", headers={**AUTH, "Origin": PAGE})
    assert plants.status_code == 200
    assert plants.headers["Access-Control-Allow-Origin"] == PAGE
    assert preflight(client, "/api/v1/plants", "POST").status_code == 204
    plants_state(host).close()


def test_a_preflight_through_gunicorn_is_a_bare_204():
    """A 204 has no body (RFC 9110 §15.3.5): no Content-Type to describe one, no Content-Length."""
    server = Gunicorn({"PLANTS_CORS_ORIGINS": PAGE})
    try:
        status, headers, body = call(
            server.connection(),
            "OPTIONS",
            "/plants",
            headers={"Origin": PAGE, "Access-Control-Request-Method": "POST"},
        )
    finally:
        server.stop()
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == PAGE
    assert "Content-Type" not in headers
    assert "Content-Length" not in headers
    assert body == b""


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_the_probes_answer_a_page_on_a_listed_origin_without_cors(make_app, path):
    """The probes are for orchestrators and load balancers, not pages: a browser's preflight gets
    its 204 with Allow and no Access-Control-* header, so the browser keeps the page from reading
    them (a degraded /readyz names the store's nodes and causes). A page asks its own backend."""
    client = make_app(PLANTS_CORS_ORIGINS=PAGE).test_client()
    asked = preflight(client, path, "GET")
    read = client.get(path, headers={"Origin": PAGE})
    assert (asked.status_code, asked.headers["Allow"], read.status_code) == (204, "GET, HEAD, OPTIONS", 200)
    for response in (asked, read):
        assert not [name for name, _ in response.headers if name.startswith("Access-Control-")]
        assert "Vary" not in response.headers
