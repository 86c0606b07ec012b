"""How long each cyclic-GC collection takes, for the benchmarks that look for pauses."""

from __future__ import annotations

import gc
import time
from typing import Any


class CollectionTimer:
    """A `gc.callbacks` entry that times every collection; `install()` adds it."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds), one per collection
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._started))

    def install(self) -> CollectionTimer:
        gc.callbacks.append(self)
        return self

    def summary(self) -> dict[str, dict[str, float]]:
        """Per generation that collected: how many collections, and the longest in ms."""
        found = {}
        for generation in (0, 1, 2):
            pauses = [pause for g, pause in self.pauses if g == generation]
            if pauses:
                found[str(generation)] = {"n": len(pauses), "max_ms": max(pauses) * 1e3}
        return found
