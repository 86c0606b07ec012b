"""Every way of starting the service: one clear line for a bad setting, and never a split store."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest

from app.server.directories import SHARED_MEMORY
from tests.conftest import redis_settings
from tests.helpers import assert_error, call
from tests.servers import ROOT, TOKEN, Gunicorn, RedisServer, Served, free_port, wait_until_serving

OK = {"PLANTS_API_TOKENS": TOKEN}
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("PLANTS_", "WEB_CONCURRENCY"))}


def refused_start(env: dict[str, str], *args: str, cwd: Path = ROOT) -> list[str]:
    """Start gunicorn; it must exit non-zero before any worker boots. Its output's lines."""
    env = {**BASE_ENV, "GUNICORN_BIND": f"127.0.0.1:{free_port()}", **env}
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    output = result.stderr + result.stdout
    assert result.returncode != 0, output
    assert "Traceback" not in output
    assert "Booting worker" not in output
    # gunicorn's own "Starting gunicorn" line, then ours.
    lines = [line for line in output.splitlines() if "Starting gunicorn" not in line]
    assert len(lines) == 1, output
    return lines


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, "PLANTS_API_TOKENS"),
        ({**OK, "PLANTS_MAX_PLANTS": "lots"}, "PLANTS_MAX_PLANTS must be a whole number"),
        ({**OK, "PLANTS_STORE_TIMEOUT": "soon"}, "PLANTS_STORE_TIMEOUT must be a number"),
        ({"PLANTS_API_TOKENS_FILE": "/nonexistent/tokens"}, "PLANTS_API_TOKENS_FILE names a file"),
        ({**OK, "PLANTS_STORE_URL": "mysql://db/plants"}, "PLANTS_STORE_URL has scheme"),
        (
            {**OK, "PLANTS_STORE_URL": "redis://user:s3cret-pw@host:port/0"},
            "PLANTS_STORE_URL is not a valid URL",
        ),
        # A generated password's "/" ends the host part: the port read is the password's start.
        (
            {**OK, "PLANTS_STORE_URL": "redis://:s3cret-pw/x@127.0.0.1:6379/0"},
            "a password holding / ? # or @ must be percent-encoded",
        ),
        ({**OK, "PLANTS_STORE_URL_FILE": "/nonexistent/url"}, "PLANTS_STORE_URL_FILE"),
        (
            {**OK, "PLANTS_STORE_URL": "redis+cluster://user:s3cret-pw@10.0.0.1:7000,10.0.0.2"},
            "PLANTS_STORE_URL needs host:port for every node",
        ),
        (
            {**OK, "PLANTS_STORE_URL": "rediss+cluster://:s3cret-pw@10.0.0.1:7000/0?ssl_cert_reqs=none"},
            "PLANTS_STORE_URL takes no path or options",
        ),
        ({**OK, "PLANTS_STORE_MIN_REPLICAS": "1"}, "PLANTS_STORE_URL names the memory store"),
        # redis-py reads a query's password (which the start's line would then print) and any
        # other name as a connection option: an unknown one was its TypeError's traceback.
        (
            {**OK, "PLANTS_STORE_URL": "redis://127.0.0.1:6399/0?password=s3cret-pw"},
            "PLANTS_STORE_URL takes no password in its query",
        ),
        (
            {**OK, "PLANTS_STORE_URL": "redis://:s3cret-pw@127.0.0.1:6399/0?s3cret-pw=1"},
            "PLANTS_STORE_URL has a query option that redis:// does not take",
        ),
        (
            {**OK, "PLANTS_STORE_URL": "redis://127.0.0.1:6399/0?socket_timeout=600"},
            "the timeouts are PLANTS_STORE_CONNECT_TIMEOUT and PLANTS_STORE_TIMEOUT",
        ),
        # redis-py refuses any other value only when it connects: every request was a 503.
        (
            {**OK, "PLANTS_STORE_URL": "rediss://:s3cret-pw@127.0.0.1:6399/0?ssl_cert_reqs=NONE"},
            "PLANTS_STORE_URL has an ssl_cert_reqs other than none, optional or required",
        ),
        # Both were tracebacks: gunicorn's import of the class, each worker's first count.
        ({**OK, "GUNICORN_WORKER_CLASS": "nosuch.Worker"}, "GUNICORN_WORKER_CLASS names no worker class"),
        (
            {
                **OK,
                "PLANTS_STORE_URL": "redis://127.0.0.1:6399/0",
                "PROMETHEUS_MULTIPROC_DIR": "/nonexistent/m",
            },
            "PROMETHEUS_MULTIPROC_DIR names '/nonexistent/m'",
        ),
        ({**OK, "PROMETHEUS_MULTIPROC_DIR": "/nonexistent/m"}, "PROMETHEUS_MULTIPROC_DIR names"),
        ({"PLANTS_API_TOKENS": "t" * 8200}, "tokens may have at most 4096 characters"),
        ({"PLANTS_API_TOKENS": "not a token"}, "not a valid bearer token"),
    ],
    ids=["no-token", "bad-number", "bad-seconds", "unreadable-file", "bad-scheme", "bad-port",
         "password-with-slash", "url-file",
         "cluster-port", "cluster-path", "replicas-on-memory", "query-password", "query-unknown",
         "query-timeout", "query-cert-reqs", "worker-class", "metrics-directory-redis",
         "metrics-directory-memory",
         "token-too-long", "token-syntax"],
)  # fmt: skip
def test_a_bad_setting_is_one_line_naming_it(env, names):
    (line,) = refused_start(env)
    assert line.startswith("Plant Store: configuration error: ")
    assert names in line
    assert "s3cret-pw" not in line
    assert "t" * 100 not in line


def test_an_over_long_token_could_never_be_sent(tmp_path):
    # The limit's reason: gunicorn refuses the header line of a token just over it.
    server = Gunicorn()
    try:
        status, _, _ = call(
            server.connection(), "POST", "/plants", {}, {"Authorization": "Bearer " + "t" * 8200}
        )
        assert status == 431
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("env", "args", "refused"),
    [
        ({}, ("--workers", "2"), "refusing to start: 2 workers"),
        ({"WEB_CONCURRENCY": "3"}, (), "refusing to start: 3 workers"),
        # A worker recycled after N requests starts empty: every plant gone, silently, each time.
        ({}, ("--max-requests", "1000"), "--max-requests 1000 recycles"),
        ({"GUNICORN_CMD_ARGS": "--max-requests 50"}, (), "--max-requests 50 recycles"),
    ],
    ids=["--workers", "WEB_CONCURRENCY", "--max-requests", "GUNICORN_CMD_ARGS-max-requests"],
)
def test_the_memory_store_refuses_more_workers_or_recycled_ones_at_start(env, args, refused):
    (line,) = refused_start({"PLANTS_API_TOKENS": TOKEN, **env}, *args)
    assert refused in line
    assert "in-memory store" in line


REDIS_DOWN = {**OK, "PLANTS_STORE_URL": "redis://127.0.0.1:6399/0"}  # no answer at the start is no error


@pytest.mark.parametrize(
    ("env", "args", "refused"),
    [
        # Each started, and the master listened while nothing ever answered a connection.
        ({}, ("--threads", "0"), "--threads is 0"),
        ({**OK, "GUNICORN_WORKER_CLASS": "gthread"}, ("--threads", "0"), "--threads is 0"),
        (REDIS_DOWN, ("--workers", "0"), "--workers is 0"),
        # The code reloader's new worker started empty at a change of any file it had imported.
        ({}, ("--reload",), "--reload restarts the worker"),
        ({"GUNICORN_CMD_ARGS": "--reload"}, (), "--reload restarts the worker"),
        # A reload forked the master's one app: a token removed from the file was still accepted.
        ({}, ("--preload",), "--preload builds the app once"),
        # The packaged worker read a proxy's PROXY line as a request: every request was a 400.
        ({}, ("--proxy-protocol",), "does not read the PROXY protocol"),
    ],
    ids=["threads-0", "gthread-threads-0", "workers-0-redis", "reload", "reload-cmd-args", "preload",
         "proxy-protocol"],
)  # fmt: skip
def test_a_gunicorn_option_that_would_break_a_promise_stops_the_start(env, args, refused):
    (line,) = refused_start({**OK, **env}, *args)
    assert line.startswith("Plant Store: refusing to start: ")
    assert refused in line


def test_the_reload_refusal_offers_no_reloader_that_empties_the_store_alike():
    """It said "Leave it unset (`flask --app wsgi run --debug` reloads for development)", offering
    a reloader that starts the memory store empty at each edit as well (README, docs/operations.md
    "flask run --debug"): only a shared store keeps the plants across a reload of the code."""
    (line,) = refused_start(OK, "--reload")
    assert "reloads for development" not in line
    assert "(as `flask --app wsgi run --debug`'s reloader does at each edit)" in line
    assert line.endswith(
        "set PLANTS_STORE_URL to a shared store (redis://...): a reloaded worker then finds every plant."
    )


def test_a_body_limit_the_memory_budget_cannot_hold_stops_the_start():
    """The packaged worker displaces the connections holding bytes past GUNICORN_MEMORY_BUDGET: with
    MAX_CONTENT_LENGTH past it, a body within the limit was closed as it arrived, its client
    answered nothing (neither its answer nor a 413). gthread has no budget, and starts."""
    settings = {**OK, "MAX_CONTENT_LENGTH": str(4 * 1024 * 1024), "GUNICORN_MEMORY_BUDGET": "1"}
    (line,) = refused_start(settings)
    assert line.startswith("Plant Store: refusing to start: MAX_CONTENT_LENGTH (4194304 bytes)")
    assert "GUNICORN_MEMORY_BUDGET to 5 MiB" in line
    server = Gunicorn(env={**settings, "GUNICORN_WORKER_CLASS": "gthread"})
    try:
        assert call(server.connection(), "GET", "/healthz")[0] == 200
    finally:
        server.stop()


def test_the_body_limit_is_held_to_the_budget_the_worker_holds_not_one_gunicorns_raw_env_sets():
    """The packaged configuration reads GUNICORN_MEMORY_BUDGET when gunicorn loads it, before
    gunicorn applies its raw_env (`-e`): a worker holds the environment's budget. Checked against
    the `-e` one instead, a body limit past the worker's budget started, and a body near it was
    closed as it arrived."""
    settings = {**OK, "GUNICORN_MEMORY_BUDGET": "1"}
    args = ("-e", "GUNICORN_MEMORY_BUDGET=64", "-e", f"MAX_CONTENT_LENGTH={4 * 1024 * 1024}")
    (line,) = refused_start(settings, *args)
    assert line.startswith("Plant Store: refusing to start: MAX_CONTENT_LENGTH (4194304 bytes)")
    assert "GUNICORN_MEMORY_BUDGET (1 MiB)" in line


@pytest.mark.skipif(
    tuple(int(part) for part in metadata.version("gunicorn").split(".")[:2]) < (24, 0),
    reason="gunicorn's --protocol came with gunicorn 24",
)
def test_a_protocol_the_packaged_worker_does_not_read_stops_the_start():
    (line,) = refused_start(OK, "--protocol", "uwsgi")
    assert "serves HTTP only, not --protocol uwsgi" in line


def test_a_gunicorn_option_the_packaged_worker_does_not_read_is_gthreads_to_take():
    """gunicorn's stock gthread worker reads the PROXY protocol: the refusal is the packaged worker's."""
    server = Gunicorn(
        env={"GUNICORN_WORKER_CLASS": "gthread"},
        args=("-c", "python:app.server.gunicorn_conf", "--proxy-protocol"),
    )
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"PROXY TCP4 10.1.2.3 10.0.0.1 5555 80\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(64).startswith(b"HTTP/1.1 200 ")
    finally:
        server.stop()


def test_the_packaged_config_refuses_from_any_directory(tmp_path):
    (line,) = refused_start(
        {"PLANTS_API_TOKENS": TOKEN}, "-c", "python:app.server.gunicorn_conf", "-w", "4", cwd=tmp_path
    )
    assert "refusing to start: 4 workers" in line


def _metrics_directories_in(tmp_path: Path) -> dict[str, str]:
    """The environment that has the master make its metrics' directory in `tmp_path`: the
    temporary directory, since the snapshot's (RUNTIME_DIRECTORY) is /dev/shm's file system."""
    return {
        "PLANTS_STORE_URL": "redis://127.0.0.1:6399/0",
        "TMPDIR": str(tmp_path),
        "RUNTIME_DIRECTORY": str(SHARED_MEMORY),
    }


def test_a_start_refused_for_a_setting_leaves_no_metrics_directory(tmp_path):
    (line,) = refused_start({**OK, **_metrics_directories_in(tmp_path), "PLANTS_RATE_LIMIT": "lots"})
    assert "PLANTS_RATE_LIMIT" in line
    assert not list(tmp_path.glob("plants-metrics-*"))


def test_a_start_refused_for_an_address_in_use_leaves_no_metrics_directory(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        env = {**BASE_ENV, **OK, **_metrics_directories_in(tmp_path)}
        env["GUNICORN_BIND"] = f"127.0.0.1:{taken.getsockname()[1]}"
        result = subprocess.run(
            [sys.executable, "-m", "gunicorn"], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode != 0
    assert "Can't connect" in result.stdout + result.stderr
    assert not list(tmp_path.glob("plants-metrics-*"))


@pytest.mark.parametrize(
    ("env", "threads"),
    [
        ({}, 1),  # the memory store: all CPU under one GIL (bench/README.md)
        ({"PLANTS_STORE_URL": "redis://127.0.0.1:6399/0"}, 2),  # overlap the round trips
        ({"GUNICORN_THREADS": "3"}, 3),
    ],
)
def test_request_threads_default_by_store(tmp_path, env, threads):
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "python:app.server.gunicorn_conf", "--print-config"],
        cwd=tmp_path, env={**BASE_ENV, **OK, "GUNICORN_THREADS": "", **env},
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert re.search(r"^threads\s*= (\d+)$", result.stdout, re.MULTILINE)[1] == str(threads)


def worker_pids(master_pid: int) -> list[int]:
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    return [int(pid) for pid in children]


def await_output(server: Gunicorn, text: str, within_s: float) -> None:
    """Until the server's output shows `text` (a master's or a worker's log line), within a bound."""
    deadline = time.monotonic() + within_s
    while text not in server.output():
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.05)


def test_sigttin_holds_the_memory_store_at_one_worker():
    server = Gunicorn()
    try:
        (worker,) = worker_pids(server.process.pid)
        server.process.send_signal(signal.SIGTTIN)
        await_output(server, "staying at 1 worker", 5)
        time.sleep(1.5)  # a master that did add a worker has forked it by now
        assert worker_pids(server.process.pid) == [worker]
        plant = {"id": 5001, "name": "Fern"}
        statuses = [call(server.connection(), "POST", "/plants", {**plant, "name": f"Fern {n}"}, AUTH)[0]
                    for n in range(6)]  # fmt: skip
        assert statuses == [200, 409, 409, 409, 409, 409]
    finally:
        server.stop()


@pytest.mark.parametrize("option", ["--access-logfile", "--error-logfile"])
def test_a_log_file_gunicorn_would_leave_empty_stops_the_start(tmp_path, option):
    """Every line goes to stdout (logconfig_dict): a log file named on gunicorn's command line was
    made and left empty, and SIGUSR1 rotated that empty file while the lines went elsewhere."""
    (line,) = refused_start(OK, option, str(tmp_path / "plants.log"))
    assert f"configuration error: gunicorn's {option} names a file" in line
    assert "stdout" in line


@pytest.mark.parametrize("stdout", ["-", "/dev/stdout"])
def test_a_log_file_of_stdout_is_what_the_service_does(stdout):
    server = Gunicorn(args=("--access-logfile", stdout, "--error-logfile", stdout))
    try:
        assert call(server.connection(), "GET", "/healthz?after=logged", None, {})[0] == 200
        assert server.stop() == 0
        assert server.output().count('"GET /healthz?after=logged HTTP/1.1" 200') == 1  # once: one handler
    finally:
        server.stop()


def test_a_refused_start_leaves_no_pid_file(tmp_path):
    """gunicorn writes `--pid`'s file before the service's checks: a start they refuse (or its
    address in use) removes it, as a run's stop does, and never leaves a process that is gone."""
    refused_start({**OK, "PLANTS_RATE_LIMIT": "lots"}, "--pid", str(tmp_path / "setting.pid"))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        env = {**BASE_ENV, **OK, "GUNICORN_BIND": f"127.0.0.1:{taken.getsockname()[1]}"}
        result = subprocess.run(
            [sys.executable, "-m", "gunicorn", "--pid", str(tmp_path / "address.pid")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode != 0
    assert list(tmp_path.iterdir()) == []


def test_a_running_masters_pid_file_outlives_its_workers_and_goes_with_it(tmp_path):
    pid_file = tmp_path / "plants.pid"
    server = Gunicorn(args=("--pid", str(pid_file)))
    try:
        (worker,) = worker_pids(server.process.pid)
        server.process.send_signal(signal.SIGHUP)  # the worker exits, its successor takes over
        await_output(server, f"Worker exiting (pid: {worker})", 20)
        assert pid_file.read_text().strip() == str(server.process.pid)
        assert server.stop() == 0
        assert not pid_file.exists()
    finally:
        server.stop()


def test_a_master_whose_worker_outlived_the_graceful_timeout_removes_the_reload_directory(tmp_path):
    """A stuck worker (SIGSTOP) is killed at the end of the graceful timeout, and the master exits
    before it has reaped it: the worker's flag is the master's own, and goes with the directory."""
    server = Gunicorn({"TMPDIR": str(tmp_path), "GUNICORN_GRACEFUL_TIMEOUT": "1"})
    try:
        (worker,) = worker_pids(server.process.pid)
        assert list(tmp_path.glob(f"plant-store-handoff-*/ready-{worker}"))
        os.kill(worker, signal.SIGSTOP)
        assert server.stop() == 0
        assert list(tmp_path.glob("plant-store-handoff-*")) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
        server.stop()


def deployed_script(tmp_path: Path, **settings: str) -> Served:
    """The `gunicorn` script, as deployed, its reload's directory in tmp_path. Re-executed by
    SIGUSR2, `python -m gunicorn` would run gunicorn/__main__.py as a file, with gunicorn's own
    `http` package ahead of the standard library's."""
    port = free_port()
    env = {**BASE_ENV, **OK, "GUNICORN_BIND": f"127.0.0.1:{port}", "TMPDIR": str(tmp_path), **settings}
    return Served([str(Path(sys.executable).parent / "gunicorn")], env, ROOT, port)


def second_master(server: Served, serving: Callable[[int], bool]) -> int:
    """SIGUSR2 to the server's master: the new master's pid, once `serving(its pid)`."""
    (old_worker,) = worker_pids(server.process.pid)
    server.process.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 20
    new_master = None
    try:
        while new_master is None or not serving(new_master):
            assert time.monotonic() < deadline, server.output()
            assert "is not a setting" not in server.output()
            time.sleep(0.1)
            new_master = next((pid for pid in worker_pids(server.process.pid) if pid != old_worker), None)
    except BaseException:
        if new_master is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(new_master, signal.SIGTERM)
        raise
    return new_master


def test_sigusr2_starts_a_second_master_that_serves(tmp_path, redis_server):
    """gunicorn's binary upgrade: the old master forks and execs a new one, handing it the
    listening sockets in GUNICORN_FD (and its own pid in GUNICORN_PID): gunicorn's variables, not
    misspelled settings. The new master was refused at its start, and no upgrade could be made."""
    # On Redis: the memory store's upgrade is refused (below).
    server = deployed_script(tmp_path, **redis_settings(redis_server), WEB_CONCURRENCY="1")
    new_master = None
    try:
        new_master = second_master(server, lambda master: bool(worker_pids(master)))
        os.kill(new_master, signal.SIGTERM)  # the new one stops first, then the old
        deadline = time.monotonic() + 30
        while new_master in worker_pids(server.process.pid):
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.05)
        status, _, body = call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, AUTH)
        assert status == 200, body
        assert server.stop() == 0
        assert "Traceback" not in server.output(), server.output()  # either master's stop is clean
    finally:
        if new_master is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(new_master, signal.SIGTERM)
        server.stop()


def test_sigusr2_with_the_memory_store_is_refused_and_the_old_master_serves_on(tmp_path):
    """The new master's worker would start with an empty store beside the old one's, which then
    refuses every request as a split store: every plant out of reach, half the requests 503. The
    refusal says what does upgrade: a restart (a reload runs the old code)."""
    server = deployed_script(tmp_path)
    old_worker = None
    try:
        assert call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, AUTH)[0] == 200
        (old_worker,) = worker_pids(server.process.pid)
        server.process.send_signal(signal.SIGUSR2)
        await_output(server, "refusing a binary upgrade (SIGUSR2)", 30)
        # An operator upgrading is not sent to SIGHUP as if it ran the new version: a reload's
        # worker is forked from this master, with the code it imported (docs/operations.md#reload).
        (refusal,) = [line for line in server.output().splitlines() if "refusing a binary upgrade" in line]
        assert "Reload with SIGHUP" not in refusal
        assert "runs the code this master started with" in refusal
        deadline = time.monotonic() + 30
        while worker_pids(server.process.pid) != [old_worker]:  # the new master has exited
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.05)
        for _ in range(6):
            status, _, body = call(server.connection(), "GET", "/plants/1", headers=AUTH)
            assert status == 200, body
        assert server.stop() == 0
    finally:
        with contextlib.suppress(OSError):  # a new master that did start outlives the old one
            for pid in set(worker_pids(server.process.pid)) - {old_worker}:
                os.kill(pid, signal.SIGTERM)
        server.stop()


def reloaded(server: Served) -> None:
    """SIGHUP to the server's master, until its one worker is the new one (the old one gone)."""
    (worker,) = worker_pids(server.process.pid)
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while len(pids := worker_pids(server.process.pid)) != 1 or pids == [worker]:
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.1)


def test_a_binary_upgrade_after_a_reload_serves_on_redis_once_the_old_master_is_gone(tmp_path):
    """gunicorn hands the new master the environment it read at its last reload, which names the
    metrics directory the old master made: the new master's workers counted into it, and once
    the old master removed it at its exit every request of theirs was a 500."""
    redis = RedisServer(tmp_path)
    server = deployed_script(tmp_path, PLANTS_STORE_URL=redis.url, WEB_CONCURRENCY="1")
    new_master = None
    try:
        reloaded(server)
        new_master = second_master(server, lambda master: bool(worker_pids(master)))
        server.process.send_signal(signal.SIGQUIT)
        assert server.process.wait(30) == 0
        for number in range(3):
            plant = {"id": number + 1, "name": "Fern"}
            status, _, body = call(server.connection(), "POST", "/plants", plant, AUTH)
            assert status == 200, body
        status, _, body = call(server.connection(), "GET", "/metrics", None, AUTH)
        assert status == 200, body
        assert b"plants_http_requests_total" in body
        assert "Traceback" not in server.output()
    finally:
        if new_master is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(new_master, signal.SIGTERM)
        server.stop()
        redis.stop()


def test_a_second_binary_upgrade_after_a_reload_and_an_upgrade_starts_on_redis(tmp_path):
    """The promoted master hands the next one the environment it started with, the first master's
    (read at its reload): it names the directory the first master made, gone with it. The third
    master took it for one the operator named, and refused to start (not a directory)."""
    redis = RedisServer(tmp_path)
    server = deployed_script(tmp_path, PLANTS_STORE_URL=redis.url, WEB_CONCURRENCY="1")
    masters: list[int] = []
    try:
        reloaded(server)
        second = second_master(server, lambda master: bool(worker_pids(master)))
        masters.append(second)
        server.process.send_signal(signal.SIGQUIT)
        assert server.process.wait(30) == 0
        await_output(server, "Master has been promoted", 20)
        (second_worker,) = worker_pids(second)
        os.kill(second, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        third = None
        while third is None or not worker_pids(third):  # the third master serves, with its worker
            assert time.monotonic() < deadline, server.output()
            assert "configuration error" not in server.output(), server.output()
            time.sleep(0.1)
            third = next((pid for pid in worker_pids(second) if pid != second_worker), None)
        masters.append(third)
        os.kill(second, signal.SIGQUIT)
        deadline = time.monotonic() + 30
        while server.output().count("Master has been promoted") < 2:  # the second one gone
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.1)
        status, _, body = call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, AUTH)
        assert status == 200, body
        status, _, body = call(server.connection(), "GET", "/metrics", None, AUTH)
        assert status == 200, body
        assert "Traceback" not in server.output()
    finally:
        for master in reversed(masters):
            with contextlib.suppress(ProcessLookupError):
                os.kill(master, signal.SIGTERM)
        server.stop()
        redis.stop()


@contextlib.contextmanager
def unconfigured_gunicorn(tmp_path: Path, *args: str):
    """`gunicorn [args] 'app:create_app()'` from another directory: no configuration file at all."""
    port = free_port()
    env = {**BASE_ENV, "PLANTS_API_TOKENS": TOKEN, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "gunicorn.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", *args, "-b", f"127.0.0.1:{port}", "app:create_app()"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_until_serving(port, process)
        yield process, port, log
    finally:
        process.terminate()
        process.wait(30)


def create_on(port: int, plant_id: int, name: str):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    return call(conn, "POST", "/plants", {"id": plant_id, "name": name}, AUTH)


def assert_split_refused(port: int, log: Path) -> None:
    for number in range(12):
        record = assert_error(*create_on(port, 77, f"Fern {number}"), 503)
        assert "misconfigured" in record["message"]
        # Reads too, as the README says: every request that reaches the store.
        for path in ("/plants/77", "/plants", "/events"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            status, headers, body = call(conn, "GET", path, None, AUTH)
            assert "misconfigured" in assert_error(status, headers, body, 503)["message"]
            assert headers["Retry-After"] == "60"
        # Not ready, with the reason the refusal logs.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        record = assert_error(*call(conn, "GET", "/readyz", None, {}), 503)
        assert "several worker processes, and the in-memory store would be split" in record["message"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    assert call(conn, "GET", "/healthz", None, AUTH)[0] == 200
    # The line names the operation it refuses, a read as a read.
    for operation in ("POST /plants:", "GET /plants/<plant_id>:", "GET /plants:", "GET /events:"):
        assert f"Refusing {operation} this server runs several worker processes" in log.read_text()


def test_unconfigured_gunicorn_with_many_workers_never_serves_split(tmp_path):
    """`gunicorn -w 4 'app:create_app()'`: no config, so no start-time guard."""
    with unconfigured_gunicorn(tmp_path, "-w", "4") as (_, port, log):
        assert_split_refused(port, log)


def test_unconfigured_gunicorn_given_sigttin_never_serves_split(tmp_path):
    """One worker and no config, then SIGTTIN: no hook holds it at one."""
    with unconfigured_gunicorn(tmp_path) as (process, port, log):
        assert create_on(port, 1, "Fern")[0] == 200
        process.send_signal(signal.SIGTTIN)
        deadline = time.monotonic() + 10
        while len(worker_pids(process.pid)) < 2:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        time.sleep(2)  # the second worker has booted, and the first has looked again
        assert_split_refused(port, log)


def test_flask_run_config_error_is_one_line():
    env = {**BASE_ENV, "FLASK_APP": "wsgi"}
    result = subprocess.run(
        [sys.executable, "-m", "flask", "run", "--port", str(free_port())],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "PLANTS_API_TOKENS is not set" in result.stderr


def test_traces_asked_for_without_the_extra_name_an_install_command_that_works(tmp_path):
    # A regular package named opentelemetry in front hides the installed SDK, as a venv without
    # the extra would have none.
    (tmp_path / "opentelemetry").mkdir()
    (tmp_path / "opentelemetry" / "__init__.py").write_text("")
    env = {**OK, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "PYTHONPATH": str(tmp_path)}
    (line,) = refused_start(env)
    assert "OpenTelemetry is not installed" in line
    command = line.split("run ", 1)[1]
    assert command == "pip install -r requirements.txt -e '.[otel]'"
    # What it names is in the clone: the pins, and the extra in the package's metadata.
    assert (ROOT / "requirements.txt").is_file()
    assert "otel" in (metadata.metadata("plant-store").get_all("Provides-Extra") or [])
