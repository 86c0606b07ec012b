"""The packaged gunicorn serves the in-memory store with its metrics kept in process: with no
PROMETHEUS_MULTIPROC_DIR set, the master starts (it checked that variable's file system against
the reload's snapshot's, and stopped with a KeyError) and the metrics count."""

from __future__ import annotations

import sys

from tests.helpers import call, packaged_env
from tests.servers import ROOT, TOKEN, Served, free_port


def test_the_memory_store_starts_and_counts_with_no_metrics_directory_set(tmp_path):
    port = free_port()
    env = packaged_env(port, tmp_path)
    server = Served([sys.executable, "-m", "gunicorn"], env, ROOT, port)
    try:
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        status, _, body = call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, auth)
        assert status == 200, body
        status, _, body = call(server.connection(), "GET", "/metrics", None, auth)
        assert status == 200
        assert b"/plants" in body
        assert not list(tmp_path.glob("plants-metrics-*"))  # in process: no files
    finally:
        server.stop()
