"""The reload's handoff directory (app/server/handoff.py) belongs to the workers' user: with
gunicorn's `user`/`group` settings the master runs as root and each worker as that user, who
could not even look for a snapshot in root's private directory (its worker would fail to boot)."""

from __future__ import annotations

import os
import stat

import pytest

from app.server import handoff


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives a directory to another user")
def test_the_directory_is_the_workers_users_and_private():
    handoff.prepare(65534, 65534)  # gunicorn's cfg.uid and cfg.gid for `--user nobody`
    try:
        directory = handoff._directory
        assert directory is not None
        status = directory.stat()
        assert (status.st_uid, status.st_gid) == (65534, 65534)
        assert stat.S_IMODE(status.st_mode) == 0o700
    finally:
        handoff.remove()
        handoff._directory = None


def test_for_the_masters_own_user_nothing_changes_hands():
    handoff.prepare(os.geteuid(), os.getegid())
    try:
        assert handoff._directory is not None
        assert handoff._directory.stat().st_uid == os.geteuid()
    finally:
        handoff.remove()
        handoff._directory = None
