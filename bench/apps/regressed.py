"""The service with one deliberate regression per create, to show that the whole-process budget
fails on it (`python -m bench process --regress KIND`; tests/integration/test_instruction_budget.py).

The app is the service's own (`wsgi:app`, the same Flask object, so the packaged worker hooks
still find its store and start its deliverer); only its WSGI callable is wrapped, as Flask
documents for middleware. BENCH_REGRESS picks what each `POST /plants` also does:

- `thread`: sets a `threading.Event` that a background thread waits on (a thread woken per create);
- `syscall`: one more system call, `os.getppid()` (glibc does not cache it; strace shows one
  `getppid` per create);
- `instructions`: an empty loop of `burn_turns()` turns, 5% of the instructions
  bench/instruction-budget.json gives a memory create (BENCH_BURN_SHARE, a fraction, for another
  share).

Nothing of the shipped service imports this module: gunicorn loads it only when named
(`regressed:app`, bench/apps/ on its path).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable
from itertools import repeat
from pathlib import Path
from typing import Any

from wsgi import app

REGRESSIONS = ("thread", "syscall", "instructions")
BUDGET = Path(__file__).resolve().parents[1] / "instruction-budget.json"
#: What one turn of `_burner`'s loop executes, counted under callgrind (Python 3.11, the loop
#: warm: 100 loops of 400 and of 4,000 turns, each 74.0 a turn more than empty loops). The loop
#: runs over `itertools.repeat`, which allocates nothing: a `range` past 256 makes an int a turn.
INSTRUCTIONS_PER_TURN = 74

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _woken_thread() -> Callable[[], None]:
    """A daemon thread that waits on an event; the function that wakes it."""
    event = threading.Event()

    def wait() -> None:
        while True:
            event.wait()
            event.clear()

    threading.Thread(target=wait, name="regressed-waiter", daemon=True).start()
    return event.set


def burn_turns(share: float) -> int:
    """The turns of `_burner`'s loop that execute `share` of a memory create's budgeted instructions."""
    create = json.loads(BUDGET.read_text())["process"]["memory"]["create"]["instructions"]
    return round(create * share / INSTRUCTIONS_PER_TURN)


def _burner(turns: int) -> Callable[[], None]:
    def burn() -> None:
        for _ in repeat(None, turns):
            pass

    return burn


def _extra_call() -> None:
    os.getppid()


def _instructions() -> Callable[[], None]:
    return _burner(burn_turns(float(os.environ.get("BENCH_BURN_SHARE", "0.05"))))


def regressed(wsgi_app: WSGIApp, kind: str) -> WSGIApp:
    """`wsgi_app`, with `kind`'s regression done on each create before the request is served."""
    if kind not in REGRESSIONS:
        raise SystemExit(f"BENCH_REGRESS: {kind!r} is none of {', '.join(REGRESSIONS)}")
    extra = {"thread": _woken_thread, "syscall": lambda: _extra_call, "instructions": _instructions}[kind]()

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] == "POST" and environ["PATH_INFO"] == "/plants":
            extra()
        return wsgi_app(environ, start_response)

    return serve


app.wsgi_app = regressed(app.wsgi_app, os.environ.get("BENCH_REGRESS", ""))  # type: ignore[method-assign,assignment]
