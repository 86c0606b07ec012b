"""What gunicorn's master checks before it forks: every setting, and the store's kind.

The master checks without building the app: an app starts loading the identity provider's keys
in a thread as it is built, and a thread running at a fork leaves the child its locks and imports
half done. Each worker builds its own app, after the fork.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from app.settings import DEFAULTS, ConfigurationError, Settings, from_environ, load_settings
from app.settings.tokens import accept_files, files_read
from app.store import StoreUnavailableError, StoreUrl, store_for
from app.store.readiness import EVICTING

log = logging.getLogger(__name__)

#: The `_FILE` settings' files the last check read (path: content), for `accept_checked`.
_last_read: dict[str, str] = {}


#: What a store's answer at the start refuses, by StoreUnavailableError's reason: a URL of the
#: wrong kind, or naming a database the server does not have. Anything else (Redis down) is no
#: error: the service starts, and /readyz says so.
AT_START = {
    "wrong_kind": "names the wrong kind of store",
    "wrong_db": "names a database the Redis server does not have",
}
#: At a reload, a store that refuses the URL's password too: the running workers reach the store
#: with the password they have, and new ones would answer only 503.
AT_RELOAD = {**AT_START, "auth": "names a store that refuses its user or password"}


def checked_settings(
    environ: Mapping[str, str] = os.environ, refused: Mapping[str, str] = AT_START
) -> tuple[Settings, StoreUrl]:
    """The settings of `environ` and their store's URL, checked as a worker's app will check them.

    Raises ConfigurationError, naming the environment variable, for a bad setting or a store of
    the wrong kind (a Redis Cluster node as `redis://`, a plain Redis as `redis+cluster://`), or
    for any other of the store's `refused` reasons. A store that does not answer is no error: the
    service starts while Redis is down, and /readyz says so. The files the `_FILE` settings name
    are read from disk; `accept_checked` makes what was read the workers' own.
    """
    with files_read() as read:
        settings, url = _checked(environ, refused)
    _last_read.clear()
    _last_read.update(read)
    return settings, url


def accept_checked() -> None:
    """The workers forked from now on read the files as the last check read them, however the
    files change until the next accepted check (app/settings/tokens.py says why)."""
    accept_files(_last_read)


def _checked(environ: Mapping[str, str], refused: Mapping[str, str]) -> tuple[Settings, StoreUrl]:
    try:
        settings = load_settings({**DEFAULTS, **from_environ(environ)})
        url, store = store_for(settings)
        try:
            evicting = store.readiness().evicting
            if evicting:
                # Not refused: the operator's Redis may be shared, and /readyz says so on.
                log.warning("Plant Store: %s", EVICTING.format(policy=evicting))
            # The cursor secret, made now while Redis has room: a worker that finds none at
            # maxmemory signs with its own, which the other workers and hosts refuse.
            store.cursor_key()
        except StoreUnavailableError as exc:
            if exc.reason in refused:
                problem = f"{refused[exc.reason]}: {exc}"
                raise ConfigurationError(settings.store_url_key, problem) from None
        finally:
            close = getattr(store, "close", None)  # a Redis store's connections
            if close is not None:
                close()
    except ConfigurationError as exc:
        raise exc.from_environment() from None
    return settings, url


def summary(settings: Settings, url: StoreUrl) -> str:
    """What is in effect, in one line for the log at start (no token, no password)."""
    tokens = settings.tokens
    jwt = settings.jwt.issuer if settings.jwt is not None else "off"
    limits = ", ".join(
        part
        for part in (
            settings.rate_limit and f"{settings.rate_limit} per token",
            tokens.limits and _count(len(tokens.limits), "token with its own", "tokens with their own"),
            settings.auth_failure_limit and f"{settings.auth_failure_limit} failed logins per address",
        )
        if part
    )
    return (
        f"store {url.redacted}; {len(set(tokens.full))} full-access and {len(set(tokens.read_only))}"
        f" read-only static tokens; JWT issuer {jwt}; rate limits {limits or 'off'}"
    )


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def environ_log_format() -> str:
    """PLANTS_LOG_FORMAT as the environment sets it, read before the app is made (its logs are set
    first): `text` where a setting is bad, which the start then reports in one line."""
    try:
        return str(from_environ().get("PLANTS_LOG_FORMAT", "text"))
    except Exception:
        return "text"
