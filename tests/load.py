"""Load for the shared-store tests: creates from threads against a real gunicorn, every answer kept."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from collections import Counter

from app.store import store_from_url
from tests.helpers import call
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
# Redis timeouts for the fault tests: a fault is answered sooner.
SHORT_TIMEOUTS = {"PLANTS_STORE_TIMEOUT": "0.5", "PLANTS_STORE_CONNECT_TIMEOUT": "0.5"}
# A client gives up on a request after this long: every answer, even in a fault, comes sooner.
CLIENT_TIMEOUT = 5


def create(port: int, plant: dict) -> tuple[int, http.client.HTTPMessage, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT)
    return call(conn, "POST", "/plants", plant, AUTH)


def redis_gunicorn(settings: dict[str, str], workers: int = 2, **env: str) -> Gunicorn:
    return Gunicorn(env={**settings, "WEB_CONCURRENCY": str(workers), "GUNICORN_THREADS": "4", **env})


def open_store(settings: dict[str, str], capacity: int = 1_000_000):
    return store_from_url(
        settings["PLANTS_STORE_URL"],
        capacity=capacity,
        prefix=settings["PLANTS_STORE_PREFIX"],
        connect_timeout=1,
        timeout=1,
    )


class CreateLoad:
    """Threads sending creates of new ids until stopped or until `limit` requests; every answer kept."""

    def __init__(self, port: int, threads: int = 4, limit: int = 20_000) -> None:
        self.port = port
        self.answers: list[tuple[int, int, dict, str | None]] = []  # (id, status, body, Retry-After)
        self._ids = itertools.count(1)
        self._issued = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._limit = limit
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                plant_id = self._issued = next(self._ids)
                if plant_id > self._limit:
                    return
            status, headers, body = create(self.port, {"id": plant_id, "name": f"Plant {plant_id}"})
            with self._lock:
                self.answers.append((plant_id, status, json.loads(body), headers["Retry-After"]))

    def issued(self) -> int:
        """The highest id a request has been started with: a later request has a higher one."""
        with self._lock:
            return self._issued

    def count(self) -> int:
        with self._lock:
            return len(self.answers)

    def wait_for(self, more: int, timeout: float = 30) -> None:
        target, deadline = self.count() + more, time.monotonic() + timeout
        while self.count() < target:
            assert time.monotonic() < deadline, "the load stalled"
            time.sleep(0.01)

    def stop(self) -> list[tuple[int, int, dict, str | None]]:
        self._stop.set()
        for thread in self._threads:
            thread.join(CLIENT_TIMEOUT * 2)
            assert not thread.is_alive()
        return self.answers


def assert_only_200_and_503(answers) -> Counter:
    statuses = Counter(status for _, status, _, _ in answers)
    assert set(statuses) <= {200, 503}, statuses
    for _, status, body, retry_after in answers:
        if status == 503:
            assert body["error"] == 503
            assert retry_after == "1"
    return statuses
