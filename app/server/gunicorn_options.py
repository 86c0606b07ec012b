"""gunicorn's own options (its command line, GUNICORN_CMD_ARGS) that would break a promise of the
service: refused in the master at start, in one line that names the option, before any worker forks.

The service's GUNICORN_* variables are checked where they are read (app/settings/server.py); these
are gunicorn's settings that no variable of the service sets, which gunicorn accepts and a user may
pass, and which start a service that serves nothing, loses plants, or keeps settings a reload was
meant to replace. So is the one pairing no single setting's check sees: a MAX_CONTENT_LENGTH the
packaged worker's memory budget cannot hold.
"""

from __future__ import annotations

import math
from typing import Any

PREFIX = "Plant Store: refusing to start: "
SHARED = "set PLANTS_STORE_URL to a shared store (redis://...)"


def refusal(cfg: Any, shared: bool, max_body: int, budget: int) -> str | None:
    """Why gunicorn's settings `cfg` must not start the service (`shared`: its store is Redis;
    `max_body`: its MAX_CONTENT_LENGTH; `budget`: the bytes a packaged worker holds, as
    gunicorn_conf.py read GUNICORN_MEMORY_BUDGET)."""
    for problem in (
        _counts(cfg),
        _memory(cfg, shared),
        _preload(cfg),
        _packaged(cfg),
        _body(cfg, max_body, budget),
    ):
        if problem is not None:
            return PREFIX + problem
    return None


def _counts(cfg: Any) -> str | None:
    """gunicorn takes 0 for either: the master listens, and nothing ever answers."""
    if cfg.workers < 1:
        return "gunicorn's --workers is 0: no worker would take a connection. Run 1 or more."
    if cfg.threads < 1:
        return (
            "gunicorn's --threads is 0: no request thread would answer a request. Run 1 or more "
            "(GUNICORN_THREADS)."
        )
    return None


def _memory(cfg: Any, shared: bool) -> str | None:
    """What gives the in-memory store's plants to a worker that does not have them: more workers
    (each its own store), or a worker replaced other than by a reload (it starts empty)."""
    if shared:
        return None
    if cfg.workers != 1:
        return (
            f"{cfg.workers} workers with the in-memory store: each worker would hold a separate "
            f"store. Run one worker (GUNICORN_THREADS sets its concurrency), or {SHARED}."
        )
    if cfg.max_requests:
        # The packaged setting is 0, but gunicorn's command line (or GUNICORN_CMD_ARGS) overrides it.
        return (
            f"gunicorn's --max-requests {cfg.max_requests} recycles the worker, and with the "
            "in-memory store each new worker would start empty, every plant gone. Leave it unset, "
            f"or {SHARED}."
        )
    if cfg.reload:
        # gunicorn's code reloader ends the worker at any change of a file it imported (an upgrade
        # of a package in its virtualenv too): its replacement started empty, without a word. Not
        # offered instead: flask's reloader, a restart too (docs/operations.md "flask run --debug").
        return (
            "gunicorn's --reload restarts the worker whenever a source file changes, and with the "
            "in-memory store the new worker would start empty, every plant gone (as `flask --app "
            "wsgi run --debug`'s reloader does at each edit). Leave it unset, or "
            f"{SHARED}: a reloaded worker then finds every plant."
        )
    return None


def _preload(cfg: Any) -> str | None:
    """gunicorn's --preload builds the app once, in the master: a reload (SIGHUP) forks the new
    workers from that same app, so a token removed from the tokens file was still accepted and a
    new one refused; and the app's threads (the identity provider's keys) would run at the fork."""
    if cfg.preload_app:
        return (
            "gunicorn's --preload builds the app once in the master, and a reload (SIGHUP) would keep "
            "its tokens and settings: a removed token still accepted. Leave it unset: each worker "
            "builds its own app."
        )
    return None


def _is_packaged(cfg: Any) -> bool:
    from app.server.worker import PlantsWorker

    worker = cfg.worker_class
    return isinstance(worker, type) and issubclass(worker, PlantsWorker)


def _packaged(cfg: Any) -> str | None:
    """The packaged worker reads plain HTTP/1.1 alone: a PROXY protocol header or a uwsgi packet
    from the proxy in front made every request a 400. gunicorn's stock workers read both. Nor
    does it serve TLS: the master listened on https, then the worker's boot failed in a traceback
    (the worker still refuses it, under a host's own configuration)."""
    if not _is_packaged(cfg):
        return None
    if cfg.is_ssl:
        return (
            "the packaged worker serves plain HTTP, not TLS (--certfile): end TLS at the reverse proxy "
            "(deploy/nginx-plants.conf), or set GUNICORN_WORKER_CLASS=gthread."
        )
    # A bool before gunicorn 24, then "off", "v1", "v2" or "auto"; no `protocol` before gunicorn 24.
    if getattr(cfg, "proxy_protocol", False) not in (False, "off"):
        return (
            "the packaged worker does not read the PROXY protocol (--proxy-protocol): every request "
            "from the proxy would be a 400. Have the proxy send X-Forwarded-For instead "
            "(PLANTS_TRUSTED_PROXIES), or set GUNICORN_WORKER_CLASS=gthread."
        )
    if getattr(cfg, "protocol", "http") != "http":
        return (
            f"the packaged worker serves HTTP only, not --protocol {cfg.protocol}: every request "
            "would be a 400. Proxy HTTP to it (nginx's proxy_pass), or set GUNICORN_WORKER_CLASS=gthread."
        )
    return None


def _body(cfg: Any, max_body: int, budget: int) -> str | None:
    """The packaged worker displaces the connections holding bytes past its memory budget (app/
    server/worker/loop.py): a body the service takes must fit in it, with a head and a chunked
    body's framing, or one near MAX_CONTENT_LENGTH was closed as it arrived, its client answered
    nothing (neither the answer nor a 413). gthread holds no budget. `budget` is the one the
    worker is given (post_worker_init): gunicorn_conf.py read it from the master's environment
    when gunicorn loaded it, before gunicorn applied its raw_env (`-e`), whose value the worker
    never holds."""
    if not _is_packaged(cfg):
        return None
    from app.server.worker.connection import FRAMING_ALLOWANCE
    from app.server.worker.workers import MAX_HEAD

    mib = 1024 * 1024
    if max_body + MAX_HEAD + FRAMING_ALLOWANCE <= budget:
        return None
    needed = math.ceil((max_body + MAX_HEAD + FRAMING_ALLOWANCE) / mib)
    return (
        f"MAX_CONTENT_LENGTH ({max_body} bytes) does not fit in GUNICORN_MEMORY_BUDGET ({budget // mib} MiB) "
        "with a request's head: a body near the limit would be closed as it arrived, its client "
        f"answered nothing. Raise GUNICORN_MEMORY_BUDGET to {needed} MiB or more in the service's "
        "environment (a worker never holds a value gunicorn's raw_env, -e, sets), or lower "
        "MAX_CONTENT_LENGTH."
    )
