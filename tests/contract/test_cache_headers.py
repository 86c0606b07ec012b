"""The headers a cache and a client rely on (RFC 9110, RFC 9111): `Vary` names every request
header an answer's form depends on, `Cache-Control` keeps answers behind a token out of shared
caches, a HEAD of a watch answers its GET's headers, webhook reads judge their preconditions as
their changes do, `Location` is one form for the service, and `Last-Event-ID` is a stream's id."""

from __future__ import annotations

import pytest

from app.settings.schema import LONGEST_WAIT
from tests.helpers import error_of, in_time

STREAM = {"Accept": "text/event-stream"}
HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture
def app(make_app):
    return make_app(
        PLANTS_CORS_ORIGINS="https://app.example",
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1",
        PLANTS_WEBHOOKS_DELIVER=False,
        PLANTS_EVENTS_STREAM_MAX=1,  # a stream opened by mistake ends soon
    )


def varies(response) -> set[str]:
    return {name.strip().lower() for line in response.headers.getlist("Vary") for name in line.split(",")}


def test_every_answer_of_the_feed_varies_by_accept_and_origin(client, auth):
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    page = client.get("/events", headers=auth)
    assert page.status_code == 200
    assert {"accept", "origin"} <= varies(page)
    revalidated = client.get("/events", headers={**auth, "If-None-Match": page.headers["ETag"]})
    assert revalidated.status_code == 304
    assert {"accept", "origin"} <= varies(revalidated)
    streamed = client.head("/events", headers={**auth, **STREAM})
    assert streamed.status_code == 200
    assert streamed.mimetype == "text/event-stream"
    assert "accept" in varies(streamed)
    refused = client.get("/events?snapshot=true", headers=auth)  # 400 only because it is not a stream
    assert refused.status_code == 400
    assert "accept" in varies(refused)
    # A plant's form does not depend on Accept.
    assert varies(client.get("/plants/1", headers=auth)) == {"origin"}


def test_answers_behind_a_token_are_private_and_revalidated(client, auth):
    # A write's answer is kept by no cache (RFC 9111 §3): it needs none.
    created = client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    assert "Cache-Control" not in created.headers
    read = client.get("/plants/1", headers=auth)
    assert read.headers["Cache-Control"] == "private, no-cache"
    revalidated = client.get("/plants/1", headers={**auth, "If-None-Match": read.headers["ETag"]})
    assert revalidated.status_code == 304
    assert revalidated.headers["Cache-Control"] == "private, no-cache"
    assert client.get("/plants", headers=auth).headers["Cache-Control"] == "private, no-cache"
    assert client.get("/plants/1").headers["Cache-Control"] == "private, no-cache"  # its 401
    # A long-poll's answer and a stream's are private too; a credential's keeps its own.
    polled = client.get("/events?after=now&wait=1", headers=auth)
    assert polled.status_code == 200
    assert polled.headers["Cache-Control"] == "private, no-cache"
    assert client.head("/events", headers={**auth, **STREAM}).headers["Cache-Control"] == "private, no-cache"
    assert client.post("/events/tickets", headers=auth).headers["Cache-Control"] == "no-store"
    # The public answers, the same for every caller, are left to a cache's own rules.
    assert "Cache-Control" not in client.get("/openapi.json").headers


def test_a_head_of_a_long_poll_answers_the_watch_headers_at_once(client, auth):
    """The GET would wait and answer without an ETag or a length: so does its HEAD, without waiting."""
    head = in_time(lambda: client.head(f"/events?after=now&wait={LONGEST_WAIT}", headers=auth))
    assert head.status_code == 200
    assert head.mimetype == "application/json"
    assert "ETag" not in head.headers
    assert head.get_data() == b""
    get = client.get("/events?after=now&wait=1", headers=auth)
    assert "ETag" not in get.headers
    assert head.headers.get("Content-Length") == get.headers.get("Content-Length")
    # A precondition is judged as on the watch: no ETag to match.
    assert client.head("/events?after=now&wait=20", headers={**auth, "If-Match": '"abc"'}).status_code == 412
    # With an event to answer, the long-poll is a page, its HEAD too.
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
    page = client.head("/events?wait=20", headers=auth)
    assert page.status_code == 200
    assert page.headers["ETag"] == client.get("/events?wait=20", headers=auth).headers["ETag"]


def register(client, auth) -> dict:
    response = client.post("/webhooks", json={"url": HOOK}, headers=auth)
    assert response.status_code == 201, response.json
    return response


def judged_without_an_etag(client, auth, path: str, not_modified_cache_control: str) -> None:
    """A read of a resource without an entity-tag (RFC 9110 §13.1.1-2): `If-Match: *` holds, an
    If-Match naming tags is 412, If-None-Match: * is 304 (a HEAD's too), another is ignored."""
    plain = client.get(path, headers=auth)
    assert plain.status_code == 200
    assert "ETag" not in plain.headers
    assert client.get(path, headers={**auth, "If-Match": "*"}).get_data() == plain.get_data()
    refused = client.get(path, headers={**auth, "If-Match": '"abc"'})
    assert "If-Match" in error_of(refused, 412)["message"]
    assert refused.headers["Cache-Control"] == "private, no-cache"
    unchanged = client.get(path, headers={**auth, "If-None-Match": "*"})
    assert unchanged.status_code == 304
    assert unchanged.get_data() == b""
    assert unchanged.headers["Cache-Control"] == not_modified_cache_control
    assert client.head(path, headers={**auth, "If-None-Match": "*"}).status_code == 304
    assert client.get(path, headers={**auth, "If-None-Match": '"abc"'}).get_data() == plain.get_data()


def test_a_webhook_read_judges_its_preconditions_as_a_change_does(client, auth):
    hook = register(client, auth).json
    for path in (f"/webhooks/{hook['id']}", "/webhooks"):
        judged_without_an_etag(client, auth, path, "no-store")  # a 304 of an answer with secrets
    # Not found comes first, whatever the precondition.
    error_of(client.get("/webhooks/wh_0000000000000000", headers={**auth, "If-Match": '"abc"'}), 404)


def test_the_attempts_of_an_endpoint_judge_their_preconditions_as_its_read_does(client, auth):
    """The attempts have no ETag either (each delivery adds one): an If-Match naming tags is 412
    and If-None-Match: * is 304 (RFC 9110 §13.1.1-2, "MUST evaluate"), as on the endpoint itself.
    Both were ignored: a client guarding its read got the list as if unconditional."""
    hook = register(client, auth).json
    path = f"/webhooks/{hook['id']}/attempts"
    assert client.get(path, headers=auth).json == {"attempts": []}
    judged_without_an_etag(client, auth, path, "private, no-cache")  # no secret in them
    # Not found comes first, whatever the precondition.
    absent = "/webhooks/wh_0000000000000000/attempts"
    error_of(client.get(absent, headers={**auth, "If-Match": '"abc"'}), 404)
    error_of(client.get(absent, headers={**auth, "If-None-Match": "*"}), 404)


def test_location_is_an_absolute_url_for_every_create(client, auth):
    created = register(client, auth)
    assert created.headers["Location"] == f"http://localhost/webhooks/{created.json['id']}"
    plant = client.put("/plants/7", json={"name": "Fern"}, headers=auth)
    assert plant.status_code == 201
    assert plant.headers["Location"] == "http://localhost/plants/7"


@pytest.mark.parametrize("value", ["now", " now "])
def test_last_event_id_now_is_no_id_a_stream_sent(client, auth, value):
    answer = client.get("/events", headers={**auth, **STREAM, "Last-Event-ID": value})
    assert "Last-Event-ID" in error_of(answer, 400)["details"]
