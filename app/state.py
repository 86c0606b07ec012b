"""The plants blueprint's state for one application, built from that application's config.

It lives in `app.extensions["plants"]`: nothing is module-level, so two apps in one process
share no tokens, store, metrics or limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Flask

from .auth import Authenticator, authenticator_for
from .metrics import Metrics
from .rate_limits import RateLimits, limits_storage_options, limits_storage_uri
from .settings import (
    ConfigurationError,
    boolean_setting,
    check_names,
    integer_setting,
    rate_limit_setting,
    seconds_setting,
    store_prefix,
    store_url,
    url_without_password,
)
from .split_guard import SplitStoreGuard
from .store import PlantStore, store_from_url

EXTENSION = "plants"


@dataclass(frozen=True)
class PlantsState:
    """Everything the blueprint keeps per application."""

    #: The accepted tokens, static and (when an issuer is set) JWT, and what each may do.
    auth: Authenticator
    store: PlantStore
    metrics: Metrics | None
    rate_limits: RateLimits | None
    #: For a per-process store: refuses to serve it from several processes.
    split_guard: SplitStoreGuard | None
    #: Whether the API page is served (PLANTS_DOCS).
    docs: bool
    #: Whether PUT, PATCH and DELETE need a precondition (PLANTS_REQUIRE_IF_MATCH): else 428.
    require_if_match: bool = False
    #: What is in effect, in one line for the log at start (no token, no password).
    summary: str = ""
    #: The store's URL without its password, for the log lines of its failures.
    store_address: str = ""


def state_for(app: Flask) -> PlantsState:
    """The blueprint's state for `app`, from its config; ConfigurationError names what is wrong."""
    config = app.config
    check_names(config, environment=False)
    auth, token_limits = authenticator_for(config)
    url = store_url(config)
    prefix = store_prefix(config)
    connect_timeout = seconds_setting(config, "PLANTS_STORE_CONNECT_TIMEOUT")
    timeout = seconds_setting(config, "PLANTS_STORE_TIMEOUT")
    try:
        store = store_from_url(
            url,
            capacity=integer_setting(config, "PLANTS_MAX_PLANTS"),
            prefix=prefix,
            connect_timeout=connect_timeout,
            timeout=timeout,
            min_replicas=integer_setting(config, "PLANTS_STORE_MIN_REPLICAS"),
            events_retain=integer_setting(config, "PLANTS_EVENTS_RETAIN"),
        )
    except ValueError as exc:
        key = "PLANTS_STORE_URL_FILE" if config.get("PLANTS_STORE_URL_FILE") else "PLANTS_STORE_URL"
        raise ConfigurationError(key, str(exc)) from None
    per_token = rate_limit_setting(config, "PLANTS_RATE_LIMIT")
    auth_failures = rate_limit_setting(config, "PLANTS_AUTH_FAILURE_LIMIT")
    rate_limits = None
    if per_token or token_limits or auth_failures:
        rate_limits = RateLimits(
            storage_uri=limits_storage_uri(url),
            storage_options=limits_storage_options(url, timeout=timeout, connect_timeout=connect_timeout),
            key_prefix=f"{prefix}:limits",
            per_token=per_token,
            token_overrides=token_limits,
            auth_failures=auth_failures,
        )
    address = url_without_password(url)
    return PlantsState(
        summary=_summary(address, auth, per_token, auth_failures, token_limits),
        store_address=address,
        auth=auth,
        store=store,
        metrics=Metrics(store) if boolean_setting(config, "PLANTS_METRICS") else None,
        rate_limits=rate_limits,
        split_guard=None if store.shared else SplitStoreGuard(),
        docs=boolean_setting(config, "PLANTS_DOCS"),
        require_if_match=boolean_setting(config, "PLANTS_REQUIRE_IF_MATCH"),
    )


def _summary(
    address: str, auth: Authenticator, per_token: str | None, failures: str | None, own: dict[str, str]
) -> str:
    tokens = list(auth.static.callers.values())
    read_only = sum(
        1 for caller in tokens if caller.read_refusal is None and caller.write_refusal is not None
    )
    jwt = auth.access_tokens.settings.issuer if auth.access_tokens is not None else "off"
    limits = ", ".join(
        part
        for part in (
            per_token and f"{per_token} per token",
            own and f"{len(own)} tokens with their own",
            failures and f"{failures} failed logins per address",
        )
        if part
    )
    return (
        f"store {address}; {len(tokens) - read_only} full-access and {read_only}"
        f" read-only static tokens; JWT issuer {jwt}; rate limits {limits or 'off'}"
    )


def get_store(app: Flask) -> PlantStore:
    """`app`'s plant store."""
    return app.extensions[EXTENSION].store


def serving_store(app: Flask, environ: dict[str, Any]) -> PlantStore:
    """The app's store, once its split guard (if any) agrees to serve it from this process."""
    state = app.extensions[EXTENSION]
    if state.split_guard is not None:
        state.split_guard.check(environ)
    return state.store
