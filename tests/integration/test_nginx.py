"""The service behind a real nginx running the README's sample configuration."""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.helpers import assert_error, call
from tests.servers import TOKEN, Gunicorn, Nginx
from tests.threaded_http import serve_in_thread

CLIENT = ("127.0.0.2", 0)  # a client address that differs from the proxy's 127.0.0.1
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
SPOOFED = {
    "X-Forwarded-For": "203.0.113.66",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "evil.example",
}


@pytest.fixture(scope="module")
def trusted(tmp_path_factory):
    # A read timeout of an hour: a request thread held by a stalled client would be held that long.
    app = Gunicorn(
        env={"PLANTS_TRUSTED_PROXIES": "1", "GUNICORN_THREADS": "2", "GUNICORN_READ_TIMEOUT": "3600"}
    )
    proxy = Nginx(app.port, tmp_path_factory.mktemp("nginx-trusted"))
    yield app, proxy
    proxy.stop()
    app.stop()


@pytest.fixture(scope="module")
def untrusted(tmp_path_factory):
    app = Gunicorn(env={"PLANTS_TRUSTED_PROXIES": "0"})
    proxy = Nginx(app.port, tmp_path_factory.mktemp("nginx-untrusted"))
    yield app, proxy
    proxy.stop()
    app.stop()


def connect(port: int, tls: bool = False) -> http.client.HTTPConnection:
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return http.client.HTTPSConnection(
            "127.0.0.1", port, timeout=15, context=context, source_address=CLIENT
        )
    return http.client.HTTPConnection("127.0.0.1", port, timeout=15, source_address=CLIENT)


def access_log_line(app: Gunicorn, marker: str) -> str:
    """The access line with `marker`, after its timestamp (UTC, RFC 3339, milliseconds), process
    id, level and logger."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [line for line in app.output().splitlines() if marker in line and "gunicorn.access" in line]
        if lines:
            timestamp, _, rest = lines[0].partition(" ")
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", timestamp), lines[0]
            when = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%f%z")
            assert abs((datetime.now(UTC) - when).total_seconds()) < 60
            prefix, _, rest = rest.partition(" gunicorn.access: ")
            assert re.fullmatch(r"\[\d+\] \[INFO\]", prefix), lines[0]
            return rest
        time.sleep(0.05)
    raise AssertionError(f"no access log line for {marker}")


def test_nginx_request_id_is_answered_and_logged_and_a_clients_own_is_replaced(trusted):
    """The shipped configuration sends nginx's $request_id; the app answers it and logs it, and
    a client cannot choose it (nginx replaces the client's X-Request-Id)."""
    app, proxy = trusted
    marker = uuid.uuid4().hex
    _, headers, _ = call(
        connect(proxy.port), "GET", f"/healthz?after={marker}", headers={"X-Request-Id": "chosen-by-client"}
    )
    request_id = headers["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    assert access_log_line(app, marker).endswith(f" request_id={request_id}")


def test_an_untrusted_proxys_forwarding_headers_are_warned_of_once(untrusted):
    app, proxy = untrusted
    for _ in range(3):
        assert call(connect(proxy.port), "GET", "/healthz")[0] == 200
    time.sleep(0.2)
    warnings = [line for line in app.output().splitlines() if "PLANTS_TRUSTED_PROXIES is 0" in line]
    assert len(warnings) == 1, warnings
    assert "[WARNING] app.telemetry.request_ids: A request came with X-Forwarded-For" in warnings[0]
    assert "set PLANTS_TRUSTED_PROXIES=1" in warnings[0]


def test_more_trusted_proxies_than_there_are_is_warned_of_once(tmp_path):
    """PLANTS_TRUSTED_PROXIES=2 behind the shipped nginx alone: its X-Forwarded-For names one
    address, which ProxyFix then ignores, so every client is nginx's address and one client's
    failed logins refuse every other's. The log says so, once per worker."""
    app = Gunicorn(env={"PLANTS_TRUSTED_PROXIES": "2", "PLANTS_AUTH_FAILURE_LIMIT": "2/hour"})
    proxy = Nginx(app.port, tmp_path)
    try:
        assert call(connect(app.port), "GET", "/healthz")[0] == 200  # a probe, past the proxy
        statuses = [
            call(connect(proxy.port), "GET", "/plants", headers={"Authorization": "Bearer guess"})[0]
            for _ in range(3)
        ]
        assert statuses == [401, 401, 429]
        time.sleep(0.2)
        warnings = [line for line in app.output().splitlines() if "PLANTS_TRUSTED_PROXIES is 2" in line]
        assert len(warnings) == 1, warnings
        assert (
            "[WARNING] app.telemetry.request_ids: A request came with X-Forwarded-For naming 1" in warnings[0]
        )
        assert "failed logins" in warnings[0]
    finally:
        proxy.stop()
        app.stop()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_reads_pages_and_deletes_pass_through_with_links_to_the_public_address(trusted, tls):
    _, proxy = trusted
    port = proxy.tls_port if tls else proxy.port
    base = 51_000_000 + (1000 if tls else 0)
    for n in range(3):
        plant = json.dumps({"id": base + n, "name": "Proxied", "tag": f"nginx-{tls}"})
        assert call(connect(port, tls), "POST", "/plants", plant, HEADERS)[0] == 200
    status, headers, data = call(
        connect(port, tls), "GET", f"/plants?tags=nginx-{tls}&limit=2", None, HEADERS
    )
    assert status == 200
    page = json.loads(data)
    assert [item["id"] for item in page["plants"]] == [base, base + 1]
    scheme = "https" if tls else "http"
    assert headers["Link"] == (
        f'<{scheme}://127.0.0.1:{port}/plants?tags=nginx-{tls}&limit=2&after={page["next"]}>; rel="next"'
    )
    status, _, data = call(connect(port, tls), "GET", f"/plants/{base + 2}", None, HEADERS)
    assert (status, json.loads(data)) == (200, {"name": "Proxied", "tag": f"nginx-{tls}"})
    status, headers, data = call(connect(port, tls), "DELETE", f"/plants/{base + 2}", None, HEADERS)
    assert (status, data) == (204, b"")
    assert_error(*call(connect(port, tls), "GET", f"/plants/{base + 2}", None, HEADERS), 404)
    status, headers, data = call(connect(port, tls), "POST", f"/plants/{base}", None, HEADERS)
    assert_error(status, headers, data, 405)
    assert headers["Allow"] == "GET, HEAD, PUT, PATCH, DELETE, OPTIONS"
    # Changes and their conditional headers pass through: ETag, If-None-Match, If-Match, 412, 201.
    status, headers, _ = call(connect(port, tls), "GET", f"/plants/{base}", None, HEADERS)
    etag = headers["ETag"]
    status, headers, data = call(
        connect(port, tls), "GET", f"/plants/{base}", None, {**HEADERS, "If-None-Match": etag}
    )
    assert (status, headers["ETag"], data) == (304, etag, b"")
    patch = {**HEADERS, "Content-Type": "application/merge-patch+json", "If-Match": etag}
    status, headers, data = call(connect(port, tls), "PATCH", f"/plants/{base}", '{"tag": null}', patch)
    assert (status, json.loads(data)) == (200, {"name": "Proxied"})
    assert_error(*call(connect(port, tls), "PATCH", f"/plants/{base}", "{}", patch), 412)
    status, headers, data = call(connect(port, tls), "PUT", f"/plants/{base + 9}", '{"name": "Put"}', HEADERS)
    assert (status, headers["Location"]) == (201, f"{scheme}://127.0.0.1:{port}/plants/{base + 9}")


@pytest.mark.parametrize("absolute", [False, True], ids=["host", "absolute-form"])
def test_the_urls_handed_out_name_the_sites_server_name_whatever_host_the_client_sends(trusted, absolute):
    """A client's `Host` (or an absolute request line's host) never becomes the host of a `Location`
    or a `Link`: they name the site's `server_name` (the tests' 127.0.0.1) and nginx's port."""
    _, proxy = trusted
    base = 52_000_000 + (10 if absolute else 0)
    prefix = "http://evil.example" if absolute else ""
    evil = {**HEADERS, "Host": "evil.example:8443"}
    body = json.dumps({"name": "Named"})
    status, headers, _ = call(connect(proxy.port), "PUT", f"{prefix}/plants/{base}", body, evil)
    assert (status, headers["Location"]) == (201, f"http://127.0.0.1:{proxy.port}/plants/{base}")
    assert call(connect(proxy.port), "PUT", f"{prefix}/plants/{base + 1}", body, evil)[0] == 201
    status, headers, _ = call(connect(proxy.port), "GET", f"{prefix}/plants?limit=1", None, evil)
    assert status == 200
    assert headers["Link"].startswith(f"<http://127.0.0.1:{proxy.port}/plants?limit=1&after=")


@pytest.mark.parametrize(
    "server_name",
    ["", "server_name _;", "server_name *.example.com;", r"server_name ~^plants\.example\.com$;"],
    ids=["none", "catch-all", "wildcard", "regex"],
)
def test_a_server_name_that_names_no_host_hands_out_the_listeners_address(trusted, tmp_path, server_name):
    """An operator's site without a literal `server_name` (none, the catch-all `_`, a wildcard or
    a regex: nginx's `$server_name` is then empty or the pattern) still serves, and the URLs it
    hands out name the listener's address, never the client's `Host`: every request was a 400
    (no Host sent), or every `Location` and `Link` was `http:///...`."""
    app, _ = trusted
    proxy = Nginx(app.port, tmp_path, server_name=server_name)
    try:
        base = 53_000_000 + 10 * len(server_name)
        evil = {**HEADERS, "Host": "evil.example"}
        body = json.dumps({"name": "Unnamed"})
        status, headers, _ = call(connect(proxy.port), "PUT", f"/plants/{base}", body, evil)
        assert (status, headers["Location"]) == (201, f"http://127.0.0.1:{proxy.port}/plants/{base}")
        assert call(connect(proxy.port), "PUT", f"/plants/{base + 1}", body, evil)[0] == 201
        status, headers, _ = call(connect(proxy.port), "GET", "/plants?limit=1", None, evil)
        assert status == 200
        assert headers["Link"].startswith(f"<http://127.0.0.1:{proxy.port}/plants?limit=1&after=")
    finally:
        proxy.stop()


def test_creates_work_and_authorization_reaches_the_app(trusted):
    _, proxy = trusted
    body = json.dumps({"id": 1, "name": "Proxied fern", "tag": "fern"})
    status, headers, data = call(connect(proxy.port), "POST", "/plants", body, HEADERS)
    assert (status, headers["Content-Type"], json.loads(data)) == (
        200, "application/json", {"name": "Proxied fern", "tag": "fern"},
    )  # fmt: skip
    status, headers, data = call(
        connect(proxy.port), "POST", "/plants", body, {**HEADERS, "Authorization": "Bearer x"}
    )
    assert_error(status, headers, data, 401)
    assert headers["WWW-Authenticate"] == 'Bearer realm="plants", error="invalid_token"'
    status, headers, data = call(
        connect(proxy.port), "POST", "/plants", body, {"Content-Type": "application/json"}
    )
    assert_error(status, headers, data, 401)
    assert headers["WWW-Authenticate"] == 'Bearer realm="plants"'


@pytest.mark.parametrize(("tls", "scheme"), [(True, "https"), (False, "http")])
def test_trusted_proxy_gives_the_app_the_clients_address_and_scheme(trusted, tls, scheme):
    app, proxy = trusted
    marker = uuid.uuid4().hex
    port = proxy.tls_port if tls else proxy.port
    status, _, _ = call(connect(port, tls), "GET", f"/healthz?after={marker}", headers=SPOOFED)
    assert status == 200
    # The client's own address and scheme, not the proxy's, and not what the client claimed.
    assert access_log_line(app, marker).startswith(f'127.0.0.2 {scheme} "GET /healthz?after={marker} ')


def test_untrusted_proxy_headers_are_ignored(untrusted):
    app, proxy = untrusted
    marker = uuid.uuid4().hex
    status, _, _ = call(connect(proxy.tls_port, tls=True), "GET", f"/healthz?after={marker}", headers=SPOOFED)
    assert status == 200
    assert access_log_line(app, marker).startswith(
        f'127.0.0.1 http "GET /healthz?after={marker} '
    )  # the proxy, as is
    marker = uuid.uuid4().hex
    direct = http.client.HTTPConnection("127.0.0.1", app.port, timeout=15, source_address=CLIENT)
    assert call(direct, "GET", f"/healthz?after={marker}", headers=SPOOFED)[0] == 200
    assert access_log_line(app, marker).startswith(f'127.0.0.2 http "GET /healthz?after={marker} ')


@pytest.mark.parametrize("size", [64 * 1024 + 1, 70_000, 2_000_000])
def test_oversized_bodies_get_the_json_413(trusted, size):
    _, proxy = trusted
    body = b'{"id": 2, "name": "' + b"x" * size + b'"}'
    conn = connect(proxy.port)
    try:
        status, headers, data = call(conn, "POST", "/plants", body, HEADERS)
    except (BrokenPipeError, ConnectionResetError):
        pytest.fail("nginx reset the connection instead of answering 413")
    assert_error(status, headers, data, 413)
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_oversized_chunked_body_gets_the_json_413(trusted):
    _, proxy = trusted
    with socket.create_connection(("127.0.0.1", proxy.port), source_address=CLIENT, timeout=15) as sock:
        head = (
            "POST /plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\r\n"
        )
        sock.sendall(head.encode() + (b"8000\r\n" + b" " * 0x8000 + b"\r\n") * 3 + b"0\r\n\r\n")
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert_error(response.status, response.headers, response.read(), 413)


def test_stalled_clients_do_not_starve_the_service(trusted):
    _, proxy = trusted  # gunicorn has 2 threads and a read timeout of an hour
    stalled = []
    try:
        for n in range(20):
            sock = socket.create_connection(("127.0.0.1", proxy.port), source_address=CLIENT)
            partial = (
                b"POST /plants HTTP/1.1\r\nHost: x\r\n"
                if n % 2
                else b'POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"id"'
            )
            sock.sendall(partial)
            stalled.append(sock)
        time.sleep(0.3)
        body = json.dumps({"id": 3, "name": "Honest"})
        # nginx buffers whole requests, so gunicorn's threads never wait on the stalled clients.
        # Without it, 20 stalled clients on 2 threads would hold them for their hour-long read
        # timeout, past the honest client's 15 s socket timeout.
        status, _, data = call(connect(proxy.port), "POST", "/plants", body, HEADERS)
        assert (status, json.loads(data)) == (200, {"name": "Honest"})
    finally:
        for sock in stalled:
            sock.close()


def test_upstream_down_is_a_json_503(tmp_path):
    app = Gunicorn()
    proxy = Nginx(app.port, tmp_path)
    try:
        app.stop()
        status, headers, data = call(connect(proxy.port), "GET", "/healthz")
        assert_error(status, headers, data, 503)
        assert headers["Retry-After"] == "5"
        assert headers["X-Content-Type-Options"] == "nosniff"
    finally:
        proxy.stop()


def test_the_samples_limit_req_zone_answers_a_flood_with_the_json_429(tmp_path):
    """nginx's limit_req is the first line: a flood from one address is cut off before gunicorn."""
    app = Gunicorn(env={"PLANTS_TRUSTED_PROXIES": "1"})
    proxy = Nginx(app.port, tmp_path)
    try:
        conn = connect(proxy.port)
        statuses = []
        for _ in range(400):  # well past the burst of 100 at 50 requests a second
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            body = response.read()
            statuses.append(response.status)
            if response.status == 429:
                assert response.headers["Content-Type"] == "application/json"
                assert response.headers["Retry-After"] == "1"
                assert response.headers["X-Content-Type-Options"] == "nosniff"
                assert json.loads(body)["error"] == 429
        conn.close()
        assert statuses[:100] == [200] * 100
        assert statuses.count(429) >= 100
        assert set(statuses) == {200, 429}
        # Another address is not held back.
        other = http.client.HTTPConnection(
            "127.0.0.1", proxy.port, timeout=15, source_address=("127.0.0.3", 0)
        )
        assert call(other, "GET", "/healthz")[0] == 200
    finally:
        proxy.stop()
        app.stop()


def test_the_largest_link_header_passes_through(trusted):
    # A valid page of 20 tags of 100 characters: its `Link` is over nginx's default buffers.
    _, proxy = trusted
    tags = [f"{n:02d}" + "t" * 98 for n in range(20)]
    for plant_id in (7001, 7002):
        body = json.dumps({"id": plant_id, "name": "tagged", "tag": tags[0]})
        assert call(connect(proxy.port), "POST", "/plants", body=body, headers=HEADERS)[0] == 200
    query = "&".join(f"tags={tag}" for tag in tags)
    status, headers, data = call(connect(proxy.port), "GET", f"/plants?{query}&limit=1", headers=HEADERS)
    assert status == 200, data
    assert len(headers["Link"]) > 2000
    assert all(tag in headers["Link"] for tag in tags)


@pytest.mark.parametrize(
    "header",
    [
        "X-Forwarded-Prefix",
        "X-Forwarded-Server",
        "X-Forwarded-Ssl",
        "X-Forwarded-Scheme",
        "X-Forwarded-Uri",
        "X-Forwarded-Path",
        "X-Forwarded-Method",
        "X-Forwarded-Protocol",
        "X-Forwarded-Client-Cert",
        "X-Real-IP",
        "Forwarded",
    ],
)
def test_forwarding_headers_nginx_does_not_set_are_cleared(trusted, header):
    _, proxy = trusted
    claim = {header: "//evil.example"}
    status, _, data = call(connect(proxy.port), "GET", "/openapi.json", headers=claim)
    assert status == 200
    assert "evil" not in json.loads(data)["servers"][0]["url"]
    body = json.dumps({"name": "prefixed"})
    status, headers, _ = call(
        connect(proxy.port), "PUT", "/plants/7100", body=body, headers={**HEADERS, **claim}
    )
    assert status in (200, 201)
    assert "evil" not in headers.get("Location", "")
    status, headers, _ = call(connect(proxy.port), "GET", "/plants?limit=1", headers={**HEADERS, **claim})
    assert status == 200
    assert "evil" not in headers.get("Link", "")


def test_a_clients_own_trace_context_does_not_reach_the_service(tmp_path):
    """Behind a trusted proxy the service continues the `traceparent` it is given: the sample
    configuration must not hand it the client's own."""
    seen: list[dict[str, str]] = []

    class Upstream(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({name.lower(): value for name, value in self.headers.items()})
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    serve_in_thread(upstream)
    proxy = Nginx(upstream.server_address[1], tmp_path)
    try:
        context = {
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": "vendor=client",
            "baggage": "user=client",
        }
        assert call(connect(proxy.port), "GET", "/plants", headers=context)[0] == 200
    finally:
        proxy.stop()
        upstream.shutdown()
        upstream.server_close()
    (headers,) = seen
    assert not {"traceparent", "tracestate", "baggage"} & set(headers)
