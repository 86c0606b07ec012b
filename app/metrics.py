"""Prometheus metrics for the plants blueprint, served at `<prefix>/metrics` behind the bearer token.

Per application (in its state, app/extension.py): its own registry with

- `plants_http_requests_total{route, method, status}` and
- `plants_http_request_duration_seconds{route}` (a histogram), for every request the blueprint
  routes, refusals included;
- `plants_store_errors_total{reason}`: store calls answered 503 (`timeout`, `refused`,
  `name_not_resolved`, `auth`, `connection`, `read_only`, `needs_migration`, `evicted`, `cluster`,
  `replication`, `unreadable`, `other`);
- `plants_auth_refusals_total{reason}`: refused authentications and authorizations, by reason
  (`missing`, `not_bearer`, `malformed`, `not_accepted`, `read_only`, `insufficient_scope`, and
  for JWT access tokens `expired`, `not_yet_valid`, `wrong_issuer`, `wrong_audience`,
  `bad_signature`, `unknown_key`, `algorithm_not_allowed`, `wrong_type`, `missing_claim`,
  `keys_unavailable`);
- `plants_events_appended_total{type}`: changes this service wrote to the change feed, by event
  type, and `plants_events_read_total`: events it served from `GET /events`;
- `plants_webhook_attempts_total{outcome}`, `plants_webhook_delivery_seconds` (from a change to its
  2xx), and, read from the store at scrape time, `plants_webhook_max_lag_events` (the most events
  any endpoint has yet to be sent) and `plants_webhook_lag_events{endpoint}` (each endpoint's),
  the latter only for callers that may manage webhooks: an endpoint id is theirs to see;
- `plants_stored`: how many plants the store holds, read from the store at scrape time;
- `plants_watch_shared_reads` and `plants_watch_shared_read_bytes`: the feed's reads kept for
  watchers at the same position (app/watch/shared_reads.py), in the worker answering the scrape;
- `plants_watch_woken_per_change` (a histogram): how many waiting watchers each change woke, in
  each worker while it had any, summed over the workers like every count (app/watch/wake_index.py).

Across gunicorn workers the counters are summed by prometheus_client's multiprocess mode, which
reads `PROMETHEUS_MULTIPROC_DIR`; the packaged gunicorn configuration makes and cleans that
directory (not for the in-memory store, whose one worker keeps its metrics in memory: a file's
increment costs a `getpid` system call). prometheus_client chooses the mode when it is first
imported, so it is imported only when an app is built, after the configuration has set the directory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from flask import Request, Response

from app.store import EVENT_TYPES, PlantStore, StoreUnavailableError
from app.telemetry import metrics_files

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from app.watch.shared_reads import SharedReads
    from app.watch.wake_index import WokenTally

_START = "plants.started"
#: The methods a request is counted under by name (RFC 9110's and PATCH); any other, which a rule's
#: 405 answers too, is counted as `other`: a client must not grow the series with made-up methods.
_NAMED_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})
#: A request's duration, in seconds: a create takes well under a millisecond, and a request that
#: meets a Redis fault waits up to the store's timeouts.
REQUEST_DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: From a change to its webhook's 2xx, in seconds: a poll and a round trip, up to the retries' hours.
WEBHOOK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0, 300.0, 3600.0, 36000.0)


class Metrics:
    """One application's metrics and the registry they are exposed from."""

    def __init__(self, store: PlantStore) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = CollectorRegistry(auto_describe=True)
        counter = functools.partial(Counter, registry=self.registry)
        self.requests = counter(
            "plants_http_requests", "Requests the plants blueprint answered.", ["route", "method", "status"]
        )
        self.duration = Histogram(
            "plants_http_request_duration_seconds",
            "Time from routing to the response, per route.",
            ["route"],
            buckets=REQUEST_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.deprecated_requests = counter(
            "plants_deprecated_requests",
            "Requests to operations the document marks deprecated (docs/versions.md), per operation.",
            ["operation"],
        )
        self.store_errors = counter(
            "plants_store_errors", "Store calls that failed and were answered 503.", ["reason"]
        )
        self.auth_refusals = counter(
            "plants_auth_refusals",
            "Requests refused by authentication or authorization, by reason.",
            ["reason"],
        )
        self.events_appended = counter(
            "plants_events_appended", "Changes written to the change feed, by event type.", ["type"]
        )
        # Made on first use: in multiprocess mode a child writes a file, and a process that
        # never counts an event type writes none for it.
        self._appended_children: list[Any] = [None] * len(EVENT_TYPES)
        self.events_read = counter("plants_events_read", "Events served from GET /events.", ["route"])
        self._refusal_children: dict[str, Any] = {}
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self.webhook_attempts = counter(
            "plants_webhook_attempts",
            "Webhook delivery attempts, by outcome: delivered (2xx), status (another HTTP status), or"
            " the error (timeout, refused, redirect, tls, address, name_not_resolved, connection, internal).",
            ["outcome"],
        )
        self.webhook_latency = Histogram(
            "plants_webhook_delivery_seconds",
            "Time from a change to its webhook's 2xx.",
            buckets=WEBHOOK_BUCKETS,
            registry=self.registry,
        )
        self._store = store
        #: The watch's shared reads of this process (app/watch/shared_reads.py), once it has them.
        self.shared_reads: SharedReads | None = None
        #: How many watchers each of this process's changes woke, once it has them.
        self.woken: WokenTally | None = None
        self._store_collector = _StoreCollector(store)
        self.registry.register(self._store_collector)

    def observe(self, req: Request, response: Response) -> None:
        """Count one answer of the blueprint, refusals and errors included, and its duration."""
        started = req.environ.get(_START)
        if started is None:
            return
        rule = req.url_rule
        route = rule.rule if rule is not None else "unrouted"
        method = req.method if req.method in _NAMED_METHODS else "other"
        key = (route, method, response.status_code)
        children = self._children.get(key)
        if children is None:
            # labels() takes a lock and builds its key on every call: looked up once per key.
            # The keys are bounded: the blueprint's routes, the named methods, and HTTP statuses.
            children = self._children[key] = (
                self.requests.labels(route, method, str(response.status_code)),
                self.duration.labels(route),
            )
        children[0].inc()
        children[1].observe(time.perf_counter() - started)

    def watch_woken(self, tally: WokenTally) -> None:
        """`plants_watch_woken_per_change`: from this process's tally, or, across workers, from a
        histogram the tally feeds, summed from every worker's files. A histogram's counts read
        from whichever worker answered went down from one scrape to the next (one replaced, or
        one without watchers for a while), which Prometheus reads as a reset."""
        if not self.multiprocess:
            self.woken = tally
            return
        from prometheus_client import Histogram

        from app.watch.wake_index import WOKEN_BUCKETS

        tally.forward = Histogram(
            "plants_watch_woken_per_change",
            "Waiting watchers of the feed each change woke, in each worker that had any.",
            buckets=WOKEN_BUCKETS,
            registry=self.registry,
        ).observe

    def count_event(self, kind: int) -> None:
        """Count one change appended to the feed (`kind`: an index of EVENT_TYPES)."""
        child = self._appended_children[kind]
        if child is None:
            child = self._appended_children[kind] = self.events_appended.labels(EVENT_TYPES[kind])
        child.inc()

    def count_read(self, events: int) -> None:
        """Count events served (labelled, so that, like every child here, it is made on first use)."""
        self.events_read.labels("/events").inc(events)

    def count_webhook_attempt(self, outcome: str) -> None:
        self.webhook_attempts.labels(outcome).inc()

    def observe_webhook_latency(self, seconds: float) -> None:
        self.webhook_latency.observe(seconds)

    def count_deprecated(self, operation_id: str) -> None:
        """Count one request to a deprecated operation: who still calls it before its sunset."""
        self.deprecated_requests.labels(operation_id).inc()

    def count_store_error(self, reason: str) -> None:
        """Count one store call answered 503, by its reason."""
        self.store_errors.labels(reason).inc()

    def count_refusal(self, reason: str) -> None:
        """Count one refused request; the reasons are a fixed set of the auth package's."""
        child = self._refusal_children.get(reason)
        if child is None:
            child = self._refusal_children[reason] = self.auth_refusals.labels(reason)
        child.inc()

    def exposition(self, *, per_endpoint: bool) -> bytes:
        """The scrape's text: every metric, and the webhook endpoints' lag (each endpoint's only
        when `per_endpoint`)."""
        from prometheus_client import generate_latest

        scraped = generate_latest(_scrape_time(self._store, per_endpoint, self.shared_reads, self.woken))
        if not self.multiprocess:
            return generate_latest(self.registry) + scraped
        directory = os.environ["PROMETHEUS_MULTIPROC_DIR"]
        # The files held still while they are read: the master folds dead workers' files into one
        # (app/telemetry/metrics_files.py), and a scrape must see each count once.
        with metrics_files.reading(directory):
            return generate_latest(_every_workers(directory, self._store_collector)) + scraped


def _scrape_time(
    store: PlantStore, per_endpoint: bool, shared_reads: SharedReads | None, woken: WokenTally | None
) -> CollectorRegistry:
    """What is read when scraped, in the worker that answers: the webhook endpoints' lag, and this
    process's shared reads and woken tally when it has them."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_WebhookLag(store, per_endpoint))
    if shared_reads is not None:
        registry.register(_SharedReadsCollector(shared_reads))
    if woken is not None:
        registry.register(_WokenCollector(woken))
    return registry


def _every_workers(directory: str, stored: _StoreCollector) -> CollectorRegistry:
    """In multiprocess mode, a registry that sums every worker's files, and the store's count."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(metrics_files.FilesCollector(directory))
    registry.register(stored)
    return registry


class _StoreCollector:
    """`plants_stored`, asked of the store at scrape time (left out when the store cannot answer)."""

    def __init__(self, store: PlantStore) -> None:
        self._store = store

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        try:
            stored = len(self._store)
        except StoreUnavailableError:
            return
        yield GaugeMetricFamily("plants_stored", "Plants in the store.", value=stored)

    def describe(self) -> list[Any]:
        return []


class _SharedReadsCollector:
    """What the watch's shared reads hold in this process: the evidence that their bound holds."""

    def __init__(self, reads: SharedReads) -> None:
        self._reads = reads

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        entries, size = self._reads.size
        yield GaugeMetricFamily(
            "plants_watch_shared_reads", "Reads of the feed kept for watchers at one position.", value=entries
        )
        yield GaugeMetricFamily(
            "plants_watch_shared_read_bytes", "The bytes of the reads kept for watchers.", value=size
        )

    def describe(self) -> list[Any]:
        return []


class _WokenCollector:
    """`plants_watch_woken_per_change`, from the signal's own tally (no lock, no cost per change
    beyond a count, and nothing while nobody watches)."""

    def __init__(self, tally: WokenTally) -> None:
        self._tally = tally

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily

        from app.watch.wake_index import WOKEN_BUCKETS

        counts, running = list(self._tally.counts), 0
        buckets = []
        for bound, count in zip([*map(str, WOKEN_BUCKETS), "+Inf"], counts, strict=True):
            running += count
            buckets.append((bound, running))
        yield HistogramMetricFamily(
            "plants_watch_woken_per_change",
            "Waiting watchers of the feed each change woke, while any watched.",
            buckets=buckets,
            sum_value=self._tally.total,
        )

    def describe(self) -> list[Any]:
        return []


class _WebhookLag:
    """The endpoints' lag, asked of the store at scrape time rather than kept in gauges: an endpoint
    deleted is gone from the next scrape whichever worker answers it, and no worker's multiprocess
    file holds a series for it. At most PLANTS_WEBHOOKS_MAX endpoints, one feed count each."""

    def __init__(self, store: PlantStore, per_endpoint: bool) -> None:
        self._store, self._per_endpoint = store, per_endpoint

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        try:
            lags = self._lags()
        except StoreUnavailableError:
            return
        yield GaugeMetricFamily(
            "plants_webhook_max_lag_events",
            "The most events of the feed any webhook endpoint has yet to be sent (0 without endpoints).",
            value=max(lags.values(), default=0),
        )
        if self._per_endpoint:
            family = GaugeMetricFamily(
                "plants_webhook_lag_events",
                "Events of the feed each webhook endpoint has yet to be sent.",
                labels=["endpoint"],
            )
            for endpoint_id, lag in lags.items():
                family.add_metric([endpoint_id], lag)
            yield family

    def _lags(self) -> dict[str, int]:
        store = self._store
        if not store.events_retain:
            return {}
        endpoints = store.endpoints.all()
        if not endpoints:
            return {}
        now_count = store.feed_count(store.events_now())
        lags = {}
        for endpoint in endpoints:
            if endpoint.position is not None:
                # A position the feed no longer keeps has no count: its endpoint is left out.
                with contextlib.suppress(ValueError):
                    lags[endpoint.id] = now_count - store.feed_count(endpoint.position)
        return lags

    def describe(self) -> list[Any]:
        return []


def start_timer(environ: dict[str, Any]) -> None:
    """Called first by the blueprint's guard, so that refusals are timed too."""
    environ[_START] = time.perf_counter()
