"""A /dev/shm that another process filled (a pod's containers share it) does not stop the service:
the metrics' memory-mapped files go to the temporary directory instead, and no worker dies of
SIGBUS. Run in a mount namespace of its own (`unshare`), with a full 1 MiB tmpfs on /dev/shm."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from tests.conftest import redis_settings
from tests.helpers import call
from tests.servers import ROOT, TOKEN, Served, free_port

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounts a tmpfs in a mount namespace"
)

FILL_DEV_SHM = (
    "mount -t tmpfs -o size=1m tmpfs /dev/shm"
    " && (head -c 2097152 /dev/zero > /dev/shm/filler 2>/dev/null; true)"
    ' && exec "$@"'
)


def test_a_full_dev_shm_kills_no_worker_and_the_metrics_still_count(tmp_path, redis_server):
    # A shared store: its workers count in files (the in-memory store's one worker counts in process).
    port = free_port()
    env = {
        **redis_settings(redis_server),
        "WEB_CONCURRENCY": "1",
        "PATH": os.environ["PATH"],
        "PLANTS_API_TOKENS": TOKEN,
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "TMPDIR": str(tmp_path),
    }
    command = ["unshare", "-m", "--propagation", "private", "sh", "-c", FILL_DEV_SHM, "sh"]
    server = Served([*command, sys.executable, "-m", "gunicorn"], env, ROOT, port)
    try:
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        for plant_id in range(1, 21):
            plant = {"id": plant_id, "name": "Fern"}
            status, _, body = call(server.connection(), "POST", "/plants", plant, auth)
            assert status == 200, body
        status, _, body = call(server.connection(), "GET", "/metrics", None, auth)
        assert status == 200
        assert b"/plants" in body
        assert "was sent SIGBUS" not in server.output()
        assert server.output().count("Booting worker") == 1
        assert list(tmp_path.glob("plants-metrics-*/*.db"))  # in the temporary directory
    finally:
        server.stop()
