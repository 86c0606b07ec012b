"""What `flask --app wsgi run` writes, as a developer reads it: Werkzeug's request lines never show
a watch ticket, nor any other value the access log hides under gunicorn (app/telemetry/redact.py),
with `--debug` or without; the service's own lines are written as under gunicorn (stdout, in
PLANTS_LOG_FORMAT, INFO and up, with the request's id), as docs/operations.md says.

A host that embeds the blueprint owns its logging: it adds what docs/embedding.md gives (a filter
on Werkzeug's logger under `flask run`, the service's access logger under gunicorn), and its lines
show no ticket either."""

from __future__ import annotations

import json
import re
import shutil
import socket
import time

import pytest

from tests.integration.test_embedded_servers import (
    AUTH,
    GUNICORN_CONF,
    HOST,
    SERVERS,
    TOKEN,
    Served,
    call,
    serve,
    serve_host,
)
from tests.issuer import AUDIENCE, Issuer
from tests.servers import ROOT

#: Sent as a query parameter the service does not define: a log cannot tell it from a token.
CLIENT_SECRET = "s3cr3t-in-a-query"
FRAGMENT_SECRET = "s3cr3t-in-a-fragment"


def watch_with_a_ticket(server: Served, prefix: str = "") -> str:
    """Mint a real ticket and long-poll the feed with it (200); the ticket."""
    status, _, body = call(server, "POST", f"{prefix}/events/tickets", headers=AUTH)
    assert status == 200, body
    ticket = json.loads(body)["ticket"]
    assert ticket.startswith("plwt_")
    status, _, body = call(server, "GET", f"{prefix}/events?after=now&ticket={ticket}&wait=1")
    assert status == 200, body
    return ticket


def send_raw(server: Served, target: str) -> None:
    """A request whose target http.client would not send as is (a fragment), answered and closed."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        while sock.recv(65536):
            pass


def targets(output: str, path: str) -> list[str]:
    """Werkzeug's request lines for `path`: each one's quoted request line and status (without the
    colours it adds to a 4xx)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    return [found.group(0) for found in re.finditer(rf'"GET {re.escape(path)}[^"]*" \d+', plain)]


@pytest.fixture(params=[(), ("--debug",)], ids=["plain", "debug"])
def flask_run(request, tmp_path):
    shutil.copy(ROOT / "wsgi.py", tmp_path / "wsgi.py")
    command = ["-m", "flask", "--app", "wsgi", "run", *request.param, "--port", "{port}"]
    server = serve(tmp_path, command, {"PLANTS_API_TOKENS": TOKEN})
    yield server
    server.stop()


def test_flask_run_logs_each_request_with_its_secrets_redacted(flask_run):
    ticket = watch_with_a_ticket(flask_run)
    assert call(flask_run, "GET", f"/plants?limit=5&token={CLIENT_SECRET}", headers=AUTH)[0] == 400
    send_raw(flask_run, f"/plants#{FRAGMENT_SECRET}")
    flask_run.stop()
    output = flask_run.output()
    for secret in (ticket, ticket[len("plwt_") :], CLIENT_SECRET, FRAGMENT_SECRET):
        assert secret not in output
    # Each request is still logged, its target as gunicorn's access line shows it.
    assert targets(output, "/events?") == [
        '"GET /events?after=now&ticket=plwt_[redacted]&wait=1 HTTP/1.1" 200'
    ]
    assert targets(output, "/plants") == [
        '"GET /plants?limit=5&token=[redacted] HTTP/1.1" 400',
        '"GET /plants#[redacted] HTTP/1.1" 401',
    ]


@pytest.mark.parametrize("options", [(), ("--debug",)], ids=["plain", "debug"])
def test_flask_run_writes_the_services_own_lines_as_gunicorn_does(tmp_path, options):
    """Its lines in PLANTS_LOG_FORMAT on stdout with the request's fields, from INFO (the identity
    provider's keys loaded): they went to stderr as bare text, from WARNING only."""
    issuer = Issuer()
    shutil.copy(ROOT / "wsgi.py", tmp_path / "wsgi.py")
    command = ["-m", "flask", "--app", "wsgi", "run", *options, "--port", "{port}"]
    env = {"PLANTS_API_TOKENS": TOKEN, "PLANTS_LOG_FORMAT": "json"}
    env.update({"PLANTS_JWT_ISSUER": issuer.url, "PLANTS_JWT_AUDIENCE": AUDIENCE})
    server = serve(tmp_path, command, env)
    try:
        status, headers, _ = call(server, "GET", "/plants", headers={**AUTH, "X-Forwarded-For": "192.0.2.9"})
        assert status == 200
        deadline = time.monotonic() + 30
        while call(server, "GET", "/readyz")[0] != 200:  # the provider's keys loaded
            assert time.monotonic() < deadline, server.output()[-3000:]
            time.sleep(0.05)
    finally:
        server.stop()
        issuer.down()
    lines = [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]
    (warning,) = [line for line in lines if line["logger"] == "app.telemetry.request_ids"]
    assert warning["level"] == "WARNING"
    assert warning["message"].startswith("A request came with X-Forwarded-For, but PLANTS_TRUSTED")
    assert (warning["request_id"], warning["method"]) == (headers["X-Request-Id"], "GET")
    loaded = [line for line in lines if line["logger"] == "app.auth.jwks"]
    assert [(line["level"], re.sub(r"\d+", "N", line["message"])) for line in loaded][:1] == [
        ("INFO", "Loaded N signing key(s) of the identity provider.")
    ]


def host_logging(server: str, tmp_path) -> Served:
    """The host served by `server` with the logging docs/embedding.md gives for it."""
    text = (ROOT / "docs" / "embedding.md").read_text()
    if server == "flask run":
        found = re.search(r"```python\n(# Under `flask run`.*?)```", text, re.DOTALL)
        assert found, "docs/embedding.md gives no lines for a host's Werkzeug logger"
        return serve_host(tmp_path, server, HOST + found.group(1))
    found = re.search(r"`(--access-logfile -)`.*?`(--logger-class [\w.]+)`", text, re.DOTALL)
    assert found, "docs/embedding.md gives no access log for a host under gunicorn"
    (tmp_path / "host_shop.py").write_text(HOST)
    (tmp_path / "host_shop_conf.py").write_text(GUNICORN_CONF)
    *command, module = SERVERS[server]
    return serve(tmp_path, [*command, *found.group(1).split(), *found.group(2).split(), module], {})


@pytest.mark.parametrize("server", ["flask run", "packaged worker"])
def test_a_host_that_logs_as_the_docs_say_logs_no_ticket(server, tmp_path):
    """A host owns its logging: the blueprint leaves it alone, and the docs say what to add."""
    served = host_logging(server, tmp_path)
    try:
        ticket = watch_with_a_ticket(served, "/api/v1")
        assert call(served, "GET", "/?page=2")[0] == 200  # the host's own route
    finally:
        served.stop()
    output = served.output()
    assert ticket[len("plwt_") :] not in output
    assert targets(output, "/api/v1/events?") == [
        '"GET /api/v1/events?after=now&ticket=plwt_[redacted]&wait=1 HTTP/1.1" 200'
    ]
    # The service's rule reads every request line: the host's own parameters are redacted too.
    assert targets(output, "/?") == ['"GET /?page=[redacted] HTTP/1.1" 200']


#: Run before the service is imported: marshmallow's `Field.deserialize` then takes no arguments
#: as far as app/compat/marshmallow.py's check at import can tell, which warns and takes the public path.
BREAKER = """import inspect

from marshmallow import fields

fields.Field.deserialize.__signature__ = inspect.Signature()
"""
CHANGED = "marshmallow's schema or field methods have changed: records load through Schema.load"


@pytest.mark.parametrize("server", ["flask run", "gunicorn"])
def test_a_check_at_import_warns_in_the_services_format(server, tmp_path):
    """The package is imported before `flask run` (wsgi.py) or gunicorn's master (its configuration
    file) sets the logs: a check's warning went to stderr bare. It is held until then, and logged
    once, in PLANTS_LOG_FORMAT."""
    (tmp_path / "breaker.py").write_text(BREAKER)
    (tmp_path / "wsgi.py").write_text("import breaker  # noqa: F401\n" + (ROOT / "wsgi.py").read_text())
    if server == "flask run":
        command = ["-m", "flask", "--app", "wsgi", "run", "--port", "{port}"]
    else:
        conf = "import breaker  # noqa: F401\nfrom app.server.gunicorn_conf import *  # noqa: F403\n"
        (tmp_path / "breaking_conf.py").write_text(conf)
        command = ["-m", "gunicorn", "-c", "breaking_conf.py", "-b", "127.0.0.1:{port}", "wsgi:app"]
    served = serve(tmp_path, command, {"PLANTS_API_TOKENS": TOKEN, "PLANTS_LOG_FORMAT": "json"})
    try:
        status, _, body = call(served, "POST", "/plants", {"id": 1, "name": "Fern"}, AUTH)
        assert (status, json.loads(body)) == (200, {"name": "Fern"})  # loaded through Schema.load
    finally:
        served.stop()
    output = served.output()
    assert output.count(CHANGED) == 1, output[-3000:]
    (line,) = [line for line in output.splitlines() if CHANGED in line]
    record = json.loads(line)
    assert (record["level"], record["logger"], record["message"]) == (
        "WARNING",
        "app.compat.marshmallow",
        CHANGED,
    )
