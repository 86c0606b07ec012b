"""Embedding the blueprint in another Flask app, under a prefix, beside other apps."""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from flask import Flask, request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import BadRequest

import app.compat.flask
from app import ConfigurationError
from app.plants import bp
from tests.helpers import ON_A_PLANT, ON_PLANTS

AUTH = {"Authorization": "Bearer host-token"}


def make_host(token: str = "host-token") -> Flask:
    host = Flask("host")
    host.config["PLANTS_API_TOKENS"] = token

    @host.get("/")
    def index():
        return "host index"

    @host.errorhandler(404)
    def host_not_found(error):
        return "<h1>host's own 404</h1>", 404

    host.register_blueprint(bp, url_prefix="/api/v1")
    return host


def test_blueprint_serves_under_the_prefix():
    client = make_host().test_client()
    response = client.post("/api/v1/plants", json={"id": 1, "name": "Fern"}, headers=AUTH)
    assert response.status_code == 200
    assert response.json == {"name": "Fern"}
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH).status_code == 404


def test_host_routes_and_error_pages_are_untouched():
    client = make_host().test_client()
    response = client.get("/")  # no bearer header: the hook is blueprint-scoped
    assert response.status_code == 200
    assert response.get_data(as_text=True) == "host index"
    missing = client.get("/nowhere")
    assert missing.status_code == 404
    assert missing.get_data(as_text=True) == "<h1>host's own 404</h1>"


def test_blueprint_errors_are_json_inside_the_host():
    client = make_host().test_client()
    response = client.post("/api/v1/plants", json={"id": 1})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="plants"'
    assert json.loads(response.get_data())["error"] == 401
    invalid = client.post("/api/v1/plants", json={"id": 1}, headers=AUTH)
    assert invalid.status_code == 400
    assert invalid.json["details"] == {"name": ["Missing data for required field."]}


def test_blueprint_errors_stay_json_where_the_host_has_its_own_error_pages():
    host = make_host()
    host.config["MAX_CONTENT_LENGTH"] = 100
    for code in (400, 409, 413, 415, 500):
        host.register_error_handler(code, lambda error: (f"<h1>host's {error.code}</h1>", error.code))

    @host.post("/form")
    def form():
        raise BadRequest()

    client = host.test_client()
    plants = "/api/v1/plants"
    cases = [
        (client.post(plants, data="{", content_type="application/json", headers=AUTH), 400),
        (client.post(plants, data="{}", content_type="text/plain", headers=AUTH), 415),
        (client.post(plants, json={"id": 1, "name": "x" * 200}, headers=AUTH), 413),
        (client.post(plants, json={"id": 1, "name": "Fern"}, headers=AUTH), 200),
        (client.post(plants, json={"id": 1, "name": "Palm"}, headers=AUTH), 409),
    ]
    for response, status in cases:
        assert response.status_code == status
        assert response.content_type == "application/json"
        if status != 200:
            assert response.json["error"] == status

    class BrokenStore:
        def create(self, plant_id, name, tag):
            raise RuntimeError("the store failed")

    host.extensions["plants"] = dataclasses.replace(host.extensions["plants"], store=BrokenStore())
    broken = client.post(plants, json={"id": 2, "name": "Fern"}, headers=AUTH)
    assert (broken.status_code, broken.content_type, broken.json["error"]) == (500, "application/json", 500)
    assert "the store failed" not in broken.get_data(as_text=True)
    host_own = client.post("/form")
    assert (host_own.status_code, host_own.get_data(as_text=True)) == (400, "<h1>host's 400</h1>")


def test_registering_without_tokens_fails_closed():
    host = Flask("bare")
    with pytest.raises(ConfigurationError, match="PLANTS_API_TOKENS"):
        host.register_blueprint(bp)


def test_host_without_body_limit_still_gets_a_bounded_read():
    host = make_host()
    assert host.config["MAX_CONTENT_LENGTH"] is None
    body = json.dumps({"id": 1, "name": "x" * (64 * 1024)})
    response = host.test_client().post(
        "/api/v1/plants", data=body, content_type="application/json", headers=AUTH
    )
    assert response.status_code == 413


def test_two_hosts_in_one_process_share_nothing():
    first, second = make_host("token-one"), make_host("token-two")
    one = first.test_client().post(
        "/api/v1/plants", json={"id": 1, "name": "First"}, headers={"Authorization": "Bearer token-one"}
    )
    assert one.status_code == 200
    # The second host knows neither the first host's token nor its plant.
    assert (
        second.test_client()
        .post(
            "/api/v1/plants", json={"id": 1, "name": "Second"}, headers={"Authorization": "Bearer token-one"}
        )
        .status_code
        == 401
    )
    two = second.test_client().post(
        "/api/v1/plants", json={"id": 1, "name": "Second"}, headers={"Authorization": "Bearer token-two"}
    )
    assert two.status_code == 200  # not a 409: the stores are separate
    assert first.extensions["plants"].store.get(1).name == "First"
    assert second.extensions["plants"].store.get(1).name == "Second"
    assert first.extensions["plants"] is not second.extensions["plants"]


def test_concurrent_overlapping_creates_through_the_app(app, auth, store):
    client = app.test_client()
    ids = range(40)

    def create(args):
        plant_id, variant = args
        return plant_id, client.post(
            "/plants", json={"id": plant_id, "name": f"plant-{variant}"}, headers=auth
        ).status_code

    work = [(plant_id, variant) for variant in range(6) for plant_id in ids]
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(create, work))
    for plant_id in ids:
        statuses = sorted(status for pid, status in results if pid == plant_id)
        assert statuses == [200, 409, 409, 409, 409, 409]
    assert len(store) == len(ids)


@pytest.mark.parametrize(
    ("path", "method", "allow"),
    [
        *[("/api/v1/plants", method, ON_PLANTS) for method in ("PUT", "PATCH", "DELETE", "TRACE")],
        *[("/api/v1/plants/1", method, ON_A_PLANT) for method in ("POST", "TRACE")],
        # Methods no rule names, and the routes outside the operations: the host's router had them.
        ("/api/v1/plants", "PROPFIND", ON_PLANTS),
        ("/api/v1/plants/1", "BREW", ON_A_PLANT),
        ("/api/v1/events/tickets", "CONNECT", "POST, OPTIONS"),
        ("/api/v1/metrics", "PUT", "GET, HEAD, OPTIONS"),
        ("/api/v1/openapi.json", "DELETE", "GET, HEAD, OPTIONS"),
        ("/api/v1/docs", "POST", "GET, HEAD, OPTIONS"),
        ("/api/v1/docs/assets/swagger-ui.css", "PROPFIND", "GET, HEAD, OPTIONS"),
    ],
)
def test_other_methods_get_the_blueprints_json_405_not_the_hosts_page(path, method, allow):
    host = make_host()

    @host.errorhandler(405)
    def host_method_not_allowed(error):
        return "<h1>host's own 405</h1>", 405

    response = host.test_client().open(path, method=method)
    assert response.status_code == 405
    assert response.headers["Allow"] == allow
    assert response.headers["Content-Type"] == "application/json"
    assert response.json == {"error": 405, "message": "The method is not allowed for the requested URL."}


@pytest.mark.parametrize("method", ["PROPFIND", "BREW"])
@pytest.mark.parametrize("path", ["/api/v1/plants//1", "/api/v1//events"])
def test_a_doubled_slash_with_a_method_no_rule_names_is_not_redirected(path, method):
    """The host's map merges doubled slashes; the blueprint's rules do not, that for any method
    too: no 308 whose Location repeats the query (a watch ticket), but the host's answer to a path
    it does not serve, as for a method a rule names."""
    client = make_host().test_client()
    answer = client.open(f"{path}?ticket=secret", method=method)
    named = client.open(f"{path}?ticket=secret", method="POST")
    assert answer.status_code == named.status_code != 308
    assert "Location" not in answer.headers
    assert "secret" not in answer.get_data(as_text=True)


def test_missing_tokens_name_the_hosts_config():
    host = Flask("host")
    with pytest.raises(ConfigurationError) as raised:
        host.register_blueprint(bp)
    assert str(raised.value).startswith('app.config["PLANTS_API_TOKENS"] is not set')
    assert 'app.config["PLANTS_API_TOKENS_FILE"]' in str(raised.value)


def test_registered_twice_in_one_app_both_prefixes_serve_its_one_store():
    host = make_host()
    host.register_blueprint(bp, url_prefix="/api/v2", name="plants_v2")
    client = host.test_client()
    assert client.post("/api/v1/plants", json={"id": 1, "name": "Fern"}, headers=AUTH).status_code == 200
    assert client.get("/api/v2/plants/1", headers=AUTH).json == {"name": "Fern"}
    assert client.get("/api/v2/openapi.json").json["servers"] == [{"url": "/api/v2"}]
    created = client.put("/api/v2/plants/2", json={"name": "Palm"}, headers=AUTH)
    assert created.headers["Location"] == "http://localhost/api/v2/plants/2"
    refused = client.open("/api/v2/plants", method="PROPFIND")
    assert (refused.status_code, refused.headers["Allow"], refused.json["error"]) == (405, ON_PLANTS, 405)


@pytest.mark.parametrize(
    ("key", "text", "wanted"),
    [
        ("PLANTS_EVENTS_RETAIN", "0", "a whole number >= 0"),
        ("PLANTS_STORE_TIMEOUT", "0.5", "a number of seconds above 0"),
        ("PLANTS_WEBHOOKS_RETRY_SCALE", "1", "a number from 0.00001 to 1"),
    ],
)
def test_a_number_setting_given_as_text_is_told_it_is_a_string(key, text, wanted):
    """A host copying text into its config (`os.environ.get(...)`) learns that the setting takes a
    number, not that '0' is not a whole number."""
    host = Flask("host")
    host.config.update(PLANTS_API_TOKENS=["t"], **{key: text})
    with pytest.raises(ConfigurationError) as raised:
        host.register_blueprint(bp)
    assert str(raised.value) == (
        f'app.config["{key}"] must be {wanted}, not the string {text!r} (app.config takes a number)'
    )


def test_the_document_and_the_page_live_under_the_prefix():
    client = make_host().test_client()
    document = client.get("/api/v1/openapi.json")
    assert document.status_code == 200
    assert document.json["servers"] == [{"url": "/api/v1"}]
    assert "/plants" in document.json["paths"]
    page = client.get("/api/v1/docs")
    assert page.status_code == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert page.headers["Content-Security-Policy"].startswith("default-src 'none'; script-src 'self';")
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    html = page.get_data(as_text=True)
    assert 'src="docs/assets/swagger-ui-bundle.js"' in html
    assert "host-token" not in html
    asset = client.get("/api/v1/docs/assets/swagger-ui-bundle.js")
    assert asset.status_code == 200
    assert asset.headers["X-Content-Type-Options"] == "nosniff"
    assert client.get("/api/v1/docs/assets/swagger-editor.js").status_code == 404
    assert client.get("/openapi.json").status_code == 404  # the host's, not the blueprint's


def test_a_host_can_turn_the_page_off():
    host = Flask("host")
    host.config.update(PLANTS_API_TOKENS="host-token", PLANTS_DOCS=False)
    host.register_blueprint(bp, url_prefix="/api")
    client = host.test_client()
    response = client.get("/api/docs")
    assert response.status_code == 404
    assert response.json["error"] == 404
    assert client.get("/api/docs/assets/swagger-ui-bundle.js").status_code == 404
    document = client.get("/api/openapi.json")
    assert document.status_code == 200
    assert "404" in document.json["paths"]["/docs"]["get"]["responses"]  # the page says it may be off


def test_a_bad_docs_setting_fails_at_registration_not_at_request_time():
    host = Flask("host")
    host.config.update(PLANTS_API_TOKENS="host-token", PLANTS_DOCS="maybe")
    with pytest.raises(ConfigurationError, match=r'^app.config\["PLANTS_DOCS"\] must be True or False'):
        host.register_blueprint(bp)


def test_every_operation_and_read_only_tokens_under_the_prefix():
    host = Flask("host")
    host.config.update(PLANTS_API_TOKENS=["host-token"], PLANTS_READ_TOKENS=["host-reader"])
    host.register_blueprint(bp, url_prefix="/api/v1")
    client = host.test_client()
    reader = {"Authorization": "Bearer host-reader"}
    for plant_id in range(3):
        assert (
            client.post("/api/v1/plants", json={"id": plant_id, "name": "Fern"}, headers=AUTH).status_code
            == 200
        )
    page = client.get("/api/v1/plants?limit=2", headers=reader)
    assert page.json["plants"] == [{"id": 0, "name": "Fern"}, {"id": 1, "name": "Fern"}]
    assert page.headers["Link"].startswith("<http://localhost/api/v1/plants?limit=2&after=")
    assert client.get("/api/v1/plants/2", headers=reader).json == {"name": "Fern"}
    refused = client.delete("/api/v1/plants/2", headers=reader)
    assert (refused.status_code, refused.json["error"]) == (403, 403)
    assert refused.headers["WWW-Authenticate"] == 'Bearer realm="plants", error="insufficient_scope"'
    assert client.delete("/api/v1/plants/2", headers=AUTH).status_code == 204
    missing = client.get("/api/v1/plants/2", headers=AUTH)
    assert (missing.status_code, missing.content_type) == (404, "application/json")
    document = client.get("/api/v1/openapi.json").json
    assert {"/plants", "/plants/{id}"} <= set(document["paths"])


def test_a_token_in_both_lists_names_the_hosts_config():
    host = Flask("host")
    host.config.update(PLANTS_API_TOKENS="same", PLANTS_READ_TOKENS="same")
    with pytest.raises(ConfigurationError) as raised:
        host.register_blueprint(bp)
    assert str(raised.value).startswith(
        'app.config["PLANTS_READ_TOKENS"] has a token (number 1) that is also in '
        'app.config["PLANTS_API_TOKENS"]'
    )


def test_the_embedded_document_lists_only_what_the_blueprint_serves():
    client = make_host().test_client()
    served = client.get("/api/v1/openapi.json")
    paths = served.json["paths"]
    assert "/healthz" not in paths
    assert "/readyz" not in paths
    # Nor does its text send a reader to them: the host serves no such path.
    assert b"/healthz" not in served.get_data()
    assert b"/readyz" not in served.get_data()
    for path in paths:  # every path it lists is served (not the host's 404)
        response = client.get("/api/v1" + path.replace("{id}", "1"), headers=AUTH)
        assert response.status_code != 404 or response.json["error"] == 404, path


class SortingProvider(DefaultJSONProvider):
    sort_keys = True


def test_embedded_json_keeps_the_services_key_order_under_a_sorting_host_provider():
    host = make_host()
    host.json = SortingProvider(host)
    client = host.test_client()
    bad = client.post("/api/v1/plants", json={"id": "x", "name": "Fern"}, headers=AUTH)
    assert list(json.loads(bad.get_data())) == ["error", "message", "details"]
    client.post("/api/v1/plants", json={"id": 1, "name": "Fern", "tag": "green"}, headers=AUTH)
    event = json.loads(client.get("/api/v1/events", headers=AUTH).get_data())["events"][0]
    assert list(event) == ["type", "plant", "time"]
    assert list(json.loads(client.get("/api/v1/plants", headers=AUTH).get_data())["plants"][0]) == [
        "id",
        "name",
        "tag",
    ]


def test_blueprint_errors_stay_json_where_the_host_handles_every_exception():
    host = make_host()

    @host.errorhandler(Exception)
    def host_error_page(error):
        return "<h1>host's error page</h1>", 500

    @host.get("/broken")
    def broken_page():
        raise RuntimeError("the host failed")

    class BrokenStore:
        def get(self, plant_id):
            raise RuntimeError("the store failed")

    host.extensions["plants"] = dataclasses.replace(host.extensions["plants"], store=BrokenStore())
    client = host.test_client()
    broken = client.get("/api/v1/plants/1", headers=AUTH)
    assert (broken.status_code, broken.content_type, broken.json["error"]) == (500, "application/json", 500)
    assert "the store failed" not in broken.get_data(as_text=True)
    host_own = client.get("/broken")
    assert (host_own.status_code, host_own.get_data(as_text=True)) == (500, "<h1>host's error page</h1>")


def test_a_hosts_handler_for_an_error_of_its_own_still_answers_the_blueprints_routes():
    """Beside a catch-all kept off the blueprint's routes (above): the host's own error class, which
    its `before_request` raises on every route, is answered by the host's handler there too."""
    host = make_host()

    class Maintenance(Exception):
        pass

    @host.errorhandler(Maintenance)
    def maintenance(error):
        return {"error": 503, "message": "down for maintenance"}, 503

    @host.errorhandler(Exception)
    def host_error_page(error):
        return "<h1>host's error page</h1>", 500

    @host.before_request
    def close_for_maintenance():
        raise Maintenance()

    answer = host.test_client().get("/api/v1/plants/1", headers=AUTH)
    assert (answer.status_code, answer.json) == (503, {"error": 503, "message": "down for maintenance"})


@pytest.mark.parametrize(
    "python_class", [ValueError, KeyError, LookupError, OSError, RuntimeError, TypeError]
)
def test_a_hosts_handler_for_one_of_pythons_own_classes_is_kept_off_the_blueprints_routes(python_class):
    """A host's handler for `ValueError` (its forms' bad numbers, as a 400 page) is a catch-all to
    the blueprint, as one for `Exception` is: an unexpected error of that class on the blueprint's
    routes is its JSON 500, never the host's page (nor its status). A class of the host's own
    under it still answers there."""
    host = make_host()

    class Maintenance(python_class):  # type: ignore[misc,valid-type]
        pass

    host.register_error_handler(python_class, lambda error: ("<h1>host's own page</h1>", 400))
    host.register_error_handler(Maintenance, lambda error: ({"error": 503, "message": "maintenance"}, 503))

    class BrokenStore:
        def get(self, plant_id):
            raise python_class("the store failed")

    @host.before_request
    def close_for_maintenance():
        if "X-Closed" in request.headers:
            raise Maintenance()

    host.extensions["plants"] = dataclasses.replace(host.extensions["plants"], store=BrokenStore())
    client = host.test_client()
    broken = client.get("/api/v1/plants/1", headers=AUTH)
    assert (broken.status_code, broken.content_type) == (500, "application/json")
    assert broken.json["error"] == 500
    assert "the store failed" not in broken.get_data(as_text=True)
    closed = client.get("/api/v1/plants/1", headers={**AUTH, "X-Closed": "1"})
    assert (closed.status_code, closed.json) == (503, {"error": 503, "message": "maintenance"})


def test_without_flasks_handler_map_the_blueprint_answers_every_unexpected_error(monkeypatch):
    """app/compat/flask.py's fallback: where the handler map is not as expected, an unexpected error
    on the blueprint's routes is its JSON 500, the host's own class included."""
    monkeypatch.setattr(app.compat.flask, "SPEC_FITS", False)
    host = make_host()

    class Maintenance(Exception):
        pass

    host.register_error_handler(Maintenance, lambda error: ("down", 503))
    host.before_request(lambda: (_ for _ in ()).throw(Maintenance()))
    answer = host.test_client().get("/api/v1/plants/1", headers=AUTH)
    assert (answer.status_code, answer.json["error"]) == (500, 500)


@pytest.mark.parametrize(
    "options",
    [{"url_prefix": "/tenants/<int:tenant>"}, {"url_prefix": "/t/<tenant>/api"}, {"subdomain": "<tenant>"}],
)
def test_a_mount_point_with_a_variable_is_refused_at_registration(options):
    host = Flask("host")
    host.config["PLANTS_API_TOKENS"] = "host-token"
    with pytest.raises(ValueError, match="must be fixed"):
        host.register_blueprint(bp, **options)


def test_a_created_webhook_is_located_under_the_prefix_as_a_plant_is():
    """One form of `Location` for the service: an absolute URL, the prefix and the script's root
    (SCRIPT_NAME) in it."""
    host = Flask("host")
    host.config.update(
        PLANTS_API_TOKENS="host-token", PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_DELIVER=False
    )
    host.register_blueprint(bp, url_prefix="/api/v1")
    client = host.test_client()
    root = "http://localhost/shop/"
    created = client.post(
        "/api/v1/webhooks", json={"url": "http://127.0.0.1:9/hook"}, headers=AUTH, base_url=root
    )
    assert created.status_code == 201
    assert created.headers["Location"] == f"http://localhost/shop/api/v1/webhooks/{created.json['id']}"
    plant = client.put("/api/v1/plants/2", json={"name": "Palm"}, headers=AUTH, base_url=root)
    assert plant.headers["Location"] == "http://localhost/shop/api/v1/plants/2"
