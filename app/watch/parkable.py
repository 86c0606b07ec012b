"""What the packaged worker offers an app beyond WSGI: an answer that waits without a thread.

The worker puts `PARKING` (true) in the environ. An app that sees it may return, instead of a
plain iterable, one that can wait (`ParkableAnswer`): besides `__next__` and `close`, it has

- `subscribe(wake)`: before it parks, the worker hands over a callable; the iterable calls it
  once, from any thread, when it has something to give (at once if it already has);
- `deadline()`: the `time.monotonic()` by which the worker asks again anyway (a heartbeat, the
  end of a wait);
- `stop()`: the worker is stopping: the next `__next__` ends the answer promptly;
- `streaming`: True to send each chunk as it comes (chunked, then close), False to collect the
  whole answer and send it at its end (with its Content-Length).

`__next__` returning `b""` means "nothing yet": the worker parks the connection, on its epoll,
until `wake`, the deadline, or the client leaving. The worker defines the same key and protocol
on its side (app/server/worker/parking.py: `Parking.start` parks; loop.py: `Registry.wake` wakes): it
imports nothing of the service, and the service imports nothing of the server, so each holds its
copy; tests/unit/test_watch_parking.py keeps the two keys equal. The service's answers that can
wait are app/watch/watches.py's `LongPoll` and `EventStream`, made by app/plants/events.py's
`_watch`, which reads `PARKING`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

#: The environ key by which the worker offers to park an answer.
PARKING = "plants.worker.parking"


class ParkableAnswer(Protocol):
    """An app's iterable that can wait (see the module docstring)."""

    streaming: bool

    def __next__(self) -> bytes: ...

    def subscribe(self, wake: Callable[[], None]) -> None: ...

    def deadline(self) -> float: ...

    def stop(self) -> None: ...

    def close(self) -> Any: ...
