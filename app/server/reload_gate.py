"""A reload is a transaction, as nginx's is: what the service refuses never replaces what runs.

gunicorn's reload (SIGHUP) reads the settings again, spawns new workers and stops the old ones,
whatever the new workers will make of the settings: a token file caught mid-rewrite (empty) or
with a line the service refuses left no worker able to boot, and with the memory store the old
worker had already handed its plants over. So the master hears SIGHUP first (its handler wraps
gunicorn's, installed in the documented `when_ready` hook, after gunicorn has set its own): it
checks the settings as a worker will, and with the memory store has the old worker reserve its
snapshot's space (handoff.py). Only then is gunicorn's handler called, and the reload goes on as
gunicorn does it. When either step fails, gunicorn never hears of the reload: the old worker
serves on with its plants, its settings and its sockets, and one ERROR names the setting (never
its value) or the reason.
"""

from __future__ import annotations

import signal
from typing import Any

from app.server import handoff
from app.server.settings_check import checked_settings
from app.settings import ConfigurationError

REFUSED = "Plant Store: reload refused, the running worker serves on with its settings and its plants: %s"


def refusal() -> str | None:
    """Why the reload asked for now must not go on; None when it may."""
    try:
        checked_settings()
    except ConfigurationError as exc:
        return f"configuration error: {exc}"
    return handoff.ask_to_prepare()


def install(server: Any) -> None:
    """In the master, once gunicorn has set its signal handlers (`when_ready`)."""
    reload = signal.getsignal(signal.SIGHUP)

    def on_sighup(signum: int, frame: Any) -> None:
        # Python runs this in the master's main thread between two steps of its loop, as it runs
        # gunicorn's own handler: the checks may read files and log.
        problem = refusal()
        if problem is not None:
            server.log.error(REFUSED, problem)
        elif callable(reload):
            reload(signum, frame)

    signal.signal(signal.SIGHUP, on_sighup)
