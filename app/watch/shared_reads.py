"""Reads of the feed shared between watchers at the same position, for one version of the feed.

Woken by one change, watchers mostly stand at the same position and would read the same page:
the first reads it, the others get the same answer. Only positions where more than one watcher
stands are kept, so a stream that starts where no other stands reads on its own and leaves
nothing behind; what is kept is bounded in entries and bytes, least recently used dropped first
(without the bound, streams opened at thousands of distinct positions would grow it without end). A store
failure is shared too: once one read of a version failed, the others of that version fail
without asking the store again (it would make each of them wait for the store's timeout).
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from app.store.base import StoreUnavailableError

#: The most answers kept, and their most bytes (a stream's page of frames is its bytes; a
#: long-poll's page of entries is counted at ENTRY_BYTES an entry).
MAX_ENTRIES = 256
MAX_BYTES = 8 * 1024 * 1024
ENTRY_BYTES = 256


def weight(answer: Any) -> int:
    """The bytes an answer (`(frames or entries, position)`) holds, roughly."""
    body = answer[0] if isinstance(answer, tuple) and answer else answer
    if isinstance(body, (bytes, str)):
        return len(body) + 64
    return ENTRY_BYTES * (len(body) + 1) if isinstance(body, list) else ENTRY_BYTES


class SharedReads:
    """The answers of one version of the feed, by key, where watchers share a position."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._lock = threading.Lock()
        self._version = -1
        self._answers: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._failure: StoreUnavailableError | None = None
        #: How many watchers stand at each position.
        self._standing: Counter[Any] = Counter()

    # --- where watchers stand ------------------------------------------------------------------

    def stand(self, position: Any) -> None:
        with self._lock:
            self._standing[position] += 1

    def leave(self, position: Any) -> None:
        with self._lock:
            self._leave(position)

    def move(self, old: Any, new: Any) -> None:
        with self._lock:
            self._leave(old)
            self._standing[new] += 1

    def _leave(self, position: Any) -> None:
        left = self._standing[position] - 1
        if left > 0:
            self._standing[position] = left
        else:
            del self._standing[position]

    # --- reading -------------------------------------------------------------------------------

    def read(self, key: Any, position: Any, fetch: Callable[[Any], Any], seen: int) -> Any:
        """`fetch(position)`, or what it answered another watcher for `key` at version `seen`;
        raises the version's StoreUnavailableError once one read of it failed."""
        with self._lock:
            if seen > self._version:
                self._answers.clear()
                self._bytes, self._failure, self._version = 0, None, seen
            current = seen == self._version
            if current and self._failure is not None:
                raise self._failure.with_traceback(None)
            if current:
                kept = self._answers.get(key)
                if kept is not None:
                    self._answers.move_to_end(key)
                    return kept[0]
            shared = current and self._standing[position] > 1
        try:
            answer = fetch(position)
        except StoreUnavailableError as exc:
            with self._lock:
                if self._version == seen:
                    self._failure = exc
            raise
        if shared:
            self._keep(key, answer, seen)
        return answer

    def _keep(self, key: Any, answer: Any, seen: int) -> None:
        size = weight(answer)
        if size > self.max_bytes:
            return
        with self._lock:
            if self._version != seen or key in self._answers:
                return
            self._answers[key] = (answer, size)
            self._bytes += size
            while len(self._answers) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, dropped) = self._answers.popitem(last=False)
                self._bytes -= dropped

    @property
    def size(self) -> tuple[int, int]:
        """The answers kept, and their bytes."""
        with self._lock:
            return len(self._answers), self._bytes
