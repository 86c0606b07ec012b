"""The request's host and `OPTIONS *` through the test client (the servers' own reading of the same
requests: tests/integration/test_request_host.py). The URLs are the app's, whichever store holds
the plants: one store."""

from __future__ import annotations

import pytest

from app import create_app
from tests.helpers import error_of
from tests.servers import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
NEEDS = "a name, an IPv4 address or a bracketed IP address, then optionally ':' and a port's digits."


def service(**settings):
    return create_app({"TESTING": True, "PLANTS_API_TOKENS": [TOKEN], **settings}).test_client()


@pytest.mark.parametrize(
    "host", ["a b", "a/b", "[::1", "[::g]", "a.example:80x", "a\x7fb", "caf\u00e9.example"]
)
def test_a_host_header_that_is_no_uri_host_is_json_400_without_its_value(host):
    response = service().get("/plants", headers={**AUTH, "Host": host})
    assert error_of(response, 400)["message"] == f"The Host header is not a host: {NEEDS}"


@pytest.mark.parametrize("host", ["", "plants.example:", "[v1.x:y]", "%41.example", "a!$&'()*+;=b"])
def test_a_host_rfc_3986_allows_is_served(host):
    """An empty `Host` (RFC 9112 section 3.2, a target without authority) and every character
    RFC 3986's reg-name takes but the comma (two Host fields joined read so): served, their links
    path-absolute where Werkzeug builds no URL."""
    assert service().get("/plants", headers={**AUTH, "Host": host}).status_code == 200


def absolute(target: str) -> dict[str, str]:
    """The environ of a request line in absolute form, as gunicorn and `flask run` write it."""
    return {"RAW_URI": target, "REQUEST_URI": target}


def test_an_absolute_request_lines_host_names_location_not_host():
    client = service()
    response = client.put(
        "/plants/1",
        json={"name": "Fern"},
        headers={**AUTH, "Host": "a.example"},
        environ_overrides=absolute("http://b.example/plants/1"),
    )
    assert response.status_code == 201
    assert response.headers["Location"] == "http://b.example/plants/1"


def test_a_trusted_proxys_forwarded_host_still_names_location_over_an_absolute_request_line():
    client = service(PLANTS_TRUSTED_PROXIES=1)
    response = client.put(
        "/plants/1",
        json={"name": "Fern"},
        headers={**AUTH, "Host": "a.example", "X-Forwarded-Host": "plants.example"},
        environ_overrides=absolute("http://b.example/plants/1"),
    )
    assert response.headers["Location"] == "http://plants.example/plants/1"


@pytest.mark.parametrize(
    "target", ["http://b.example:8x/plants", "http://u:p@b.example/plants", "http:///plants"]
)
def test_an_absolute_request_line_whose_authority_is_no_host_is_json_400(target):
    response = service().get("/plants", headers=AUTH, environ_overrides=absolute(target))
    assert error_of(response, 400)["message"] == f"The request target's authority is not a host: {NEEDS}"


def test_options_star_is_204_naming_every_method_without_a_token():
    response = service().open("*", method="OPTIONS", environ_overrides={"RAW_URI": "*", "REQUEST_URI": "*"})
    assert (response.status_code, response.data) == (204, b"")
    assert response.headers["Allow"] == "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
    assert "Content-Type" not in response.headers
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_another_method_on_star_is_still_the_json_404():
    response = service().get("*", headers=AUTH, environ_overrides={"RAW_URI": "*", "REQUEST_URI": "*"})
    error_of(response, 404)
