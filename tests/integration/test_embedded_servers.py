"""A host app of one's own, its module in a directory of its own, served as docs/embedding.md says:
`flask run` (Werkzeug's development server), gunicorn with the packaged worker, and gunicorn's
stock gthread worker. The plants contract holds on each (JSON errors, the prefix in the URLs, a
long-poll woken by a write, the metrics), and the host's own routes stay the host's.

And `flask --app wsgi run --debug`, as the README says to run it: bad input is a JSON Error, never
the debugger's page, and its reloader is a restart that empties the memory store, as
docs/operations.md says."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from app.settings.schema import LONGEST_WAIT
from tests.servers import ROOT, Served, free_port, wait_until_serving

TOKEN = "host-token"
BODY_READ_BY_HOST = (
    "The request body was read by the host application before the plants API could read it: "
    "nothing was written."
)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HOST = """
from flask import Blueprint, Flask, request
from flask_cors import CORS

from app.plants import bp

app = Flask("shop")
app.config["PLANTS_API_TOKENS"] = "host-token"
app.config["MAX_CONTENT_LENGTH"] = 1024 * 1024
shelf = Blueprint("shelf", __name__)


@shelf.get("/")
def index():
    return "<p>the shop</p>"


@shelf.get("/healthz")
def healthz():
    return "ok"


@shelf.post("/upload")
def upload():
    return {"size": len(request.get_data())}


@app.before_request
def audit():
    if "X-Shop-Drain" in request.headers:
        request.stream.read()  # a host that reads the body without keeping it
    else:
        request.get_data()  # the host logs every body


for code in (400, 401, 404, 405, 500):
    app.register_error_handler(code, lambda error, code=code: (f"<h1>shop {code}</h1>", code))
app.register_blueprint(shelf)
CORS(app, origins=["https://shop.example"])
app.register_blueprint(bp, url_prefix="/api/v1")
"""
#: gunicorn 27's management socket has one path per user: the host's servers open none.
GUNICORN_CONF = "control_socket_disable = True\n"
GUNICORN = ["-m", "gunicorn", "-c", "host_shop_conf.py", "-b", "127.0.0.1:{port}"]
SERVERS = {
    "flask run": ["-m", "flask", "--app", "host_shop", "run", "--port", "{port}"],
    "packaged worker": [*GUNICORN, "-k", "app.server.worker.PlantsWorker", "host_shop:app"],
    "gthread": [*GUNICORN, "-k", "gthread", "--threads", "4", "host_shop:app"],
}


def serve(directory: Path, command: list[str], env: dict[str, str]) -> Served:
    """`command` run in `directory` (`{port}` in it: the port it serves), once it serves /healthz."""
    port = free_port()
    args = [sys.executable, *(part.format(port=port) for part in command)]
    return Served(args, {**os.environ, "PYTHONPATH": str(ROOT), **env}, directory, port, log_dir=directory)


def call(server: Served, method, path, body=None, headers=None):
    conn = server.connection(timeout=30)
    try:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        sent = {**({"Content-Type": "application/json"} if data is not None else {}), **(headers or {})}
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # answered before its end
            conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def call_chunked(server: Served, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """POST `body` to `path` in 64 KiB chunks (`Transfer-Encoding: chunked`): status and body."""
    conn = server.connection(timeout=30)
    try:
        chunks = (body[start : start + 65536] for start in range(0, len(body), 65536))
        sent = {**headers, "Content-Type": "application/json", "Transfer-Encoding": "chunked"}
        # A server may answer an oversized body and close before it has read the rest: as it
        # lingers for a bounded while, the client's send may break, its answer still readable.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.request("POST", path, body=chunks, headers=sent, encode_chunked=True)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def serve_host(directory: Path, server: str, host: str) -> Served:
    """The host module `host` (its text) served in `directory` by `server` (a name of SERVERS)."""
    (directory / "host_shop.py").write_text(host)
    (directory / "host_shop_conf.py").write_text(GUNICORN_CONF)
    return serve(directory, SERVERS[server], {})


@pytest.fixture(params=sorted(SERVERS))
def host(request, tmp_path):
    server = serve_host(tmp_path, request.param, HOST)
    yield server
    server.stop()


#: The same host with no MAX_CONTENT_LENGTH of its own (Flask's default, None).
UNBOUNDED_HOST = HOST.replace('app.config["MAX_CONTENT_LENGTH"] = 1024 * 1024\n', "")


@pytest.fixture(params=sorted(SERVERS))
def unbounded_host(request, tmp_path):
    assert UNBOUNDED_HOST != HOST
    server = serve_host(tmp_path, request.param, UNBOUNDED_HOST)
    yield server
    server.stop()


def test_the_plants_contract_holds_in_the_host_on_each_server(host):
    assert call(host, "GET", "/")[2] == b"<p>the shop</p>"  # no token on the host's own route
    assert call(host, "GET", "/nowhere")[2] == b"<h1>shop 404</h1>"
    status, _, body = call(host, "POST", "/api/v1/plants", {"id": 1, "name": "Fern"}, AUTH)
    assert (status, json.loads(body)) == (200, {"name": "Fern"})  # the host read the body first
    for (status, headers, body), wanted in [
        (call(host, "GET", "/api/v1/plants"), 401),
        (call(host, "POST", "/api/v1/plants", b"{", AUTH), 400),
        (call(host, "GET", "/api/v1/plants/x", headers=AUTH), 400),
        (call(host, "PROPFIND", "/api/v1/plants", headers=AUTH), 405),
        (call(host, "GET", "/api/v1/plants/9", headers=AUTH), 404),
    ]:
        assert (status, headers["Content-Type"]) == (wanted, "application/json")
        assert json.loads(body)["error"] == wanted
    status, headers, _ = call(host, "PUT", "/api/v1/plants/2", {"name": "Palm"}, AUTH)
    assert (status, headers["Location"]) == (201, f"http://127.0.0.1:{host.port}/api/v1/plants/2")
    assert json.loads(call(host, "GET", "/api/v1/openapi.json")[2])["servers"] == [{"url": "/api/v1"}]
    status, _, metrics = call(host, "GET", "/api/v1/metrics", headers=AUTH)
    assert status == 200
    assert b'{method="PUT",route="/api/v1/plants/<plant_id>",status="201"} 1.0' in metrics


def test_a_long_poll_in_the_host_is_woken_by_a_write_on_each_server(host):
    position = json.loads(call(host, "GET", "/api/v1/events?after=now", headers=AUTH)[2])["next"]
    answers = []
    watch = threading.Thread(
        target=lambda: answers.append(
            call(host, "GET", f"/api/v1/events?after={position}&wait={LONGEST_WAIT}", headers=AUTH)
        ),
        daemon=True,
    )
    watch.start()
    time.sleep(0.5)
    assert call(host, "PUT", "/api/v1/plants/7", {"name": "Ivy"}, AUTH)[0] == 201
    watch.join(20)
    assert answers, "not woken: the long-poll would answer at its deadline, 55 s after it began"
    status, _, body = answers[0]
    events = json.loads(body)["events"]
    assert (status, [(event["type"], event["plant"]["id"]) for event in events]) == (
        200,
        [("plant.created", 7)],
    )


def test_the_hosts_body_limit_bounds_its_own_routes_on_each_server(host):
    """The host's MAX_CONTENT_LENGTH (1 MiB), not the service's 64 KiB, on each server: the
    packaged worker reads the app's."""
    status, _, body = call(host, "POST", "/upload", b"x" * (512 * 1024), {"Content-Type": "text/plain"})
    assert (status, json.loads(body)) == (200, {"size": 512 * 1024})
    assert call(host, "POST", "/upload", b"x" * (2 * 1024 * 1024), {"Content-Type": "text/plain"})[0] == 413


def test_a_chunked_write_past_the_hosts_limit_is_a_413_though_the_host_read_it_first(host):
    """The host's hook reads every body (`request.get_data()`): Werkzeug stops a chunked one at
    MAX_CONTENT_LENGTH without an error, and the write read what it kept as the whole body, so
    that one padded past the limit was stored (another a 400 saying it was no JSON)."""
    padded = b'{"id": 3, "name": "Fern"}' + b" " * (2 * 1024 * 1024)
    status, body = call_chunked(host, "/api/v1/plants", padded, AUTH)
    assert (status, json.loads(body)["error"]) == (413, 413)
    assert call(host, "GET", "/api/v1/plants/3", headers=AUTH)[0] == 404  # nothing written


def test_a_write_whose_body_the_host_read_first_is_a_json_500_naming_the_cause(host):
    """The host's hook read the body through `request.stream` (not kept, as `get_data()` keeps
    it): the write cannot have it. Not the 408 of a client that stopped sending (nor, under
    `flask run`, a read that waits on the connection for bytes already gone): the JSON 500 that
    says the host read it, logged for the host's developer; nothing written."""
    assert_drained_writes_refused(host)


def test_a_write_whose_body_a_host_without_a_limit_read_first_is_a_json_500_too(unbounded_host):
    """With no MAX_CONTENT_LENGTH of the host's, Werkzeug gave its hook `wsgi.input` itself, and
    the read left no trace: a 400 (an empty body, or no JSON) or a 408 that blamed the client.
    Refused as with a limit; a chunked write the hook leaves alone is served whole."""
    assert_drained_writes_refused(unbounded_host)
    status, answer = call_chunked(unbounded_host, "/api/v1/plants", b'{"id": 5, "name": "Ivy"}', AUTH)
    assert (status, json.loads(answer)) == (200, {"name": "Ivy"})


def assert_drained_writes_refused(host: Served) -> None:
    """Each write whose body the host's hook drains (sized: POST, PUT, PATCH; and a chunked POST)
    is the JSON 500, logged once each, and writes nothing."""
    drained = {**AUTH, "X-Shop-Drain": "1"}
    for method, path, body, headers in [
        ("POST", "/api/v1/plants", {"id": 4, "name": "Fern"}, drained),
        ("PUT", "/api/v1/plants/4", {"name": "Fern"}, drained),
        (
            "PATCH",
            "/api/v1/plants/4",
            {"tag": "x"},
            {**drained, "Content-Type": "application/merge-patch+json"},
        ),
    ]:
        status, headers, answer = call(host, method, path, body, headers)
        assert (status, headers["Content-Type"]) == (500, "application/json"), (method, answer)
        assert json.loads(answer) == {"error": 500, "message": BODY_READ_BY_HOST}
    status, answer = call_chunked(host, "/api/v1/plants", b'{"id": 4, "name": "Fern"}', drained)
    assert (status, json.loads(answer)) == (500, {"error": 500, "message": BODY_READ_BY_HOST})
    assert call(host, "GET", "/api/v1/plants/4", headers=AUTH)[0] == 404  # nothing written
    assert host.output().count("read the request body before the plants blueprint") == 4


def test_the_embedding_docs_host_serves_with_the_gunicorn_line_they_give(tmp_path):
    """docs/embedding.md's example host, saved as the module its gunicorn line names and served by
    that line (on the memory store, with the control socket off): the app is found and serves."""
    text = (ROOT / "docs" / "embedding.md").read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    found = re.search(r"gunicorn -k app\.server\.worker\.PlantsWorker '(\w+):(\w+)'", text)
    assert found, "docs/embedding.md gives no gunicorn line for the host"
    module, variable = found.groups()
    on_memory = example.replace('"redis://127.0.0.1:6379/0"', '"memory://"')
    assert on_memory != example
    probe = f'\n{variable}.add_url_rule("/healthz", "healthz", lambda: "ok")  # readiness, for the test\n'
    (tmp_path / f"{module}.py").write_text(on_memory + probe)
    (tmp_path / "host_shop_conf.py").write_text(GUNICORN_CONF)
    line = [*GUNICORN, "-k", "app.server.worker.PlantsWorker", f"{module}:{variable}"]
    server = serve(tmp_path, line, {})
    try:
        plant = {"id": 5, "name": "Fig", "tag": "tree"}
        assert call(server, "POST", "/api/v1/plants", plant, {"Authorization": "Bearer token-a"})[0] == 200
        reader = {"Authorization": "Bearer dashboard-token"}
        status, _, body = call(server, "GET", "/api/v1/plants/5", headers=reader)
        assert (status, json.loads(body)) == (200, {"name": "Fig", "tag": "tree"})
        assert call(server, "DELETE", "/api/v1/plants/5", headers=reader)[0] == 403
    finally:
        server.stop()


@pytest.fixture
def debug_server(tmp_path):
    shutil.copy(ROOT / "wsgi.py", tmp_path / "wsgi.py")
    command = ["-m", "flask", "--app", "wsgi", "run", "--debug", "--port", "{port}"]
    server = serve(tmp_path, command, {"PLANTS_API_TOKENS": TOKEN})
    yield server
    server.stop()


@pytest.mark.parametrize("options", [(), ("--debug",), ("--without-threads",)])
def test_flask_run_says_what_is_in_effect_once_without_secrets(tmp_path, options):
    """The README says that one line at start says what is in effect: only gunicorn's master
    logged it. `flask run` prints it with its own banner, once (not again from the reloader's
    child, nor at its restarts)."""
    shutil.copy(ROOT / "wsgi.py", tmp_path / "wsgi.py")
    command = ["-m", "flask", "--app", "wsgi", "run", *options, "--port", "{port}"]
    server = serve(
        tmp_path, command, {"PLANTS_API_TOKENS": "full-secret", "PLANTS_READ_TOKENS": "read-secret"}
    )
    try:
        output = server.output()
    finally:
        server.stop()
    threads = "one request at a time" if "--without-threads" in options else "a thread per request"
    assert [line for line in output.splitlines() if "Plant Store" in line] == [
        " * Plant Store: store memory://; 1 full-access and 1 read-only static tokens; JWT issuer off;"
        f" rate limits off; Flask's development server, {threads}"
    ]
    assert "secret" not in output


def test_a_host_under_flask_run_says_nothing_of_the_blueprint_at_start(tmp_path):
    """The line is the standalone service's: an embedded blueprint's settings are its host's
    (docs/embedding.md), which logs what it likes."""
    server = serve_host(tmp_path, "flask run", HOST)
    try:
        output = server.output()
    finally:
        server.stop()
    assert "Serving Flask app 'host_shop'" in output
    assert "Plant Store" not in output


def test_under_flask_run_debug_bad_input_is_a_json_error(debug_server):
    for args, wanted in [
        (("POST", "/plants", b"{", AUTH), 400),
        (("POST", "/plants", b'{"id": 1, "name": "x"}', {**AUTH, "Content-Type": "text/plain"}), 415),
        (("GET", "/plants?limit=%FF", None, AUTH), 400),
        (("GET", "/plants/%00", None, AUTH), 400),
        (("GET", "/events", None, {**AUTH, "Accept": "text/event-stream", "Last-Event-ID": "no"}), 400),
        (("GET", "/plants", None, {"Authorization": "Bearer \x7f"}), 400),
    ]:
        status, headers, body = call(debug_server, *args)
        assert (status, headers["Content-Type"]) == (wanted, "application/json")
        assert json.loads(body)["error"] == wanted
        assert b"Traceback" not in body


def test_the_reloader_of_flask_run_debug_starts_an_empty_memory_store(debug_server, tmp_path):
    """As docs/operations.md says: a Python file edited in the working directory restarts the
    app, the plants are gone, and a position or a ticket read before is refused."""
    assert call(debug_server, "POST", "/plants", {"id": 1, "name": "Fern"}, AUTH)[0] == 200
    position = json.loads(call(debug_server, "GET", "/events", headers=AUTH)[2])["next"]
    ticket = json.loads(call(debug_server, "POST", "/events/tickets", headers=AUTH)[2])["ticket"]
    edited = tmp_path / "wsgi.py"
    later = edited.stat().st_mtime + 5  # a change the stat reloader sees, whatever its last look
    os.utime(edited, (later, later))
    deadline = time.monotonic() + 20
    while "Detected change" not in debug_server.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    wait_until_serving(debug_server.port, debug_server.process)
    while call(debug_server, "GET", "/plants/1", headers=AUTH)[0] == 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert json.loads(call(debug_server, "GET", "/plants", headers=AUTH)[2]) == {"plants": []}
    status, _, body = call(debug_server, "GET", f"/events?after={position}", headers=AUTH)
    assert (status, json.loads(body)["details"]["after"][0][:35]) == (
        400,
        "Not a cursor this service made for ",
    )
    assert call(debug_server, "GET", f"/events?ticket={ticket}")[0] == 401
