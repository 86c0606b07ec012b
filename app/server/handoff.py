"""A reload (SIGHUP, `systemctl reload`) that keeps the memory store's plants and fails no request.

gunicorn's own reload starts the new workers first and then stops the old ones: for a while two
workers accept on the one listening socket. With the memory store each holds its own plants, so
the new worker would start empty and the split-store guard (app/http/split_guard.py) would refuse
requests during the overlap. With the memory store the packaged configuration hands over instead:

1. the master (in gunicorn's `on_reload` hook, before it spawns the new worker) asks for a
   handoff and stops the old worker gracefully: it accepts nothing more, and finishes the
   requests it has;
2. the old worker, its last request answered, writes its store to a snapshot
   (app/store/memory/snapshot.py) in a directory of the master's, mode 0700;
3. the master waits for it to exit, then gunicorn spawns the new worker, which reads the
   snapshot before it accepts its first connection.

Meanwhile connections wait in the listening socket's backlog, which the master keeps open (or
systemd, under socket activation): a client sees a slower answer, not a failed one. A shared
store (Redis) needs none of this: gunicorn's own overlapping reload is kept.
"""

from __future__ import annotations

import logging
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from app.server.directories import workers_directory

log = logging.getLogger("app.server.handoff")

#: Set in the master at start (memory store only), inherited by every worker it forks.
_directory: Path | None = None
#: How long the master waits for the old worker beyond gunicorn's graceful timeout: its snapshot.
SNAPSHOT_SECONDS = 60.0


def _wanted() -> Path | None:
    return None if _directory is None else _directory / "handoff-wanted"


def _snapshot() -> Path | None:
    return None if _directory is None else _directory / "store.snapshot"


def prepare(uid: int | None = None, gid: int | None = None) -> None:
    """In the master, at start, with the memory store: the handoff's directory, owned by the
    workers' user (gunicorn's `user` and `group`, `uid`/`gid` here) when the master runs as
    another (root): a worker could not even look for the snapshot in root's 0700 directory."""
    global _directory
    _directory = workers_directory("plants-handoff-", uid, gid)


def remove() -> None:
    """In the master, at exit."""
    if _directory is not None:
        shutil.rmtree(_directory, ignore_errors=True)


def hand_over(server: Any) -> None:
    """In the master, on reload: stop the old workers and wait until they have written the store."""
    wanted = _wanted()
    if wanted is None:
        return
    wanted.touch()
    old = list(server.WORKERS)
    for pid in old:
        server.kill_worker(pid, signal.SIGTERM)
    deadline = time.monotonic() + server.cfg.graceful_timeout + SNAPSHOT_SECONDS
    while any(pid in server.WORKERS for pid in old):
        server.reap_workers()  # gunicorn reaps from its main loop, which waits for this hook
        if time.monotonic() > deadline:
            server.log.error("Plant Store: the old worker did not hand its store over in time: stopped")
            for pid in old:
                server.kill_worker(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.02)
    wanted.unlink(missing_ok=True)


def write_if_wanted(store: Any) -> None:
    """In a worker that stops: write its store when the master asked for a handoff."""
    wanted, snapshot = _wanted(), _snapshot()
    if wanted is None or snapshot is None or not wanted.exists():
        return
    from app.store.memory import snapshot as snapshots

    count = snapshots.write(store, snapshot)
    log.info("Plant Store: handing %s plants over to the next worker", count)


def read_if_any(store: Any) -> None:
    """In a new worker, before it serves: read the store its predecessor wrote, once."""
    snapshot = _snapshot()
    if snapshot is None or not snapshot.exists():
        return
    from app.store.memory import snapshot as snapshots

    count = snapshots.read_into(store, snapshot)
    snapshot.unlink()
    log.info("Plant Store: took over %s plants from the previous worker", count)
