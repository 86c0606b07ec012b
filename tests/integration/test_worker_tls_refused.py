"""The packaged worker serves plain HTTP (TLS ends at the reverse proxy): given a certificate, it
does not boot, and gunicorn stops with what to do, rather than start the worker again and again."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.servers import ROOT, TOKEN, free_port, self_signed_certificate


def test_a_certificate_stops_the_start_with_what_to_do(tmp_path):
    cert, key = self_signed_certificate(tmp_path)
    env = {**os.environ, "PLANTS_API_TOKENS": TOKEN, "GUNICORN_BIND": f"127.0.0.1:{free_port()}"}
    command = [sys.executable, "-m", "gunicorn", "--certfile", str(cert), "--keyfile", str(key)]
    # Without the stop, gunicorn starts the worker again until this timeout ends it.
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-2000:]
    assert "this worker serves plain HTTP; end TLS at the reverse proxy" in output
    assert output.count("Booting worker") == 1, output[-2000:]
