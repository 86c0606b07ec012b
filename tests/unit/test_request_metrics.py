"""The two metrics of every request, kept as plain counts in one process (app/metrics.py), are
scraped as the same text prometheus_client's Counter and Histogram give for the same requests."""

from __future__ import annotations

import re
import time

import pytest
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    enable_created_metrics,
    generate_latest,
)

from app.metrics import REQUEST_DURATION_BUCKETS, RequestTally

#: (route, method, status, seconds): every bucket, a bound itself, past the last bound, two routes.
REQUESTS = [
    ("/plants", "POST", 200, 0.0001),
    ("/plants", "POST", 200, 0.0005),
    ("/plants", "POST", 409, 0.003),
    ("/plants/<plant_id>", "GET", 200, 0.02),
    ("/plants", "POST", 200, 7.5),
    ("unrouted", "GET", 404, 1.0),
    ("/plants/<plant_id>", "GET", 304, 0.3),
]


def reference(requests: list[tuple[str, str, int, float]]) -> bytes:
    """The scrape of the same requests counted by prometheus_client's own Counter and Histogram."""
    registry = CollectorRegistry(auto_describe=True)
    counter = Counter(
        "plants_http_requests", "Requests the plants blueprint answered.", ["route", "method", "status"],
        registry=registry,
    )  # fmt: skip
    histogram = Histogram(
        "plants_http_request_duration_seconds", "Time from routing to the response, per route.", ["route"],
        buckets=REQUEST_DURATION_BUCKETS, registry=registry,
    )  # fmt: skip
    for route, method, status, seconds in requests:
        counter.labels(route, method, str(status)).inc()
        histogram.labels(route).observe(seconds)
    return generate_latest(registry)


def tallied(requests: list[tuple[str, str, int, float]]) -> bytes:
    registry, tally = CollectorRegistry(auto_describe=True), RequestTally()
    registry.register(tally)
    for route, method, status, seconds in requests:
        tally.count(route, method, status, seconds)
    return generate_latest(registry)


def without_creation_times(text: bytes) -> bytes:
    return re.sub(rb"(_created\{[^}]*\}) \S+", rb"\1 T", text)


@pytest.mark.parametrize("count", [0, 1, len(REQUESTS)])
def test_the_scrape_is_prometheus_clients_text(count):
    requests = REQUESTS[:count]
    assert without_creation_times(tallied(requests)) == without_creation_times(reference(requests))


def test_creation_times_are_when_each_series_began():
    before = time.time()
    text = tallied(REQUESTS).decode()
    times = [float(value) for value in re.findall(r"_created\{[^}]*\} (\S+)", text)]
    assert len(times) == 5 + 3  # one a (route, method, status), one a route
    assert all(before <= value <= time.time() for value in times)


def test_without_created_series_none_is_written():
    disable_created_metrics()
    try:
        assert tallied(REQUESTS) == reference(REQUESTS)
        assert b"_created" not in tallied(REQUESTS)
    finally:
        enable_created_metrics()
