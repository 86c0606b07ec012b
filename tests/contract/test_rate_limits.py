"""Rate limits per token and per address, on both stores; shared by workers on Redis; Redis faults."""

from __future__ import annotations

import http.client
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from flask import Flask
from flask_limiter import Limiter

from app import ConfigurationError, create_app
from app.plants import bp
from tests.conftest import redis_settings, settings_for_store
from tests.helpers import assert_error, call, error_of, refused_alike_and_documented
from tests.servers import ROOT, TOKEN, Gunicorn, RedisServer

OTHER = "second-token"


def create(client, plant_id, token=TOKEN, address="192.0.2.1"):
    return client.post(
        "/plants",
        json={"id": plant_id, "name": "Fern"},
        headers={"Authorization": f"Bearer {token}"},
        environ_overrides={"REMOTE_ADDR": address},
    )


def test_exactly_n_creates_then_429_until_the_window_ends(make_app):
    client = make_app(PLANTS_RATE_LIMIT="3 per 2 seconds").test_client()
    answers = [create(client, n) for n in range(5)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
    assert [a.headers["RateLimit-Remaining"] for a in answers[:3]] == ["2", "1", "0"]
    # Whole seconds until the window ends, rounded up: the request that opened it says the
    # whole window, never a second past it.
    assert answers[0].headers["RateLimit-Reset"] == "2"
    for answer in answers:
        assert answer.headers["RateLimit-Limit"] == "3"
        assert 1 <= int(answer.headers["RateLimit-Reset"]) <= 2
    refused = error_of(answers[3], 429)
    assert "Too many requests for this token" in refused["message"]
    assert 1 <= int(answers[3].headers["Retry-After"]) <= 2
    time.sleep(int(answers[4].headers["Retry-After"]) + 0.2)
    assert create(client, 10).status_code == 200
    assert len(client.application.extensions["plants"].store) == 4


@pytest.mark.parametrize("limit", ["3 per minute;2 per hour", "2 per hour;3 per minute"])
def test_with_several_limits_retry_after_waits_for_every_spent_window(make_app, limit):
    """Once the hour's budget is spent, a request the minute's also refuses is told to wait for
    the hour: after the minute alone it would be refused again. In either order of the limits,
    for tokens and for refused authentications alike."""
    client = make_app(PLANTS_RATE_LIMIT=limit, PLANTS_AUTH_FAILURE_LIMIT=limit).test_client()
    answers = [create(client, n) for n in range(6)]
    assert [a.status_code for a in answers] == [200, 200, 429, 429, 429, 429]
    for answer in answers[2:]:
        assert 3500 <= int(answer.headers["Retry-After"]) <= 3600
        assert answer.headers["RateLimit-Limit"] == "2"
    failures = [create(client, n, token="wrong-token") for n in range(6)]
    assert [a.status_code for a in failures] == [401, 401, 429, 429, 429, 429]
    for answer in failures[2:]:
        assert 3500 <= int(answer.headers["Retry-After"]) <= 3600


def test_a_worker_that_joins_a_window_reports_no_second_past_its_end(make_app):
    """A second worker (app) on the same store counts in the window the first opened, and reads
    its end from the store (Redis's TTL): the seconds it reports are the window's at most."""
    opener, joiner = (
        make_app(PLANTS_RATE_LIMIT="3 per 2 seconds"),
        make_app(PLANTS_RATE_LIMIT="3 per 2 seconds"),
    )
    assert create(opener.test_client(), 1).headers["RateLimit-Reset"] == "2"
    answer = create(joiner.test_client(), 2)
    assert 1 <= int(answer.headers["RateLimit-Reset"]) <= 2


def test_tokens_have_separate_budgets_and_a_token_may_have_its_own(make_app):
    client = make_app(
        PLANTS_API_TOKENS=[TOKEN, f"{OTHER}@5/minute"], PLANTS_RATE_LIMIT="2/minute"
    ).test_client()
    assert [create(client, n).status_code for n in range(3)] == [200, 200, 429]
    assert [create(client, 100 + n, OTHER).status_code for n in range(6)] == [200] * 5 + [429]


def test_replays_and_refusals_other_than_auth_count_only_creates_that_reach_the_view(make_app):
    client = make_app(PLANTS_RATE_LIMIT="2/minute").test_client()
    assert client.get("/openapi.json").status_code == 200  # public views are never limited
    assert [create(client, 1).status_code for _ in range(3)] == [200, 200, 429]  # replays count


def test_metrics_count_against_the_tokens_limit_as_an_operation(make_app):
    """A scrape is an operation behind a token: counted, and refused past the limit with the JSON
    429 and Retry-After, so that a token cannot ask for the costly summing without bound; another
    token (a scraper's own) has its own budget."""
    client = make_app(PLANTS_RATE_LIMIT="2/minute").test_client()
    auth, scraper = {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": f"Bearer {OTHER}"}
    first = client.get("/metrics", headers=auth)
    assert first.status_code == 200
    assert (first.headers["RateLimit-Limit"], first.headers["RateLimit-Remaining"]) == ("2", "1")
    assert create(client, 1).status_code == 200  # the same budget as the plants
    refused = client.get("/metrics", headers=auth)
    assert "Too many requests for this token" in error_of(refused, 429)["message"]
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert b"plants_" not in refused.get_data()
    assert client.get("/metrics", headers=scraper).status_code == 200


def test_an_anonymous_flood_is_limited_per_address(make_app):
    client = make_app(PLANTS_AUTH_FAILURE_LIMIT="3/minute").test_client()
    flood = [create(client, n, token="guess", address="198.51.100.7").status_code for n in range(5)]
    assert flood == [401, 401, 401, 429, 429]
    error_of(create(client, 1, token="guess", address="198.51.100.7"), 429)
    # Another address, with a valid token or a wrong one, is not held back.
    assert create(client, 1, address="203.0.113.5").status_code == 200
    assert create(client, 2, token="guess", address="203.0.113.5").status_code == 401


@pytest.mark.parametrize(
    ("per_64", "per_48"), [("3/minute", "4/hour"), ("2/hour", "4/minute")], ids=["48-hour", "64-hour"]
)
def test_an_ipv6_clients_retry_after_waits_for_its_64s_and_its_48s_spent_windows(make_app, per_64, per_48):
    """A /64 and its /48 each count a refused authentication; Retry-After is the spent window that
    ends last of both: told to wait only for the minute while the other network's hour is spent,
    the client would be refused again. A second /64 of the same /48 spends the /48's budget."""
    client = make_app(PLANTS_AUTH_FAILURE_LIMIT=per_64, PLANTS_AUTH_FAILURE_LIMIT_PER_48=per_48).test_client()
    first, second = "2001:db8:1:1::7", "2001:db8:1:2::7"
    amount, wide = int(per_64.split("/")[0]), int(per_48.split("/")[0])
    assert [create(client, n, "guess", first).status_code for n in range(amount)] == [401] * amount
    # The /48's last requests, from the second /64 (with the /64's hour, spending it too).
    rest = wide - amount
    assert [create(client, 9, "guess", second).status_code for _ in range(rest)] == [401] * rest
    for address in (first, second):
        refused = create(client, 1, token="guess", address=address)
        error_of(refused, 429)
        assert 3500 <= int(refused.headers["Retry-After"]) <= 3600, (address, refused.headers)


def test_every_operation_behind_the_token_documents_the_auth_failure_429(make_app):
    """Past PLANTS_AUTH_FAILURE_LIMIT a client address is refused 429 before any operation that
    needs a token, those outside PLANTS_RATE_LIMIT (the metrics) too: each one's document says so."""
    client = make_app(PLANTS_AUTH_FAILURE_LIMIT="1/minute").test_client()
    guess = {"Authorization": "Bearer guess"}
    error_of(client.get("/plants", headers=guess), 401)
    waits = refused_alike_and_documented(client, guess, 429, "Retry-After")
    assert min(map(int, waits)) >= 1


def test_the_address_is_the_clients_behind_a_trusted_proxy(make_app):
    client = make_app(PLANTS_AUTH_FAILURE_LIMIT="2/minute", PLANTS_TRUSTED_PROXIES=1).test_client()

    def through_proxy(client_address):
        return client.post(
            "/plants", json={}, headers={"X-Forwarded-For": client_address},
            environ_overrides={"REMOTE_ADDR": "127.0.0.1"},
        ).status_code  # fmt: skip

    assert [through_proxy("198.51.100.7") for _ in range(3)] == [401, 401, 429]
    assert through_proxy("198.51.100.8") == 401


def test_an_ipv6_clients_addresses_in_one_64_count_as_one_on_a_real_gunicorn():
    """An IPv6 client holds a whole /64 (RFC 6177): one counter a /64, or it would open a counter
    (kept for the limit's whole window, in the worker or in Redis) with each of its 2^64 addresses,
    never reaching the limit. An IPv4-mapped address counts as its IPv4 address."""
    server = Gunicorn(env={"PLANTS_AUTH_FAILURE_LIMIT": "3/hour", "PLANTS_TRUSTED_PROXIES": "1"})
    try:

        def refused_from(address):
            headers = {"Authorization": "Bearer guess", "X-Forwarded-For": address}
            return call(server.connection(), "GET", "/plants", None, headers)[0]

        guesses = [refused_from(f"2001:db8:1:2:{n:x}::{n:x}") for n in range(1, 6)]
        assert guesses == [401, 401, 401, 429, 429]
        assert refused_from("2001:db8:1:3::1") == 401  # the next /64 is another client
        assert [refused_from(a) for a in ("198.51.100.9", "::ffff:198.51.100.9", "198.51.100.9")] == [
            401, 401, 401,
        ]  # fmt: skip
        assert refused_from("::ffff:198.51.100.9") == 429
    finally:
        server.stop()


def test_limits_are_off_by_default(client, auth):
    for n in range(30):
        response = client.post("/plants", json={"id": n, "name": "Fern"}, headers=auth)
        assert response.status_code == 200
        assert "RateLimit-Limit" not in response.headers


@pytest.mark.parametrize("key", ["PLANTS_RATE_LIMIT", "PLANTS_AUTH_FAILURE_LIMIT"])
def test_a_limit_that_is_not_in_the_limits_notation_is_refused(key):
    with pytest.raises(ConfigurationError, match=f"^{key} is not a rate limit in the limits notation"):
        create_app({"PLANTS_API_TOKENS": TOKEN, key: "lots"})
    with pytest.raises(ConfigurationError, match="token number 2 that is not a rate limit") as raised:
        create_app({"PLANTS_API_TOKENS": f"{TOKEN},{OTHER}@often"})
    assert OTHER not in str(raised.value)


def test_embedded_limits_leave_the_hosts_limiter_and_routes_alone():
    host = Flask("host")
    host.config.update(PLANTS_API_TOKENS=TOKEN, PLANTS_RATE_LIMIT="1/minute")
    host_limiter = Limiter(lambda: "everyone", app=host, storage_uri="memory://")

    @host.get("/host")
    @host_limiter.limit("2/minute")
    def host_route():
        return "host"

    @host.get("/free")
    def free_route():
        return "free"

    host.register_blueprint(bp, url_prefix="/api")
    client = host.test_client()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert [client.get("/host").status_code for _ in range(3)] == [200, 200, 429]
    assert [client.get("/free").status_code for _ in range(5)] == [200] * 5
    answers = [client.post("/api/plants", json={"id": n, "name": "Fern"}, headers=auth) for n in range(2)]
    assert [a.status_code for a in answers] == [200, 429]
    assert answers[1].json["error"] == 429
    assert len(host.extensions["limiter"]) == 1  # the host's own; the blueprint adds none


@pytest.mark.parametrize("shared", ["redis", "cluster"])
def test_two_workers_on_one_redis_share_one_budget_per_token(request, shared):
    """On a cluster through `limits`' own cluster storage, from the same URL."""
    settings = settings_for_store(request, shared)
    server = Gunicorn(
        env={**settings, "WEB_CONCURRENCY": "2", "GUNICORN_THREADS": "4", "PLANTS_RATE_LIMIT": "25/minute"}
    )
    try:

        def one(plant_id):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            return call(conn, "POST", "/plants", {"id": plant_id, "name": "Fern"}, headers)[0]

        with ThreadPoolExecutor(8) as pool:
            statuses = Counter(pool.map(one, range(80)))
        assert statuses == {200: 25, 429: 55}
    finally:
        server.stop()


@pytest.mark.parametrize(
    "limits", [{}, {"PLANTS_RATE_LIMIT": "1000/second", "PLANTS_AUTH_FAILURE_LIMIT": "5/second"}]
)
def test_a_hung_redis_is_503_never_500_with_or_without_limits(tmp_path, limits):
    redis = RedisServer(tmp_path, config_file=ROOT / "deploy" / "redis.conf")
    settings = redis_settings(redis)
    server = Gunicorn(
        env={**settings, "PLANTS_STORE_TIMEOUT": "0.5", "PLANTS_STORE_CONNECT_TIMEOUT": "0.5", **limits}
    )
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    try:
        assert call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, headers)[0] == 200
        redis.signal(signal.SIGSTOP)
        for plant_id in range(2, 6):
            status, response_headers, body = call(
                server.connection(), "POST", "/plants", {"id": plant_id, "name": "Fern"}, headers
            )
            assert_error(status, response_headers, body, 503)
            assert response_headers["Retry-After"] == "1"
        redis.signal(signal.SIGCONT)
        assert call(server.connection(), "POST", "/plants", {"id": 9, "name": "Fern"}, headers)[0] == 200
        assert "Traceback" not in server.output()
    finally:
        server.stop()
        redis.stop()


@pytest.mark.parametrize("durable", [True, False], ids=["append-only", "no-persistence"])
def test_a_redis_restart_keeps_the_counts_as_durably_as_the_plants(tmp_path, durable):
    """As docs/operations.md says: while Redis is down every request is 503; restarted with its
    append-only file, a spent budget (a token's, a guesser's) stays spent; without persistence,
    every window starts afresh."""
    redis = RedisServer(tmp_path, *(("--appendonly", "yes", "--appendfsync", "always") if durable else ()))
    try:
        app = create_app(
            {"TESTING": True, "PLANTS_API_TOKENS": TOKEN, **redis_settings(redis),
             "PLANTS_RATE_LIMIT": "2/hour", "PLANTS_AUTH_FAILURE_LIMIT": "2/hour"}
        )  # fmt: skip
        client = app.test_client()
        good, wrong = TOKEN, "not-a-token"
        assert [create(client, n, good).status_code for n in range(3)] == [200, 200, 429]
        assert [create(client, n, wrong).status_code for n in range(3)] == [401, 401, 429]
        redis.stop()
        assert [create(client, 9, token).status_code for token in (good, wrong)] == [503, 503]
        redis.start()
        after = [create(client, 9, token) for token in (good, wrong)]
        assert [answer.status_code for answer in after] == ([429, 429] if durable else [200, 401])
        for answer in after if durable else ():
            assert 1 <= int(answer.headers["Retry-After"]) <= 3600
    finally:
        redis.stop()


def test_a_scrape_answers_while_redis_is_hung_and_counts_the_store_error(tmp_path):
    """/metrics counts against its token's limit, but a scrape is wanted most while Redis does not
    answer: it goes on uncounted (as it was before it was limited), not a 503 that blinds the
    operator; the plant operations are still 503."""
    redis = RedisServer(tmp_path, config_file=ROOT / "deploy" / "redis.conf")
    settings = redis_settings(redis)
    server = Gunicorn(
        env={
            **settings,
            "PLANTS_STORE_TIMEOUT": "0.5",
            "PLANTS_STORE_CONNECT_TIMEOUT": "0.5",
            "PLANTS_RATE_LIMIT": "1000/second",
        }
    )
    headers = {"Authorization": f"Bearer {TOKEN}"}
    try:
        assert call(server.connection(), "GET", "/metrics", None, headers)[0] == 200
        redis.signal(signal.SIGSTOP)
        status, response_headers, body = call(server.connection(), "GET", "/metrics", None, headers)
        assert status == 200, body
        assert response_headers["Content-Type"].startswith("text/plain")
        assert b"plants_" in body
        status, response_headers, body = call(server.connection(), "GET", "/plants", None, headers)
        assert_error(status, response_headers, body, 503)
        redis.signal(signal.SIGCONT)
        assert "Traceback" not in server.output()
    finally:
        redis.signal(signal.SIGCONT)
        server.stop()
        redis.stop()


def test_invented_addresses_past_the_bound_share_one_budget(make_app, monkeypatch):
    """A client that invents a new address a request (past its proxy, or with a /64 to spend)
    opens at most MAX_ADDRESSES counters a window; every newcomer past them shares one budget."""
    from app.auth import rate_limits

    monkeypatch.setattr(rate_limits, "MAX_ADDRESSES", 5)
    app = make_app(PLANTS_AUTH_FAILURE_LIMIT="3/minute", PLANTS_TRUSTED_PROXIES=1)
    client = app.test_client()

    def refused_from(address):
        return client.get("/plants", headers={"Authorization": "Bearer guess", "X-Forwarded-For": address})

    assert [refused_from(f"198.51.100.{n}").status_code for n in range(5)] == [401] * 5
    newcomers = [refused_from(f"203.0.113.{n}") for n in range(6)]
    assert [answer.status_code for answer in newcomers] == [401] * 3 + [429] * 3
    error_of(newcomers[-1], 429)
    assert (app.extensions["plants"].rate_limits.open_addresses) == 5  # the bound, not 11
    # The addresses counted before the bound was met keep their own budgets.
    assert refused_from("198.51.100.1").status_code == 401


def test_a_spent_48_opens_no_counter_for_its_next_64s(make_app, monkeypatch):
    """One site past its /48's budget kept inventing /64s (it holds 65,536): each was still given
    a counter of its own before the /48 refused it, until the bound was met, and from then on
    every newcomer (another site, an IPv4 client) shared one budget with the flood: its first
    wrong token, an expired JWT its client would refresh on the 401, was 429. A spent /48 is
    refused before its /64 is counted."""
    from app.auth import rate_limits

    monkeypatch.setattr(rate_limits, "MAX_ADDRESSES", 20)
    app = make_app(PLANTS_AUTH_FAILURE_LIMIT="2/minute", PLANTS_TRUSTED_PROXIES=1)
    client = app.test_client()

    def refused_from(address):
        return client.get("/plants", headers={"Authorization": "Bearer guess", "X-Forwarded-For": address})

    flood = [refused_from(f"2001:db8:1:{n:x}::1") for n in range(60)]
    assert [answer.status_code for answer in flood] == [401] * 8 + [429] * 52  # the /48's 4 x 2
    assert "/48" in error_of(flood[-1], 429)["message"]
    assert app.extensions["plants"].rate_limits.open_addresses == 9  # eight /64s and their /48
    assert refused_from("203.0.113.9").status_code == 401
    assert refused_from("2001:db8:2::1").status_code == 401


def test_a_reload_on_the_memory_store_keeps_every_window_and_its_counts():
    """The counters are handed over with the plants (app/store/memory/snapshot.py): a SIGHUP gives
    no token a fresh budget, and no token guesser a fresh count of failures."""
    server = Gunicorn(env={"PLANTS_RATE_LIMIT": "3/hour", "PLANTS_AUTH_FAILURE_LIMIT": "2/hour"})
    good = {"Authorization": f"Bearer {TOKEN}"}
    wrong = {"Authorization": "Bearer not-a-token"}
    try:
        assert [call(server.connection(), "GET", "/plants", None, good)[0] for _ in range(3)] == [200] * 3
        assert [call(server.connection(), "GET", "/plants", None, wrong)[0] for _ in range(2)] == [401] * 2
        children = f"/proc/{server.process.pid}/task/{server.process.pid}/children"
        with open(children) as file:
            old = set(file.read().split())
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while True:  # the old worker gone, a new one in its place
            with open(children) as file:
                now = set(file.read().split())
            if now and not now & old:
                break
            assert time.monotonic() < deadline, server.output()[-3000:]
            time.sleep(0.05)
        for headers in (good, wrong):
            status, response_headers, body = call(server.connection(), "GET", "/plants", None, headers)
            assert_error(status, response_headers, body, 429)
            assert 3000 < int(response_headers["Retry-After"]) <= 3600
        assert "took over 0 plants" in server.output()  # the handoff happened, and was this one
    finally:
        server.stop()
