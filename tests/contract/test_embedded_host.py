"""The blueprint in a host app that has everything of its own: blueprints, HTML error pages for
every status and every exception, a JSON provider, SERVER_NAME, APPLICATION_ROOT, a
before_request, Flask-CORS, and Flask config keys of its own that the service reads too
(MAX_CONTENT_LENGTH). The service's contract holds on its routes, under a prefix and at the root;
the host's routes stay the host's."""

from __future__ import annotations

import io
import json

import pytest
from flask import Blueprint, Flask, g, request
from flask.json.provider import DefaultJSONProvider
from flask_cors import CORS

from app.plants import bp

TOKEN = "host-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: The host's name and script root: the URLs the service hands out carry both.
BASE = "http://shop.example:8080/shop/"
HOST_STATUSES = (400, 401, 403, 404, 405, 409, 412, 413, 415, 428, 429, 500, 503)


class HostJSON(DefaultJSONProvider):
    sort_keys = True
    compact = False
    mimetype = "application/vnd.shop+json"


def make_host(**config) -> Flask:
    host = Flask("shop")
    host.config.update(
        {
            "PLANTS_API_TOKENS": TOKEN,
            "SERVER_NAME": "shop.example:8080",
            "APPLICATION_ROOT": "/shop",
            "MAX_CONTENT_LENGTH": 10 * 1024 * 1024,  # the host's uploads
            "SECRET_KEY": "the host's own",
            **config,
        }
    )
    host.json = HostJSON(host)
    own = Blueprint("shelf", __name__)

    @own.get("/items")
    def items():
        return {"items": [1], "seen": g.get("seen")}

    @own.get("/broken")
    def broken():
        raise RuntimeError("the host's own failure")

    host.register_blueprint(own, url_prefix="/shelf")
    for code in HOST_STATUSES:
        host.register_error_handler(code, lambda error, code=code: (f"<h1>host {code}</h1>", code))
    host.register_error_handler(Exception, lambda error: ("<h1>host error page</h1>", 500))

    @host.before_request
    def mark():
        g.seen = "the host's hook"

    CORS(host, origins=["https://shop.example"])
    host.register_blueprint(bp, url_prefix="/api/v1")
    host.register_blueprint(bp, name="plants_at_root")
    return host


@pytest.fixture
def host():
    return make_host()


def call(client, method, path, **kwargs):
    kwargs.setdefault("base_url", BASE)
    return client.open(path, method=method, **kwargs)


def merge_patch(client, path, body: bytes):
    """A merge PATCH of `body` (bytes, so that the host's hook sees exactly these)."""
    headers = {**AUTH, "Content-Type": "application/merge-patch+json"}
    return call(client, "PATCH", path, data=body, headers=headers)


@pytest.mark.parametrize("prefix", ["/api/v1", ""])
def test_every_refusal_on_the_plants_routes_is_the_json_error(host, prefix):
    client = host.test_client()
    assert (
        call(client, "POST", f"{prefix}/plants", json={"id": 1, "name": "Fern"}, headers=AUTH).status_code
        == 200
    )
    refusals = [
        (call(client, "GET", f"{prefix}/plants"), 401),
        (call(client, "GET", f"{prefix}/plants", headers={"Authorization": "Bearer nope"}), 401),
        (
            call(client, "POST", f"{prefix}/plants", data="{", content_type="application/json", headers=AUTH),
            400,
        ),
        (call(client, "POST", f"{prefix}/plants", data="{}", content_type="text/plain", headers=AUTH), 415),
        (call(client, "POST", f"{prefix}/plants", json={"id": 1, "name": "Palm"}, headers=AUTH), 409),
        (call(client, "GET", f"{prefix}/plants/9", headers=AUTH), 404),
        (call(client, "GET", f"{prefix}/plants/x", headers=AUTH), 400),
        (call(client, "GET", f"{prefix}/plants?limit=-1", headers=AUTH), 400),
        (call(client, "PROPFIND", f"{prefix}/plants", headers=AUTH), 405),
        (call(client, "DELETE", f"{prefix}/plants/1", headers={**AUTH, "If-Match": '"other"'}), 412),
        (call(client, "GET", f"{prefix}/events?after=nowhere", headers=AUTH), 400),
        (call(client, "GET", f"{prefix}/metrics"), 401),
    ]
    for response, status in refusals:
        assert (response.status_code, response.content_type) == (status, "application/json")
        assert response.json["error"] == status
        assert "<h1>" not in response.get_data(as_text=True)
    assert call(client, "GET", "/shelf/items").json == {"items": [1], "seen": "the host's hook"}  # no token
    assert call(client, "GET", "/shelf/broken").get_data(as_text=True) == "<h1>host error page</h1>"
    assert call(client, "GET", "/nowhere").get_data(as_text=True) == "<h1>host 404</h1>"


#: The blueprint's views that need no token: the interface document and the API page.
PUBLIC = {"openapi", "page", "init_script", "asset"}
VALUES = {"plant_id": "1", "endpoint_id": "wh_1", "name": "swagger-ui.css"}


def test_every_operation_of_the_blueprint_needs_a_token_in_the_host(host):
    client = host.test_client()
    operations = 0
    for rule in host.url_map.iter_rules():
        blueprint, _, view = rule.endpoint.rpartition(".")
        if (
            blueprint not in ("plants", "plants_at_root")
            or view in PUBLIC
            or view.startswith(("other_", "options_"))
        ):
            continue
        path = rule.rule
        for name, value in VALUES.items():
            path = path.replace(f"<{name}>", value)
        for method in rule.methods - {"OPTIONS"}:
            refused = call(client, method, path)
            assert (refused.status_code, refused.content_type) == (401, "application/json"), (method, path)
            operations += 1
    assert operations >= 2 * 15


def test_the_urls_handed_out_carry_the_hosts_name_root_and_prefix(host):
    client = host.test_client()
    created = call(client, "PUT", "/api/v1/plants/2", json={"name": "Palm"}, headers=AUTH)
    assert created.headers["Location"] == "http://shop.example:8080/shop/api/v1/plants/2"
    call(client, "PUT", "/plants/3", json={"name": "Ivy"}, headers=AUTH)
    page = call(client, "GET", "/api/v1/plants?limit=1", headers=AUTH)
    assert page.headers["Link"].startswith("<http://shop.example:8080/shop/api/v1/plants?limit=1&after=")
    assert call(client, "GET", "/api/v1/openapi.json").json["servers"] == [{"url": "/shop/api/v1"}]
    assert call(client, "GET", "/openapi.json").json["servers"] == [{"url": "/shop"}]


@pytest.mark.parametrize("prefix", ["/api/v1", ""])
def test_a_page_links_on_the_hosts_server_name_as_a_create_locates(host, prefix):
    """The host's SERVER_NAME is its name: a client that sends another `Host` is handed URLs on
    that name, the next page's as a created plant's, never on the name it sent."""
    client = host.test_client()
    elsewhere = "http://attacker.example/shop/"
    for plant_id in (1, 2):
        created = call(
            client,
            "PUT",
            f"{prefix}/plants/{plant_id}",
            json={"name": "Fern"},
            headers=AUTH,
            base_url=elsewhere,
        )
        assert created.headers["Location"] == f"http://shop.example:8080/shop{prefix}/plants/{plant_id}"
    page = call(client, "GET", f"{prefix}/plants?limit=1", headers=AUTH, base_url=elsewhere)
    assert page.headers["Link"].startswith(f"<http://shop.example:8080/shop{prefix}/plants?limit=1&after=")
    following = call(
        client, "GET", page.headers["Link"][1:].partition(">")[0].removeprefix(BASE[:-1]), headers=AUTH
    )
    assert following.json["plants"] == [{"id": 2, "name": "Fern"}]


def test_entity_tags_and_preconditions_inside_the_host(host):
    client = host.test_client()
    created = call(client, "POST", "/api/v1/plants", json={"id": 1, "name": "Fern"}, headers=AUTH)
    tag = created.headers["ETag"]
    unchanged = call(client, "GET", "/api/v1/plants/1", headers={**AUTH, "If-None-Match": tag})
    assert (unchanged.status_code, unchanged.get_data()) == (304, b"")
    stale = call(
        client, "PATCH", "/api/v1/plants/1", json={"tag": "x"}, headers={**AUTH, "If-Match": '"stale"'}
    )
    assert (stale.status_code, stale.json["error"]) == (412, 412)
    page = call(client, "GET", "/api/v1/plants", headers=AUTH)
    again = call(client, "GET", "/api/v1/plants", headers={**AUTH, "If-None-Match": page.headers["ETag"]})
    assert again.status_code == 304


def test_the_feed_and_the_metrics_inside_the_host(host):
    client = host.test_client()
    now = call(client, "GET", "/api/v1/events?after=now", headers=AUTH).json["next"]
    call(client, "POST", "/plants", json={"id": 5, "name": "Fern"}, headers=AUTH)  # at the root: one store
    events = call(client, "GET", f"/api/v1/events?after={now}&wait=1", headers=AUTH).json["events"]
    assert [(event["type"], event["plant"]["id"]) for event in events] == [("plant.created", 5)]
    metrics = call(client, "GET", "/api/v1/metrics", headers=AUTH)
    assert metrics.status_code == 200
    assert 'route="/plants",status="200"' in metrics.get_data(as_text=True)


def test_the_hosts_cors_covers_the_plants_routes_as_it_covers_its_own(host):
    client = host.test_client()
    origin = {"Origin": "https://shop.example"}
    preflight = call(
        client,
        "OPTIONS",
        "/api/v1/plants",
        headers={
            **origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization",
        },
    )
    assert preflight.headers["Access-Control-Allow-Origin"] == "https://shop.example"
    assert "authorization" in preflight.headers["Access-Control-Allow-Headers"].lower()
    listed = call(client, "GET", "/api/v1/plants", headers={**AUTH, **origin})
    assert listed.headers["Access-Control-Allow-Origin"] == "https://shop.example"


def test_the_hosts_body_limit_is_the_blueprints_as_its_setting(host):
    """MAX_CONTENT_LENGTH is Flask's key: the host's value is the blueprint's limit too."""
    client = host.test_client()
    big = json.dumps({"id": 1, "name": "x" * (11 * 1024 * 1024)})
    refused = call(client, "POST", "/api/v1/plants", data=big, content_type="application/json", headers=AUTH)
    assert (refused.status_code, refused.json["error"]) == (413, 413)
    assert "10485760 bytes" in refused.json["message"]


@pytest.mark.parametrize("reads", [{"cache": True}, {"silent": True}], ids=["get_data", "get_json"])
def test_a_host_hook_that_reads_the_body_first_leaves_the_writes_whole(reads):
    """A host that logs every request's body (`request.get_data()`, `get_json()`) in its own
    before_request: Werkzeug keeps what it read, and the blueprint's write gets the same body,
    not an empty stream (answered 408, "not received in full", and nothing written). Its
    after_request reads the body of a write too."""
    host = make_host()
    seen = []

    @host.before_request
    def audit():
        seen.append(request.get_json(**reads) if "silent" in reads else request.get_data(**reads))

    @host.after_request
    def audit_after(response):
        seen.append(request.get_data())
        return response

    client = host.test_client()
    body = {"id": 1, "name": "Fern", "tag": "green"}
    created = call(client, "POST", "/api/v1/plants", json=body, headers=AUTH)
    assert (created.status_code, created.json) == (200, {"name": "Fern", "tag": "green"})
    changed = call(client, "PUT", "/plants/1", json={"name": "Palm"}, headers=AUTH)
    assert (changed.status_code, changed.json) == (200, {"name": "Palm"})
    patched = merge_patch(client, "/api/v1/plants/1", b'{"tag": "tall"}')
    assert (patched.status_code, patched.json) == (200, {"name": "Palm", "tag": "tall"})
    assert call(client, "GET", "/plants/1", headers=AUTH).json == {"name": "Palm", "tag": "tall"}
    assert seen[1] == json.dumps(body).encode()  # what the host's after_request read
    assert seen[-3] == b'{"tag": "tall"}'


def test_a_host_the_hosts_trusted_hosts_refuse_is_the_hosts_own_400():
    """As docs/embedding.md says: refused before routing, so not the blueprint's answer."""
    client = make_host(TRUSTED_HOSTS=["shop.example"]).test_client()
    assert call(client, "GET", "/api/v1/plants", headers=AUTH).status_code == 200
    refused = call(client, "GET", "/api/v1/plants", headers=AUTH, base_url="http://attacker.example/shop/")
    assert (refused.status_code, refused.get_data(as_text=True)) == (400, "<h1>host 400</h1>")


@pytest.mark.parametrize(
    "reads",
    [
        lambda: request.stream.read(),
        lambda: request.get_data(cache=False),
        lambda: (request.stream.read(5), request.get_data()),
    ],
    ids=["stream", "get_data uncached", "a part, then get_data"],
)
def test_a_host_hook_that_reads_the_body_and_keeps_none_or_part_is_a_json_500(reads, caplog):
    """The body the host's hook read and did not keep is gone: the write is refused as the JSON
    500 that says so (not a 408 or 400 that blames the client), and the log tells the host's
    developer how to read it instead; nothing is written. A hook that reads nothing is left alone."""
    host = make_host()

    @host.before_request
    def audit():
        if "X-Drain" in request.headers:
            reads()

    client = host.test_client()
    drained = {**AUTH, "X-Drain": "1"}
    refused = call(client, "POST", "/api/v1/plants", json={"id": 1, "name": "Fern"}, headers=drained)
    assert (refused.status_code, refused.content_type) == (500, "application/json")
    assert refused.json["message"].startswith("The request body was read by the host application")
    assert "request.get_data()" in caplog.text
    assert call(client, "GET", "/api/v1/plants/1", headers=AUTH).status_code == 404
    created = call(client, "POST", "/api/v1/plants", json={"id": 1, "name": "Fern"}, headers=AUTH)
    assert (created.status_code, created.json) == (200, {"name": "Fern"})


#: A body as gunicorn (any worker) hands it over, sized or chunked, and as Werkzeug's development
#: server hands over a chunked one: `wsgi.input_terminated`, so that Werkzeug, with no limit of
#: the host's, gives a hook `wsgi.input` itself as `request.stream`.
AS_SERVERS_HAND_IT = {"sized": {}, "chunked": {"Transfer-Encoding": "chunked"}}


@pytest.mark.parametrize("framing", sorted(AS_SERVERS_HAND_IT))
@pytest.mark.parametrize(
    "reads", [lambda: request.stream.read(), lambda: request.stream.read(5)], ids=["stream", "a part"]
)
def test_a_host_without_a_body_limit_whose_hook_read_the_body_is_a_json_500(framing, reads, caplog):
    """With no MAX_CONTENT_LENGTH of the host's, the body its hook read through `request.stream`
    was not seen as read: the write answered a 400 (empty, or no JSON) or a 408 that blames the
    client. Refused as with a limit: the JSON 500, logged; nothing written. Unread, it is served."""
    host = make_host(MAX_CONTENT_LENGTH=None)

    @host.before_request
    def audit():
        if "X-Drain" in request.headers:
            reads()

    client = host.test_client()
    body = b'{"id": 1, "name": "Fern"}'

    def create(**headers):
        sent = {**AUTH, **AS_SERVERS_HAND_IT[framing], "Content-Type": "application/json", **headers}
        environ = {"wsgi.input_terminated": True}
        options = {"data": body} if framing == "sized" else {"input_stream": io.BytesIO(body)}
        return call(client, "POST", "/api/v1/plants", headers=sent, environ_overrides=environ, **options)

    refused = create(**{"X-Drain": "1"})
    assert (refused.status_code, refused.content_type) == (500, "application/json")
    assert refused.json["message"].startswith("The request body was read by the host application")
    assert "request.get_data()" in caplog.text
    assert call(client, "GET", "/api/v1/plants/1", headers=AUTH).status_code == 404
    created = create()
    assert (created.status_code, created.json) == (200, {"name": "Fern"})


def test_a_host_hook_that_looks_at_the_form_leaves_a_json_write_whole():
    """A CSRF check reads `request.form` on every POST: on a JSON body Werkzeug makes the stream
    and reads nothing from it, so the write is served, not refused as a body the host read."""
    host = make_host()

    @host.before_request
    def csrf():
        request.form.get("csrf_token")

    client = host.test_client()
    created = call(client, "POST", "/api/v1/plants", json={"id": 1, "name": "Fern"}, headers=AUTH)
    assert (created.status_code, created.json) == (200, {"name": "Fern"})
    patched = merge_patch(client, "/api/v1/plants/1", b'{"tag": "tall"}')
    assert (patched.status_code, patched.json) == (200, {"name": "Fern", "tag": "tall"})
