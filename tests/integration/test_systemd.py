"""deploy/systemd/: the units pass systemd's own check, and the service starts as its unit says,
socket-activated (`systemd-socket-activate`), tells systemd it is ready (Type=notify), and reloads
with its ExecReload without losing a plant."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import call
from tests.servers import ROOT, TOKEN, SocketActivated

UNITS = ROOT / "deploy" / "systemd"
#: Where the unit expects the service's venv; the tests use their own.
INSTALLED = "/opt/plant-store/bin/"
VENV = str(Path(sys.executable).parent) + "/"

pytestmark = pytest.mark.skipif(
    not (shutil.which("systemd-analyze") and shutil.which("systemd-socket-activate")),
    reason="needs systemd's tools",
)


def directives(unit: Path, section: str) -> list[tuple[str, str]]:
    """The unit's `Key=Value` lines of [section], in order (a key may repeat, as Environment= does)."""
    found, current = [], None
    for line in unit.read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif current == section and line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            found.append((key, value))
    return found


def one(unit: Path, section: str, key: str) -> str:
    (value,) = [value for name, value in directives(unit, section) if name == key]
    return value


def test_the_units_pass_systemd_analyze_verify(tmp_path):
    # verify needs ExecStart's program to exist: the copies name this venv's gunicorn instead.
    for unit in UNITS.iterdir():
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED, VENV))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *sorted(str(path) for path in tmp_path.iterdir())],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # an unknown or misspelt directive is only a warning there


def test_the_service_starts_as_its_unit_says_and_reloads_keeping_its_plants(tmp_path):
    service = UNITS / "plant-store.service"
    socket_unit = UNITS / "plant-store.socket"
    assert one(service, "Service", "Type") == "notify"
    assert one(socket_unit, "Socket", "ListenStream") == "127.0.0.1:8000"  # the test listens on a free port
    credentials = tmp_path / "credentials"  # what LoadCredential= makes, named by %d
    credentials.mkdir()
    (credentials / "tokens").write_text(f"{TOKEN}\n")
    env = {"PATH": os.environ["PATH"], "NOTIFY_SOCKET": str(tmp_path / "notify")}
    for key, value in directives(service, "Service"):
        if key == "Environment":
            name, _, setting = value.partition("=")
            env[name] = setting.replace("%d", str(credentials))
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(env["NOTIFY_SOCKET"])
    notify.settimeout(30)
    command = shlex.split(one(service, "Service", "ExecStart").replace(INSTALLED, VENV))
    server = SocketActivated(command, env, cwd=tmp_path)
    try:
        assert b"READY=1" in notify.recv(4096)
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        assert call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, auth)[0] == 200
        reload = shlex.split(
            one(service, "Service", "ExecReload").replace("$MAINPID", str(server.process.pid))
        )
        subprocess.run(reload, check=True, timeout=30)
        deadline = time.monotonic() + 60
        while "took over 1 plants" not in server.output():
            assert time.monotonic() < deadline, server.output()[-3000:]
            time.sleep(0.1)
        status, _, body = call(server.connection(), "GET", "/plants/1", headers=auth)
        assert (status, json.loads(body)) == (200, {"name": "Fern"})
        assert json.loads(server.output().splitlines()[-1])["level"]  # PLANTS_LOG_FORMAT=json
    finally:
        assert server.stop() == 0
        notify.close()
