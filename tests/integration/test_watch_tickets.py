"""Watch tickets on a real gunicorn, directly and behind the shipped nginx configuration: a stream
and a long-poll with `?ticket=`, refusals elsewhere and after expiry, and never a ticket in a log
line: gunicorn's access and error lines (captured from its output) and nginx's access log."""

from __future__ import annotations

import http.client
import io
import json
import logging
import socket
import time
from pathlib import Path

import pytest

from app.auth.static import StaticTokens
from app.auth.watch_tickets import WatchTickets
from app.telemetry.logs import TextFormatter, TicketFilter, logging_config
from app.telemetry.redact import SCRUBBED, TICKET_PREFIX, scrub
from tests.helpers import assert_error, call
from tests.integration.test_watch import read_stream
from tests.servers import TOKEN, Gunicorn, Nginx, RedisServer

AUTH = {"Authorization": f"Bearer {TOKEN}"}
TTL = 4


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    app = Gunicorn(
        env={
            "PLANTS_WATCH_TICKET_TTL": str(TTL),
            "PLANTS_EVENTS_HEARTBEAT": "1",
            "PLANTS_TRUSTED_PROXIES": "1",
            "GUNICORN_THREADS": "2",
        }
    )
    directory = tmp_path_factory.mktemp("nginx-tickets")
    proxy = Nginx(app.port, directory)
    yield app, proxy, directory
    proxy.stop()
    app.stop()


def _connection(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=15)


def mint(port: int) -> str:
    status, _, body = call(_connection(port), "POST", "/events/tickets", headers=AUTH)
    assert status == 200, body
    return json.loads(body)["ticket"]


def create(port: int, plant_id: int) -> None:
    status, _, body = call(
        _connection(port),
        "POST",
        "/plants",
        {"id": plant_id, "name": f"ticketed {plant_id}"},
        {**AUTH, "Content-Type": "application/json"},
    )
    assert status == 200, body


def stream_until(port: int, path: str, marker: bytes, write: int) -> bytes:
    """Open a stream without any header but Accept (as EventSource), write a plant once the stream
    has answered, and read until its event arrives."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode())
    head = read_stream(sock, until=b"\r\n\r\n")
    create(port, write)
    data = head + read_stream(sock, until=marker)
    sock.close()
    return data


@pytest.mark.parametrize("through", ["gunicorn", "nginx"])
def test_a_ticket_streams_and_long_polls_then_expires_and_is_never_logged(servers, through):
    app, proxy, directory = servers
    port = app.port if through == "gunicorn" else proxy.port
    ticket = mint(port)
    base = 720_000 if through == "gunicorn" else 730_000

    data = stream_until(port, f"/events?ticket={ticket}&after=now", f'"id":{base + 1}'.encode(), base + 1)
    assert data.startswith(b"HTTP/1.1 200 ")
    assert f'"id":{base + 1}'.encode() in data
    # The ticket is in the URL, with no Authorization a shared cache would heed: the stream says
    # itself that it is private.
    assert b"\r\nCache-Control: private, no-cache\r\n" in data.partition(b"\r\n\r\n")[0]

    _, _, body = call(_connection(port), "GET", "/events?after=now", headers=AUTH)
    after = json.loads(body)["next"]
    create(port, base + 2)
    status, _, body = call(_connection(port), "GET", f"/events?ticket={ticket}&after={after}&wait=5")
    assert status == 200
    assert [event["plant"]["id"] for event in json.loads(body)["events"]] == [base + 2]

    assert call(_connection(port), "GET", f"/plants?ticket={ticket}")[0] == 401
    assert call(_connection(port), "GET", "/plants", headers={"Authorization": f"Bearer {ticket}"})[0] == 401
    assert call(_connection(port), "GET", f"/events?ticket={ticket}")[0] == 403
    assert call(_connection(port), "GET", f"/events?ticket={ticket}&bogus=1&wait=1")[0] == 400

    time.sleep(TTL + 1)
    status, _, body = call(_connection(port), "GET", f"/events?ticket={ticket}&wait=1")
    assert status == 401
    assert b"expired" in body

    secret = ticket[len(TICKET_PREFIX) :]
    log = app.output()
    assert f"ticket={SCRUBBED}" in log  # the requests were logged, without their ticket
    assert secret not in log
    if through == "nginx":
        access = nginx_log(proxy, directory)
        assert "/events?ticket=[redacted] HTTP/1.1" in access
        assert secret not in access
        assert secret not in (directory / "error.log").read_text()


def test_a_stream_opened_with_a_ticket_ends_when_the_ticket_expires(servers):
    """The ticket's expiry is the end of the watch's authority (as a JWT's `exp` is): the stream
    it opened ends then, long before PLANTS_EVENTS_STREAM_MAX, having sent its events, and the
    EventSource's reconnection with the same ticket is refused, so the page mints another."""
    app, _, _ = servers
    ticket = mint(app.port)
    opened = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", app.port), timeout=TTL + 10)
    request = f"GET /events?ticket={ticket}&after=now HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
    request += "\r\n"
    sock.sendall(request.encode())
    head = read_stream(sock, until=b"\r\n\r\n")
    create(app.port, 740_001)
    data = head + read_stream(sock, seconds=TTL + 10)  # until its last chunk
    lasted = time.monotonic() - opened
    sock.close()
    assert data.startswith(b"HTTP/1.1 200 ")
    assert b'"id":740001' in data
    assert data.endswith(b"\r\n0\r\n\r\n"), data[-200:]  # ended by the service, not the read's bound
    assert lasted < TTL + 5
    status, _, body = call(_connection(app.port), "GET", f"/events?ticket={ticket}&after=now&wait=1")
    assert status == 401
    assert b"expired" in body


def test_a_percent_encoded_ticket_is_refused_and_never_logged_in_any_encoding(servers):
    """A client that encodes a character of its ticket is refused (only `ticket=plwt_...` is taken),
    but the ticket it sent is still good, decoded: no log line may show it either."""
    app, _, _ = servers
    port = app.port
    ticket = mint(port)
    body = ticket[len(TICKET_PREFIX) :]
    # A ticket decoded, in another spelling, is 401; encoded twice, it decodes to no ticket's form
    # (`plwt%5F...`), a malformed credential's 400.
    encoded = {
        "plwt%5F" + body: 401,  # the prefix's underscore
        "%70lwt_" + body: 401,  # its first letter
        f"{ticket[:12]}%{ord(ticket[12]):02X}{ticket[13:]}": 401,  # a character inside
        f"plwt%255F{body}": 400,  # twice
    }
    before = app.output().count(f"ticket={SCRUBBED}")
    for sent, refusal in encoded.items():
        status, _, answer = call(_connection(port), "GET", f"/events?ticket={sent}&after=now&wait=1")
        assert status == refusal, answer
    log = logged(app, f"ticket={SCRUBBED}", before + len(encoded))  # each request's line, scrubbed
    assert body[8:40] not in log


def test_through_nginx_a_ticket_under_an_encoded_name_is_not_logged(servers):
    """`tick%65t=plwt_...` is refused too (not the literal `ticket=`), and nginx's log must not
    show it whatever the parameter's name."""
    app, proxy, directory = servers
    ticket = mint(app.port)
    for query in (f"tick%65t={ticket}", f"after=now&%74icket={ticket}", f"ticket=plwt%5F{ticket[5:]}"):
        status, _, answer = call(_connection(proxy.port), "GET", f"/events?{query}&wait=1")
        assert status == 401, answer
    secret = ticket[len(TICKET_PREFIX) + 8 :]
    assert secret not in nginx_log(proxy, directory)
    assert secret not in app.output()


def nginx_log(proxy: Nginx, directory: Path) -> str:
    """nginx's access log once every request answered so far is in it: its one worker writes a
    request's line as the request ends, so the line of a request sent after theirs comes later."""
    marker = f"logged-{time.monotonic_ns()}"
    assert call(_connection(proxy.port), "GET", f"/healthz?after={marker}")[0] == 200
    nginx_access_line(directory, marker)
    return (directory / "access.log").read_text()


def logged(app: Gunicorn, marker: str, count: int) -> str:
    """gunicorn's output once `marker` is in it `count` times: a request's access line is written
    after its answer has gone, so the client can read the answer before the line is there."""
    deadline = time.monotonic() + 10
    while (seen := (output := app.output()).count(marker)) < count:
        assert time.monotonic() < deadline, f"{marker} logged {seen} times, not {count}"
        time.sleep(0.05)
    return output


def nginx_access_line(directory: Path, marker: str) -> str:
    """nginx's one access line with `marker`, once written: nginx logs a request after its answer
    has gone, so the client can read the answer before the line is in the file."""
    deadline = time.monotonic() + 10
    while not (
        lines := [line for line in (directory / "access.log").read_text().splitlines() if marker in line]
    ):
        assert time.monotonic() < deadline, f"no access line for {marker}"
        time.sleep(0.05)
    [line] = lines
    return line


@pytest.mark.parametrize(
    ("referer", "logged"),
    [
        ("https://app.example/watch?ticket={}", "https://app.example/watch?ticket=[redacted]"),
        (
            "https://app.example/watch?a=1&Access_Token={}&b=2",
            "https://app.example/watch?access_token=[redacted]",
        ),
        ("https://app.example/watch?tick%65t={}", "https://app.example/watch?ticket=[redacted]"),
        ("https://app.example/p/plwt_{}?q=1", "[redacted]"),
        ("https://app.example/p?q=plwt%5F{}", "[redacted]"),
    ],
)
def test_through_nginx_a_secret_in_the_referer_is_not_logged(servers, referer, logged):
    """The page a request came from may hold a ticket or a token in its URL, and nginx writes the
    `Referer` in its access line: redacted as the request's own line is."""
    _, proxy, directory = servers
    marker = f"referer-{time.monotonic_ns()}"
    status, _, _ = call(
        _connection(proxy.port), "GET", f"/healthz?after={marker}", headers={"Referer": referer.format(TOKEN)}
    )
    assert status == 200
    line = nginx_access_line(directory, marker)
    assert TOKEN not in (directory / "access.log").read_text()
    assert f'"{logged}"' in line


def test_through_nginx_a_plain_referer_is_logged_as_sent(servers):
    _, proxy, directory = servers
    marker = f"referer-{time.monotonic_ns()}"
    referer = "https://app.example/garden?view=ferns&page=2"
    assert (
        call(_connection(proxy.port), "GET", f"/healthz?after={marker}", headers={"Referer": referer})[0]
        == 200
    )
    assert f'"{referer}"' in nginx_access_line(directory, marker)


@pytest.mark.parametrize(
    "query", ["access_token={}", "wait=1&access_token={}&x=1", "access%5Ftoken={}", "Access_Token={}"]
)
def test_a_bearer_token_in_the_query_is_refused_and_never_logged(servers, query):
    """RFC 6750 §2.3's `access_token` parameter is never read (only the header is), but the token a
    client put in its URL is good: neither gunicorn's log nor nginx's may show it."""
    app, proxy, directory = servers
    for port in (app.port, proxy.port):
        assert_error(*call(_connection(port), "GET", "/plants?" + query.format(TOKEN)), 401)
    assert TOKEN not in app.output()
    assert TOKEN not in nginx_log(proxy, directory)


@pytest.mark.parametrize("query", ["ticket={}&wait=1", "after=now&wait=1&ticket={}", "Ticket={}&wait=1"])
def test_a_bearer_token_sent_as_the_ticket_is_refused_and_never_logged(servers, query):
    """A page that puts its token where the ticket goes (EventSource sends no header, so a URL is
    the only place left) is refused, but its token is good: gunicorn's log may not show it,
    as nginx's shipped configuration does not."""
    app, proxy, directory = servers
    for port in (app.port, proxy.port):
        status, _, body = call(_connection(port), "GET", "/events?" + query.format(TOKEN))
        assert status in (400, 401), body
    assert TOKEN not in app.output()
    assert TOKEN not in nginx_log(proxy, directory)


@pytest.mark.parametrize(
    "query",
    [
        "/plants?%61ccess_token={}",
        "/plants?x=1&ACCESS_%54OKEN={}",
        "/plants?access%5Ftok%65n={}",
        "/events?%74icket={}&wait=1",
        "/events?after=now&ti%63k%65t={}&wait=1",
    ],
)
def test_a_bearer_token_under_a_parameter_name_with_encoded_letters_is_never_logged(servers, query):
    """Werkzeug decodes a parameter's name (`%61ccess_token=` is `access_token=`), so the value
    sent under it is the token all the same: neither gunicorn's log nor nginx's may show it."""
    app, proxy, directory = servers
    before = app.output().count("=[redacted]")
    for port in (app.port, proxy.port):
        status, _, body = call(_connection(port), "GET", query.format(TOKEN))
        assert status in (400, 401), body
    assert TOKEN not in logged(app, "=[redacted]", before + 2)  # both requests' lines, redacted
    assert TOKEN not in nginx_log(proxy, directory)


@pytest.mark.parametrize("value", [f"{TICKET_PREFIX}AAAA.secret", f"{TICKET_PREFIX}AAAA~secret"])
def test_a_ticket_parameter_that_only_starts_as_a_ticket_is_redacted_whole(value):
    """The ticket's alphabet (base64url) has no `.` or `~`: what follows one is not the ticket's,
    and a `ticket` parameter's value is redacted whole all the same."""
    line = f'"GET /events?wait=1&ticket={value}&limit=1 HTTP/1.1" 401'
    assert "secret" not in scrub(line)
    assert "&limit=1 HTTP/1.1" in scrub(line)


def test_a_ticket_in_any_other_log_line_is_scrubbed():
    """gunicorn's own error lines name a failed request's URI, query and all."""
    config = logging_config("text")
    assert config["handlers"]["plants"]["filters"] == ["request", "tickets"]
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(TextFormatter())
    handler.addFilter(TicketFilter())
    logger = logging.getLogger("test.tickets.gunicorn.error")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise RuntimeError("while serving /events?ticket=plwt_AAAAsecretBBBB&wait=1")
        except RuntimeError:
            logger.exception("Error handling request %s", "/events?ticket=plwt_AAAAsecretBBBB")
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert "AAAAsecretBBBB" not in text
    assert text.count(SCRUBBED) >= 2  # the message and the exception (and its source line)


def test_a_forged_ticket_is_refused_and_counted_before_the_store_is_read(tmp_path):
    """The ticket's form and expiry need no key: a ticket refused by them makes the service read
    nothing from the store (the key signing tickets is read from Redis the first time it is
    needed, and made there when absent: that it is still absent shows it was never read), and the
    refusal counts against PLANTS_AUTH_FAILURE_LIMIT. (The start makes the key; it is removed
    before the tickets come, and no worker has read it yet.)"""
    redis = RedisServer(tmp_path)
    prefix = "forged"
    app = Gunicorn(
        env={
            "PLANTS_STORE_URL": redis.url,
            "PLANTS_STORE_PREFIX": prefix,
            "PLANTS_AUTH_FAILURE_LIMIT": "3/minute",
            "WEB_CONCURRENCY": "1",
        }
    )
    try:
        assert redis.command("DEL", f"{{{prefix}}}:cursor-key") == "1"
        # Well-formed, signed with another key, expired a minute ago: only its MAC would need the key.
        minted_earlier = WatchTickets(
            StaticTokens([TOKEN], []), 60, jwt=False, clock=lambda: time.time() - 120
        )
        expired, _ = minted_earlier.mint(StaticTokens([TOKEN], []).callers[TOKEN.encode()], b"k" * 32)
        for forged in ("plwt_forged", expired, TICKET_PREFIX + "A" * 60):
            status, headers, body = call(_connection(app.port), "GET", f"/events?ticket={forged}&wait=1")
            assert_error(status, headers, body, 401)
        assert redis.command("EXISTS", f"{{{prefix}}}:cursor-key") == "0"
        status, headers, body = call(_connection(app.port), "GET", "/events?ticket=plwt_forged&wait=1")
        assert_error(status, headers, body, 429)  # the fourth refusal from this address this minute
    finally:
        app.stop()
        redis.stop()


@pytest.mark.parametrize(
    ("query", "by_gunicorn", "by_nginx"),
    [
        ("/plants?token={}", "/plants?token=[redacted] ", "/plants?[redacted] "),
        (
            "/plants?limit=7&api_key={}&x=1",
            "/plants?limit=7&api_key=[redacted]&x=[redacted] ",
            "/plants?limit=7&[redacted] ",
        ),
        ("/healthz?after&Token={}", "/healthz?after&Token=[redacted] ", "/healthz?after&[redacted] "),
        ("/events?wait=1&%61fter={}", "/events?wait=1&%61fter=[redacted] ", "/events?wait=1&[redacted] "),
        (
            "/openapi.json?after=x;secret={}",
            "/openapi.json?after=x;secret=[redacted] ",
            "/openapi.json?after=x;[redacted] ",
        ),
        # A `"` in the query: the service's line escapes it, and still redacts what follows.
        (
            '/plants?after=a"&token={}',
            '/plants?after=a\\"&token=[redacted] ',
            "/plants?after=a\\x22&[redacted] ",
        ),
        # A fragment, which no server reads as the query: never written, by either log.
        ("/plants?limit=1#token={}", "/plants?limit=1#[redacted] ", "/plants?limit=1#[redacted] "),
        ("/healthz#{}", "/healthz#[redacted] ", "/healthz#[redacted] "),
        # A token as a bare word, a name without a value: never written, by either log.
        ("/plants?{}", "/plants?[redacted] ", "/plants?[redacted] "),
        ("/events?after=now&{}", "/events?after=now&[redacted] ", "/events?after=now&[redacted] "),
        (
            "/healthz?after&wait=1;{}&limit=2",
            "/healthz?after&wait=1;[redacted]&limit=2 ",
            "/healthz?after&wait=1;[redacted] ",
        ),
        ("/healthz?&&{}=", "/healthz?&&[redacted] ", "/healthz?&&[redacted] "),
        ("/healthz?%61fter&{}", "/healthz?[redacted]&[redacted] ", "/healthz?[redacted] "),
        (
            "/healthz?limit=1&{}#top",
            "/healthz?limit=1&[redacted]#[redacted] ",
            "/healthz?limit=1&[redacted] ",
        ),
        ("/healthz?{}?limit=5", "/healthz?[redacted]?limit=5 ", "/healthz?[redacted] "),
        ("/healthz?limit=5?{}", "/healthz?limit=5?[redacted] ", "/healthz?limit=5?[redacted] "),
        (
            "/healthz?" + "tags=a&" * 300 + "{}",
            "/healthz?" + "tags=a&" * 300 + "[redacted] ",
            "&tags=a&[redacted] ",
        ),
    ],
)
def test_a_token_under_a_parameter_the_service_does_not_define_is_never_logged(
    servers, query, by_gunicorn, by_nginx
):
    """A client may put its token under any name (`?token=`): neither log writes the value of a
    parameter the service does not define, and both keep the service's own readable (nginx's
    map cuts the query at the first other one)."""
    app, proxy, directory = servers
    before = app.output().count(by_gunicorn), (directory / "access.log").read_text().count(by_nginx)
    for port in (app.port, proxy.port):
        call(_connection(port), "GET", query.format(TOKEN))
    assert TOKEN not in logged(app, by_gunicorn, before[0] + 2)  # both requests' lines, redacted
    deadline = time.monotonic() + 10  # nginx logs a request once its answer has gone
    while (nginx_log := (directory / "access.log").read_text()).count(by_nginx) <= before[1]:
        assert time.monotonic() < deadline, f"no access line with {by_nginx}"
        time.sleep(0.05)
    assert TOKEN not in nginx_log
