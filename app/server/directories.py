"""Directories the master makes for its workers at start: the reload's handoff (handoff.py) and
prometheus_client's multiprocess files (gunicorn_conf.py). With gunicorn's `user` and `group`
the master runs as root and each worker as that user, who could neither read nor write in
root's private (0700) directory; so each is given to the workers' user, and stays private.

The handoff's directory has a fixed name, so that a snapshot a master left unread (it stopped
between the old worker's write and the new worker's read) is found by the next start. The
metrics' files go to another file system where there is one (/dev/shm), so that a snapshot
filling its directory cannot fill theirs: a worker that writes a count into a memory-mapped page
of a full file system dies of SIGBUS, and so would each worker started after it."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

#: Where the metrics' files go when it is a file system of its own (Linux's shared memory).
SHARED_MEMORY = Path("/dev/shm")  # noqa: S108 - a private 0700 directory is made in it
#: The room /dev/shm must have free to be used: each worker's files start at 64 KiB a kind of
#: metric and double as they fill, and a page that cannot be had kills the worker.
METRICS_ROOM_BYTES = 8 << 20


def _give(directory: Path, uid: int | None, gid: int | None) -> None:
    if uid is not None and gid is not None and (uid, gid) != (os.geteuid(), os.getegid()):
        os.chown(directory, uid, gid)


def workers_directory(prefix: str, uid: int | None, gid: int | None, parent: Path | None = None) -> Path:
    """A new directory (in `parent`, or the temporary directory), mode 0700, owned by the
    workers' user (gunicorn's `cfg.uid`, `cfg.gid`) when the master runs as another."""
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    _give(directory, uid, gid)
    return directory


def handoff_parent() -> Path:
    """systemd's RuntimeDirectory= (its first) when the unit sets one, else the temporary directory."""
    runtime = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    return Path(runtime or tempfile.gettempdir())


def handoff_key(cwd: Path, bind: list[str]) -> str:
    """What names a service's handoff directory: its working directory and its addresses."""
    return hashlib.sha256(f"{cwd}\0{' '.join(bind)}".encode()).hexdigest()[:16]


def handoff_directory(bind: list[str], uid: int | None, gid: int | None) -> Path:
    """The handoff's directory of this service: in systemd's RuntimeDirectory= when the unit sets
    one, else in the temporary directory, named after the working directory and the addresses
    (two services of one user never share it). Made 0700 for the workers' user, or checked to be
    such a directory (never a link or another user's) when it is already there."""
    directory = handoff_parent() / f"plant-store-handoff-{handoff_key(Path.cwd(), bind)}"
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        status = directory.lstat()
        owner = uid if uid is not None else os.geteuid()
        if not stat.S_ISDIR(status.st_mode) or status.st_uid not in (owner, os.geteuid()):
            raise SystemExit(f"Plant Store: {directory} is not the service's own directory") from None
        directory.chmod(0o700)
    except OSError as exc:  # missing, not a directory, read-only: one line, not a traceback
        setting = "RUNTIME_DIRECTORY" if os.environ.get("RUNTIME_DIRECTORY") else "TMPDIR"
        raise SystemExit(
            f"Plant Store: configuration error: {setting} names {str(directory.parent)!r}, where the "
            f"reload's snapshot directory cannot be made ({exc.strerror})"
        ) from None
    _give(directory, uid, gid)
    return directory


def metrics_parent() -> Path | None:
    """Where the metrics' directory goes: /dev/shm when it is writable, another file system than
    the handoff's, and has METRICS_ROOM_BYTES free; else the temporary directory (None). Other
    processes share /dev/shm (a pod's containers): one that filled it would have every worker
    die of SIGBUS at its first count, and each one started after it."""
    try:
        apart = SHARED_MEMORY.stat().st_dev != handoff_parent().stat().st_dev
        status = os.statvfs(SHARED_MEMORY)
    except OSError:
        return None
    room = status.f_bavail * status.f_frsize >= METRICS_ROOM_BYTES
    return SHARED_MEMORY if apart and room and os.access(SHARED_MEMORY, os.W_OK | os.X_OK) else None
