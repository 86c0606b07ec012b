"""The deliverer: sends each endpoint the feed's events after its position, in order, at least once.

A coordinator thread looks at the endpoints when something changed: a change this process made
(`wake`, called by every write and every change to an endpoint), a drain that ended, a retry
that fell due, or the feed moved by another process (seen by one look at the feed's position
every `IDLE_S`). One that is enabled, due, and behind the feed is leased and drained in a pool
thread, which reads the feed a batch at a time and sends its events one by one; endpoints that
have been slow share a bounded lane of the pool, the others keep one of their own (lanes.py).
Each outcome is stored with the endpoint's `ack` (the position and the attempt in one atomic
step, which also renews the lease); the coordinator renews the leases of the endpoints it drains
every `RENEW_S`, so a slow receiver keeps its lease. A process that
dies holds its leases for at most `LEASE_MS`; then another takes the endpoint over, from the last
acknowledged event, which is sent again with the same `webhook-id`.

Each endpoint's connection is kept alive between its attempts (keepalive.py); each attempt carries
the request id of the write that made its event, and with tracing on, a span of its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from app.settings import Settings
from app.store import EVENT_TYPES, FeedEntry, FeedExpiredError, PlantStore, StoreUnavailableError
from app.store.endpoints import DISABLED, ENABLED, FAILING, Endpoint, delivery_fields
from app.telemetry import tracing
from app.webhooks.keepalive import KeptAlive, Slot
from app.webhooks.lanes import THREADS, Lanes
from app.webhooks.message import (
    ATTEMPTS,
    message_id,
    origin_of,
    payload,
    retry_delay,
    signed_headers,
    utc_text,
)
from app.webhooks.sender import Attempt, Watchdog, send

if TYPE_CHECKING:
    from app.metrics import Metrics

log = logging.getLogger(__name__)

#: How often the coordinator looks while drains are in flight (the watchdog, the leases).
POLL_S = 0.1
#: How often an idle coordinator asks the store for the feed's position alone: the most a change
#: made by another process (one that does not deliver) waits before this one sees it.
IDLE_S = 2.0
#: How often the endpoints are read again while the feed does not move and nothing woke it.
REFRESH_S = 30.0
LEASE_MS = 10_000
RENEW_S = 3.0
#: Events read from the feed at once.
BATCH = 100
#: How long a process leaves an endpoint alone after its drain failed other than by an attempt.
HOLD_S = 5.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Deliverer:
    """One process's deliveries for one store. `start` runs it in the background; `stop` ends it."""

    def __init__(
        self,
        store: PlantStore,
        settings: Settings,
        *,
        user_agent: str,
        metrics: Metrics | None = None,
        keep_alive: bool = True,
    ) -> None:
        self.store, self.settings, self.metrics = store, settings, metrics
        self.user_agent = user_agent
        self.owner = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._pool: ThreadPoolExecutor | None = None
        self._busy: dict[str, Future[None]] = {}
        #: Endpoints this process does not lease until the monotonic time given.
        self._held: dict[str, float] = {}
        self._renewed = 0.0
        self._failing_store = False
        self._wake = threading.Event()
        #: Set by `wake`: the endpoints are read again at the next look.
        self._changed = True
        self._seen_position: bytes | None = None
        self._refresh_at = 0.0
        #: When the earliest retry falls due (ms since the epoch), 0 when none is pending.
        self._next_due_ms = 0
        self.watchdog = Watchdog()
        #: Each endpoint's kept-alive connection (`keep_alive=False`: one connection per attempt).
        self.connections = KeptAlive(keep_alive)
        #: Which endpoints may start draining beside the others (lanes.py).
        self.lanes = Lanes(settings.webhooks_timeout)
        #: An OpenTelemetry tracer when this process traces (app/telemetry/tracing.py), else None.
        self.tracer: Any = None

    @property
    def enabled(self) -> bool:
        return self.settings.webhooks_deliver and self.store.events_retain > 0

    def start(self) -> bool:
        """Deliver in a background thread of this process, once; False when delivery is off."""
        if not self.enabled:
            return False
        with self._lock:
            if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
                self.wake()  # an endpoint changed: look at once
                return True
            # A forked process starts its own, under an owner name of its own.
            self._pid = os.getpid()
            self.owner = f"{socket.gethostname()}:{self._pid}:{secrets.token_hex(4)}"
            self._stop.clear()
            self._busy, self._held = {}, {}
            self._pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="webhooks-send")
            self._thread = threading.Thread(target=self._run, name="webhooks", daemon=True)
            self._thread.start()
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop, giving up the leases of the drains that end within `timeout` (an attempt in flight
        ends by its own timeout; a lease not given up lapses in LEASE_MS)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            thread, pool = self._thread, self._pool
            self._thread = self._pool = None
        self._stop.set()
        self._wake.set()
        if thread is not None:
            thread.join(timeout)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
            futures.wait(list(self._busy.values()), timeout=max(0.0, deadline - time.monotonic()))
        self.connections.close_all()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wake(self) -> None:
        """Something changed in this process (a write, an endpoint): look at once. Cheap enough
        for every write: a flag and an Event."""
        self._changed = True
        if not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            wait = POLL_S
            try:
                wait = self.run_once()
                if self._failing_store:
                    log.info("Webhooks: the store answers again; delivering")
                    self._failing_store = False
            except StoreUnavailableError as exc:
                if not self._failing_store:
                    log.warning("Webhooks: the store did not answer (%s); deliveries wait for it", exc)
                    self._failing_store = True
            except Exception:
                log.exception("Webhooks: the deliverer failed; it carries on")
            self._wake.wait(wait)

    def run_once(self) -> float:
        """One look: lease and drain the endpoints with events to send; the seconds until the
        next look, unless something wakes it first."""
        self.watchdog.expire()
        for endpoint_id, future in list(self._busy.items()):
            if future.done():
                del self._busy[endpoint_id]
                # The drain's own wake-up may have come before its future was done, and found it
                # still busy: a change it did not send would then wait for REFRESH_S.
                self._changed = True
        self._renew()
        now = time.monotonic()
        self.connections.close_idle(now)
        now_position = self.store.events_now()
        now_ms = _now_ms()
        changed, self._changed = self._changed, False
        if not (
            changed
            or self._busy
            or now_position != self._seen_position
            or now >= self._refresh_at
            or (self._next_due_ms and now_ms >= self._next_due_ms)
        ):
            return self._pause(now_ms)  # idle: one call to the store
        endpoints = self.store.endpoints.all()
        # A deleted, disabled or failing endpoint's connection is not kept.
        self.connections.keep_only({e.id for e in endpoints if e.status == ENABLED})
        self.lanes.keep_only({e.id for e in endpoints})
        self._seen_position, self._refresh_at = now_position, now + REFRESH_S
        self._next_due_ms = min(
            (e.due_ms for e in endpoints if e.status == ENABLED and e.due_ms > now_ms), default=0
        )
        if self._held:
            self._held = {endpoint_id: until for endpoint_id, until in self._held.items() if until > now}
        waiting = [
            endpoint.id
            for endpoint in endpoints
            if endpoint.id not in self._busy
            and self._held.get(endpoint.id, 0.0) <= now
            and endpoint.status == ENABLED
            and endpoint.due_ms <= now_ms
            and endpoint.position != now_position
        ]
        for endpoint_id in self.lanes.order(waiting):
            if self._pool is None or not self.lanes.admits(endpoint_id, self._busy.keys()):
                continue
            leased = self.store.endpoints.lease(endpoint_id, self.owner, LEASE_MS)
            if leased is not None:
                self.lanes.started(endpoint_id)
                self._busy[endpoint_id] = self._pool.submit(self._drain, leased)
            else:
                # Another process drains it; look again once it may have let go.
                self._refresh_at = min(self._refresh_at, now + IDLE_S)
        return self._pause(_now_ms())

    def _pause(self, now_ms: int) -> float:
        if self._busy:
            return POLL_S
        if self._next_due_ms:
            return min(IDLE_S, max(0.001, (self._next_due_ms - now_ms) / 1000))
        return IDLE_S

    def _renew(self) -> None:
        if not self._busy or time.monotonic() - self._renewed < RENEW_S:
            return
        self._renewed = time.monotonic()
        ids = list(self._busy)
        self.store.endpoints.renew(ids, self.owner, LEASE_MS)

    def _drain(self, endpoint: Endpoint) -> None:
        slot = self.connections.take(endpoint.id)
        try:
            Drain(self, endpoint, slot).run()
        except StoreUnavailableError as exc:
            log.warning("Webhooks: the store did not answer while delivering to %s (%s)", endpoint.id, exc)
        except Exception:
            # Not an attempt's failure (those are outcomes): a fault here would repeat at every
            # look, so this process leaves the endpoint alone for a while.
            self._held[endpoint.id] = time.monotonic() + HOLD_S
            log.exception("Webhooks: delivering to %s failed; it waits %.0f s", endpoint.id, HOLD_S)
        finally:
            if slot is not None and self.stopping:
                slot.close()
            self.connections.give_back(endpoint.id, slot)
            with contextlib.suppress(StoreUnavailableError):
                self.store.endpoints.release(endpoint.id, self.owner)
            # A change another process made while this one held the lease is this one's to send.
            self.wake()

    def count(self, outcome: Attempt, event_time_ms: int) -> None:
        if self.metrics is None:
            return
        kind = "delivered" if outcome.delivered else outcome.error or "status"
        self.metrics.count_webhook_attempt(kind)
        if outcome.delivered:
            self.metrics.observe_webhook_latency(max(0.0, (_now_ms() - event_time_ms) / 1000))


class Drain:
    """One endpoint's deliveries while its lease is held: until it has caught up with the feed, an
    attempt failed (the next is scheduled), or the endpoint changed under it."""

    def __init__(self, deliverer: Deliverer, endpoint: Endpoint, slot: Slot | None = None) -> None:
        self.deliverer = deliverer
        self.endpoint = endpoint
        #: The endpoint's kept-alive connection, held for the drain's length.
        self.slot = slot
        self.position = endpoint.position
        #: The position last stored: `position` may run ahead of it over events not subscribed to.
        self.acked = endpoint.position
        self.tries = endpoint.tries
        #: Whether the last attempt was slow (lanes.py).
        self.slow = False

    def run(self) -> None:
        store = self.deliverer.store
        while not self.deliverer.stopping:
            try:
                entries, end = store.feed_entries(self.position, BATCH)
            except (FeedExpiredError, ValueError):
                if not self._expired():
                    return
                continue
            for entry in entries:
                if self.deliverer.stopping:
                    return
                if not self._subscribed(entry):
                    self.position = entry.position
                    continue
                if not self._deliver(entry):
                    return
            # Events it is not subscribed to, or none at all from the oldest kept: store where it is.
            self.position = end
            if self.position != self.acked and not self._ack(delivery_fields(end, 0, 0), None):
                return
            if len(entries) < BATCH:
                return

    def _subscribed(self, entry: FeedEntry) -> bool:
        events = self.endpoint.events
        return events is None or EVENT_TYPES[entry.event.kind] in events

    def _signing(self) -> list[str]:
        now_ms = _now_ms()
        return [secret for secret, until in self.endpoint.secrets if until is None or until > now_ms]

    def _deliver(self, entry: FeedEntry) -> bool:
        """Send one event; True when it was delivered and the drain may go on."""
        deliverer, endpoint = self.deliverer, self.endpoint
        settings = deliverer.settings
        msg_id = message_id(entry)
        try:
            body = payload(entry.event)
            headers = signed_headers(msg_id, body, self._signing(), deliverer.user_agent)
        except Exception as exc:
            # A stored secret the signer refuses, say: a failed attempt, retried on schedule.
            log.warning("Webhooks: could not sign %s for %s (%s)", msg_id, endpoint.id, type(exc).__name__)
            outcome = Attempt(None, "internal", None, 0)
        else:
            outcome = self._send(entry, msg_id, body, headers)
        deliverer.count(outcome, entry.event.time_ms)
        attempt = _attempt(msg_id, outcome)
        if outcome.delivered:
            self.position, self.tries = entry.position, 0
            # After a slow attempt the drain gives its thread up: the endpoint's next event waits
            # for a turn in the slow lane (lanes.py).
            return self._ack(delivery_fields(entry.position, 0, 0), attempt) and not self.slow
        self.tries += 1
        fields = delivery_fields(self.position, self.tries, 0)
        if outcome.status == 410:
            fields.update(status=DISABLED, reason=f"The receiver answered 410 Gone to {msg_id}.")
        elif self.tries >= ATTEMPTS:
            fields.update(
                status=FAILING,
                reason=f"{ATTEMPTS} attempts to deliver {msg_id} failed; deliveries wait at it until"
                ' PATCH {"status": "enabled"}.',
            )
        else:
            delay = retry_delay(self.tries, settings.webhooks_retry_scale, outcome.retry_after)
            fields["due"] = str(_now_ms() + int(delay * 1000))
        self._ack(fields, attempt)
        return False

    def _send(self, entry: FeedEntry, msg_id: str, body: bytes, headers: dict[str, str]) -> Attempt:
        """One attempt, with the request id (outside the signed content) and the trace context of
        the write that made the event: the attempt's own span's, when this process traces, else
        the write's as stored."""
        deliverer, endpoint = self.deliverer, self.endpoint
        settings = deliverer.settings
        request_id, traceparent = origin_of(entry)
        if request_id is not None:
            headers["X-Request-Id"] = request_id

        def attempt(extra: dict[str, str]) -> Attempt:
            return send(
                endpoint.url,
                body,
                {**headers, **extra},
                timeout=settings.webhooks_timeout,
                allowed=settings.webhooks_allow_hosts,
                watchdog=deliverer.watchdog,
                slot=self.slot,
            )

        deliverer.lanes.begin(endpoint.id)
        try:
            if deliverer.tracer is None:
                return attempt({"traceparent": traceparent} if traceparent is not None else {})
            attributes = {"webhook.id": msg_id, "webhook.endpoint": endpoint.id}
            return tracing.traced_attempt(deliverer.tracer, traceparent, attributes, attempt)
        finally:
            self.slow = deliverer.lanes.end(endpoint.id)

    def _expired(self) -> bool:
        """The position fell out of the feed's retention: say so, and go on from the oldest kept."""
        self.position, self.tries = None, 0
        attempt = json.dumps(
            {
                "webhook_id": None,
                "time": utc_text(_now_ms()),
                "status": None,
                "error": "expired",
                "duration_ms": 0,
            }
        )
        reason = (
            "Events were lost: the endpoint fell behind the feed's retention, and resumed from the"
            " oldest event kept."
        )
        return self._ack({**delivery_fields(None, 0, 0), "reason": reason}, attempt)

    def _ack(self, fields: dict[str, str], attempt: str | None) -> bool:
        """Store an outcome; True when the drain may go on (the lease held, the endpoint enabled)."""
        deliverer, endpoint = self.deliverer, self.endpoint
        answer = deliverer.store.endpoints.ack(
            endpoint.id, deliverer.owner, LEASE_MS, endpoint.epoch, fields, attempt
        )
        if answer is None:
            return False
        self.acked = self.position
        status, rev = answer
        if status != ENABLED:
            return False
        if rev != endpoint.rev:  # changed through the API meanwhile: its URL, events or secrets
            fresh = deliverer.store.endpoints.get(endpoint.id)
            if fresh is None or fresh.epoch != endpoint.epoch:
                return False
            self.endpoint = fresh
        return True


def _attempt(msg_id: str, outcome: Attempt) -> str:
    return json.dumps(
        {
            "webhook_id": msg_id,
            "time": utc_text(_now_ms()),
            "status": outcome.status,
            "error": outcome.error,
            "duration_ms": outcome.duration_ms,
        }
    )
