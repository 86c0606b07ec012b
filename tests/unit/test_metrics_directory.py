"""The metrics directory the packaged gunicorn configuration makes (prometheus_client's
multiprocess files) belongs to the workers' user, as the reload's handoff directory does
(test_handoff_directory.py): with gunicorn's `user`/`group` settings the master runs as root and
each worker as that user, who could not write its counts into root's private directory."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import types
from pathlib import Path

import pytest

from app.server import gunicorn_conf
from app.server.directories import SHARED_MEMORY


def _made(monkeypatch, uid: int, gid: int) -> Path:
    """The directory on_starting makes for a master whose workers run as uid:gid."""
    # Empty is unset to on_starting; setenv (not delenv) has the test's end restore the variable.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    monkeypatch.setenv(gunicorn_conf._MADE_VARIABLE, "")  # restored, as the directory's variable
    monkeypatch.setenv("PLANTS_STORE_URL", "redis://127.0.0.1:6379/0")  # several workers may share it
    server = types.SimpleNamespace(cfg=types.SimpleNamespace(uid=uid, gid=gid))
    gunicorn_conf._prepare_metrics_directory(server)
    directory = Path(server.plants_metrics_directory)
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(directory)
    return directory


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives a directory to another user")
def test_the_directory_is_the_workers_users_and_private(monkeypatch):
    directory = _made(monkeypatch, 65534, 65534)  # gunicorn's cfg.uid and cfg.gid for `--user nobody`
    try:
        status = directory.stat()
        assert (status.st_uid, status.st_gid) == (65534, 65534)
        assert stat.S_IMODE(status.st_mode) == 0o700
    finally:
        shutil.rmtree(directory)


def test_for_the_masters_own_user_nothing_changes_hands(monkeypatch):
    directory = _made(monkeypatch, os.geteuid(), os.getegid())
    try:
        assert directory.stat().st_uid == os.geteuid()
    finally:
        shutil.rmtree(directory)


def test_it_goes_to_dev_shm_apart_from_the_snapshots_file_system(monkeypatch, tmp_path):
    """A snapshot that fills its directory must not fill the metrics' (SIGBUS, docs/operations.md)."""
    if not SHARED_MEMORY.is_dir() or SHARED_MEMORY.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on a file system of its own")
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path))  # where the snapshot goes
    directory = _made(monkeypatch, os.geteuid(), os.getegid())
    try:
        assert directory.parent == SHARED_MEMORY
    finally:
        shutil.rmtree(directory)


def test_on_the_snapshots_file_system_it_stays_in_the_temporary_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(SHARED_MEMORY))  # the snapshot in /dev/shm too
    directory = _made(monkeypatch, os.geteuid(), os.getegid())
    try:
        assert directory.parent == Path(tempfile.gettempdir())
    finally:
        shutil.rmtree(directory)


def test_the_in_memory_stores_one_worker_keeps_its_metrics_in_process(monkeypatch):
    """One worker's counts are the total: no directory, so no file (and no getpid) per increment."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    monkeypatch.setenv("PLANTS_STORE_URL", "memory://")
    server = types.SimpleNamespace(cfg=types.SimpleNamespace(uid=os.getuid(), gid=os.getgid()))
    gunicorn_conf._prepare_metrics_directory(server)
    assert not hasattr(server, "plants_metrics_directory")
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == ""


@pytest.mark.parametrize(("old_master", "kept"), [("", False), ("4242", True)])
def test_a_named_directory_is_emptied_unless_a_master_counts_into_it(monkeypatch, tmp_path, old_master, kept):
    """An earlier run's files are cleared at start; but the master that SIGUSR2 starts (gunicorn
    gives it the old master's pid in GUNICORN_PID) shares the directory with the old master, whose
    workers still count into their files (and whose folds hold its dead workers' counts): cleared,
    every count so far left the totals, and the old workers' further counts never reached one."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setenv("PLANTS_STORE_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("GUNICORN_PID", old_master)
    (tmp_path / "counter_1.db").write_bytes(b"counts")
    (tmp_path / "counter_dead.db").write_bytes(b"folded counts")
    cfg = types.SimpleNamespace(uid=os.getuid(), gid=os.getgid())
    gunicorn_conf._prepare_metrics_directory(types.SimpleNamespace(cfg=cfg))
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path)
    expected = ["counter_1.db", "counter_dead.db"] if kept else []
    assert sorted(path.name for path in tmp_path.glob("*.db")) == expected
