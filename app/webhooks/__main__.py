"""`python -m app.webhooks` (the console script `plant-store-webhooks`): a deliverer on its own, for
operators who run it apart from the web workers (then set PLANTS_WEBHOOKS_DELIVER=false there).

It reads the same settings as the service, needs a shared store (Redis), and stops on SIGTERM or
Ctrl-C, giving up its leases once the attempts in flight end; SIGHUP reads the settings again."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import threading
from typing import Any

from app.settings import DEFAULTS, ConfigurationError, Settings, from_environ, load_settings
from app.settings.schema import FIELDS
from app.store import PlantStore, StoreUrl, store_for
from app.telemetry.logs import configure
from app.watch.feed_signal import FeedSignal
from app.webhooks import Deliverer, user_agent

#: The settings that shape a deliverer on its own, named in --help with their defaults.
HELP_SETTINGS = ("PLANTS_STORE_", "PLANTS_WEBHOOKS_", "PLANTS_LOG_FORMAT")


def _shown(default: Any) -> str:
    if isinstance(default, bool):
        return str(default).lower()
    return "(none)" if default in (None, ()) else str(default)


def _parser() -> argparse.ArgumentParser:
    defaults = "\n".join(
        f"  {name:<34} {_shown(FIELDS[name].load_default)}"
        for name in FIELDS
        if name.startswith(HELP_SETTINGS)
    )
    return argparse.ArgumentParser(
        prog="plant-store-webhooks",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Deliver the Plant Store's webhooks apart from the web workers (docs/webhooks.md).\n"
            "Reads the service's settings from the environment; needs a shared store\n"
            "(PLANTS_STORE_URL=redis://... or PLANTS_STORE_URL_FILE) and the service's tokens\n"
            "(PLANTS_API_TOKENS or PLANTS_API_TOKENS_FILE). Set PLANTS_WEBHOOKS_DELIVER=false on\n"
            "the web workers. Stops on SIGTERM or Ctrl-C once the attempts in flight end;\n"
            "SIGHUP reads the settings again (refused settings keep the running ones)."
        ),
        epilog=f"settings (environment, default):\n{defaults}\n\n"
        "The README's settings table says what each does.",
    )


class _Refused(Exception):
    """Settings a deliverer cannot start with: its message is for the operator."""


def _prepared() -> tuple[StoreUrl, PlantStore, Settings]:
    """The settings read now and the store they name; _Refused when no deliverer can run on them."""
    try:
        settings = load_settings({**DEFAULTS, **from_environ()})
        url, store = store_for(settings)
    except ConfigurationError as exc:
        raise _Refused(f"Plant Store: configuration error: {exc.from_environment()}") from None
    if not url.shared:
        store.close()
        raise _Refused(
            "Plant Store: a deliverer on its own needs a shared store (PLANTS_STORE_URL=redis://...):"
            " the memory store's endpoints live in the web worker, which delivers them itself."
        )
    # PLANTS_WEBHOOKS_DELIVER=false is for the web workers, when this process delivers instead.
    return url, store, dataclasses.replace(settings, webhooks_deliver=True)


class _Running:
    """One deliverer with the feed's listener that wakes it."""

    def __init__(self, url: StoreUrl, store: PlantStore, settings: Settings) -> None:
        configure(settings.log_format)  # the web workers' format (app/telemetry/logs.py)
        self.store = store
        self.deliverer = Deliverer(store, settings, user_agent=user_agent())
        # Every write is another process's here: the feed's listener hears them as they are made,
        # as a web worker's does once it has an endpoint (else each waits for the look every IDLE_S).
        self.feed_signal = FeedSignal(
            store.feed_listener, max_watchers=0, max_per_caller=0, cheap_to_listen=True
        )
        self.feed_signal.observe(self.deliverer.wake)
        self.deliverer.on_delivering = self.feed_signal.listen
        self.deliverer.start()
        logging.getLogger("app.webhooks").info("Plant Store: delivering webhooks from %s", url.redacted)

    def stop(self) -> None:
        self.deliverer.stop()
        self.feed_signal.close()
        self.store.close()


def main(argv: list[str] | None = None) -> int:
    _parser().parse_args(argv)  # --help prints the usage and exits 0; any argument is refused
    asked: list[int] = []
    signalled = threading.Event()

    def note(number: int, _frame: Any) -> None:
        asked.append(number)
        signalled.set()

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, note)
    try:
        running = _Running(*_prepared())
    except _Refused as exc:
        print(exc, file=sys.stderr)
        return 2
    while True:
        signalled.wait()
        signalled.clear()
        if any(number != signal.SIGHUP for number in asked):
            break
        asked.clear()
        # SIGHUP, as `systemctl reload` and a closed terminal send it: the settings read again (a
        # `_FILE` setting's file may have changed). Settings that fail keep the running deliverer;
        # else its attempts in flight end first, so that no event goes out from the two at once.
        try:
            prepared = _prepared()
        except _Refused as exc:
            logging.getLogger("app.webhooks").error("Reload refused, delivering as before: %s", exc)
            continue
        running.stop()
        running = _Running(*prepared)
    running.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
