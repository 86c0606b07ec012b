"""gunicorn configuration for bench/gc_pauses.py: the packaged one, plus a probe and the levers.

Each worker records how long every cyclic-GC collection took (gc.callbacks) and writes, when it
exits, the count, the longest and the total per generation to `$GC_PAUSES_DIR`. The levers are
set by environment variables: GC_LEVER_FREEZE, GC_LEVER_DISABLE, GC_LEVER_SWITCH (seconds, for
sys.setswitchinterval) and GC_LEVER_THREADS.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

from app.server import gunicorn_conf as packaged
from app.server.gunicorn_conf import *  # noqa: F403 (the packaged settings, then these)

if os.environ.get("GC_LEVER_THREADS"):
    threads = int(os.environ["GC_LEVER_THREADS"])

_pauses: list[tuple[int, float]] = []
_started: list[float] = [0.0]


def _record(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        _pauses.append((info["generation"], time.perf_counter() - _started[0]))


def post_worker_init(worker: Any) -> None:
    gc.unfreeze()  # measure from the same start, whatever the packaged hook does
    packaged.post_worker_init(worker)
    if not os.environ.get("GC_LEVER_FREEZE"):
        gc.unfreeze()
    if os.environ.get("GC_LEVER_DISABLE"):
        gc.disable()
    if os.environ.get("GC_LEVER_SWITCH"):
        sys.setswitchinterval(float(os.environ["GC_LEVER_SWITCH"]))
    gc.callbacks.append(_record)


def worker_exit(server: Any, worker: Any) -> None:
    found: dict[str, Any] = {"frozen": gc.get_freeze_count()}
    for generation in (0, 1, 2):
        pauses = sorted(pause for g, pause in _pauses if g == generation)
        if pauses:
            found[str(generation)] = {
                "n": len(pauses),
                "max_ms": pauses[-1] * 1e3,
                "total_ms": sum(pauses) * 1e3,
            }
    name = os.environ.get("GC_PAUSES_NAME", "worker")
    with open(os.path.join(os.environ["GC_PAUSES_DIR"], f"{name}-{os.getpid()}.json"), "w") as file:
        json.dump(found, file)
