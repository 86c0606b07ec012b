"""gunicorn configuration for bench/tail.py: the packaged one, plus two probes and the levers.

Each worker records how long every cyclic-GC collection took (gc.callbacks) and how long each
connection's turn in a request thread took (from the poller handing it over to the response
sent), and writes them, when it exits, to `$TAIL_PROBE_DIR`. The levers are environment
variables: LEVER_NO_FREEZE (undo the packaged gc.freeze()), LEVER_GC_DISABLE, LEVER_SWITCH
(seconds, for sys.setswitchinterval), LEVER_THREADS and LEVER_GEN0 (gen-0 threshold).
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

if os.environ.get("LEVER_THREADS"):
    threads = int(os.environ["LEVER_THREADS"])

_pauses: list[tuple[int, float]] = []
_turns: list[float] = []
_started: list[float] = [0.0]


def _record(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        _pauses.append((info["generation"], time.perf_counter() - _started[0]))


def _timed(handle: Any) -> Any:
    clock = time.perf_counter

    def timed(conn: Any) -> bool:
        started = clock()
        try:
            return handle(conn)
        finally:
            _turns.append(clock() - started)

    return timed


def post_worker_init(worker: Any) -> None:
    packaged.post_worker_init(worker)
    if os.environ.get("LEVER_NO_FREEZE"):
        gc.unfreeze()
    if os.environ.get("LEVER_GC_DISABLE"):
        gc.disable()
    if os.environ.get("LEVER_SWITCH"):
        sys.setswitchinterval(float(os.environ["LEVER_SWITCH"]))
    if os.environ.get("LEVER_GEN0"):
        gc.set_threshold(int(os.environ["LEVER_GEN0"]), *gc.get_threshold()[1:])
    gc.callbacks.append(_record)
    worker._handle = _timed(worker._handle)


def _quantile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1e3


def worker_exit(server: Any, worker: Any) -> None:
    found: dict[str, Any] = {"frozen": gc.get_freeze_count()}
    for generation in (0, 1, 2):
        pauses = sorted(pause for g, pause in _pauses if g == generation)
        if pauses:
            found[str(generation)] = {"n": len(pauses), "max_ms": pauses[-1] * 1e3}
    turns = sorted(_turns)
    if turns:
        found["turn"] = {key: _quantile(turns, share) for key, share in (("p50", 0.5), ("p99", 0.99))}
    name = os.environ.get("TAIL_PROBE_NAME", "worker")
    with open(os.path.join(os.environ["TAIL_PROBE_DIR"], f"{name}-{os.getpid()}.json"), "w") as file:
        json.dump(found, file)
