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
from bench.gc_probe import CollectionTimer

if os.environ.get("LEVER_THREADS"):
    threads = int(os.environ["LEVER_THREADS"])

_collections = CollectionTimer()
_turns: list[float] = []


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
    _collections.install()
    worker._handle = _timed(worker._handle)


def _quantile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1e3


def worker_exit(server: Any, worker: Any) -> None:
    found: dict[str, Any] = {"frozen": gc.get_freeze_count(), **_collections.summary()}
    turns = sorted(_turns)
    if turns:
        found["turn"] = {key: _quantile(turns, share) for key, share in (("p50", 0.5), ("p99", 0.99))}
    name = os.environ.get("TAIL_PROBE_NAME", "worker")
    with open(os.path.join(os.environ["TAIL_PROBE_DIR"], f"{name}-{os.getpid()}.json"), "w") as file:
        json.dump(found, file)
