"""Never serve a per-process store (the memory store) from several processes: one id would get
two owners. The guard reads the WSGI environ and gunicorn's process tree, which the store never
sees; the app holds one for a store that is not `shared` (app/extension.py).

The packaged gunicorn configuration refuses more than one worker at start and holds at one on
SIGTTIN. This guard covers every other way of starting, on every request that reaches the
memory store:

- gunicorn started with several workers sets `wsgi.multiprocess`;
- gunicorn given SIGTTIN without the packaged configuration does not, so under gunicorn the
  guard also asks whether the master has other workers (from /proc). It asks again at most once a
  second while the answer is "no other", and on every request while it is "others".

A refused request is a JSON 503 (app/errors.py's SplitStoreRefused: the process refuses, as
`/readyz` says with the same reason, so that a load balancer sends it nothing) and one log line
that names the operation refused and says what to do (app/plants/__init__.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RECHECK_SECONDS = 1.0


#: Why a split store is refused, and what to do: in the refusal's log line and in `/readyz`.
SPLIT_STORE = (
    "this server runs several worker processes, and the in-memory store would be split between"
    " them. Run one worker, or set PLANTS_STORE_URL to a shared store (redis://...)"
)


class SplitStoreError(Exception):
    """A per-process store asked to serve from one of several processes."""

    def __init__(self) -> None:
        super().__init__(SPLIT_STORE)


class SplitStoreGuard:
    """One app's guard for its in-memory store."""

    def __init__(self) -> None:
        self._alone_until = 0.0

    def check(self, environ: Mapping[str, Any]) -> None:
        """Raise SplitStoreError when another process may be serving another store."""
        if environ.get("wsgi.multiprocess") or self._gunicorn_has_other_workers(environ):
            raise SplitStoreError()

    def _gunicorn_has_other_workers(self, environ: Mapping[str, Any]) -> bool:
        now = time.monotonic()
        if now < self._alone_until or not environ.get("SERVER_SOFTWARE", "").startswith("gunicorn"):
            return False
        master = os.getppid()
        try:
            workers = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        except OSError:  # no /proc here: the other checks stand
            return False
        if len(workers) > 1:
            return True
        self._alone_until = now + RECHECK_SECONDS
        return False
