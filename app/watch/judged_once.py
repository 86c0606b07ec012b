"""The writes this process has judged once (woken the watchers they concern), known by their
marks: on a shared store the process hears its own writes twice, from its own signal as each is
made and from its feed listener as the store adds its entry, whichever comes first. The first
wakes the watchers; the second finds the mark here and wakes no one again.

Only a mark judged once is skipped: a write whose store call failed sent no signal, so its entry,
if it was added, is judged by the listener as any other process's is. Marks are unique to one
write (app/store/redis/origins.py), never a plant's id or an event's type. The marks are kept in
two generations of at most `most` each, so that a mark whose second hearing never comes (the
listener was not running, or heard it inside a burst it did not read entry by entry) is
forgotten after twice as many others: forgetting one costs a second wake-up, never an event.
"""

from __future__ import annotations

from app.watch.wake_index import Touched

#: Marks kept per generation: far more than the writes a listener hears between two of its reads.
MOST = 2048


class JudgedOnce:
    """The marks of writes judged once. Not thread-safe: the feed signal holds its lock."""

    def __init__(self, most: int = MOST) -> None:
        self._most = most
        self._new: set[bytes] = set()
        self._old: set[bytes] = set()

    def first(self, changes: list[Touched]) -> list[Touched]:
        """`changes` but those of writes judged already (a change without a mark is kept: it cannot
        be known again); the marks of those kept are kept as judged now."""
        return [change for change in changes if change.mark is None or not self.again(change.mark)]

    def again(self, mark: bytes) -> bool:
        """Whether the write marked `mark` was judged already (then forgotten: it is heard twice
        at most); if not, kept as judged now."""
        if mark in self._new:
            self._new.discard(mark)
            return True
        if mark in self._old:
            self._old.discard(mark)
            return True
        if len(self._new) >= self._most:
            self._old, self._new = self._new, set()
        self._new.add(mark)
        return False
