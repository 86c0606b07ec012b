"""A watch's wake-up: the callable its server hands it, filed with the feed signal for the next
change that may concern it, or with the wake gate for the end of a read slot (wake_gate.py) when
its last read found none free; the read slot itself; and, where no server parks the watch, the
wait in its own request thread for the same wake-up, looking meanwhile whether its client left.

The watch (watches.py) decides what to read and what to answer; this decides when it is woken.
"""

from __future__ import annotations

import math
import select
import threading
import time
from collections.abc import Callable
from typing import Any

from app.watch.feed_signal import FeedSignal
from app.watch.filters import EventFilter

#: Where no server parks a watch: how often its thread looks whether its client left.
LEFT_LOOK_SECONDS = 1.0
#: The environ keys of the client's socket: gunicorn's workers' and Werkzeug's development server's.
_SOCKET_KEYS = ("gunicorn.socket", "werkzeug.socket")


def client_left(environ: dict[str, Any]) -> Callable[[], bool] | None:
    """Whether the request's client has closed its side of the connection, asked of its socket as
    the packaged worker's epoll asks of a parked watch's (EPOLLRDHUP; bytes it sent, a pipelined
    request, are no leaving); None where the server hands over no socket."""
    sock = next((environ[key] for key in _SOCKET_KEYS if key in environ), None)
    fileno = getattr(sock, "fileno", None)
    if fileno is None:
        return None

    def left() -> bool:
        try:
            poller = select.poll()
            poller.register(fileno(), select.POLLRDHUP)
            return bool(poller.poll(0))  # POLLHUP and POLLERR are always reported too
        except (OSError, ValueError):  # closed already
            return True

    return left


class NoReadSlot(Exception):
    """No read slot free for a store call: the watch waits for one, parked (`WakeUp.fetch`)."""


class WakeUp:
    """One watch's wake-up and read slot."""

    def __init__(
        self, signal: FeedSignal, only: EventFilter | None, left: Callable[[], bool] | None = None
    ) -> None:
        self.signal, self.only = signal, only
        #: Whether its client left (`client_left`), looked at while it blocks; None: never asked.
        self.left = left
        #: The server's wake-up, as last handed over (None: never).
        self.wake: Callable[[], None] | None = None
        #: No read slot was free: the next wake-up is filed with the gate, not the signal.
        self.awaits_slot = False

    def file(self, wake: Callable[[], None], seen: int, turns: bool = False) -> None:
        """Call `wake` once when the watch has something to read: with the feed signal for the
        next change since version `seen` (feed_signal.py: `FeedSignal.subscribe`; `turns`: the
        sweep calls it for a turn instead), or, when no read slot was free, with the wake gate
        for a slot's end (wake_gate.py: `WakeGate.defer`)."""
        self.wake = wake
        if self.awaits_slot:
            self.awaits_slot = False
            self.signal.gate.defer(wake)
        else:
            self.signal.subscribe(seen, wake, self.only, turns)

    def read_again(self) -> None:
        """The watch reads again: whether a slot is free is asked anew."""
        self.awaits_slot = False

    def cancel(self) -> None:
        """The watch ended: its wake-up is no longer filed anywhere."""
        if self.wake is not None:
            self.signal.unsubscribe(self.wake)
            self.signal.gate.forget(self.wake)

    def fetch(self, fetch: Callable[[Any], Any], position: Any) -> Any:
        """`fetch(position)` in one of the gate's read slots: at most the gate's many at once, so
        that the worker's other threads stay free for requests however slow the store is.
        NoReadSlot when none is free: the watch then waits for one, parked."""
        gate = self.signal.gate
        if not gate.enter(self.wake):
            self.awaits_slot = True
            raise NoReadSlot
        try:
            return fetch(position)
        finally:
            gate.leave()

    def block(self, seen: int, deadline: float) -> bool:
        """Not parked by any server: wait in this request thread, holding it, for the same wake-up
        as a parked watch's (here an Event's `set`) or the `time.monotonic()` deadline. True when
        its client left meanwhile (looked at every LEFT_LOOK_SECONDS): the watch then ends, giving
        back its thread and its place, as a parked one does when the packaged worker sees it."""
        woken = threading.Event()
        wake = woken.set  # one bound method: the signal files and removes it by its id
        self.file(wake, seen)
        look = math.inf if self.left is None else LEFT_LOOK_SECONDS
        try:
            while not woken.wait(max(0.0, min(deadline - time.monotonic(), look))):
                if self.left is None or time.monotonic() >= deadline:
                    return False
                if self.left():
                    return True
            return False
        finally:
            self.signal.unsubscribe(wake)
