"""Real servers for the tests: gunicorn with the shipped gunicorn.conf.py, on 127.0.0.1."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "test-token-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(port: int, process: subprocess.Popen, deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited early with {process.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing served on port {port} within {deadline_s}s")


class Gunicorn:
    """`gunicorn` started from the project root, as deployed, with its output in a file."""

    def __init__(self, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="gunicorn-", suffix=".log", delete=False)  # noqa: SIM115
        full_env = {
            **os.environ,
            "PLANTS_API_TOKENS": TOKEN,
            "GUNICORN_BIND": f"127.0.0.1:{self.port}",
            **(env or {}),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", *args],
            cwd=ROOT,
            env=full_env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until_serving(self.port, self.process)
        except Exception:
            self.stop()
            raise

    def connection(self, timeout: float = 10) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self, timeout: float = 40) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode
