"""The plants blueprint's state for one application, built once from that application's settings.

It lives in `app.extensions["plants"]`, reached only through `plants_state`: nothing is
module-level, so two apps in one process share no tokens, store, metrics or limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Flask, current_app

from app.auth import Authenticator, authenticator_for
from app.auth.rate_limits import RateLimits, rate_limits_for
from app.http.cors import Cors
from app.http.split_guard import SplitStoreGuard
from app.metrics import Metrics
from app.settings import Settings, load_settings
from app.store import PlantStore, store_for
from app.watch.signal import FeedSignal
from app.watch.wake_index import Touched
from app.webhooks import Deliverer, user_agent

EXTENSION = "plants"


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

    def serving_store(self, environ: dict[str, Any]) -> PlantStore:
        """The store, once its split guard (if any) agrees to serve it from this process."""
        if self.split_guard is not None:
            self.split_guard.check(environ)
        return self.store

    def count_event(self, kind: int, plant_id: int, tags: tuple[str | None, ...] | None) -> None:
        """A change that the feed recorded, with the tags its plant is known to have had (None:
        not known): wake this process's deliverer and the watchers it may concern, and count it
        when the app has metrics."""
        if self.store.events_retain:
            self.feed_signal.notify(Touched(kind, plant_id, tags))
            if self.metrics is not None:
                self.metrics.count_event(kind)


def init_state(app: Flask) -> PlantsState:
    """`app`'s state, made from its config on first use; ConfigurationError names what is wrong."""
    state = app.extensions.get(EXTENSION)
    if state is None:
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
    if metrics is not None:
        metrics.shared_reads = feed_signal.reads
        metrics.woken = feed_signal.woken
    return PlantsState(
        settings=settings,
        auth=authenticator_for(settings),
        store=store,
        metrics=metrics,
        rate_limits=rate_limits_for(settings, url),
        split_guard=None if store.shared else SplitStoreGuard(),
        store_address=url.redacted,
        deliverer=deliverer,
        feed_signal=feed_signal,
        cors=Cors(settings.cors_origins) if settings.cors_origins else None,
    )
