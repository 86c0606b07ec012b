"""The reload's handoff directory (app/server/handoff.py) belongs to the workers' user: with
gunicorn's `user`/`group` settings the master runs as root and each worker as that user, who
could not even look for a snapshot in root's private directory (its worker would fail to boot).
It has a fixed name, so that a snapshot a master left unread is read by the next start, and it is
never removed with such a snapshot in it."""

from __future__ import annotations

import os
import stat

import pytest

from app.server import handoff

BIND = ["127.0.0.1:8000"]


@pytest.fixture
def runtime(monkeypatch, tmp_path):
    """systemd's RuntimeDirectory=, as the unit sets it: where the handoff's directory goes."""
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path))
    yield tmp_path
    handoff._directory = None


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives a directory to another user")
def test_the_directory_is_the_workers_users_and_private(runtime):
    directory = handoff.prepare(BIND, 65534, 65534)  # cfg.uid and cfg.gid for `--user nobody`
    status = directory.stat()
    assert directory.parent == runtime
    assert (status.st_uid, status.st_gid) == (65534, 65534)
    assert stat.S_IMODE(status.st_mode) == 0o700
    handoff.remove()
    assert not directory.exists()


def test_for_the_masters_own_user_nothing_changes_hands(runtime):
    directory = handoff.prepare(BIND, os.geteuid(), os.getegid())
    assert directory.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_an_unread_snapshot_outlives_its_master_and_is_found_by_the_next(runtime, caplog):
    directory = handoff.prepare(BIND)
    (directory / handoff.SNAPSHOT).write_bytes(b"plants")
    (directory / "handoff-wanted").touch()
    handoff.remove()  # the master exits before a new worker read it
    assert (directory / handoff.SNAPSHOT).read_bytes() == b"plants"
    assert "keeping the unread snapshot" in caplog.text
    assert str(directory) in caplog.text
    assert handoff.prepare(BIND) == directory  # the next start: same place, the flag gone
    assert sorted(path.name for path in directory.iterdir()) == [handoff.SNAPSHOT]
    assert f"found the unread snapshot {directory / handoff.SNAPSHOT}" in caplog.text


def test_another_services_addresses_get_another_directory(runtime):
    first = handoff.prepare(BIND)
    assert handoff.prepare(["127.0.0.1:8001"]) != first


def test_a_link_in_its_place_is_refused(runtime, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    directory = handoff.prepare(BIND)
    directory.rmdir()
    directory.symlink_to(target)
    with pytest.raises(SystemExit, match="is not the service's own directory"):
        handoff.prepare(BIND)


@pytest.mark.parametrize("where", ["missing", "a-file"])
def test_a_runtime_directory_that_cannot_hold_it_stops_the_start_in_one_line(monkeypatch, tmp_path, where):
    """Not a traceback: one line naming the setting and the reason, as for any other setting."""
    (tmp_path / "a-file").touch()
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / where))
    try:
        with pytest.raises(SystemExit) as stopped:
            handoff.prepare(BIND)
    finally:
        handoff._directory = None
    message = str(stopped.value)
    assert message.startswith("Plant Store: configuration error: RUNTIME_DIRECTORY ")
    assert str(tmp_path / where) in message
    assert "\n" not in message
