"""/metrics: the Prometheus text format, behind the bearer token, exact across gunicorn workers."""

from __future__ import annotations

import http.client
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app import create_app
from tests.conftest import redis_settings
from tests.helpers import call, error_of, wait_for_watches, watches_started
from tests.servers import ROOT, TOKEN, Gunicorn, free_port

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape, by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def request_count(scrape: dict, route: str, method: str, status: str) -> float:
    return scrape.get(
        ("plants_http_requests_total", (("method", method), ("route", route), ("status", status))), 0.0
    )


def test_requests_refusals_latency_and_plants_are_counted(client, auth):
    for plant_id in range(3):
        assert client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=auth).status_code == 200
    assert client.post("/plants", json={"id": 0, "name": "Other"}, headers=auth).status_code == 409
    assert client.post("/plants", json={"id": 9, "name": "Fern"}).status_code == 401
    assert client.put("/plants").status_code == 405
    assert client.get("/plants", headers=auth).status_code == 200
    assert client.get("/plants/1", headers=auth).status_code == 200
    assert client.get("/plants/9", headers=auth).status_code == 404
    assert client.delete("/plants/2", headers=auth).status_code == 204
    response = client.get("/metrics", headers=auth)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    scrape = samples(response.get_data(as_text=True))
    assert request_count(scrape, "/plants", "POST", "200") == 3
    assert request_count(scrape, "/plants", "POST", "409") == 1
    assert request_count(scrape, "/plants", "POST", "401") == 1
    assert request_count(scrape, "/plants", "PUT", "405") == 1
    assert request_count(scrape, "/plants", "GET", "200") == 1
    assert request_count(scrape, "/plants/<plant_id>", "GET", "200") == 1
    assert request_count(scrape, "/plants/<plant_id>", "GET", "404") == 1
    assert request_count(scrape, "/plants/<plant_id>", "DELETE", "204") == 1
    assert scrape[("plants_http_request_duration_seconds_count", (("route", "/plants"),))] == 7
    assert scrape[("plants_http_request_duration_seconds_count", (("route", "/plants/<plant_id>"),))] == 3
    assert scrape[("plants_stored", ())] == 2


def test_metrics_need_the_token(client):
    error_of(client.get("/metrics"), 401)


@pytest.mark.parametrize(
    ("precondition", "status"),
    [({"If-None-Match": "*"}, 304), ({"If-Match": '"0"'}, 412), ({"If-Match": "*"}, 200),
     ({"If-None-Match": '"0"'}, 200)],
    ids=["none-match-any", "match-a-tag", "match-any", "none-match-a-tag"],
)  # fmt: skip
def test_a_scrapes_precondition_is_judged_as_a_watchs(client, auth, precondition, status):
    """RFC 9110 §13.2.1: a GET that would be a 2xx judges its preconditions. A scrape has no
    ETag (every one differs), so, as on a watch of the feed, only `*` is met."""
    response = client.get("/metrics", headers={**auth, **precondition})
    if status == 412:
        assert "If-Match" in error_of(response, 412)["message"]
    else:
        assert response.status_code == status
        assert (response.get_data() == b"") == (status == 304)
        assert "ETag" not in response.headers


def test_metrics_can_be_turned_off(make_app, auth):
    client = make_app(PLANTS_METRICS=False).test_client()
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth).status_code == 200
    error_of(client.get("/metrics", headers=auth), 404)
    assert "404" in client.get("/openapi.json").json["paths"]["/metrics"]["get"]["responses"]


def test_made_up_methods_are_counted_as_one_series(client, auth):
    """Any method reaches a route's JSON 405: a client without a token must not add a series per
    method it makes up (PROPFIND, BREW1...), which would grow every scrape and the memory for good."""
    for number in range(20):
        assert client.open("/plants", method=f"BREW{number}").status_code == 405
    assert client.open("/plants", method="PROPFIND").status_code == 405
    exposition = client.get("/metrics", headers=auth).get_data(as_text=True)
    assert "BREW" not in exposition
    assert "PROPFIND" not in exposition
    assert 'plants_http_requests_total{method="other",route="/plants",status="405"} 21.0' in exposition


def test_metrics_of_several_processes_without_their_directory_are_a_documented_500(
    make_app, auth, monkeypatch
):
    """A host serving the app from several processes without PROMETHEUS_MULTIPROC_DIR
    (docs/embedding.md): one worker's counts are not the total, and the document says so."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    client = make_app().test_client()
    response = client.get("/metrics", headers=auth, environ_overrides={"wsgi.multiprocess": True})
    assert "without PROMETHEUS_MULTIPROC_DIR" in error_of(response, 500)["message"]
    assert "500" in client.get("/openapi.json").json["paths"]["/metrics"]["get"]["responses"]


@pytest.mark.parametrize(
    ("host", "reason", "cause"),
    [
        ("127.0.0.1:{port}", "refused", "connection refused (is Redis running on that port?)"),
        ("nonexistent.invalid:6379", "name_not_resolved", "the host name did not resolve"),
    ],
    ids=["refused", "name-not-resolved"],
)
def test_store_errors_name_the_address_and_the_cause_never_the_password(caplog, host, reason, cause):
    host = host.format(port=free_port())
    url = f"redis://:store-password@{host}/0"
    app = create_app({"PLANTS_API_TOKENS": TOKEN, "PLANTS_STORE_URL": url})
    client = app.test_client()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            error_of(client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH), 503)
    scrape = samples(client.get("/metrics", headers=AUTH).get_data(as_text=True))
    assert scrape[("plants_store_errors_total", (("reason", reason),))] == 2
    assert ("plants_stored", ()) not in scrape  # the store could not say
    assert f"The plant store at redis://:***@{host}/0 did not answer: {cause}" in caplog.text
    assert "store-password" not in caplog.text


def test_a_wrong_password_is_named_as_such(redis_server, caplog):
    user = f"plants-{uuid.uuid4().hex[:8]}"
    redis_server.command("ACL", "SETUSER", user, "on", ">right-password", "~*", "+@all")
    try:
        url = redis_server.url.replace("redis://", f"redis://{user}:wrong-password@")
        client = create_app({"PLANTS_API_TOKENS": TOKEN, "PLANTS_STORE_URL": url}).test_client()
        with caplog.at_level(logging.WARNING):
            error_of(client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH), 503)
        assert "did not answer: authentication failed" in caplog.text
        assert "wrong-password" not in caplog.text
    finally:
        redis_server.command("ACL", "DELUSER", user)


def test_the_migration_names_the_address_and_the_cause():
    port = free_port()
    env = {**os.environ, "PLANTS_STORE_URL": f"redis://:store-password@127.0.0.1:{port}/0"}
    result = subprocess.run(
        [sys.executable, "-m", "app.store.migrate"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"Plant Store migrate: Redis at redis://:***@127.0.0.1:{port}/0 failed: connection refused"
        " (is Redis running on that port?) (Redis: ConnectionError); once that is mended, run it again"
        " (what it indexed stays, and indexing twice changes nothing)."
    )


def test_counts_are_exact_across_two_workers(redis_server, tmp_path):
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / "counter_1.db").write_bytes(b"stale")  # an earlier run's file is cleared at start
    settings = redis_settings(redis_server)
    server = Gunicorn(env={**settings, "WEB_CONCURRENCY": "2", "PROMETHEUS_MULTIPROC_DIR": str(directory)})
    total = 0
    try:

        def create(plant_id: int) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            body = {"id": plant_id, "name": "Fern"}
            return call(conn, "POST", "/plants", body, {**AUTH, "Content-Type": "application/json"})[0]

        def writers() -> set[str]:
            """The workers that have counted a request: each writes its own file (its pid)."""
            return {path.stem.rpartition("_")[2] for path in directory.glob("counter_*.db")}

        # Which worker accepts a connection is the kernel's choice, and the second may still be
        # booting on a loaded machine: batches of concurrent creates until both have counted some
        # (at least 240 in all), within a bound.
        deadline = time.monotonic() + 90
        with ThreadPoolExecutor(8) as pool:
            while total < 240 or len(writers()) < 2:
                assert time.monotonic() < deadline, f"{total} requests did not reach both workers"
                assert set(pool.map(create, range(total, total + 40))) == {200}
                total += 40
        status, _, body = call(server.connection(), "GET", "/metrics", headers=AUTH)
        assert status == 200
        scrape = samples(body.decode())
        assert request_count(scrape, "/plants", "POST", "200") == total
        assert scrape[("plants_http_request_duration_seconds_count", (("route", "/plants"),))] == total
        assert scrape[("plants_stored", ())] == total
    finally:
        server.stop()


def test_replaced_workers_counts_stay_and_their_files_do_not_pile_up(redis_server, tmp_path):
    """A worker killed (SIGKILL, the OOM killer) is replaced: its counts stay in the totals,
    exactly, no scrape sees a total go down (Prometheus would read a counter reset), and the
    directory holds the live workers' files and one fold per kind, however many were replaced."""
    directory = tmp_path / "metrics"
    directory.mkdir()
    settings = redis_settings(redis_server)
    server = Gunicorn(env={**settings, "WEB_CONCURRENCY": "2", "PROMETHEUS_MULTIPROC_DIR": str(directory)})
    seen: list[float] = []
    refused: list[str] = []
    stop = threading.Event()

    def scrape() -> float:
        status, _, body = call(server.connection(), "GET", "/metrics", headers=AUTH)
        assert status == 200, body
        return request_count(samples(body.decode()), "/plants/<plant_id>", "GET", "404")

    def scrapes() -> None:  # all along, as Prometheus would
        while not stop.is_set():
            try:
                seen.append(scrape())
            except OSError:  # a connection to the worker being killed
                pass
            except AssertionError as failed:  # not a 200: asserted below, with the server's log
                refused.append(str(failed))

    try:
        watcher = threading.Thread(target=scrapes)
        watcher.start()
        for replaced in range(1, 7):
            for _ in range(10):
                assert call(server.connection(), "GET", "/plants/1", headers=AUTH)[0] == 404
            replace_a_worker(server)
            assert scrape() == 10 * replaced
        stop.set()
        watcher.join(30)
        assert not refused, (refused[:3], server.output()[-3000:])
        assert seen == sorted(seen), seen
        # A fold the master could not make while a scrape read the files is made at the next
        # worker's exit (app/telemetry/metrics_files.py: `fold`): one more, with no scrape under way.
        replace_a_worker(server)
        assert scrape() == 60
        assert len(list(directory.glob("*.db"))) <= 2 * 3  # counter and histogram: two workers', one fold
    finally:
        stop.set()
        server.stop()


def worker_pids(master: int) -> list[int]:
    return [int(pid) for pid in Path(f"/proc/{master}/task/{master}/children").read_text().split()]


def replace_a_worker(server: Gunicorn) -> None:
    """SIGKILL one worker, and wait until gunicorn has started its replacement."""
    victim = worker_pids(server.process.pid)[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while victim in worker_pids(server.process.pid) or len(worker_pids(server.process.pid)) < 2:
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.05)


def test_the_watchers_woken_histogram_never_goes_down_whichever_worker_answers(redis_server, tmp_path):
    """Summed over the workers, a replaced one's counts kept: each scrape, whichever worker answers
    it, shows the same counts (one worker's own, the new one's 0, read as a counter reset)."""
    settings = redis_settings(redis_server)
    server = Gunicorn(env={**settings, "WEB_CONCURRENCY": "2", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    try:
        with ThreadPoolExecutor(8) as pool:
            for plant_id in range(1, 4):
                polls = watches_started(server, TOKEN)
                waits = [
                    pool.submit(call, server.connection(), "GET", "/events?after=now&wait=20", headers=AUTH)
                    for _ in range(6)
                ]
                wait_for_watches(server, TOKEN, polls + 6)  # the long-polls in place, in either worker
                created = {"id": plant_id, "name": "Fern"}
                headers = {**AUTH, "Content-Type": "application/json"}
                assert call(server.connection(), "POST", "/plants", created, headers)[0] == 200
                assert {wait.result(30)[0] for wait in waits} == {200}
        replace_a_worker(server)
        time.sleep(2)  # the new worker has loaded the app and takes its share of connections
        counts = set()
        for _ in range(40):
            status, _, body = call(server.connection(), "GET", "/metrics", headers=AUTH)
            assert status == 200, body
            counts.add(samples(body.decode())[("plants_watch_woken_per_change_count", ())])
        (count,) = counts
        assert count >= 3
    finally:
        server.stop()
