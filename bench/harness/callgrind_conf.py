"""The packaged gunicorn configuration, and one addition for callgrind: a worker that gets a
SIGWINCH (which gunicorn's worker otherwise ignores) calls `os.getpgid`, a C function the service
never calls, before which callgrind dumps its counts (counters.py's CALLGRIND). A forked worker
cannot be reached by callgrind_control (valgrind's gdbserver is the parent's)."""

from __future__ import annotations

import os
import signal
from typing import Any

from app.server import gunicorn_conf
from app.server.gunicorn_conf import *  # noqa: F403


def post_worker_init(worker: Any) -> None:
    gunicorn_conf.post_worker_init(worker)
    signal.signal(signal.SIGWINCH, _mark)


def _mark(signum: int, frame: object) -> None:
    os.getpgid(0)
