"""The plants blueprint's state for one application, built once from that application's settings.

It lives in `app.extensions["plants"]`, reached only through `plants_state`: nothing is
module-level, so two apps in one process share no tokens, store, metrics or limits; and its
`close` ends one app's threads and connections, for the app's owner when it is done with it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, current_app
from werkzeug.exceptions import ServiceUnavailable

from app.auth import Authenticator, authenticator_for
from app.auth.rate_limits import RateLimits, rate_limits_for
from app.compat import release_warnings
from app.errors import (
    ReplicasDidNotConfirm,
    StoreEvicted,
    StoreNeedsMigration,
    StoreNotAnswering,
    StoreReadOnly,
    StoreValueUnreadable,
)
from app.http.cors import Cors
from app.http.split_guard import SplitStoreGuard
from app.metrics import Metrics
from app.settings import Settings, load_settings
from app.store import PlantStore, StoreUnavailableError, store_for
from app.store.memory.store import MemoryPlantStore
from app.watch.feed_signal import FeedSignal
from app.watch.wake_index import Touched
from app.webhooks import Deliverer, user_agent

EXTENSION = "plants"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlantsState:
    """Everything the blueprint keeps per application."""

    settings: Settings
    #: The accepted tokens, static and (when an issuer is set) JWT, and what each may do.
    auth: Authenticator
    store: PlantStore
    metrics: Metrics | None
    rate_limits: RateLimits | None
    #: For a per-process store: refuses to serve it from several processes.
    split_guard: SplitStoreGuard | None
    #: The store's URL without its password, for the log lines of its failures.
    store_address: str
    #: This process's webhook deliveries (app/webhooks/), started by the gunicorn worker or the
    #: first change to an endpoint.
    deliverer: Deliverer
    #: This process's watchers of the feed (long-polls and streams), woken by every change.
    feed_signal: FeedSignal
    #: Cross-origin requests (PLANTS_CORS_ORIGINS); None: off.
    cors: Cors | None = None
    #: The deprecated operations' announcements, by view and method (app/plants/deprecation.py),
    #: filled as the blueprint is registered: empty, one truth test an answer, while none is.
    deprecated: dict[tuple[str, str], Any] = field(default_factory=dict)
    #: Set when the process serving the app was asked to stop (SIGTERM, app/server/gunicorn_conf.py):
    #: from then on /readyz is 503, so that a load balancer sends it nothing new while the requests
    #: in flight finish.
    stopping: threading.Event = field(default_factory=threading.Event)

    def close(self, timeout: float = 5.0) -> bool:
        """End what this app runs in the background and close its connections, for the app's
        owner when it is done with the app (a host that made it, a test): the webhook deliverer
        (its leases given up), the feed's listener, the provider's key loader and the store's
        connections. The deliverer and the feed's listener are waited for within `timeout` seconds
        in all; whether the listener ended (each of its stream readers ends within one blocking
        read after: redis-py's one retry may reopen a read the close cut). The app is not meant
        to serve after it (/readyz answers 503). Safe to call again."""
        deadline = time.monotonic() + timeout
        self.stopping.set()
        self.deliverer.stop(timeout=timeout)
        ended = self.feed_signal.close(max(0.0, deadline - time.monotonic()))
        self.auth.close()
        self.store.close()
        return ended

    def serving_store(self, environ: dict[str, Any]) -> PlantStore:
        """The store, once its split guard (if any) agrees to serve it from this process."""
        if self.split_guard is not None:
            self.split_guard.check(environ)
        return self.store

    def count_event(
        self, kind: int, plant_id: int, tags: tuple[str | None, ...], *, with_before: bool = False
    ) -> None:
        """A change that the feed recorded, with the tags its plant is known to have had, and
        (`with_before`) the tag before, which this thread's store tells when it can (else every
        watcher filed by tag may be concerned): wake this process's deliverer and the watchers it
        may concern, and count it when the app has metrics."""
        if self.store.events_retain:
            signal = self.feed_signal
            # What the change touched matters only to waiting watches: made only when there are some.
            signal.notify(self._touched(kind, plant_id, tags, with_before) if signal.waiting else None)
            if self.metrics is not None:
                self.metrics.count_event(kind)

    def _touched(self, kind: int, plant_id: int, tags: tuple[str | None, ...], with_before: bool) -> Touched:
        # The write's mark only where the listener hears it again (feed_signal.py: `notify`).
        store = self.store
        mark = store.write_mark() if self.feed_signal.hears else None
        if not with_before:
            return Touched(kind, plant_id, tags, mark)
        before = store.tag_before()
        return Touched(kind, plant_id, None if before is None else (*tags, *before), mark)

    def store_unavailable(self, exc: StoreUnavailableError) -> ServiceUnavailable:
        """The 503 for a store that did not answer in time; the client may retry after a second."""
        if self.metrics is not None:
            self.metrics.count_store_error(exc.reason)
        if exc.reason in ("needs_migration", "evicted"):
            log.error("The plant store cannot list plants: %s", exc)
            return StoreEvicted() if exc.reason == "evicted" else StoreNeedsMigration()
        if exc.reason == "unreadable":
            log.error("The plant store holds a value the service cannot read: %s", exc)
            return StoreValueUnreadable()
        if exc.reason == "read_only":
            log.error(
                "The plant store at %s is a read-only replica, which takes no write: set PLANTS_STORE_URL"
                " to its primary (%s)",
                self.store_address,
                exc,
            )
            return StoreReadOnly()
        if exc.reason == "replication":
            on = f" on node {exc.node}" if exc.node is not None else ""
            log.warning("The plant store's replicas did not confirm a write%s: %s", on, exc)
            return ReplicasDidNotConfirm()
        if exc.node is not None:  # one node of a cluster: the others serve their plants
            log.warning("The plant store's node %s did not answer: %s", exc.node, exc)
        else:
            log.warning("The plant store at %s did not answer: %s", self.store_address, exc)
        return StoreNotAnswering()


def init_state(app: Flask) -> PlantsState:
    """`app`'s state, made from its config on first use; ConfigurationError names what is wrong."""
    state = app.extensions.get(EXTENSION)
    if state is None:
        # The checks' warnings at import, where no server set the logs first (a host, a test).
        release_warnings()
        state = app.extensions[EXTENSION] = _state_for(load_settings(app.config))
    return state


def plants_state(app: Flask | None = None) -> PlantsState:
    """The state of `app` (by default, the current app): the one accessor of the extension."""
    return (app or current_app).extensions[EXTENSION]


def _state_for(settings: Settings) -> PlantsState:
    url, store = store_for(settings)
    metrics = Metrics(store) if settings.metrics else None
    deliverer = Deliverer(store, settings, user_agent=user_agent(), metrics=metrics)
    feed_signal = FeedSignal(
        store.feed_listener,
        max_watchers=settings.events_max_watchers,
        max_per_caller=settings.events_max_watchers_per_token,
        cheap_to_listen=store.shared,
        # Filtered watchers move past what they do not select at least twice a retention window.
        sweep_every=max(1, store.events_retain // 2),
    )
    feed_signal.observe(deliverer.wake)
    # The deliverer hears other processes' writes on the feed's listener once it has an endpoint
    # to deliver to: before, the listener's thread would wake at every write (this process's own
    # too) with nothing to do; the deliverer's look every IDLE_S sees an endpoint another process
    # enables.
    deliverer.on_delivering = feed_signal.listen
    if metrics is not None:
        metrics.shared_reads = feed_signal.reads
        metrics.watch_woken(feed_signal.woken)
    if store.shared:
        holding = threading.Thread(target=_hold_cursor_key, args=(store,), name="plants-cursor-key")
        holding.daemon = True
        holding.start()
    rate_limits = rate_limits_for(settings, url)
    if rate_limits is not None and isinstance(store, MemoryPlantStore):
        store.limit_counters = rate_limits.counters  # handed over with the plants at a reload
    return PlantsState(
        settings=settings,
        auth=authenticator_for(settings),
        store=store,
        metrics=metrics,
        rate_limits=rate_limits,
        split_guard=None if store.shared else SplitStoreGuard(),
        store_address=url.redacted,
        deliverer=deliverer,
        feed_signal=feed_signal,
        cors=Cors(settings.cors_origins) if settings.cors_origins else None,
    )


def _hold_cursor_key(store: PlantStore) -> None:
    """Read the shared store's cursor key as the process starts, in the background (no start waits
    on a Redis that does not answer). A process that first needed it only after Redis lost its data
    would make a new one, and every cursor and ticket signed before the loss would be refused
    everywhere (400, 401) where the docs promise a 410: one that holds it puts it back
    (app/store/redis/cursor_secret.py). A failure leaves it to be read at its first use, as before."""
    try:
        store.cursor_key()
    except Exception as exc:  # the store's errors, or its client closed meanwhile (an app dropped)
        log.info("The store's cursor key is read at its first use: %s", type(exc).__name__)
