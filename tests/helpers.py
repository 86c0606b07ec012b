"""Assertions shared by the tests."""

from __future__ import annotations

import contextlib
import http.client
import importlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from app.schemas.records import ErrorSchema
from app.store import Plant
from tests.rawhttp import exchange, request


def assert_error(status: int, headers: Any, body: bytes, expected: int) -> dict[str, Any]:
    """A JSON Error record with `error` equal to the status, and nothing else but `details`."""
    assert status == expected, body
    assert headers["Content-Type"] == "application/json"
    record = json.loads(body)
    assert ErrorSchema().load(record) == record  # the declared Error schema (raises if not)
    assert set(record) - {"details"} == {"error", "message"}
    assert record["error"] == expected
    assert isinstance(record["message"], str)
    assert record["message"]
    return record


def error_of(response: Any, expected: int) -> dict[str, Any]:
    """assert_error for a Flask test-client response."""
    return assert_error(response.status_code, response.headers, response.get_data(), expected)


def call(
    conn: http.client.HTTPConnection, method: str, path: str, body: Any = None, headers: dict | None = None
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request on `conn` (a dict body is sent as JSON), then close it: status, headers, body."""
    try:
        data = body if isinstance(body, (bytes, str, type(None))) else json.dumps(body)
        conn.request(method, path, body=data, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def watches_started(server: Any, token: str, status: int = 200) -> float:
    """The `GET /events` answers with `status` that `server` counted (plants_http_requests_total,
    summed over its workers), a page's included: take the count before the watches. A watch is
    counted as it starts, once admitted with its position taken: what is written from then on
    reaches it, so a test waits for this, not for a sleep to be long enough."""
    auth = {"Authorization": f"Bearer {token}"}
    scraped, _, body = call(server.connection(), "GET", "/metrics", None, auth)
    assert scraped == 200, body[:300]
    labels = {"method": "GET", "route": "/events", "status": str(status)}
    return sum(
        sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == "plants_http_requests_total" and sample.labels == labels
    )


def wait_for_watches(server: Any, token: str, count: float, status: int = 200, seconds: float = 30) -> None:
    """Until `count` watches (or refusals, by `status`) have started: `watches_started`, bounded."""
    deadline = time.monotonic() + seconds
    while (started := watches_started(server, token, status)) < count:
        assert time.monotonic() < deadline, f"{started} of {count} GET /events answered {status}"
        time.sleep(0.05)


def walk_pages(store: Any, limit: int, tags: Any = None) -> list[tuple[int, Plant]]:
    """Every page of `store` from the first, each from the `next` of the one before: the plants."""
    plants: list[tuple[int, Plant]] = []
    after = None
    # In id order a page is short only when it is the last; a cluster's pages may stop short at
    # the end of a group, and one page reads at most GROUPS_PER_PAGE groups.
    id_order = getattr(store, "groups", None) is None or store.groups.count == 1
    while True:
        page = store.page(after, limit, tags)
        assert len(page.plants) <= limit
        plants += [(plant_id, Plant(name, tag)) for plant_id, name, tag in page.plants]
        if page.next is None:
            return plants
        assert len(page.plants) == limit or not id_order
        after = page.next


def apply_events(copy: dict[int, dict], events: list[dict]) -> None:
    """The sync recipe's step (docs/change-feed.md): each event an upsert, or a delete."""
    for event in events:
        if event["type"] == "plant.deleted":
            copy.pop(event["plant"]["id"], None)
        else:
            copy[event["plant"]["id"]] = event["plant"]


def create_until_200(server: Any, plant_ids: Iterable[int], headers: dict) -> None:
    """Create each plant through `server` (a Gunicorn), sending it again after a 503 (a store
    fault under way), for at most 10 s a plant."""
    for plant_id in plant_ids:
        for _ in range(100):
            plant = {"id": plant_id, "name": f"Plant {plant_id}"}
            status, _, body = call(server.connection(), "POST", "/plants", plant, headers)
            if status == 200:
                break
            assert status == 503, body
            time.sleep(0.1)
        else:
            raise AssertionError(f"plant {plant_id} was never created")


def kill_and_restart(redis_server: Any, before_s: float = 1.0) -> None:
    """After `before_s`, kill -9 the Redis server; start it again (it replays its append-only
    file), and leave the clients a second to reconnect."""
    time.sleep(before_s)
    redis_server.kill()
    time.sleep(0.5)
    redis_server.start()
    time.sleep(1.0)


@contextlib.contextmanager
def reloaded(module: ModuleType) -> Iterator[ModuleType]:
    """`module` imported again (its import-time checks run anew), and afterwards its first namespace
    put back, not a third import's: the modules that took its classes by name (`except Unanswered`,
    say) then catch what it raises again, whichever test ran before theirs."""
    namespace = dict(vars(module))
    try:
        yield importlib.reload(module)
    finally:
        vars(module).clear()
        vars(module).update(namespace)


@contextlib.contextmanager
def small_tmpfs(path: Any, size: str) -> Iterator[Any]:
    """A tmpfs of `size` (mount's `size=`, e.g. "1m") mounted on the new directory `path`, and
    unmounted after (the tests run as root): a file system that fills."""
    import subprocess

    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=False)


@contextlib.contextmanager
def static_origin(directory: Path) -> Iterator[str]:
    """`directory` served as static files by Python's own server, on a port of its own (another
    origin than the service's): its origin, `http://127.0.0.1:<port>`."""
    from tests.servers import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
         "--directory", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, "the page's server exited"
                assert time.monotonic() < deadline, "the page's server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def packaged_env(port: int, tmp_path: Any) -> dict[str, str]:
    """The packaged gunicorn's environment, as a unit gives it: the memory store, one token, the
    bind, and a temporary directory of the test's own."""
    from tests.servers import TOKEN

    return {
        "PATH": os.environ["PATH"],
        "PLANTS_API_TOKENS": TOKEN,
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "TMPDIR": str(tmp_path),
    }


#: The `Allow` of a 405 (and of OPTIONS) on /plants and on /plants/{id}.
ON_PLANTS = "GET, HEAD, POST, OPTIONS"
ON_A_PLANT = "GET, HEAD, PUT, PATCH, DELETE, OPTIONS"


def node_ref_parts(ref: str) -> list[str]:
    """The keys a local `$ref` of an OpenAPI document names, from its root."""
    assert ref.startswith("#/")
    return ref[2:].split("/")


def deref(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """`node` of `document`, its `$ref`s followed."""
    while "$ref" in node:
        target = document
        for part in node_ref_parts(node["$ref"]):
            target = target[part]
        node = target
    return node


#: A value for each path parameter of the served document, when a test calls every operation.
PATH_PARAMETERS = {"{id}": "1", "{endpoint_id}": "wh_0000000000000000"}
HTTP_METHODS = ("get", "head", "put", "post", "patch", "delete")


def guarded_operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(method, path with its parameters filled in, responses) of each operation of the served
    `document` that needs the bearer token: its own `security`, or the document's, is not empty."""
    for path, item in document["paths"].items():
        for parameter, value in PATH_PARAMETERS.items():
            path = path.replace(parameter, value)
        for method, operation in item.items():
            if method in HTTP_METHODS and operation.get("security", document["security"]):
                yield method.upper(), path, operation["responses"]


def refused_alike_and_documented(client: Any, headers: dict[str, str], status: int, header: str) -> set[str]:
    """Calls every operation of `client`'s served document that needs the bearer token with
    `headers`; asserts each answers `status` with `header`, and that the document lists that status
    with that header for each. The values of the header the answers carried."""
    document = client.get("/openapi.json").json
    values = set()
    for method, path, responses in guarded_operations(document):
        response = client.open(path, method=method, headers=headers)
        assert response.status_code == status, (method, path)
        values.add(response.headers[header])
        assert str(status) in responses, (method, path)
        assert header in deref(document, responses[str(status)]).get("headers", {}), (method, path)
    return values


T = TypeVar("T")


def in_time(work: Callable[[], T], seconds: float = 30) -> T:
    """What `work` returns, waited for `seconds` at most: generous for a loaded machine, where the
    tests make the wait they guard against longer (an hour, or the longest long-poll's 55 s)."""
    done: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as error:  # raised in the test's thread: its own failure, not a timeout
            failed.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if failed:
        raise failed[0]
    assert done, f"not answered within {seconds} s"
    return done[0]


def parked_long_poll(server: Any, token: str, plant_id: int) -> Any:
    """The answer to a long-poll from `now` that parked: counted as started (its position taken)
    by a scrape its request thread was free to answer, then woken by a write of `plant_id`, not by
    its 55 s wait (an hour, to a test's eye); a server with one request thread shows the park."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def write() -> None:
        plant = {"id": plant_id, "name": "wakes"}
        status, _, body = call(server.connection(), "POST", "/plants", plant, headers)
        assert status == 200, body

    return long_poll_woken_by(server, token, write)


def long_poll_woken_by(server: Any, token: str, write: Callable[[], object]) -> Any:
    """The answer to a long-poll from `now`, once counted as started (parked), then woken by
    `write` (any write: the server's own, or another process's that only its listener hears)."""
    auth = [("Authorization", f"Bearer {token}")]
    before = watches_started(server, token)
    answer: list[Any] = []
    poll = threading.Thread(
        target=lambda: answer.append(
            exchange(server.port, request("GET", "/events?after=now&wait=55", headers=auth), timeout=60)
        ),
        daemon=True,
    )
    poll.start()
    wait_for_watches(server, token, before + 1)
    write()
    poll.join(30)  # generous for a loaded machine; the wait it guards against is 55 s
    assert answer, "the long-poll was not woken by the write"
    return answer[0]
