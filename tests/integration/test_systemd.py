"""deploy/systemd/: the units pass systemd's own checks (`verify`, and `security` at 2.0 or
less), and the service starts as its unit says, socket-activated (`systemd-socket-activate`),
tells systemd it is ready (Type=notify), and reloads with its ExecReload without losing a plant;
with the tokens-file drop-in, a reload rotates the tokens.

No systemd runs here as PID 1, so the sandbox itself (the syscall filter, the user) is not
exercised: what systemd would give the service (%d, RUNTIME_DIRECTORY) is given by hand."""

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


SERVICE = UNITS / "plant-store.service"
DROP_IN = UNITS / "plant-store-tokens-file.conf"


def installed(directory: Path, drop_in: bool = False) -> Path:
    """The units copied to `directory`, naming this venv's gunicorn (verify needs ExecStart's
    program to exist), the service with the drop-in appended when asked (as systemd merges it)."""
    directory.mkdir(exist_ok=True)
    (directory / "plant-store.socket").write_text((UNITS / "plant-store.socket").read_text())
    service = SERVICE.read_text() + (DROP_IN.read_text() if drop_in else "")
    (directory / SERVICE.name).write_text(service.replace(INSTALLED, VENV))
    return directory / SERVICE.name


@pytest.mark.parametrize("drop_in", [False, True], ids=["as shipped", "with the tokens-file drop-in"])
def test_the_units_pass_systemd_analyze_verify(tmp_path, drop_in):
    installed(tmp_path, drop_in)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *sorted(str(path) for path in tmp_path.iterdir())],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # an unknown or misspelt directive is only a warning there


@pytest.mark.parametrize("drop_in", [False, True], ids=["as shipped", "with the tokens-file drop-in"])
def test_systemd_rates_the_service_2_or_less(tmp_path, drop_in):
    service = installed(tmp_path, drop_in)
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(service)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    (overall,) = [line for line in done.stdout.splitlines() if "Overall exposure level" in line]
    assert float(overall.split(": ")[1].split()[0]) <= 2.0, done.stdout


def started(tmp_path: Path, units: list[Path], tokens: str) -> tuple[SocketActivated, socket.socket]:
    """The service as systemd would start it from `units` (the service, then its drop-ins): their
    Environment=, %d (LoadCredential='s directory) holding `tokens`, RUNTIME_DIRECTORY
    (RuntimeDirectory=), NOTIFY_SOCKET, and ExecStart= socket-activated; and the notify socket."""
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "tokens").write_text(tokens)
    env = {"PATH": os.environ["PATH"], "NOTIFY_SOCKET": str(tmp_path / "notify")}
    for unit in units:
        for key, value in directives(unit, "Service"):
            if key == "Environment":
                name, _, setting = value.partition("=")
                env[name] = setting.replace("%d", str(credentials))
            elif key == "RuntimeDirectory":
                env["RUNTIME_DIRECTORY"] = str(tmp_path / "run" / value)
                (tmp_path / "run" / value).mkdir(parents=True, mode=0o700)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(env["NOTIFY_SOCKET"])
    notify.settimeout(30)
    command = shlex.split(one(SERVICE, "Service", "ExecStart").replace(INSTALLED, VENV))
    return SocketActivated(command, env, cwd=tmp_path), notify


def reload_as_systemd_does(server: SocketActivated, plants: int) -> None:
    """ExecReload=, then wait until the new worker took the plants over."""
    reload = shlex.split(one(SERVICE, "Service", "ExecReload").replace("$MAINPID", str(server.process.pid)))
    subprocess.run(reload, check=True, timeout=30)
    deadline = time.monotonic() + 60
    while f"took over {plants} plants" not in server.output():
        assert time.monotonic() < deadline, server.output()[-3000:]
        time.sleep(0.1)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def test_the_service_starts_as_its_unit_says_and_reloads_keeping_its_plants(tmp_path):
    assert one(SERVICE, "Service", "Type") == "notify"
    socket_unit = UNITS / "plant-store.socket"
    assert one(socket_unit, "Socket", "ListenStream") == "127.0.0.1:8000"  # the test listens on a free port
    server, notify = started(tmp_path, [SERVICE], f"{TOKEN}\n")
    try:
        assert b"READY=1" in notify.recv(4096)
        auth = bearer(TOKEN)
        assert call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, auth)[0] == 200
        # The reload's snapshot goes to the service's RuntimeDirectory=, kept across a stop.
        assert list((tmp_path / "run" / "plant-store").glob("plant-store-handoff-*"))
        reload_as_systemd_does(server, 1)
        status, _, body = call(server.connection(), "GET", "/plants/1", headers=auth)
        assert (status, json.loads(body)) == (200, {"name": "Fern"})
        assert json.loads(server.output().splitlines()[-1])["level"]  # PLANTS_LOG_FORMAT=json
    finally:
        assert server.stop() == 0
        notify.close()


def test_with_the_drop_in_a_reload_rotates_the_tokens(tmp_path):
    """The drop-in's file is read in place: a new file renamed over the old, then `systemctl
    reload`, and the new token works, the removed one no longer does, and no plant is lost."""
    etc = tmp_path / "etc"
    etc.mkdir()
    drop_in = tmp_path / "tokens-file.conf"
    drop_in.write_text(DROP_IN.read_text().replace("/etc/plant-store/", f"{etc}/"))
    (etc / "tokens").write_text("old-token-1\n")
    server, notify = started(tmp_path, [SERVICE, drop_in], "credential-token-1\n")
    try:
        assert (
            call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, bearer("old-token-1"))[0]
            == 200
        )
        (etc / "tokens.new").write_text("new-token-2\n")
        (etc / "tokens.new").replace(etc / "tokens")
        reload_as_systemd_does(server, 1)
        assert call(server.connection(), "GET", "/plants/1", headers=bearer("new-token-2"))[0] == 200
        assert call(server.connection(), "GET", "/plants/1", headers=bearer("old-token-1"))[0] == 401
        assert call(server.connection(), "GET", "/plants/1", headers=bearer("credential-token-1"))[0] == 401
    finally:
        assert server.stop() == 0
        notify.close()
