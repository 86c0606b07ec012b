"""prometheus_client's multiprocess files, kept bounded: each gunicorn worker writes its counts to
files of its own (`counter_<pid>.db`, `histogram_<pid>.db`) in PROMETHEUS_MULTIPROC_DIR, and a
dead worker's files must stay, since its counts are part of the totals a scrape sums. Left alone,
the directory grows by a worker's files each time one is replaced (a reload, a crash, a timeout),
without bound, and every scrape reads every file.

So the master folds a dead worker's files into one file per kind (`counter_dead.db`): the sums are
the same, and the directory holds the live workers' files and the folds. A scrape reads the
directory under a shared lock, the fold takes it exclusively: a scrape sees a worker's counts once,
in its own file or in the fold, never in both or in neither. The master never waits for the lock
(gunicorn 23 runs its child_exit hook in the SIGCHLD handler): a scrape under way defers the fold
to the next worker's exit.

`MultiProcessCollector.merge(files, accumulate=False)` is prometheus_client's own way to write
merged counts back into its files (its docstring); the files are written as its workers write them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

#: A file's header: the bytes it uses (4), then padding (MmapedDict's layout, in its docstring).
_HEADER_BYTES = 8
#: The lock's file: not a `*.db`, which prometheus_client reads as counts.
LOCK_NAME = "fold.lock"
#: The kinds of file the service's metrics write (no multiprocess gauge: its gauges are read at scrape).
KINDS = ("counter", "histogram")


def _lock(directory: str | Path) -> int:
    # Read-only, and readable by all: flock needs no more, and whichever makes it (the master as
    # root, or a worker as gunicorn's `user`), the other can open it.
    return os.open(os.path.join(directory, LOCK_NAME), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)


@contextlib.contextmanager
def reading(directory: str | Path) -> Iterator[None]:
    """Hold the directory's files still while a scrape reads them."""
    descriptor = _lock(directory)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH)
        yield
    finally:
        os.close(descriptor)  # and with it the lock


def fold(directory: str | Path, pids: Iterable[int]) -> list[int]:
    """Fold the files of the dead workers `pids` into the directory's folds; the pids left for a
    later call (a scrape held the lock, or the directory is gone) are returned."""
    pids = list(pids)
    try:
        descriptor = _lock(directory)
    except OSError:
        return pids
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return pids
        for kind in KINDS:
            _fold_kind(Path(directory), kind, pids)
        return []
    except Exception:
        # No room for the fold (ENOSPC), a file that cannot be read, or anything else: this runs
        # in the master, which must outlive it. The files stay as they are, counted as before,
        # and are tried again at the next worker's exit.
        return pids
    finally:
        os.close(descriptor)


def holding_counts(paths: Iterable[str | Path]) -> list[str]:
    """The files of `paths` a reader may read: not those still empty. A worker makes its file
    empty, then sizes it and writes its header; read in between, prometheus_client's reader fails
    (struct.error), and with it the whole scrape. An empty file holds no count yet."""
    kept = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_size >= _HEADER_BYTES:
                kept.append(str(path))
    return kept


class FilesCollector:
    """prometheus_client's multiprocess collector, of the files `holding_counts`: the sum of every
    worker's counts, by `MultiProcessCollector.merge`, prometheus_client's own."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def collect(self) -> Any:
        from prometheus_client.multiprocess import MultiProcessCollector

        files = holding_counts(Path(self._directory).glob("*.db"))
        return MultiProcessCollector.merge(files, accumulate=True)


def _fold_kind(directory: Path, kind: str, pids: list[int]) -> None:
    from prometheus_client.mmap_dict import MmapedDict, mmap_key
    from prometheus_client.multiprocess import MultiProcessCollector

    dead = [path for path in (directory / f"{kind}_{pid}.db" for pid in pids) if path.exists()]
    if not dead:
        return
    folded = directory / f"{kind}_dead.db"
    sources = [Path(path) for path in holding_counts([folded, *dead])]  # an empty one goes, unread
    if not sources:
        for path in dead:
            path.unlink()
        return
    merged = MultiProcessCollector.merge([str(path) for path in sources], accumulate=False)
    # Written beside it under a name no scrape reads, then put in its place in one step.
    written = directory / f"{kind}_dead.db.new"
    # Its room taken before it is mapped: a memory-mapped page that a full file system cannot
    # give is SIGBUS, here in the master. The bytes its sources use bound what the fold holds; their
    # files' sizes would not do (each worker's is 64 KiB, sparse, and the fold, allocated whole,
    # would grow by that much, and by its own size, at every fold).
    # Readable by all, as prometheus_client makes a worker's: the master may be root, and the
    # workers that read it gunicorn's `user` (the directory itself is theirs alone, 0700).
    descriptor = os.open(written, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.posix_fallocate(descriptor, 0, max(_HEADER_BYTES, sum(map(_used, sources))))
    except OSError:
        written.unlink()
        raise
    finally:
        os.close(descriptor)
    values = MmapedDict(str(written))
    try:
        for metric in merged:
            for sample in metric.samples:
                key = mmap_key(
                    metric.name,
                    sample.name,
                    list(sample.labels),
                    list(sample.labels.values()),
                    metric.documentation,
                )
                values.write_value(key, sample.value, 0.0)
    finally:
        values.close()
    os.replace(written, folded)
    for path in dead:
        path.unlink()


def _used(path: Path) -> int:
    """How many bytes of a multiprocess file hold counts: its first 4 bytes say (the layout
    MmapedDict's docstring gives), header included."""
    with path.open("rb") as file:
        (used,) = struct.unpack("i", file.read(4))
    return int(used)
