"""A reload is a transaction, as nginx's is: what the service refuses never replaces what runs.

gunicorn's reload (SIGHUP) reads the settings again, spawns new workers and stops the old ones,
whatever the new workers will make of the settings: a token file caught mid-rewrite (empty) or
with a line the service refuses left no worker able to boot, and with the memory store the old
worker had already handed its plants over. So the master hears SIGHUP first (its handler wraps
gunicorn's, installed in the documented `when_ready` hook, after gunicorn has set its own): it
reads gunicorn's configuration again as gunicorn's reload will (a file's `raw_env` sets the new
workers' environment, and its options are refused as at start), checks the settings as a worker
will, and with the memory store has the old worker reserve its snapshot's space (handoff.py).
Only then is gunicorn's handler called, and the reload goes on as gunicorn does it. When either
step fails, gunicorn never hears of the reload: the old worker serves on with its plants, its
settings and its sockets, and one ERROR names the setting (never its value) or the reason.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from app.server import gunicorn_options, handoff
from app.server.settings_check import AT_RELOAD, accept_checked, checked_settings
from app.settings import ConfigurationError

#: Set from the moment a reload is let through until its handoff is done (`finished`).
_under_way = False
REFUSED = "Plant Store: reload refused, the running worker serves on with its settings and its plants: %s"


def refusal(budget: int) -> str | None:
    """Why the reload asked for now must not go on; None when it may. `budget`: the bytes the new
    packaged workers hold, as the master read GUNICORN_MEMORY_BUDGET at its start (post_worker_init
    gives them that one, whatever the file's raw_env says)."""
    try:
        cfg = next_config()
    except SystemExit:  # gunicorn printed why, and its own reload would have exited the master
        return "gunicorn's configuration could not be read again (gunicorn's message is above)"
    except Exception as exc:
        return f"gunicorn's configuration could not be read again ({type(exc).__name__}: {exc})"
    try:
        # The environment the new workers get: the master's, and the file's raw_env (`-e`) on it.
        settings, url = checked_settings({**os.environ, **cfg.env}, refused=AT_RELOAD)
    except ConfigurationError as exc:
        return f"configuration error: {exc}"
    problem = gunicorn_options.refusal(cfg, url.shared, settings.max_content_length, budget)
    if problem is not None:
        return problem
    return handoff.ask_to_prepare()


def next_config() -> Any:
    """gunicorn's settings as its reload will read them again (its command line, its configuration
    file and GUNICORN_CMD_ARGS), read as the `gunicorn` command reads them, by an application object
    of its own (gunicorn's WSGIApplication): the running master's settings are left as they are."""
    from gunicorn.app.wsgiapp import WSGIApplication

    return WSGIApplication("%(prog)s [OPTIONS] [APP_MODULE]").cfg


def install(server: Any, budget: int) -> None:
    """In the master, once gunicorn has set its signal handlers (`when_ready`); `budget` as in
    `refusal`."""
    reload = signal.getsignal(signal.SIGHUP)

    def on_sighup(signum: int, frame: Any) -> None:
        # Python runs this in the master's main thread between two steps of its loop, as it runs
        # gunicorn's own handler: the checks may read files and log.
        global _under_way
        if _under_way:
            # This handler may run inside the checks of an earlier SIGHUP, or in the handoff's
            # wait of the reload it let through: a second handoff would have the stopping worker
            # reserve again as it writes.
            server.log.error(REFUSED, "another reload is under way: ask again once it is done")
            return
        _under_way = True
        try:
            problem = refusal(budget)
        except Exception as exc:  # whatever it is, the running worker must not be the price
            problem = f"the reload could not be checked ({type(exc).__name__}: {exc})"
        if problem is not None:
            _under_way = False
            server.log.error(REFUSED, problem)
        elif callable(reload):
            accept_checked()  # the new workers read the files as checked now
            reload(signum, frame)  # gunicorn queues it; on_reload calls finished()
        else:
            _under_way = False

    signal.signal(signal.SIGHUP, on_sighup)


def finished() -> None:
    """gunicorn's on_reload hook has run (the handoff done): the next SIGHUP is checked anew."""
    global _under_way
    _under_way = False
