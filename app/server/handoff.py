"""A reload (SIGHUP, `systemctl reload`) that keeps the memory store's plants and fails no request.

gunicorn's own reload starts the new workers first and then stops the old ones: for a while two
workers accept on the one listening socket. With the memory store each holds its own plants, so
the new worker would start empty and the split-store guard (app/http/split_guard.py) would refuse
requests during the overlap. With the memory store the packaged configuration hands over instead,
as a transaction (reload_gate.py runs the first step before gunicorn hears of the reload):

1. prepare: the master asks the old worker (SIGWINCH, which gunicorn's workers otherwise ignore)
   to reserve its snapshot's space while it still serves; a worker that cannot (ENOSPC, EIO)
   says why, and the reload is refused: the old worker serves on;
2. hand over (gunicorn's `on_reload` hook, before it spawns the new worker): the master stops the
   old worker gracefully (SIGTERM: it accepts nothing more and finishes the requests it has);
   its last request answered, it writes its store into the reserved file
   (app/store/memory/snapshot.py), in a directory of the service's, mode 0700;
3. the master waits for it to exit, then gunicorn spawns the new worker, which reads the
   snapshot before it accepts its first connection, and deletes it once read.

Meanwhile connections wait in the listening socket's backlog, which the master keeps open (or
systemd, under socket activation): a client sees a slower answer, not a failed one. A shared
store (Redis) needs none of this: gunicorn's own overlapping reload is kept.

The master knows its workers through gunicorn's documented server hooks (`pre_fork` gives each
worker object, whose `pid` the master sets; `child_exit` reports its end) and signals them as
gunicorn documents; it waits for an exit with `waitid(WNOWAIT)`, which leaves the child for
gunicorn's own reaping.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

from app.server.directories import handoff_directory

log = logging.getLogger("app.server.handoff")

#: Set in the master at start (memory store only), inherited by every worker it forks.
_directory: Path | None = None
#: The master's workers (gunicorn's worker objects), from pre_fork until child_exit.
_workers: list[Any] = []
#: How long the master waits for the old worker beyond gunicorn's graceful timeout: its snapshot.
SNAPSHOT_SECONDS = 60.0
#: How long the master waits for the old worker to reserve its snapshot's space.
PREPARE_SECONDS = 30.0
SNAPSHOT = "store.snapshot"


def _path(name: str) -> Path | None:
    return None if _directory is None else _directory / name


def prepare(bind: list[str], uid: int | None = None, gid: int | None = None) -> Path:
    """In the master, at start, with the memory store: the handoff's directory, owned by the
    workers' user (gunicorn's `user` and `group`, `uid`/`gid` here) when the master runs as
    another (root): a worker could not even look for the snapshot in root's 0700 directory.
    What an earlier master left half done is cleared; a snapshot it left unread stays, for the
    first worker to read."""
    global _directory
    _directory = handoff_directory(bind, uid, gid)
    _clear_transient()
    snapshot = _directory / SNAPSHOT
    if snapshot.exists():
        log.warning("Plant Store: found the unread snapshot %s: the first worker reads it", snapshot)
    return _directory


def _clear_transient() -> None:
    """The handoff's flags and answers, and a reservation never filled: never a snapshot, and
    never a flag of a worker that still runs. Two masters share the directory during gunicorn's
    binary upgrade (SIGUSR2): the new one's start, or the old one's exit, took the other's worker's
    `ready-` flag, and that master's next reload waited 30 s for it and was refused."""
    assert _directory is not None
    for pattern in ("handoff-wanted", "prepared-*", "ready-*", "*.tmp", "*.partial"):
        for path in _directory.glob(pattern):
            if not _of_a_running_worker(path.name):
                path.unlink(missing_ok=True)


def _of_a_running_worker(name: str) -> bool:
    """Whether `name` is a worker's flag or answer (`ready-<pid>`, `prepared-<pid>[.tmp]`) and
    that process still runs (this master's, or another's sharing the directory)."""
    match = re.fullmatch(r"(?:ready|prepared)-(\d+)(?:\.tmp)?", name)
    if match is None:
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: not a worker of this service
        return False
    return True


def remove() -> None:
    """In the master, at exit: the directory goes, unless it holds a snapshot nobody read."""
    if _directory is None or not _directory.is_dir():
        return  # a second master (SIGUSR2's) shares it, and the first to stop removed it
    for worker in list(_workers):  # stopped, killed at the graceful timeout, perhaps not yet reaped
        forget(worker)
    _clear_transient()
    kept = sorted(_directory.iterdir())
    unread = [path for path in kept if path.name.startswith(SNAPSHOT)]
    if unread:
        names = ", ".join(str(path) for path in unread)
        log.error("Plant Store: keeping the unread snapshot %s: the next start reads it", names)
        return
    if kept:
        return  # another master's workers' flags (SIGUSR2): that master removes it at its exit
    _directory.rmdir()


def track(worker: Any) -> None:
    """gunicorn's pre_fork: the master will know this worker's pid once it has forked."""
    _workers.append(worker)


def forget(worker: Any) -> None:
    """gunicorn's child_exit (and worker_exit, for a worker it found gone)."""
    if worker in _workers:
        _workers.remove(worker)
    for name in (f"ready-{worker.pid}", f"prepared-{worker.pid}"):
        flag = _path(name)
        if flag is not None:
            flag.unlink(missing_ok=True)


def serving(worker_pid: int) -> None:
    """In a worker, once it listens for the master's SIGWINCH (post_worker_init)."""
    ready = _path(f"ready-{worker_pid}")
    if ready is not None:
        ready.touch()


def _live_pids() -> list[int]:
    return [worker.pid for worker in _workers if worker.pid and not _exited(worker.pid)]


def _exited(pid: int) -> bool:
    """Whether the child `pid` has ended, leaving it for gunicorn to reap (WNOWAIT)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already reaped
        return True


def ask_to_prepare() -> str | None:
    """In the master, before a reload: have each worker reserve its snapshot's space while it
    serves (one still starting first finishes its start). None when they all did; else why not
    (the reload is then refused)."""
    if _directory is None:
        return None
    deadline = time.monotonic() + PREPARE_SECONDS
    for pid in _live_pids():
        ready, answer = _directory / f"ready-{pid}", _directory / f"prepared-{pid}"
        problem = _wait_for(ready, pid, deadline, "start")
        if problem is None:
            answer.unlink(missing_ok=True)
            os.kill(pid, signal.SIGWINCH)
            problem = _wait_for(answer, pid, deadline, "reserve its snapshot's space")
        if problem is None:
            problem = answer.read_text()
            answer.unlink()
        if problem:
            return problem
    return None


def _wait_for(path: Path, pid: int, deadline: float, what: str) -> str | None:
    """Wait until the worker `pid` has made `path`; else why it did not."""
    while not path.exists():
        if _exited(pid):
            return f"the worker (pid {pid}) stopped"
        if time.monotonic() > deadline:
            return f"the worker (pid {pid}) did not {what} in time"
        time.sleep(0.02)
    return None


def prepare_in_worker(store: Any) -> None:
    """In a worker, on the master's SIGWINCH: reserve the snapshot's space, and answer."""
    snapshot, answer = _path(SNAPSHOT), _path(f"prepared-{os.getpid()}")
    if snapshot is None or answer is None:
        return
    from app.store.memory import snapshot as snapshots

    wanted = _path("handoff-wanted")
    if wanted is not None and wanted.exists():  # stopping: its snapshot is being written
        problem = "a handoff is under way"
    else:
        try:
            size = snapshots.reserve(store, snapshot)
            problem = ""
            log.info("Plant Store: reserved %s bytes for the handoff's snapshot", size)
        except OSError as exc:
            problem = f"the handoff's snapshot does not fit in {snapshot.parent}: {exc.strerror}"
    temporary = answer.with_suffix(".tmp")
    temporary.write_text(problem)
    temporary.replace(answer)  # the master reads a whole answer or none


def hand_over(server: Any) -> None:
    """In the master, on reload (the space reserved): stop the old workers and wait until they
    have written the store."""
    wanted = _path("handoff-wanted")
    if wanted is None:
        return
    wanted.touch()
    old = _live_pids()
    for pid in old:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + server.cfg.graceful_timeout + SNAPSHOT_SECONDS
    while not all(_exited(pid) for pid in old):
        if time.monotonic() > deadline:
            server.log.error("Plant Store: the old worker did not hand its store over in time: stopped")
            for pid in old:
                os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.02)
    wanted.unlink(missing_ok=True)
    snapshot = _path(SNAPSHOT)
    if old and snapshot is not None and not snapshot.exists():
        # Killed (SIGKILL, the OOM killer) or its write failed: say so where the reload is logged.
        server.log.error(
            "Plant Store: the old worker stopped without handing its plants over (no snapshot in %s):"
            " the new worker starts empty",
            snapshot.parent,
        )


def write_if_wanted(store: Any) -> None:
    """In a worker that stops: write its store when the master asked for a handoff. A write that
    fails leaves no partial file, and says so in an ERROR: the next worker starts empty."""
    wanted, snapshot = _path("handoff-wanted"), _path(SNAPSHOT)
    if wanted is None or snapshot is None or not wanted.exists():
        return
    from app.store.memory import snapshot as snapshots

    try:
        count = snapshots.write(store, snapshot)
    except OSError as exc:
        log.error(
            "Plant Store: the handoff's snapshot could not be written whole to %s (%s): the plants "
            "were not handed over",
            snapshot.parent,
            exc.strerror,
        )
        return
    log.info("Plant Store: handing %s plants over to the next worker", count)


def read_if_any(store: Any) -> None:
    """In a new worker, before it serves: read the store its predecessor wrote, once. A snapshot
    that cannot be read is kept, renamed, and named in an ERROR: never deleted unread."""
    snapshot = _path(SNAPSHOT)
    if snapshot is None or not snapshot.exists():
        return
    from app.store.memory import snapshot as snapshots

    try:
        count = snapshots.read_into(store, snapshot)
    except Exception as exc:  # a snapshot of another version, or damaged: kept for its operator
        kept = snapshot.with_name(f"{SNAPSHOT}.unread-{int(time.time())}")
        snapshot.replace(kept)
        log.error("Plant Store: could not read the snapshot, kept as %s: %s", kept, type(exc).__name__)
        return
    snapshot.unlink()
    log.info("Plant Store: took over %s plants from the snapshot %s", count, snapshot)
