"""Directories the master makes for its workers at start: the reload's handoff (handoff.py) and
prometheus_client's multiprocess files (gunicorn_conf.py). With gunicorn's `user` and `group`
the master runs as root and each worker as that user, who could neither read nor write in
root's private (0700) directory; so each is given to the workers' user, and stays private."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def workers_directory(prefix: str, uid: int | None, gid: int | None) -> Path:
    """A new directory, mode 0700, owned by the workers' user (gunicorn's `cfg.uid`, `cfg.gid`)
    when the master runs as another."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    if uid is not None and gid is not None and (uid, gid) != (os.geteuid(), os.getegid()):
        os.chown(directory, uid, gid)
    return directory
