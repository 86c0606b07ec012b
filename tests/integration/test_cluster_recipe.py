"""docs/redis-cluster.md's "Making a cluster", run as written: its three shell blocks (six nodes with
deploy/redis.conf joined by `redis-cli --cluster create ... --cluster-replicas 1`, the service on
them, the nodes stopped), with free ports for 7000-7005 and a temporary directory for
/var/lib/redis-cluster; a plant created and read through the service in between."""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import call
from tests.servers import ROOT, Served, first_ephemeral_port, free_port

DOC = ROOT / "docs" / "redis-cluster.md"

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")


def recipe() -> list[str]:
    """The section's ```sh blocks, in order."""
    section = DOC.read_text().split("\n## Making a cluster\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def node_ports(count: int) -> list[int]:
    """Ports free with their cluster bus (port + 10000) free too, both below the kernel's ephemeral
    range, where no client's connection takes one before its node binds it (tests/servers.py)."""
    ports: list[int] = []
    highest = max(first_ephemeral_port() - 10000, 12000)
    while len(ports) < count:
        port = random.SystemRandom().randrange(10000, highest)
        if port not in ports and _free(port) and _free(port + 10000):
            ports.append(port)
    return ports


def test_the_cluster_recipe_works_as_written(tmp_path):
    setup, service, stop = recipe()
    ports = node_ports(6)
    directory = tmp_path / "cluster"

    def substituted(block: str) -> str:
        block = re.sub(r"\b700([0-5])\b", lambda match: str(ports[int(match.group(1))]), block)
        return block.replace("/var/lib/redis-cluster", str(directory))

    def run(block: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", substituted(block)],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    server = None
    pids: list[int] = []
    try:
        made = run(setup)
        # Read now: a node removes its pid file as it shuts down.
        pids = [int(path.read_text()) for path in directory.glob("*/redis.pid")]
        assert made.returncode == 0, made.stdout + made.stderr
        assert len(pids) == 6
        assert "[OK] All 16384 slots covered." in made.stdout
        # The service's line: its settings, then the program, run from the clone.
        *assignments, program = shlex.split(substituted(service).strip())
        assert program == ".venv/bin/gunicorn"
        env = dict(assignment.split("=", 1) for assignment in assignments)
        port = free_port()
        server = Served(
            [str(Path(sys.executable).parent / "gunicorn")],
            {"PATH": os.environ["PATH"], **env, "GUNICORN_BIND": f"127.0.0.1:{port}"},
            ROOT,
            port,
        )
        auth = {"Authorization": f"Bearer {env['PLANTS_API_TOKENS']}", "Content-Type": "application/json"}
        assert call(server.connection(), "POST", "/plants", {"id": 7, "name": "Fern"}, auth)[0] == 200
        assert call(server.connection(), "GET", "/plants/7", headers=auth)[0] == 200
    finally:
        if server is not None:
            server.stop()
        stopped = run(stop)
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in pids:  # what the stop block left, so that no node outlives the test
            if _alive(pid):
                os.kill(pid, 9)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
