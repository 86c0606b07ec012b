"""Watch tickets (`POST /events/tickets`): minted by a token that may read, accepted as
`GET /events?ticket=...` for a long-poll or a stream and nowhere else, until they expire or their
token is gone; counted against their token's watcher cap; good on every app that shares the store."""

from __future__ import annotations

import base64
import math
import time

import pytest

from app.auth.caller import Caller
from app.auth.static import StaticTokens
from app.auth.watch_tickets import PREFIX, WatchTickets
from app.schemas.parameters import NOT_A_TICKET, NOT_UTF8
from tests.helpers import error_of
from tests.servers import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def mint(client, headers=AUTH) -> str:
    answer = client.post("/events/tickets", headers=headers)
    assert answer.status_code == 200, answer.get_data()
    return answer.json["ticket"]


def create(client, plant_id: int) -> None:
    assert client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=AUTH).status_code == 200


def test_a_ticket_is_short_lived_and_never_cached(make_app):
    client = make_app().test_client()
    answer = client.post("/events/tickets", headers=AUTH)
    assert answer.status_code == 200
    assert answer.headers["Cache-Control"] == "no-store"
    assert set(answer.json) == {"ticket", "expires", "expires_in"}
    assert answer.json["ticket"].startswith(PREFIX)
    assert TOKEN not in answer.json["ticket"]
    assert answer.json["expires_in"] == 60
    assert answer.json["expires"].endswith("Z")


def test_a_ticket_long_polls_the_feed_without_a_header(make_app):
    client = make_app().test_client()
    ticket = mint(client)
    create(client, 1)
    answer = client.get(f"/events?ticket={ticket}&wait=1")
    assert answer.status_code == 200
    assert [event["plant"]["id"] for event in answer.json["events"]] == [1]
    # it serves until it expires, not once (an EventSource reconnects with the same URL)
    again = client.get(f"/events?ticket={ticket}&wait=1&after={answer.json['next']}")
    assert again.status_code == 200
    assert again.json["events"] == []


def test_a_read_only_token_mints_a_ticket(make_app):
    client = make_app(PLANTS_READ_TOKENS="reader-token").test_client()
    ticket = mint(client, {"Authorization": "Bearer reader-token"})
    create(client, 1)
    assert client.get(f"/events?ticket={ticket}&wait=1").status_code == 200


def test_a_ticket_serves_nothing_but_watching(make_app):
    client = make_app().test_client()
    ticket = mint(client)
    as_bearer = {"Authorization": f"Bearer {ticket}"}
    error_of(client.get(f"/events?ticket={ticket}"), 403)  # a page, not a watch
    assert client.head(f"/events?ticket={ticket}&wait=1").status_code == 403
    error_of(client.get("/events?wait=1", headers=as_bearer), 401)
    error_of(client.get(f"/plants?ticket={ticket}"), 401)
    error_of(client.get("/plants", headers=as_bearer), 401)
    error_of(client.get(f"/plants/1?ticket={ticket}"), 401)
    error_of(client.post(f"/plants?ticket={ticket}", json={"id": 1, "name": "Fern"}), 401)
    error_of(client.post("/plants", json={"id": 1, "name": "Fern"}, headers=as_bearer), 401)
    error_of(client.post(f"/events/tickets?ticket={ticket}"), 401)
    error_of(client.post("/events/tickets", headers=as_bearer), 401)
    error_of(client.get(f"/webhooks?ticket={ticket}"), 401)
    error_of(client.get(f"/metrics?ticket={ticket}"), 401)


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/events?wait=1"), ("GET", "/plants"), ("POST", "/events/tickets")]
)
def test_a_ticket_sent_as_a_bearer_token_is_told_where_a_ticket_goes(make_app, method, path):
    """A ticket pasted into the Authorization header (the natural first try) was told only `The
    bearer token is not accepted.`: still a 401 with `invalid_token`, it now says what a ticket is
    for and how to send it."""
    client = make_app().test_client()
    answer = client.open(path, method=method, headers={"Authorization": f"Bearer {mint(client)}"})
    message = error_of(answer, 401)["message"]
    assert message.startswith("The bearer token is a watch ticket, not a token:")
    assert "GET /events?ticket=" in message
    assert 'error="invalid_token"' in answer.headers["WWW-Authenticate"]
    assert (
        "watch ticket"
        not in error_of(client.get("/plants", headers={"Authorization": "Bearer plwt"}), 401)["message"]
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/plants"),
        ("GET", "/plants/1"),
        ("POST", "/plants"),
        ("POST", "/events/tickets"),
        ("GET", "/webhooks"),
        ("GET", "/metrics"),
    ],
)
@pytest.mark.parametrize("forged", [False, True])
def test_a_ticket_in_the_query_of_another_operation_is_told_where_a_ticket_goes(
    make_app, method, path, forged
):
    """`?ticket=` where a bearer header is needed (a page's first try with the ticket its watch
    took) was told only that the operation needs an Authorization header: still that 401 with the
    bare challenge (no credentials were sent there), it now says a ticket opens only the watch."""
    client = make_app().test_client()
    ticket = PREFIX + "A" * 60 if forged else mint(client)
    answer = client.open(path, method=method, query_string={"ticket": ticket}, json={"id": 1, "name": "F"})
    message = error_of(answer, 401)["message"]
    assert message.startswith("This operation needs an 'Authorization: Bearer <token>' header")
    assert "a watch ticket opens only the watch of the feed" in message
    assert "GET /events?ticket=" in message
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="plants"'
    assert ticket not in message
    assert "watch ticket" not in error_of(client.open(path, method=method), 401)["message"]


@pytest.mark.parametrize("forged", [PREFIX + "AAAA", PREFIX + "A" * 60, PREFIX + "A" * 200])
def test_a_forged_ticket_is_401(make_app, forged):
    client = make_app().test_client()
    answer = client.get("/events", query_string={"ticket": forged, "wait": "1"})
    error_of(answer, 401)
    assert "invalid_token" in answer.headers["WWW-Authenticate"]


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("ticket=%ff", NOT_UTF8),
        ("ticket=%ff&wait=1", NOT_UTF8),
        ("ticket=plwt_%ff&limit=0&bogus=%fe", NOT_UTF8),
        ("ticket=x&wait=1", NOT_A_TICKET),
        ("ticket=plwt_&wait=1", NOT_A_TICKET),
        ("ticket=plwt_%C3%A9&wait=1", NOT_A_TICKET),
        ("ticket=plwt-abc&wait=1", NOT_A_TICKET),
        ("ticket=undefined&wait=1", NOT_A_TICKET),  # a page's ticket never minted
        (f"ticket={TOKEN}&wait=1", NOT_A_TICKET),  # a bearer token where the ticket goes
        ("ticket=plwt_" + "A" * 201, NOT_A_TICKET),
    ],
)
def test_without_a_header_a_malformed_ticket_is_a_400_naming_it(make_app, query, problem):
    """Without `Authorization` the ticket is the request's credential, checked before any other
    parameter is read. One that is not of a ticket's form (or not UTF-8) is a malformed request,
    as a malformed bearer token is: 400 with `error="invalid_request"`, naming `ticket` as the
    answer with a header does (it was a 401 saying the ticket was not this service's, where the
    same value with a header was the 400). Counted as a refused authentication all the same."""
    client = make_app(PLANTS_AUTH_FAILURE_LIMIT="2/minute").test_client()
    for _ in range(2):
        answer = client.get(f"/events?{query}")
        assert error_of(answer, 400)["details"] == {"ticket": [problem]}
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="plants", error="invalid_request"'
    error_of(client.get(f"/events?{query}"), 429)
    answer = client.get(f"/events?{query}", headers=AUTH)
    assert error_of(answer, 400)["details"]["ticket"] == [problem]


def test_a_tampered_ticket_is_401(make_app):
    client = make_app().test_client()
    ticket = mint(client)
    last = "A" if ticket[-1] != "A" else "B"
    error_of(client.get(f"/events?ticket={ticket[:-1]}{last}&wait=1"), 401)


def test_a_ticket_is_refused_once_it_expires(make_app):
    client = make_app(PLANTS_WATCH_TICKET_TTL=1).test_client()
    ticket = mint(client)
    time.sleep(1.1)
    answer = client.get(f"/events?ticket={ticket}&wait=1")
    assert error_of(answer, 401)["message"].startswith("The watch ticket has expired")


def test_a_ticket_counts_against_its_tokens_watcher_cap(make_app):
    client = make_app(PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN=1).test_client()
    ticket = mint(client)
    # The test client answers a long-poll once its wait is over; its watch counts until it is
    # closed, so a longer wait would hold it no better, only later.
    held = client.get("/events?after=now&wait=1", headers=AUTH, buffered=False)
    try:
        error_of(client.get(f"/events?ticket={ticket}&after=now&wait=1"), 429)
        other = mint(client, {"Authorization": "Bearer second-token"})  # another token's cap
        assert client.get(f"/events?ticket={other}&after=now&wait=1").status_code == 200
    finally:
        held.close()


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)
def test_every_app_sharing_the_store_accepts_it_until_its_token_is_removed(make_app):
    minting = make_app().test_client()
    ticket = mint(minting, {"Authorization": "Bearer second-token"})
    create(minting, 1)
    other_worker = make_app().test_client()
    assert other_worker.get(f"/events?ticket={ticket}&wait=1").status_code == 200
    rotated = make_app(PLANTS_API_TOKENS=[TOKEN, "third-token"]).test_client()
    answer = rotated.get(f"/events?ticket={ticket}&wait=1")
    assert error_of(answer, 401)["message"].startswith("The watch ticket's token is no longer accepted")


def test_a_jwts_ticket_ends_with_the_jwt_and_shares_its_key():
    tickets = WatchTickets(StaticTokens([], []), 60, jwt=True)
    key, now = b"k" * 32, time.time()
    jwt_caller = Caller(b"jwt:" + b"ab" * 32, None, None, None, "jwt", now + 10)
    ticket, expires = tickets.mint(jwt_caller, key)
    assert expires == math.floor(now + 10)
    problem, caller = tickets.verify(ticket, key)
    assert problem is None
    assert caller is not None
    assert caller.limit_key == jwt_caller.limit_key
    assert caller.write_refusal is not None
    assert caller.webhooks_refusal is not None
    without_jwt = WatchTickets(StaticTokens([], []), 60, jwt=False)
    assert without_jwt.verify(ticket, key)[1] is None
    assert tickets.verify(ticket, b"another store's key" * 2)[1] is None


def test_with_a_bearer_header_a_ticket_is_not_used_but_must_have_its_form(make_app):
    client = make_app().test_client()
    ticket = mint(client)
    assert client.get(f"/events?ticket={ticket}", headers=AUTH).status_code == 200
    answer = client.get("/events?ticket=not-a-ticket", headers=AUTH)
    assert error_of(answer, 400)["details"] == {"ticket": ["Not a watch ticket of this service."]}


@pytest.mark.parametrize(
    "query",
    [
        "ticket=%70lwt%5F{secret}&wait=1",  # the prefix encoded: no log would find it
        "%74icket={ticket}&wait=1",  # the name encoded: nginx's log map would miss it
        "ticket={encoded}&wait=1",  # any other character encoded
    ],
)
def test_a_percent_encoded_ticket_is_refused(make_app, query):
    """Logs (app/telemetry/redact.py, deploy/nginx-plants.conf) scrub a ticket by its literal
    `ticket=plwt_...`: one accepted in any other spelling would reach them in clear."""
    client = make_app().test_client()
    ticket = mint(client)
    secret = ticket[len(PREFIX) :]
    encoded = PREFIX + "".join(f"%{ord(c):02X}" for c in secret[:3]) + secret[3:]
    assert client.get(f"/events?ticket={ticket}&wait=1").status_code == 200
    answer = client.get("/events?" + query.format(secret=secret, ticket=ticket, encoded=encoded))
    error_of(answer, 401)


def test_a_ticket_holds_no_unkeyed_digest_of_its_token():
    """A ticket travels in URLs, so it leaks more often than its token: its binding to a static
    token is keyed with the store's key, so a leaked ticket is no offline test of token guesses.
    The same token, the same second, two stores: the bound parts differ."""
    tickets = WatchTickets(StaticTokens(["weak"], []), 60, jwt=False, clock=lambda: 1_800_000_000.0)
    caller = StaticTokens(["weak"], []).callers[b"weak"]
    payloads = set()
    for key in (b"a" * 32, b"b" * 32):
        ticket, _ = tickets.mint(caller, key)
        assert tickets.verify(ticket, key)[1] is not None
        text = ticket[len(PREFIX) :]
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        payloads.add(raw[:-16])  # all but the MAC
    assert len(payloads) == 2


def test_a_ticket_in_a_pages_query_beside_a_token_is_told_where_a_ticket_goes(make_app):
    """With a valid token, `GET /plants?ticket=` was 400 `Unknown parameter.` and no more: the
    401 without a token said where a ticket goes, this refusal says it too."""
    client = make_app().test_client()
    ticket = mint(client)
    answer = client.get("/plants", query_string={"ticket": ticket}, headers=AUTH)
    assert error_of(answer, 400)["details"] == {
        "ticket": [
            "Unknown parameter: a watch ticket opens only the watch of the feed, GET /events?ticket=..."
            " (a stream or a long-poll). This operation reads the token of the Authorization header:"
            " leave the ticket out."
        ]
    }
    assert ticket not in answer.get_data(as_text=True)
    assert client.head("/plants", query_string={"ticket": ticket}, headers=AUTH).status_code == 400
    assert error_of(client.get("/plants?nope=1", headers=AUTH), 400)["details"] == {
        "nope": ["Unknown parameter."]
    }
