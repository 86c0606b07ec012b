"""`python -m app.webhooks` (the console script `plant-store-webhooks`): a deliverer on its own, for
operators who run it apart from the web workers (then set PLANTS_WEBHOOKS_DELIVER=false there).

It reads the same settings as the service, needs a shared store (Redis), and stops on SIGTERM or
Ctrl-C, giving up its leases once the attempts in flight end."""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
import threading
from typing import Any

from app.settings import DEFAULTS, ConfigurationError, from_environ, load_settings
from app.store import store_for
from app.telemetry.logs import configure
from app.webhooks import Deliverer, user_agent


def main() -> int:
    try:
        settings = load_settings({**DEFAULTS, **from_environ()})
        configure(settings.log_format)  # the web workers' format (app/telemetry/logs.py)
        url, store = store_for(settings)
    except ConfigurationError as exc:
        print(f"Plant Store: configuration error: {exc.from_environment()}", file=sys.stderr)
        return 2
    if not url.shared:
        print(
            "Plant Store: a deliverer on its own needs a shared store (PLANTS_STORE_URL=redis://...):"
            " the memory store's endpoints live in the web worker, which delivers them itself.",
            file=sys.stderr,
        )
        return 2
    # PLANTS_WEBHOOKS_DELIVER=false is for the web workers, when this process delivers instead.
    deliverer = Deliverer(
        store, dataclasses.replace(settings, webhooks_deliver=True), user_agent=user_agent()
    )
    done = threading.Event()

    def finish(*_: Any) -> None:
        done.set()

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    deliverer.start()
    logging.getLogger("app.webhooks").info("Plant Store: delivering webhooks from %s", url.redacted)
    done.wait()
    deliverer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
