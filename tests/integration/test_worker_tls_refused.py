"""The packaged worker serves plain HTTP (TLS ends at the reverse proxy): given a certificate, the
packaged configuration refuses the start in one line, in the master, as it refuses gunicorn's other
options the worker cannot serve; under a host's own configuration the worker does not boot, and
gunicorn stops with what to do, rather than start the worker again and again."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.servers import ROOT, TOKEN, free_port, self_signed_certificate


def _start(tmp_path, *options: str) -> tuple[int, str]:
    cert, key = self_signed_certificate(tmp_path)
    env = {**os.environ, "PLANTS_API_TOKENS": TOKEN, "GUNICORN_BIND": f"127.0.0.1:{free_port()}"}
    command = [sys.executable, "-m", "gunicorn", *options, "--certfile", str(cert), "--keyfile", str(key)]
    # Without the stop, gunicorn starts the worker again until this timeout ends it.
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stdout + done.stderr


def test_a_certificate_stops_the_start_in_one_line_before_any_worker(tmp_path):
    """It listened (`Listening at: https://...`), booted the worker and ended in the worker's
    traceback: the master now refuses it as it refuses --proxy-protocol."""
    status, output = _start(tmp_path)
    assert status != 0, output[-2000:]
    assert (
        "Plant Store: refusing to start: the packaged worker serves plain HTTP, not TLS (--certfile):"
        " end TLS at the reverse proxy"
    ) in output
    assert "Listening at" not in output, output[-2000:]
    assert "Booting worker" not in output, output[-2000:]
    assert "Traceback" not in output, output[-2000:]


def test_under_a_host_configuration_the_worker_does_not_boot_and_says_what_to_do(tmp_path):
    host_options = ("-c", "/dev/null", "-k", "app.server.worker.PlantsWorker", "app:create_app()")
    status, output = _start(tmp_path, *host_options)
    assert status != 0, output[-2000:]
    assert "this worker serves plain HTTP; end TLS at the reverse proxy" in output
    assert output.count("Booting worker") == 1, output[-2000:]
