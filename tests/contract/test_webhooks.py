"""The /webhooks operations (docs/webhooks.md): registering, reading, changing, rotating, replaying
and deleting endpoints, and every refusal: scopes, the SSRF rules, the limit, bad bodies. On the
memory store and a real Redis; deliveries themselves are tests/integration/test_webhook_delivery.py."""

from __future__ import annotations

import base64
import json
import re

import pytest

from app.extension import plants_state
from app.settings import ConfigurationError
from tests.helpers import error_of

TIME = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")
ALL_TYPES = ["plant.created", "plant.updated", "plant.deleted"]
HOOK = "http://127.0.0.1:9/hook"
MERGE_PATCH = "application/merge-patch+json"
#: Addresses that are not globally reachable although Python 3.11.7's checks miss them, and the
#: IPv6 forms that wrap refused IPv4 addresses.
NOT_GLOBAL = [
    "http://100.100.100.200/latest/meta-data/",  # Alibaba Cloud's metadata, in shared space
    "http://100.64.0.1:8080/",  # shared space: carrier NAT, Tailscale
    "http://192.0.0.192/",  # Oracle Cloud's legacy metadata
    "http://192.0.0.8/",
    "http://198.18.0.1/",  # benchmarking
    "http://[2002:a9fe:a9fe::]/",  # 6to4 of 169.254.169.254
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "http://[2001:0:4136:e378::80ff:fffe]/",  # Teredo to 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
    "http://[::ffff:100.100.100.200]/",  # IPv4-mapped shared space
    "http://[::127.0.0.1]/",  # IPv4-compatible
]


@pytest.fixture
def app(make_app):
    # Deliveries are not under test here: nothing listens on HOOK's port.
    return make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_DELIVER=False)


def register(client, auth, **body):
    response = client.post("/webhooks", json={"url": HOOK, **body}, headers=auth)
    assert response.status_code == 201, response.json
    return response.json


def test_register_answers_201_with_the_endpoint_and_its_secret(client, auth):
    response = client.post("/webhooks", json={"url": HOOK, "description": "mine"}, headers=auth)
    assert response.status_code == 201
    hook = response.json
    assert set(hook) == {
        *("id", "url", "events", "description", "secret", "status", "status_reason", "created"),
        "next_attempt",
    }
    assert hook["next_attempt"] is None
    assert isinstance(hook["id"], str)
    assert hook["id"]
    assert response.headers["Location"] == f"http://localhost/webhooks/{hook['id']}"
    assert hook["url"] == HOOK
    assert hook["description"] == "mine"
    assert hook["events"] == ALL_TYPES
    assert hook["status"] == "enabled"
    assert hook["status_reason"] is None
    assert TIME.match(hook["created"])
    assert hook["secret"].startswith("whsec_")
    assert 24 <= len(base64.b64decode(hook["secret"].removeprefix("whsec_"), validate=True)) <= 64
    assert client.get(response.headers["Location"], headers=auth).json == hook
    assert client.get("/webhooks", headers=auth).json == {"webhooks": [hook]}


def test_each_endpoint_has_its_own_id_and_secret_and_the_list_is_oldest_first(client, auth):
    first, second = register(client, auth), register(client, auth, events=["plant.deleted"])
    assert first["id"] != second["id"]
    assert first["secret"] != second["secret"]
    assert second["events"] == ["plant.deleted"]
    # Registered within the same millisecond or not, they list in the order they were registered.
    more = [register(client, auth)["id"] for _ in range(5)]
    listed = [hook["id"] for hook in client.get("/webhooks", headers=auth).json["webhooks"]]
    assert listed == [first["id"], second["id"], *more]


def test_events_are_kept_in_the_feeds_order_whatever_order_they_are_sent_in(client, auth):
    hook = register(client, auth, events=["plant.deleted", "plant.created"])
    assert hook["events"] == ["plant.created", "plant.deleted"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": HOOK, "events": ["plant.eaten"]}, "events"),
        ({"url": HOOK, "events": []}, "events"),
        ({"url": HOOK, "events": ["plant.created", "plant.created"]}, "events"),
        ({"url": HOOK, "events": "plant.created"}, "events"),
        ({"url": "ftp://127.0.0.1/x"}, "url"),
        ({"url": "127.0.0.1:9/x"}, "url"),
        ({"url": "http://127.0.0.1:9/x#part"}, "url"),
        ({"url": "http://127.0.0.1:99999/x"}, "url"),
        ({"url": "http://user:password@127.0.0.1:9/x"}, "url"),
        # Host names no resolver can be asked for: an empty label, a label over 63 characters.
        ({"url": "https://hooks..example/x"}, "url"),
        ({"url": "https://.example/x"}, "url"),
        ({"url": f"https://{'a' * 64}.example/x"}, "url"),
        ({"url": 7}, "url"),
        ({}, "url"),
        ({"url": HOOK, "secret": "whsec_mine"}, "secret"),
        ({"url": HOOK, "description": "x" * 501}, "description"),
    ],
)
def test_an_invalid_endpoint_is_400_naming_the_field(client, auth, body, field):
    response = client.post("/webhooks", json=body, headers=auth)
    error = error_of(response, 400)
    assert field in error["details"]
    # The record named as the served document names it, whichever check refused the body.
    assert error["message"].startswith("The request body is not a valid NewWebhook. Invalid fields: ")
    assert client.get("/webhooks", headers=auth).json == {"webhooks": []}


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_an_empty_list_of_events_says_what_to_send_instead(client, auth, method):
    """Not marshmallow's bare "Length must be between 1 and 3.": which length, of what?"""
    path = "/webhooks" if method == "POST" else f"/webhooks/{register(client, auth)['id']}"
    body = {"url": HOOK, "events": []} if method == "POST" else {"events": []}
    response = client.open(path, method=method, json=body, headers=auth)
    assert error_of(response, 400)["details"]["events"] == [
        "Must list 1 to 3 of the event types (plant.created, plant.updated, plant.deleted), each"
        " once; leave it out, or null, for every type."
    ]


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/hook",  # private
        "http://192.168.1.10/hook",
        "http://172.16.0.1/hook",
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata (link-local)
        "http://[fe80::1]/hook",
        "http://[::1]/hook",  # loopback
        "http://127.0.0.2/hook",  # loopback, not the allowed address
        "http://0.0.0.0/hook",  # unspecified
        "http://224.0.0.1/hook",  # multicast
        "http://[::ffff:10.0.0.1]/hook",  # private, mapped into IPv6
        "http://localhost:9/hook",  # a name that resolves to 127.0.0.1: only the address is allowed
        *NOT_GLOBAL,
    ],
)
def test_urls_of_refused_addresses_are_400_naming_url(client, auth, url):
    message = error_of(client.post("/webhooks", json={"url": url}, headers=auth), 400)["details"]["url"][0]
    assert "not a globally reachable address" in message or "never sent to" in message
    assert client.get("/webhooks", headers=auth).json == {"webhooks": []}


@pytest.mark.parametrize("url", NOT_GLOBAL)
def test_a_patch_to_an_address_that_is_not_global_is_400_naming_url(client, auth, url):
    hook = register(client, auth)
    response = client.patch(f"/webhooks/{hook['id']}", json={"url": url}, headers=auth)
    error = error_of(response, 400)
    assert "url" in error["details"]
    assert error["message"] == "The request body is not a valid WebhookPatch. Invalid fields: url."
    assert client.get(f"/webhooks/{hook['id']}", headers=auth).json == hook


@pytest.mark.parametrize(
    "url", ["http://example.com:0/", "http://example.com:65536/", "http://127.0.0.1:0/hook"]
)
def test_port_0_and_ports_over_65535_are_400_naming_url(client, auth, url):
    response = client.post("/webhooks", json={"url": url}, headers=auth)
    assert error_of(response, 400)["details"]["url"] == ["The port must be a number from 1 to 65535."]
    hook = register(client, auth)
    response = client.patch(f"/webhooks/{hook['id']}", json={"url": url}, headers=auth)
    assert "port" in error_of(response, 400)["details"]["url"][0]


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("http://127.0.0.1:9/café", "http://127.0.0.1:9/caf%C3%A9"),
        ("http://127.0.0.1:9/hook?q=☃", "http://127.0.0.1:9/hook?q=%E2%98%83"),
        # Encoded once: what is encoded already stays as it is.
        ("http://127.0.0.1:9/caf%C3%A9?q=%E2%98%83", "http://127.0.0.1:9/caf%C3%A9?q=%E2%98%83"),
        ("http://127.0.0.1:9/€/%20?x=ü&y=%", "http://127.0.0.1:9/%E2%82%AC/%20?x=%C3%BC&y=%"),
    ],
)
def test_a_non_ascii_path_or_query_is_kept_percent_encoded(client, auth, given, kept):
    hook = register(client, auth, url=given)
    assert hook["url"] == kept
    assert client.get(f"/webhooks/{hook['id']}", headers=auth).json["url"] == kept
    patched = client.patch(f"/webhooks/{hook['id']}", json={"url": given + "x"}, headers=auth).json
    assert patched["url"] == kept + "x"


def test_a_non_ascii_host_is_400_saying_to_write_it_in_its_xn_form(client, auth):
    """The path and query are encoded, the host is not: the message says how to write it."""
    for url in ("http://bücher.example/hook", "http://例え.jp:9/x"):
        message = error_of(client.post("/webhooks", json={"url": url}, headers=auth), 400)["details"]["url"][
            0
        ]
        assert "not ASCII" in message
        assert "xn--" in message
    assert register(client, auth, url="http://127.0.0.1:9/bücher")["url"] == "http://127.0.0.1:9/b%C3%BCcher"


def test_a_url_too_long_once_encoded_is_400_naming_url(client, auth):
    url = "http://127.0.0.1:9/" + "é" * 1000  # 1,019 characters, 6,019 once encoded
    assert (
        "percent-encoded"
        in error_of(client.post("/webhooks", json={"url": url}, headers=auth), 400)["details"]["url"][0]
    )


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("HTTP://Example.COM/Hook?Q=A", "http://example.com/Hook?Q=A"),
        ("hTTpS://HOOKS.example:8443/x", "https://hooks.example:8443/x"),
        ("HTTP://[2001:DB8::1]:9/X", "http://[2001:db8::1]:9/X"),
    ],
)
def test_scheme_and_host_in_any_case_are_kept_in_lower_case(make_app, auth, given, kept):
    """RFC 3986 §3.1 and §3.2.2: a scheme and a host are case-insensitive, the path and query are
    not. The URL is kept normalised, so the endpoint's URL reads one way whoever wrote it."""
    client = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="example.com,hooks.example,2001:db8::/32", PLANTS_WEBHOOKS_DELIVER=False
    ).test_client()
    hook = register(client, auth, url=given)
    assert hook["url"] == kept
    patched = client.patch(f"/webhooks/{hook['id']}", json={"url": given + "y"}, headers=auth).json
    assert patched["url"] == kept + "y"


def test_a_host_name_with_an_underscore_is_taken_and_allowed_by_name(make_app, auth):
    """A compose service's name (`hook_receiver`) resolves on its network, as any other name: the
    URL and PLANTS_WEBHOOKS_ALLOW_HOSTS take it (here it does not resolve, and is kept all the same)."""
    client = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="hook_receiver", PLANTS_WEBHOOKS_DELIVER=False
    ).test_client()
    assert (
        register(client, auth, url="http://hook_receiver:8080/hook")["url"]
        == "http://hook_receiver:8080/hook"
    )


@pytest.mark.parametrize("listed", ["hooks.internal.", "HOOKS.internal.,10.0.0.0/8"])
def test_a_fully_qualified_name_with_its_trailing_dot_can_be_allowed(make_app, auth, listed):
    """The allowance names it as the URL does (test_webhook_addresses.py: neither spelling allows
    the other); it stopped the start, so such a host could not be allowed at all."""
    app = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS=listed, PLANTS_WEBHOOKS_DELIVER=False)
    assert "hooks.internal." in plants_state(app).settings.webhooks_allow_hosts
    hook = register(app.test_client(), auth, url="https://hooks.internal./hook")
    assert hook["url"] == "https://hooks.internal./hook"


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_an_address_with_a_trailing_dot_is_that_address(client, auth, method):
    """`127.0.0.1.` is the address, as a browser's URL parser reads it, not a name: it was taken as
    a name no resolver finds, so the SSRF check waited for each delivery, and an address the
    setting allows was not allowed. The dot is dropped, and the address checked as written."""
    path = f"/webhooks/{register(client, auth)['id']}" if method == "PATCH" else "/webhooks"
    answer = client.open(path, method=method, json={"url": "http://127.0.0.1.:9/hook"}, headers=auth)
    assert answer.status_code in (200, 201), answer.json
    assert answer.json["url"] == "http://127.0.0.1:9/hook"
    for url, says in [
        (
            "http://169.254.169.254./latest/meta-data/",
            "link-local and unspecified addresses are never sent to",
        ),
        ("http://10.0.0.1./hook", "not a globally reachable address"),
    ]:
        refused = error_of(client.open(path, method=method, json={"url": url}, headers=auth), 400)
        assert says in refused["details"]["url"][0]
        assert f"The host {url.split('/')[2][:-1]} resolves to" in refused["details"]["url"][0]


@pytest.mark.parametrize("listed", ["127.0.0.1.", "127.0.0.0/8"])
def test_the_allowance_reads_an_address_with_a_trailing_dot_as_the_address(make_app, auth, listed):
    app = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS=listed, PLANTS_WEBHOOKS_DELIVER=False)
    assert plants_state(app).settings.webhooks_allow_hosts == (listed.rstrip("."),)
    assert register(app.test_client(), auth, url="http://127.0.0.1./hook")["url"] == "http://127.0.0.1/hook"


def test_the_allowance_refuses_a_link_local_address_with_a_trailing_dot(make_app):
    with pytest.raises(ConfigurationError, match=r"may not allow 169\.254\.169\.254: link-local"):
        make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="169.254.169.254.")


def test_a_host_that_does_not_resolve_yet_is_accepted(client, auth):
    """Each delivery resolves and checks it again (test_webhook_delivery.py)."""
    response = client.post("/webhooks", json={"url": "http://no-such-host.invalid/hook"}, headers=auth)
    assert response.status_code == 201


def test_without_the_allowance_even_127_0_0_1_is_refused(make_app, auth):
    client = make_app(PLANTS_WEBHOOKS_DELIVER=False).test_client()
    error_of(client.post("/webhooks", json={"url": HOOK}, headers=auth), 400)


def test_the_allowance_takes_cidrs_and_names(make_app, auth):
    client = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="10.0.0.0/8,localhost", PLANTS_WEBHOOKS_DELIVER=False
    ).test_client()
    for url in ("http://10.1.2.3/hook", "http://localhost:9/hook"):
        assert client.post("/webhooks", json={"url": url}, headers=auth).status_code == 201
    # A name allows only itself: 127.0.0.1 written as an address is not "localhost".
    error_of(client.post("/webhooks", json={"url": HOOK}, headers=auth), 400)


def test_a_read_only_token_gets_403_on_every_webhooks_operation(make_app, auth):
    app = make_app(
        PLANTS_READ_TOKENS="reader-token",
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1",
        PLANTS_WEBHOOKS_DELIVER=False,
    )
    client = app.test_client()
    hook = register(client, auth)
    reader = {"Authorization": "Bearer reader-token"}
    for method, path, body in [
        ("POST", "/webhooks", {"url": HOOK}),
        ("GET", "/webhooks", None),
        ("GET", f"/webhooks/{hook['id']}", None),
        ("PATCH", f"/webhooks/{hook['id']}", {"description": "x"}),
        ("DELETE", f"/webhooks/{hook['id']}", None),
        ("POST", f"/webhooks/{hook['id']}/rotate", None),
        ("GET", f"/webhooks/{hook['id']}/attempts", None),
        ("POST", f"/webhooks/{hook['id']}/replay", {"after": "start"}),
    ]:
        response = client.open(path, method=method, json=body, headers=reader)
        assert "webhook" in error_of(response, 403)["message"]
        assert hook["secret"] not in response.get_data(as_text=True)
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="plants", error="insufficient_scope"'
    assert client.get(f"/webhooks/{hook['id']}", headers=auth).json == hook
    # The read-only token still reads plants.
    assert client.get("/plants", headers=reader).status_code == 200


def test_without_a_token_every_webhooks_operation_is_401(client):
    for method, path in [("POST", "/webhooks"), ("GET", "/webhooks"), ("GET", "/webhooks/x")]:
        error_of(client.open(path, method=method), 401)


def test_at_most_plants_webhooks_max_endpoints_then_507(make_app, auth):
    client = make_app(
        PLANTS_WEBHOOKS_MAX=2, PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_DELIVER=False
    ).test_client()
    first = register(client, auth)
    register(client, auth)
    client.patch(f"/webhooks/{first['id']}", json={"status": "disabled"}, headers=auth)
    assert (
        "PLANTS_WEBHOOKS_MAX"
        in error_of(client.post("/webhooks", json={"url": HOOK}, headers=auth), 507)["message"]
    )
    assert client.delete(f"/webhooks/{first['id']}", headers=auth).status_code == 204
    register(client, auth)


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)
def test_past_a_lowered_limit_the_507_says_how_many_to_delete(make_app, auth):
    """A limit lowered below the endpoints kept (by a reload, or another host sharing the store
    with a lower one) is not "N are registered": it says how many are, and to delete down to it."""
    settings = {"PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1", "PLANTS_WEBHOOKS_DELIVER": False}
    wide = make_app(PLANTS_WEBHOOKS_MAX=3, **settings).test_client()
    for _ in range(3):
        register(wide, auth)
    for limit, message in [
        (1, "3 webhook endpoints are registered, and this service keeps at most 1 (PLANTS_WEBHOOKS_MAX):"
            " delete 3 first."),
        (0, "3 webhook endpoints are registered, and this service keeps none (PLANTS_WEBHOOKS_MAX=0):"
            " it takes no more."),
    ]:  # fmt: skip
        narrow = make_app(PLANTS_WEBHOOKS_MAX=limit, **settings).test_client()
        assert error_of(narrow.post("/webhooks", json={"url": HOOK}, headers=auth), 507)["message"] == message
    assert error_of(wide.post("/webhooks", json={"url": HOOK}, headers=auth), 507)["message"] == (
        "3 webhook endpoints are registered, and this service keeps at most 3 (PLANTS_WEBHOOKS_MAX):"
        " delete 1 first."
    )


def test_patch_changes_what_it_names_and_keeps_the_rest(client, auth):
    hook = register(client, auth, description="first")
    path = f"/webhooks/{hook['id']}"
    response = client.patch(
        path,
        json={"events": ["plant.updated"], "url": "http://127.0.0.1:10/new"},
        headers=auth,
        content_type=MERGE_PATCH,
    )
    assert response.status_code == 200
    changed = response.json
    assert changed == {**hook, "events": ["plant.updated"], "url": "http://127.0.0.1:10/new"}
    assert client.get(path, headers=auth).json == changed
    assert client.patch(path, json={"events": None, "description": None}, headers=auth).json == {
        **changed,
        "events": ALL_TYPES,
        "description": "",
    }


def test_patch_status_disables_and_enables(client, auth):
    hook = register(client, auth)
    path = f"/webhooks/{hook['id']}"
    disabled = client.patch(path, json={"status": "disabled"}, headers=auth).json
    assert disabled["status"] == "disabled"
    assert disabled["status_reason"]
    enabled = client.patch(path, json={"status": "enabled"}, headers=auth).json
    assert enabled["status"] == "enabled"
    assert enabled["status_reason"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"status": "failing"}, "status"),
        ({"status": "paused"}, "status"),
        ({"url": "http://10.0.0.1/x"}, "url"),
        ({"url": None}, "url"),
        ({"events": ["plant.eaten"]}, "events"),
        ({"secret": "whsec_x"}, "secret"),
    ],
)
def test_an_invalid_patch_is_400_naming_the_field_and_changes_nothing(client, auth, body, field):
    hook = register(client, auth)
    response = client.patch(f"/webhooks/{hook['id']}", json=body, headers=auth)
    assert field in error_of(response, 400)["details"]
    assert client.get(f"/webhooks/{hook['id']}", headers=auth).json == hook


def test_a_patch_of_the_secret_is_400_pointing_to_rotate_and_changes_nothing(client, auth):
    """`secret` was refused as an unknown field, though every answer holds one: the refusal now
    says which operation changes it."""
    hook = register(client, auth)
    for secret in ("whsec_" + base64.b64encode(b"x" * 32).decode(), None):
        response = client.patch(f"/webhooks/{hook['id']}", json={"secret": secret}, headers=auth)
        assert error_of(response, 400)["details"] == {
            "secret": [
                "The secret is never set by a PATCH: POST /webhooks/{id}/rotate gives the endpoint a new"
                " one (the current one signs beside it for PLANTS_WEBHOOKS_ROTATION_OVERLAP)."
            ]
        }
    assert client.get(f"/webhooks/{hook['id']}", headers=auth).json == hook


#: The Webhook record's fields the service sets, as a GET answers them.
SET_BY_THE_SERVICE = ("id", "created", "status_reason", "next_attempt")


@pytest.mark.parametrize("status", ["enabled", "disabled"])
def test_a_patch_of_the_record_as_read_is_200_and_changes_what_it_names(client, auth, status):
    """A record copied from a GET and sent back with a change was 400 `Unknown field.` for each
    field the service sets: those are accepted as they are now, as a plant's `id` is in a PUT."""
    hook = register(client, auth, description="first")
    path = f"/webhooks/{hook['id']}"
    read = client.patch(path, json={"status": status}, headers=auth).json
    response = client.patch(path, json={**read, "description": "second"}, headers=auth)
    assert response.status_code == 200, response.json
    assert response.json == {**read, "description": "second"}
    assert client.get(path, headers=auth).json == {**read, "description": "second"}
    assert client.patch(path, json=read, headers=auth).json == read


def test_a_patch_of_the_record_as_read_keeps_an_endpoint_of_every_type_so(app, client, auth):
    """A GET lists every type for an endpoint registered without `events`: sent back, that list
    keeps it getting every type, any added later included, rather than only today's three."""
    hook = register(client, auth)
    path = f"/webhooks/{hook['id']}"
    assert client.patch(path, json={**hook, "description": "x"}, headers=auth).json["events"] == ALL_TYPES
    assert plants_state(app).store.endpoints.get(hook["id"]).events is None
    client.patch(path, json={"events": ["plant.deleted"]}, headers=auth)
    client.patch(path, json={"events": list(reversed(ALL_TYPES))}, headers=auth)
    assert plants_state(app).store.endpoints.get(hook["id"]).events == tuple(ALL_TYPES)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("created", "2001-01-01T00:00:00.000Z"),
        ("status_reason", "Mine."),
        ("next_attempt", "2001-01-01T00:00:00.000Z"),
        ("created", None),
        ("next_attempt", 5),
    ],
)
def test_a_patch_of_a_field_the_service_sets_to_another_value_is_400_saying_so(client, auth, field, value):
    hook = register(client, auth)
    path = f"/webhooks/{hook['id']}"
    response = client.patch(path, json={field: value, "description": "changed"}, headers=auth)
    assert error_of(response, 400)["details"] == {
        field: ["Set by the service: must be the endpoint's value as a GET answers it now, or be left out."]
    }
    assert client.get(path, headers=auth).json == hook


def test_a_patch_of_another_id_is_400_as_a_plants_is(client, auth):
    hook, other = register(client, auth), register(client, auth)
    path = f"/webhooks/{hook['id']}"
    response = client.patch(path, json={"id": other["id"], "description": "changed"}, headers=auth)
    assert error_of(response, 400)["details"] == {
        "id": [f"Must equal the id in the path ({hook['id']}), or be left out."]
    }
    assert client.get(path, headers=auth).json == hook


def test_a_patch_of_the_current_secret_is_accepted_and_changes_nothing(client, auth):
    hook = register(client, auth)
    path = f"/webhooks/{hook['id']}"
    assert client.patch(path, json={"secret": hook["secret"]}, headers=auth).json == hook
    rotated = client.post(f"{path}/rotate", headers=auth).json
    for secret in (hook["secret"], "whsec_\u00e9", 5):  # the one before, one past ASCII, no string
        response = client.patch(path, json={"secret": secret}, headers=auth)
        assert "POST /webhooks/{id}/rotate" in error_of(response, 400)["details"]["secret"][0]
    assert client.get(path, headers=auth).json == rotated


@pytest.mark.parametrize("field", [*SET_BY_THE_SERVICE, "status"])
def test_a_registration_with_a_field_the_service_sets_is_400_saying_so(client, auth, field):
    hook = register(client, auth)
    response = client.post("/webhooks", json={"url": HOOK, field: hook[field]}, headers=auth)
    assert error_of(response, 400)["details"] == {field: ["Set by the service: leave it out."]}
    assert client.get("/webhooks", headers=auth).json == {"webhooks": [hook]}


def test_a_registration_with_a_secret_is_400_saying_the_service_makes_it(client, auth):
    response = client.post("/webhooks", json={"url": HOOK, "secret": "whsec_mine"}, headers=auth)
    assert error_of(response, 400)["details"] == {
        "secret": ["The service makes each endpoint's secret, and the answer to the registration holds it."]
    }
    assert client.get("/webhooks", headers=auth).json == {"webhooks": []}


def test_an_unknown_endpoint_is_404_on_every_operation(client, auth):
    for method, suffix, body in [
        ("GET", "", None),
        ("PATCH", "", {"description": "x"}),
        ("DELETE", "", None),
        ("POST", "/rotate", None),
        ("GET", "/attempts", None),
        ("POST", "/replay", {"after": "start"}),
    ]:
        response = client.open(f"/webhooks/wh_none{suffix}", method=method, json=body, headers=auth)
        assert "wh_none" in error_of(response, 404)["message"]


@pytest.mark.parametrize("url", ["http://10.0.0.1/hook", "http://[::1]/hook", "http://localhost:9/hook"])
def test_a_patch_of_an_unknown_endpoints_url_is_404_whatever_its_host(client, auth, url):
    """The host of a new URL is judged (looked up) only for an endpoint there is."""
    response = client.patch("/webhooks/wh_none", json={"url": url}, headers=auth)
    assert "wh_none" in error_of(response, 404)["message"]


def test_a_patch_of_an_unknown_endpoint_to_a_malformed_url_is_400_as_any_invalid_body(client, auth):
    response = client.patch("/webhooks/wh_none", json={"url": "ftp://example.com/"}, headers=auth)
    assert "url" in error_of(response, 400)["details"]


def test_delete_is_204_then_404(client, auth):
    hook = register(client, auth)
    response = client.delete(f"/webhooks/{hook['id']}", headers=auth)
    assert response.status_code == 204
    assert response.get_data() == b""
    error_of(client.get(f"/webhooks/{hook['id']}", headers=auth), 404)
    error_of(client.delete(f"/webhooks/{hook['id']}", headers=auth), 404)
    assert client.get("/webhooks", headers=auth).json == {"webhooks": []}


def test_rotate_gives_a_new_secret(client, auth):
    hook = register(client, auth)
    response = client.post(f"/webhooks/{hook['id']}/rotate", headers=auth)
    assert response.status_code == 200
    rotated = response.json
    assert rotated["secret"] != hook["secret"]
    assert rotated["secret"].startswith("whsec_")
    assert rotated == {**hook, "secret": rotated["secret"]}
    assert client.get(f"/webhooks/{hook['id']}", headers=auth).json == rotated


def test_ten_rotations_within_the_overlap_then_409_and_nothing_changes(client, auth):
    hook = register(client, auth)
    path = f"/webhooks/{hook['id']}/rotate"
    for _ in range(10):
        assert client.post(path, headers=auth).status_code == 200
    current = client.get(f"/webhooks/{hook['id']}", headers=auth).json
    response = client.post(path, headers=auth)
    message = error_of(response, 409)["message"]
    assert "PLANTS_WEBHOOKS_OLD_SECRETS_MAX" in message
    assert re.search(r"The oldest stops signing at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", message)
    assert client.get(f"/webhooks/{hook['id']}", headers=auth).json == current


def test_the_bound_on_old_secrets_is_a_setting(make_app, auth):
    client = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1",
        PLANTS_WEBHOOKS_DELIVER=False,
        PLANTS_WEBHOOKS_OLD_SECRETS_MAX=2,
    ).test_client()
    hook = register(client, auth)
    path = f"/webhooks/{hook['id']}/rotate"
    assert client.post(path, headers=auth).status_code == 200
    assert client.post(path, headers=auth).status_code == 200
    error_of(client.post(path, headers=auth), 409)


def test_without_an_overlap_rotations_are_not_bounded(make_app, auth):
    client = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1",
        PLANTS_WEBHOOKS_DELIVER=False,
        PLANTS_WEBHOOKS_ROTATION_OVERLAP=0,
        PLANTS_WEBHOOKS_OLD_SECRETS_MAX=1,
    ).test_client()
    hook = register(client, auth)
    for _ in range(5):
        assert client.post(f"/webhooks/{hook['id']}/rotate", headers=auth).status_code == 200


def test_a_new_endpoint_has_no_attempts(client, auth):
    hook = register(client, auth)
    assert client.get(f"/webhooks/{hook['id']}/attempts", headers=auth).json == {"attempts": []}


def test_replay_takes_start_or_a_cursor_of_the_feed(client, auth):
    hook = register(client, auth)
    path = f"/webhooks/{hook['id']}/replay"
    response = client.post(path, json={"after": "start"}, headers=auth)
    assert response.status_code == 202
    assert response.json == hook
    cursor = client.get("/events?after=now", headers=auth).json["next"]
    assert client.post(path, json={"after": cursor}, headers=auth).status_code == 202


@pytest.mark.parametrize("after", ["", "now", "bm90IGEgY3Vyc29y", 7, None])
def test_replay_of_a_cursor_the_service_did_not_make_is_400_naming_after(client, auth, after):
    hook = register(client, auth)
    response = client.post(f"/webhooks/{hook['id']}/replay", json={"after": after}, headers=auth)
    assert "after" in error_of(response, 400)["details"]


def test_a_page_cursor_is_not_a_feed_cursor(client, auth):
    for plant_id in range(3):
        client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=auth)
    page_cursor = client.get("/plants?limit=1", headers=auth).json["next"]
    hook = register(client, auth)
    response = client.post(f"/webhooks/{hook['id']}/replay", json={"after": page_cursor}, headers=auth)
    assert "after" in error_of(response, 400)["details"]


def test_with_the_feed_off_registering_is_409(make_app, auth):
    client = make_app(PLANTS_EVENTS_RETAIN=0, PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1").test_client()
    assert (
        "PLANTS_EVENTS_RETAIN"
        in error_of(client.post("/webhooks", json={"url": HOOK}, headers=auth), 409)["message"]
    )


def test_other_methods_are_405_with_allow(client, auth):
    response = client.put("/webhooks", headers=auth)
    error_of(response, 405)
    assert response.headers["Allow"] == "GET, HEAD, POST, OPTIONS"
    response = client.post("/webhooks/x", headers=auth)
    assert response.headers["Allow"] == "GET, HEAD, PATCH, DELETE, OPTIONS"


def test_a_body_that_is_not_json_is_refused_as_every_body_is(client, auth):
    error_of(client.post("/webhooks", data="url=x", headers={**auth, "Content-Type": "text/plain"}), 415)
    error_of(client.post("/webhooks", data="{", headers={**auth, "Content-Type": "application/json"}), 400)
    error_of(client.post("/webhooks", json=[HOOK], headers=auth), 400)
    encoded = {**auth, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    error_of(client.post("/webhooks", data=json.dumps(HOOK), headers=encoded), 415)
    assert client.get("/webhooks", headers=auth).json["webhooks"] == []


def test_a_body_sent_as_a_part_is_refused_and_adds_no_endpoint(client, auth):
    partial = {**auth, "Content-Type": "application/json", "Content-Range": "bytes 0-99/200"}
    assert (
        "Content-Range"
        in error_of(client.post("/webhooks", data=json.dumps(HOOK), headers=partial), 400)["message"]
    )
    assert client.get("/webhooks", headers=auth).json["webhooks"] == []


#: Each change of an endpoint, with the body it needs (None: none).
CHANGES = [
    ("patch", "", {"description": "changed"}),
    ("delete", "", None),
    ("post", "/rotate", None),
    ("post", "/replay", {"after": "start"}),
]


@pytest.mark.parametrize(("method", "suffix", "body"), CHANGES)
@pytest.mark.parametrize(
    "condition",
    [
        {"If-Match": '"0123456789abcdef"'},
        {"If-Match": '""'},
        {"If-Match": 'W/"x", "y"'},
        {"If-None-Match": "*"},
    ],
)
def test_a_change_whose_precondition_fails_is_412_and_changes_nothing(
    client, auth, method, suffix, body, condition
):
    """Endpoints have no ETag (their answer changes with every delivery): If-Match names none of
    theirs, and If-None-Match: * fails for one that exists (RFC 9110 §13.1.1-2). A client that
    guards its change against a lost update is told so, not silently obeyed."""
    hook = register(client, auth)
    response = getattr(client, method)(
        f"/webhooks/{hook['id']}{suffix}", json=body, headers={**auth, **condition}
    )
    assert "ETag" in error_of(response, 412)["message"]
    assert client.get(f"/webhooks/{hook['id']}", headers=auth).json == hook


@pytest.mark.parametrize(("method", "suffix", "body"), CHANGES)
@pytest.mark.parametrize("condition", [{"If-Match": "*"}, {"If-None-Match": '"0123456789abcdef"'}])
def test_a_change_whose_precondition_holds_goes_through(client, auth, method, suffix, body, condition):
    hook = register(client, auth)
    response = getattr(client, method)(
        f"/webhooks/{hook['id']}{suffix}", json=body, headers={**auth, **condition}
    )
    assert response.status_code in (200, 202, 204)


@pytest.mark.parametrize(("method", "suffix", "body"), CHANGES)
def test_a_conditional_change_of_an_absent_endpoint_is_404(client, auth, method, suffix, body):
    response = getattr(client, method)(
        f"/webhooks/wh_0000000000000000{suffix}", json=body, headers={**auth, "If-Match": '"x"'}
    )
    error_of(response, 404)


@pytest.mark.parametrize("condition", ['"0123456789abcdef"', "*", 'W/"x", "y"'])
def test_a_registration_under_if_match_is_412_and_registers_nothing(client, auth, condition):
    """A registration makes an endpoint no request could have read (the service picks its id):
    there is no current representation for If-Match to match, `*` included (RFC 9110 §13.1.1),
    as for a watch ticket's mint. It was ignored: the endpoint was registered (201)."""
    response = client.post("/webhooks", json={"url": HOOK}, headers={**auth, "If-Match": condition})
    assert "If-Match" in error_of(response, 412)["message"]
    assert client.get("/webhooks", headers=auth).json == {"webhooks": []}


@pytest.mark.parametrize("condition", ["*", '"0123456789abcdef"'])
def test_a_registration_under_if_none_match_goes_through(client, auth, condition):
    """If-None-Match holds where there is no current representation (RFC 9110 §13.1.2)."""
    response = client.post("/webhooks", json={"url": HOOK}, headers={**auth, "If-None-Match": condition})
    assert response.status_code == 201, response.json
    assert [hook["id"] for hook in client.get("/webhooks", headers=auth).json["webhooks"]] == [
        response.json["id"]
    ]


def test_every_answer_holding_a_secret_is_never_kept_by_a_cache(client, auth):
    """The signing secret is a credential, as a watch ticket is: `Cache-Control: no-store`, so
    that no cache (a browser page's, with CORS on) keeps it on disk."""
    created = client.post("/webhooks", json={"url": HOOK}, headers=auth)
    hook = created.json["id"]
    answers = [
        created,
        client.get("/webhooks", headers=auth),
        client.get(f"/webhooks/{hook}", headers=auth),
        client.patch(f"/webhooks/{hook}", json={"description": "x"}, headers=auth),
        client.post(f"/webhooks/{hook}/rotate", headers=auth),
        client.post(f"/webhooks/{hook}/replay", json={"after": "start"}, headers=auth),
    ]
    for response in answers:
        assert "whsec_" in response.get_data(as_text=True)
        assert response.headers["Cache-Control"] == "no-store"
