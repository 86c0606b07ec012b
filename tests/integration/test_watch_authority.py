"""A watch ends when its authority does (issue 48, item 6): at its JWT's `exp` a stream ends with
every event it sent written before then, and a long-poll answers with no event written after
`exp`; a static token removed (its file edited, the server reloaded with SIGHUP) ends its
streams, and their reconnect is refused. On a real gunicorn with a real identity provider."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path

from app.settings.schema import LONGEST_WAIT
from tests.conftest import redis_settings
from tests.helpers import assert_error, call, wait_for_watches, watches_started
from tests.integration.test_watch import read_stream
from tests.issuer import AUDIENCE, Issuer
from tests.servers import TOKEN, Gunicorn

WRITER = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def open_stream(port: int, token: str) -> tuple[socket.socket, bytes]:
    """A stream from now, once it has taken its position (its first chunk, `retry:`, is sent
    after): what is written from then on is in it. The socket, and what it sent so far."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.sendall(
        f"GET /events?after=now HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    opened = read_stream(sock, until=b"retry:", seconds=20)
    assert opened.startswith(b"HTTP/1.1 200 "), opened[:300]
    assert b"retry:" in opened, opened[:300]
    return sock, opened


def read_to_end(sock: socket.socket, seconds: float, opened: bytes = b"") -> bytes:
    """Everything the stream sends (after `opened`) until it ends or `seconds` pass."""
    sock.settimeout(seconds)
    return opened + read_stream(sock, seconds=seconds)


def create(server: Gunicorn, plant_id: int, name: str) -> None:
    assert call(server.connection(), "POST", "/plants", {"id": plant_id, "name": name}, WRITER)[0] == 200


def assert_watch_refused(server: Gunicorn, token: str) -> None:
    """The client's reconnect with `token` is a 401."""
    status, headers, body = call(
        server.connection(), "GET", "/events", None, {"Authorization": f"Bearer {token}"}
    )
    assert_error(status, headers, body, 401)


def jwt_server(issuer: Issuer, leeway: str = "0") -> Gunicorn:
    server = Gunicorn(
        env={"PLANTS_JWT_ISSUER": issuer.url, "PLANTS_JWT_AUDIENCE": AUDIENCE, "PLANTS_JWT_LEEWAY": leeway}
    )
    deadline = time.monotonic() + 60
    while call(server.connection(), "GET", "/readyz")[0] != 200:  # the provider's keys loaded
        assert time.monotonic() < deadline, server.output()[-3000:]
        time.sleep(0.05)
    return server


def test_a_stream_ends_at_its_jwts_exp_with_nothing_written_after():
    issuer = Issuer()
    server = jwt_server(issuer)
    try:
        expires = int(time.time()) + 4
        token = issuer.token(scope="plants:read", exp=expires)
        sock, opened = open_stream(server.port, token)
        create(server, 4801, "before exp")

        def after_exp() -> None:
            time.sleep(max(0.0, expires - time.time()) + 0.05)
            create(server, 4802, "after exp")

        writer = threading.Thread(target=after_exp)
        writer.start()
        data = read_to_end(sock, expires - time.time() + 8, opened)
        writer.join(10)
        sock.close()
        # A clean end, not a cut, within the read's bound (exp and 8 s): at exp, not
        # PLANTS_EVENTS_STREAM_MAX (300 s) later.
        assert data.endswith(b"\r\n0\r\n\r\n"), data[-300:]
        assert b"before exp" in data
        assert b"after exp" not in data
        assert_watch_refused(server, token)
    finally:
        server.stop()
        issuer.down()


def test_a_long_poll_answers_at_its_jwts_exp_without_events_written_after():
    issuer = Issuer()
    server = jwt_server(issuer)
    try:
        after = json.loads(call(server.connection(), "GET", "/events?after=now", None, WRITER)[2])["next"]
        expires = int(time.time()) + 3
        token = issuer.token(scope="plants:read", exp=expires)
        answers: list[tuple[int, dict]] = []

        def long_poll() -> None:
            conn = server.connection(timeout=LONGEST_WAIT + 10)
            conn.request(
                "GET",
                f"/events?after={after}&wait={LONGEST_WAIT}",
                headers={"Authorization": f"Bearer {token}"},
            )
            response = conn.getresponse()
            answers.append((response.status, json.loads(response.read())))

        polls = watches_started(server, TOKEN)
        poll = threading.Thread(target=long_poll)
        poll.start()
        wait_for_watches(server, TOKEN, polls + 1, seconds=expires - time.time())  # waiting, before exp
        time.sleep(max(0.0, expires - time.time()) + 0.01)
        create(server, 4803, "written after exp")  # may race the deadline: either way, not sent
        poll.join(20)  # answered at exp, not at its 55 s wait
        assert answers == [(200, {"events": [], "next": after})]
    finally:
        server.stop()
        issuer.down()


def test_a_jwt_past_its_exp_within_the_leeway_reads_but_is_told_to_renew_for_a_watch():
    """The leeway lets a token past its `exp` read, but a watch it opened would end before its
    first read: the client (docs/change-feed.md's, reconnecting at a stream's end) would be
    answered that again and again. So a watch and a ticket are a 401 naming the expiry."""
    issuer = Issuer()
    server = jwt_server(issuer, leeway="30")
    try:
        token = issuer.token(scope="plants:read", exp=int(time.time()) - 2)
        auth = {"Authorization": f"Bearer {token}"}
        assert call(server.connection(), "GET", "/plants", None, auth)[0] == 200
        after = json.loads(call(server.connection(), "GET", "/events?after=now", None, auth)[2])["next"]
        watches = [
            ("GET", "/events?after=now", {**auth, "Accept": "text/event-stream"}),
            ("GET", f"/events?after={after}&wait={LONGEST_WAIT}", auth),
            ("POST", "/events/tickets", auth),
        ]
        for method, path, headers in watches:
            # Refused, not a watch: within the connection's 10 s, where a long-poll would wait 55 s.
            status, answer, body = call(server.connection(timeout=10), method, path, None, headers)
            assert_error(status, answer, body, 401)
            assert answer["WWW-Authenticate"] == (
                'Bearer realm="plants", error="invalid_token", error_description="the token has expired"'
            )
        # A HEAD of a watch answers as its GET would, without the body.
        stream = {**auth, "Accept": "text/event-stream"}
        status, answer, _ = call(server.connection(), "HEAD", "/events?after=now", None, stream)
        assert status == 401
        assert 'error_description="the token has expired"' in answer["WWW-Authenticate"]
    finally:
        server.stop()
        issuer.down()


def test_a_watch_ends_once_its_jwts_signing_key_is_withdrawn():
    """A key the provider withdrew refuses its tokens from the worker's next look at the keys on:
    a stream such a token opened ends then, and a long-poll answers, with nothing written after;
    the client's reconnect with that token is 401. (They went on until the JWT's `exp`, up to
    PLANTS_EVENTS_STREAM_MAX for a stream, sending every event written meanwhile.)"""
    issuer = Issuer()
    server = jwt_server(issuer)  # the memory store: one worker, which every request reaches
    try:
        token = issuer.token(scope="plants:read", exp=int(time.time()) + 600)
        after = json.loads(call(server.connection(), "GET", "/events?after=now", None, WRITER)[2])["next"]
        sock, opened = open_stream(server.port, token)
        answers: list[tuple[int, dict]] = []

        def long_poll() -> None:
            conn = server.connection(timeout=40)
            conn.request(
                "GET", f"/events?after={after}&wait=30", headers={"Authorization": f"Bearer {token}"}
            )
            response = conn.getresponse()
            answers.append((response.status, json.loads(response.read())))

        poll = threading.Thread(target=long_poll)
        poll.start()  # from `after`: waiting or not yet, the next write is in its answer
        create(server, 4805, "before the withdrawal")
        poll.join(20)
        [(status, page)] = answers
        assert status == 200
        assert [event["plant"]["id"] for event in page["events"]] == [4805]
        after = answers.pop()[1]["next"]
        polls = watches_started(server, TOKEN)
        poll = threading.Thread(target=long_poll)
        poll.start()
        wait_for_watches(server, TOKEN, polls + 1)  # waiting, its token verified with the old key
        issuer.rotate()
        # A token of the new key makes the worker fetch the keys at once: the old one is gone.
        fresh = {"Authorization": f"Bearer {issuer.token(scope='plants:read')}"}
        assert call(server.connection(), "GET", "/plants", None, fresh)[0] == 200
        create(server, 4806, "after the withdrawal")
        data = read_to_end(sock, 20, opened)
        sock.close()
        poll.join(20)
        # A clean end within the read's 20 s: now, not at exp (600 s) or PLANTS_EVENTS_STREAM_MAX (300 s).
        assert data.endswith(b"\r\n0\r\n\r\n"), data[-300:]
        assert b"before the withdrawal" in data
        assert b"after the withdrawal" not in data
        assert answers == [(200, {"events": [], "next": after})]
        assert_watch_refused(server, token)
    finally:
        server.stop()
        issuer.down()


def test_a_removed_static_token_ends_its_streams_at_the_reload(tmp_path, redis_server):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\nremoved-token-1\n")
    server = Gunicorn(
        env={**redis_settings(redis_server), "PLANTS_API_TOKENS": "", "PLANTS_API_TOKENS_FILE": str(tokens)}
    )
    try:
        sock, opened = open_stream(server.port, "removed-token-1")
        create(server, 4804, "before removal")
        Path(tokens).write_text(f"{TOKEN}\n")
        server.process.send_signal(signal.SIGHUP)
        data = read_to_end(sock, 30, opened)
        sock.close()
        # Ended within the read's 30 s: at the reload, not PLANTS_EVENTS_STREAM_MAX (300 s) later.
        assert data.endswith(b"\r\n0\r\n\r\n"), data[-300:]
        assert b"before removal" in data
        deadline = time.monotonic() + 20
        while True:  # once the old worker is gone, every answer is the new one's
            status, headers, body = call(
                server.connection(), "GET", "/events", None, {"Authorization": "Bearer removed-token-1"}
            )
            if status == 401 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert_error(status, headers, body, 401)
    finally:
        server.stop()
