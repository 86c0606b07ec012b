"""What the service says about itself, through a real gunicorn: every answer's X-Request-Id, the
same id in each log line of the request, and one log format (PLANTS_LOG_FORMAT) for gunicorn's
lines, the access lines, the service's own and the standalone deliverer's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.helpers import call
from tests.servers import ROOT, TOKEN, Gunicorn, free_port

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def lines_with(server: Gunicorn, text: str) -> list[str]:
    deadline = time.monotonic() + 5
    while not (found := [line for line in server.output().splitlines() if text in line]):
        assert time.monotonic() < deadline, server.output()[-2000:]
        time.sleep(0.05)
    return found


@pytest.fixture(scope="module")
def direct():
    server = Gunicorn()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def behind_proxy():
    server = Gunicorn(env={"PLANTS_TRUSTED_PROXIES": "1"})
    yield server
    server.stop()


def test_every_answer_has_a_new_request_id_when_no_proxy_is_trusted(direct):
    ids = set()
    for headers in ({}, {"X-Request-Id": "chosen-by-the-client"}):
        status, answer, _ = call(direct.connection(), "GET", "/healthz", None, headers)
        assert status == 200
        assert re.fullmatch(r"[0-9a-f]{32}", answer["X-Request-Id"])
        ids.add(answer["X-Request-Id"])
    assert len(ids) == 2


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("abc-123", True),
        ("A.b_c:d-9", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("has space", False),
        ('quote"d', False),
        ("ünï", False),
    ],
)
def test_a_trusted_proxys_request_id_is_kept_when_well_formed(behind_proxy, sent, kept):
    headers = {"X-Request-Id": sent}
    status, answer, _ = call(behind_proxy.connection(), "GET", "/plants/1", None, {**AUTH, **headers})
    assert status == 404
    assert (answer["X-Request-Id"] == sent) is kept
    if not kept:
        assert re.fullmatch(r"[0-9a-f]{32}", answer["X-Request-Id"])


def test_text_lines_of_a_request_carry_its_id(tmp_path):
    """A store that refuses: the service's own warning and the access line name the request."""
    server = Gunicorn(env={"PLANTS_STORE_URL": f"redis://:pw-never-logged@127.0.0.1:{free_port()}/0"})
    try:
        status, headers, _ = call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, AUTH)
        assert status == 503
        request_id = headers["X-Request-Id"]
        lines_with(server, '"POST /plants HTTP/1.1" 503')
        (warning, access) = [line for line in server.output().splitlines() if request_id in line]
    finally:
        server.stop()
    assert re.fullmatch(
        rf"{TIME.pattern} \[\d+\] \[WARNING\] app\.extension: .* request_id={request_id}", warning
    )
    assert re.fullmatch(
        rf"{TIME.pattern} \[\d+\] \[INFO\] gunicorn\.access: .* request_id={request_id}", access
    )
    assert "pw-never-logged" not in server.output()


def test_json_puts_every_line_of_every_logger_in_one_object(tmp_path):
    server = Gunicorn(
        env={
            "PLANTS_LOG_FORMAT": "json",
            "PLANTS_STORE_URL": f"redis://127.0.0.1:{free_port()}/0",
            "PLANTS_READ_TOKENS": "read-secret",
        }
    )
    try:
        status, headers, _ = call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, AUTH)
        assert status == 503
        created = headers["X-Request-Id"]
        read = {"Authorization": "Bearer read-secret"}
        status, headers, _ = call(server.connection(), "GET", "/plants/7", None, read)
        assert status == 503
        fetched = headers["X-Request-Id"]
        assert call(server.connection(), "GET", "/readyz")[0] == 503
        lines_with(server, '/readyz HTTP/1.1\\" 503')
    finally:
        server.stop()
    records = [json.loads(line) for line in server.output().splitlines() if line.strip()]
    for record in records:
        assert list(record)[:4] == ["time", "level", "logger", "message"], record
        assert TIME.fullmatch(record["time"])
    loggers = {record["logger"] for record in records}
    assert {"gunicorn.error", "gunicorn.access", "app.extension"} <= loggers
    access = next(r for r in records if r["logger"] == "gunicorn.access" and r["request_id"] == created)
    assert access["method"] == "POST"
    assert access["route"] == "/plants"
    assert access["status"] == 503
    assert access["token"] == "full-access"
    assert isinstance(access["duration_ms"], float)
    probe = next(r for r in records if r["logger"] == "gunicorn.access" and "/readyz" in r["message"])
    assert (probe["route"], probe["status"]) == ("/readyz", 503)
    warning = next(r for r in records if r["logger"] == "app.extension" and r.get("request_id") == fetched)
    assert warning["level"] == "WARNING"
    assert (warning["method"], warning["route"], warning["token"]) == (
        "GET",
        "/plants/<plant_id>",
        "read-only",
    )
    assert "did not answer" in warning["message"]
    output = server.output()
    assert TOKEN not in output
    assert "read-secret" not in output


def test_the_standalone_deliverer_writes_the_same_json(redis_server):
    env = {
        **os.environ,
        "PLANTS_API_TOKENS": TOKEN,
        "PLANTS_LOG_FORMAT": "json",
        "PLANTS_STORE_URL": redis_server.url,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "app.webhooks"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        line = process.stdout.readline()
    finally:
        process.terminate()
        process.wait(30)
    record = json.loads(line)
    assert (record["level"], record["logger"]) == ("INFO", "app.webhooks")
    assert record["message"].startswith("Plant Store: delivering webhooks from redis://")
    assert TIME.fullmatch(record["time"])
