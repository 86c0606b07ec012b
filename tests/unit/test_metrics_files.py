"""The master's fold of dead workers' prometheus_client files (app/telemetry/metrics_files.py):
the totals a scrape sums stay exact, and the directory (in /dev/shm: memory) stays bounded however
many workers are replaced. Each worker's files are written by a real process's prometheus_client."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from app.telemetry import metrics_files

_WORKER = (
    "import prometheus_client as p;"
    "p.Counter('served', 'Served.', ['route']).labels('/plants').inc(2);"
    "p.Histogram('took', 'Took.', buckets=(1, 5)).observe(3)"
)


def _a_worker_counts(directory: Path) -> int:
    """A process that counts, as a worker does, and exits; its pid."""
    return _a_worker_counts_beside(directory)


def _a_worker_counts_beside(directory: Path, *others: int) -> int:
    """As _a_worker_counts, with the files of the workers `others` (not yet folded) there too."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    subprocess.run([sys.executable, "-c", _WORKER], env=env, check=True)
    (pid,) = {int(path.stem.rpartition("_")[2]) for path in directory.glob("counter_[0-9]*.db")} - set(others)
    return pid


def _scrape(directory: Path) -> list[str]:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    return [line for line in generate_latest(registry).decode().splitlines() if not line.startswith("#")]


def _allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_folds_keep_the_totals_and_their_room_bounded(tmp_path):
    """Each fold is given the room its counts take, not the sum of its sources' files' sizes: those
    are prometheus_client's sparse 64 KiB each, and the fold grew by a whole file (allocated, in
    memory) at every replaced worker, its own earlier size included."""
    one_worker = 0
    for _ in range(12):
        pid = _a_worker_counts(tmp_path)
        one_worker = one_worker or sum(_allocated(path) for path in tmp_path.glob(f"*_{pid}.db"))
        assert metrics_files.fold(tmp_path, [pid]) == []
    assert sorted(path.name for path in tmp_path.glob("*.db")) == ["counter_dead.db", "histogram_dead.db"]
    assert 'served_total{route="/plants"} 24.0' in _scrape(tmp_path)
    assert 'took_bucket{le="5.0"} 12.0' in _scrape(tmp_path)
    assert "took_count 12.0" in _scrape(tmp_path)
    folds = sum(_allocated(tmp_path / f"{kind}_dead.db") for kind in metrics_files.KINDS)
    assert folds <= 2 * one_worker, (folds, one_worker)


def test_a_worker_that_exits_during_a_fold_is_folded_at_the_next(tmp_path, monkeypatch):
    """gunicorn 23 runs child_exit in its SIGCHLD handler, so a second worker's exit can run it
    again in the middle of a fold: that one is deferred (the lock is held), and must stay pending,
    not be dropped when the outer fold ends (its files would then stay in the directory for good)."""
    from app.server import gunicorn_conf

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    first, second = _a_worker_counts(tmp_path), None
    server = types.SimpleNamespace()
    fold = metrics_files.fold

    def fold_interrupted(directory, pids):
        nonlocal second
        with metrics_files.reading(directory):  # mid-fold, as the lock held by the outer fold
            if second is None:
                second = _a_worker_counts_beside(tmp_path, first)
                gunicorn_conf.child_exit(server, types.SimpleNamespace(pid=second))
        return fold(directory, pids)

    monkeypatch.setattr(metrics_files, "fold", fold_interrupted)
    gunicorn_conf.child_exit(server, types.SimpleNamespace(pid=first))
    assert second is not None
    monkeypatch.setattr(metrics_files, "fold", fold)
    third = _a_worker_counts_beside(tmp_path, first, second)
    gunicorn_conf.child_exit(server, types.SimpleNamespace(pid=third))
    assert sorted(path.name for path in tmp_path.glob("*.db")) == ["counter_dead.db", "histogram_dead.db"]
    assert 'served_total{route="/plants"} 6.0' in _scrape(tmp_path)


def test_a_deferred_workers_pid_taken_by_a_live_worker_is_not_folded(tmp_path, monkeypatch):
    """A fold deferred (a scrape held the lock) keeps the dead worker's pid; if a new worker gets
    that pid before the next fold, it counts into the same files (prometheus_client reopens them):
    folded then, they were unlinked under the live worker, and its further counts reached no total."""
    from app.server import gunicorn_conf, handoff

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    reused = _a_worker_counts(tmp_path)
    server = types.SimpleNamespace()
    with metrics_files.reading(tmp_path):  # a scrape under way: the fold is deferred
        gunicorn_conf.child_exit(server, types.SimpleNamespace(pid=reused))
    again = types.SimpleNamespace(pid=reused)
    handoff.track(again)  # pre_fork's: a live worker with that pid again
    try:
        other = _a_worker_counts_beside(tmp_path, reused)
        gunicorn_conf.child_exit(server, types.SimpleNamespace(pid=other))
    finally:
        handoff.forget(again)
    assert (tmp_path / f"counter_{reused}.db").exists()
    assert 'served_total{route="/plants"} 4.0' in _scrape(tmp_path)


def test_a_file_a_worker_has_just_made_fails_no_scrape_and_no_fold(tmp_path):
    """A worker makes its file empty, then sizes it and writes its header: a scrape that read it in
    between failed whole (prometheus_client's reader, struct.error), a 500 to Prometheus, and a
    worker killed in between left a file no fold could read, every fold after it failing too."""
    pid = _a_worker_counts(tmp_path)
    (tmp_path / "counter_999999.db").touch()  # a worker's, made an instant ago
    registry = CollectorRegistry()
    registry.register(metrics_files.FilesCollector(str(tmp_path)))
    assert 'served_total{route="/plants"} 2.0' in generate_latest(registry).decode()
    assert metrics_files.fold(tmp_path, [999999, pid]) == []
    assert sorted(path.name for path in tmp_path.glob("*.db")) == ["counter_dead.db", "histogram_dead.db"]
    assert 'served_total{route="/plants"} 2.0' in _scrape(tmp_path)
