"""The deliverer: sends each endpoint the feed's events after its position, in order, at least once.

A coordinator thread looks at the endpoints when something changed: a change this process made
(`wake`, called by every write, and `look_now`, by every change to an endpoint), a drain that
ended, a retry that fell due, or the feed moved by another process (seen by one look at the
feed's position every `IDLE_S`). While no endpoint is enabled, a write does not wake it: a write
then has nothing to deliver, and waking a thread per request costs the request path two context
switches and a few futex calls (bench/README.md); on a shared store the look every `IDLE_S` still
sees an endpoint another process enabled, and on the in-memory store it sleeps until woken.
The look that first finds one enabled reads the feed's position again once it delivers, so that a
write it did not wake meanwhile is not left for the next look.
One that is enabled, due, and behind the feed is leased and drained in a pool
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
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from app.settings import Settings
from app.store import PlantStore, StoreFullError, StoreUnavailableError
from app.store.endpoints import ENABLED, Endpoint
from app.webhooks.drain import LEASE_MS, EndpointDrain
from app.webhooks.keepalive import KeptAlive
from app.webhooks.lanes import THREADS, Lanes
from app.webhooks.outcomes import epoch_ms
from app.webhooks.sender import Watchdog

if TYPE_CHECKING:
    from app.metrics import Metrics

log = logging.getLogger(__name__)

#: A store that refuses the deliverer: down, or full (Redis at its maxmemory refuses a lease and
#: an acknowledgement as it refuses a write). Either is the operator's to mend, not a fault here.
STORE_REFUSALS = (StoreUnavailableError, StoreFullError)


def store_refusal(exc: Exception) -> str:
    """Why the store refused, for the log."""
    if isinstance(exc, StoreFullError):
        return "is full (Redis is at its maxmemory: no lease or acknowledgement is stored until it has room)"
    return f"did not answer ({exc})"


#: How often the coordinator looks while drains are in flight (the leases, the drains that ended).
POLL_S = 0.1
#: How often an idle coordinator asks the store for the feed's position alone: the most a change
#: made by another process (one that does not deliver) waits before this one sees it.
IDLE_S = 2.0
#: How often the endpoints are read again while the feed does not move and nothing woke it.
REFRESH_S = 30.0
RENEW_S = 3.0
#: How long a process leaves an endpoint alone after its drain failed other than by an attempt.
HOLD_S = 5.0
#: How long a process leaves an endpoint alone after the store refused or failed one of its drain's
#: calls (an acknowledgement, say): twice as long after each such failure in a row, at most
#: `STORE_WAIT_MAX_S`. Its event is sent again after the wait, not at once and again while the
#: store keeps refusing.
STORE_WAIT_S = 1.0
STORE_WAIT_MAX_S = 30.0
#: How long a stop waits for the drains whose attempts it cut off to end.
CUT_OFF_S = 1.0


class InFlight:
    """The drains a deliverer runs: its pool, each endpoint's future, the endpoints it holds off
    after a fault, and the renewal of their leases."""

    def __init__(self, deliverer: Deliverer) -> None:
        self.deliverer = deliverer
        self.pool: ThreadPoolExecutor | None = None
        self.busy: dict[str, Future[None]] = {}
        #: Endpoints this process does not lease until the monotonic time given.
        self.held: dict[str, float] = {}
        #: Each endpoint's drains in a row that the store failed (`STORE_WAIT_S`).
        self.store_failures: dict[str, int] = {}
        #: Each drain under way, by its endpoint's id; changed, and its drains withdrawn, under
        #: `_running_lock`, so that no withdrawal outlives its drain to cut the thread's next one.
        self.running: dict[str, EndpointDrain] = {}
        self._running_lock = threading.Lock()
        self._renewed = 0.0

    def open(self) -> None:
        self.busy, self.held, self.store_failures = {}, {}, {}
        self.pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="webhooks-send")

    def close(self, deadline: float) -> None:
        """Cancel the drains not begun; wait for the others until `deadline` (monotonic)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        futures.wait(list(self.busy.values()), timeout=max(0.0, deadline - time.monotonic()))

    @property
    def in_flight(self) -> bool:
        return not all(future.done() for future in list(self.busy.values()))

    def reap(self) -> bool:
        """Forget the drains that ended; True when one did."""
        ended = [endpoint_id for endpoint_id, future in self.busy.items() if future.done()]
        for endpoint_id in ended:
            del self.busy[endpoint_id]
        return bool(ended)

    def renew(self, store: PlantStore, owner: str) -> None:
        if not self.busy or time.monotonic() - self._renewed < RENEW_S:
            return
        self._renewed = time.monotonic()
        store.endpoints.renew(list(self.busy), owner, LEASE_MS)

    def drain(self, endpoint: Endpoint) -> None:
        """One endpoint's drain, in a thread of the pool; its lease given up at the end."""
        deliverer = self.deliverer
        slot = deliverer.connections.take(endpoint.id)
        drain = EndpointDrain(deliverer, endpoint, slot)
        with self._running_lock:
            self.running[endpoint.id] = drain
        try:
            drain.run()
            self.store_failures.pop(endpoint.id, None)
        except STORE_REFUSALS as exc:
            # Sent again at the next look, its event would be sent again and again while the
            # store refuses its acknowledgement (hundreds of times a second).
            failures = self.store_failures[endpoint.id] = self.store_failures.get(endpoint.id, 0) + 1
            wait = doubling(STORE_WAIT_S, STORE_WAIT_MAX_S, failures)
            self.held[endpoint.id] = time.monotonic() + wait
            log.warning(
                "Webhooks: the store %s while delivering to %s; it waits %.0f s",
                store_refusal(exc),
                endpoint.id,
                wait,
            )
        except Exception:
            # Not an attempt's failure (those are outcomes): a fault here would repeat at every
            # look, so this process leaves the endpoint alone for a while.
            self.held[endpoint.id] = time.monotonic() + HOLD_S
            log.exception("Webhooks: delivering to %s failed; it waits %.0f s", endpoint.id, HOLD_S)
        finally:
            with self._running_lock:
                del self.running[endpoint.id]
                deliverer.watchdog.uncut(drain.thread)
            if slot is not None and deliverer.stopping:
                slot.close()
            deliverer.connections.give_back(endpoint.id, slot)
            with contextlib.suppress(*STORE_REFUSALS):
                deliverer.store.endpoints.release(endpoint.id, deliverer.owner)
            # A change another process made while this one held the lease is this one's to send.
            deliverer.look_now()

    def withdraw_moved(self, endpoints: list[Endpoint]) -> None:
        """Withdraw the drains whose endpoint was moved since they leased it (its epoch: a new
        URL, a replay, a resume): the next drain sends from where it now stands, at once."""
        epochs = {endpoint.id: endpoint.epoch for endpoint in endpoints}
        with self._running_lock:
            for endpoint_id, drain in self.running.items():
                if epochs.get(endpoint_id, drain.endpoint.epoch) != drain.endpoint.epoch:
                    drain.withdraw()

    def start(self, endpoint_ids: list[str]) -> bool:
        """Lease the endpoints and drain them, in the lanes' order, as far as the lanes admit;
        whether another process held the lease of one."""
        deliverer = self.deliverer
        lanes = deliverer.lanes
        # Whether an endpoint not slow waits for a thread: the drains then end at their turn's end.
        refused = held_elsewhere = False
        for endpoint_id in lanes.order(endpoint_ids):
            if self.pool is None or not lanes.admits(endpoint_id, self.busy.keys()):
                refused = refused or not lanes.slow(endpoint_id)
                continue
            leased = deliverer.store.endpoints.lease(endpoint_id, deliverer.owner, LEASE_MS)
            if leased is not None and not ready(leased, epoch_ms()):
                # Changed since the look read it (disabled by a PATCH, a retry's wait stored by
                # another process's attempt): it gets what it would as it stands, nothing now.
                deliverer.store.endpoints.release(endpoint_id, deliverer.owner)
                deliverer.look_now()
            elif leased is not None:
                lanes.started(endpoint_id)
                self.busy[endpoint_id] = self.pool.submit(self.drain, leased)
            else:
                held_elsewhere = True
        lanes.contended = refused
        return held_elsewhere

    def waiting(
        self, endpoints: list[Endpoint], position: bytes | None, now: float, now_ms: int
    ) -> list[str]:
        """The enabled endpoints behind the feed, due, neither draining nor held off."""
        # Pruned in place: a drain's thread may hold an endpoint off meanwhile.
        for endpoint_id, until in list(self.held.items()):
            if until <= now and self.held.get(endpoint_id, math.inf) <= now:
                self.held.pop(endpoint_id, None)
        return [
            endpoint.id
            for endpoint in endpoints
            if endpoint.id not in self.busy
            and self.held.get(endpoint.id, 0.0) <= now
            and ready(endpoint, now_ms)
            and endpoint.position != position
        ]


def ready(endpoint: Endpoint, now_ms: int) -> bool:
    """Whether `endpoint` is to be drained at `now_ms`: enabled, and no retry pending later."""
    return endpoint.status == ENABLED and endpoint.due_ms <= now_ms


class Schedule:
    """When the coordinator reads the endpoints again, and how long it sleeps meanwhile."""

    def __init__(self) -> None:
        #: Set by a change in this process: the endpoints are read again at the next look.
        self.changed = True
        self.seen_position: bytes | None = None
        self.refresh_at = 0.0
        #: When the earliest retry falls due (ms since the epoch), 0 when none is pending.
        self.next_due_ms = 0
        #: When the earliest hold on an endpoint ends (monotonic), 0.0 when none is held off.
        self.held_until = 0.0

    def due(self, position: bytes | None, busy: bool, now: float, now_ms: int) -> bool:
        """Whether this look reads the endpoints (else it costs one call to the store)."""
        changed, self.changed = self.changed, False
        return (
            changed
            or busy
            or position != self.seen_position
            or now >= self.refresh_at
            or bool(self.next_due_ms and now_ms >= self.next_due_ms)
            or bool(self.held_until and now >= self.held_until)
        )

    def read(self, endpoints: list[Endpoint], enabled: set[str], position: bytes | None, now: float) -> None:
        now_ms = epoch_ms()
        self.seen_position, self.refresh_at = position, now + REFRESH_S
        self.next_due_ms = min(
            (e.due_ms for e in endpoints if e.id in enabled and e.due_ms > now_ms), default=0
        )

    def pause(self, busy: bool, forever: bool = False) -> float | None:
        """The seconds until the next look (None: until something wakes it)."""
        if busy:
            return POLL_S
        until_held = max(0.001, self.held_until - time.monotonic()) if self.held_until else math.inf
        if forever:
            return None if until_held == math.inf else until_held
        if self.next_due_ms:
            return min(IDLE_S, until_held, max(0.001, (self.next_due_ms - epoch_ms()) / 1000))
        return min(IDLE_S, until_held)


def doubling(first: float, most: float, failures: int) -> float:
    """The wait after `failures` in a row: `first`, twice as long after each, at most `most`."""
    return min(most, first * 2 ** min(failures - 1, 16))


class Looks:
    """The coordinator's looks that failed in a row: each logged, and the wait after it."""

    def __init__(self) -> None:
        self.failures = 0
        self.failing_store = False

    def answered(self) -> None:
        self.failures = 0
        if self.failing_store:
            log.info("Webhooks: the store answers again; delivering")
            self.failing_store = False

    def failed(self, exc: Exception) -> float:
        """The wait after this failed look: POLL_S, twice as long after each failure in a row,
        at most IDLE_S (a change in the process still wakes it at once)."""
        if not isinstance(exc, STORE_REFUSALS):
            log.error("Webhooks: the deliverer failed; it carries on", exc_info=exc)
        elif not self.failing_store:
            log.warning("Webhooks: the store %s; deliveries wait for it", store_refusal(exc))
            self.failing_store = True
        self.failures += 1
        return doubling(POLL_S, IDLE_S, self.failures)


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
        #: Set when a stop cuts off the attempts still in flight: only those go unrecorded (an
        #: attempt that fails on its own while the process stops is recorded and retried).
        self.cutting_off = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.drains = InFlight(self)
        self._looks = Looks()
        self._wake = threading.Event()
        self.schedule = Schedule()
        #: Whether the last read of the endpoints found one enabled: until then a write's `wake`
        #: has nothing to deliver, and leaves the thread asleep (see `_asleep`).
        self._delivering = False
        #: Called (on the coordinator's thread) when a read of the endpoints first finds one
        #: enabled: where the process hears other processes' writes only for its deliveries,
        #: it starts listening then, not for every write while there is nothing to deliver.
        self.on_delivering: Callable[[], None] | None = None
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
        """Deliver in a background thread of this process, once (an endpoint changed: it looks at
        once); False when delivery is off."""
        if not self.enabled:
            return False
        with self._lock:
            if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
                self.look_now()
                return True
            # A forked process starts its own, under an owner name of its own.
            self._pid = os.getpid()
            self.owner = f"{socket.gethostname()}:{self._pid}:{secrets.token_hex(4)}"
            self._stop.clear()
            self.cutting_off = False
            self.drains.open()
            self._thread = threading.Thread(target=self._run, name="webhooks", daemon=True)
            self._thread.start()
        return True

    def stop(self, timeout: float = 5.0, cut_off: bool = False) -> None:
        """Stop, giving up the leases of the drains that end within `timeout` (an attempt in flight
        ends by its own timeout; a lease not given up lapses in LEASE_MS). `cut_off`: the attempts
        still in flight then are ended at once, unrecorded, so that their threads do not hold the
        process's exit (the interpreter waits for its pools' threads) for as long as a receiver
        takes to answer; the next process sends their events again."""
        deadline = time.monotonic() + timeout
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        self._wake.set()
        if thread is not None:
            thread.join(timeout)
        self.drains.close(deadline)
        if cut_off and self.drains.in_flight:
            self.cutting_off = True
            self.watchdog.expire(now=math.inf)
            self.drains.close(time.monotonic() + CUT_OFF_S)
        self.connections.close_all()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wake(self) -> None:
        """A write in this process: look at once when an endpoint may want it. Every write calls
        it: without an enabled endpoint it reads one flag."""
        if self._delivering:
            self.look_now()

    def look_now(self) -> None:
        """An endpoint changed, or a drain ended: read the endpoints again at once."""
        self.schedule.changed = True
        if not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            wait: float | None
            try:
                wait = self.run_once()
                self._looks.answered()
            except Exception as exc:
                wait = self._looks.failed(exc)
                # The look may have failed after it took the endpoints as read (at a lease): the
                # next reads them again, rather than waiting REFRESH_S for an event still unsent.
                self.schedule.changed = True
            self._wake.wait(wait)

    @property
    def _asleep(self) -> bool:
        return not self._delivering and not self.store.shared  # no other process writes to it

    def run_once(self) -> float | None:
        """One look: lease and drain the endpoints with events to send; the seconds until the
        next look (None: none until something wakes it), unless something wakes it first."""
        drains, schedule = self.drains, self.schedule
        if drains.reap():
            # The drain's own wake-up may have come before its future was done, and found it
            # still busy: a change it did not send would then wait for REFRESH_S.
            schedule.changed = True
        drains.renew(self.store, self.owner)
        now = time.monotonic()
        self.connections.close_idle(now)
        position = self.store.events_now()
        if not schedule.due(position, bool(drains.busy), now, epoch_ms()):
            return schedule.pause(bool(drains.busy), self._asleep)  # idle: one call to the store
        endpoints = self.store.endpoints.all()
        enabled = {e.id for e in endpoints if e.status == ENABLED}
        if enabled and not self._delivering:
            self._delivering = True
            if self.on_delivering is not None:
                self.on_delivering()
            # A write since the position was read found the flag down and woke nothing (`wake`),
            # nor did the listener if it heard it already: its event is in the feed by now.
            position = self.store.events_now()
        self._delivering = bool(enabled)
        # A deleted, disabled or failing endpoint's connection is not kept.
        self.connections.keep_only(enabled)
        self.lanes.keep_only({e.id for e in endpoints})
        drains.withdraw_moved(endpoints)
        schedule.read(endpoints, enabled, position, now)
        waiting = drains.waiting(endpoints, position, now, epoch_ms())
        schedule.held_until = min(drains.held.values(), default=0.0)
        if drains.start(waiting):
            # Another process drains one; look again once it may have let go.
            schedule.refresh_at = min(schedule.refresh_at, now + IDLE_S)
        return schedule.pause(bool(drains.busy), self._asleep)
