"""A reload (SIGHUP, what `systemctl reload` sends) under systemd's socket activation, while clients
create: no request fails, and every plant acknowledged before, during and after it is still there,
on the default memory store too (app/server/handoff.py)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import call, small_tmpfs, wait_for_watches, watches_started
from tests.rawhttp import responses
from tests.servers import TOKEN, RedisServer, SocketActivated

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
CLIENTS = 3

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-socket-activate") is None, reason="needs systemd-socket-activate (systemd)"
)


def service_env(**settings: str) -> dict[str, str]:
    """What a unit's Environment= would give: no inherited PLANTS_* or gunicorn variables."""
    keep = ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV")
    return {
        **{name: os.environ[name] for name in keep if name in os.environ},
        "PLANTS_API_TOKENS": TOKEN,
        **settings,
    }


def creator(
    port: int, first: int, acknowledged: list[int], failures: list[str], stop: threading.Event
) -> None:
    """One plant per connection, as a client without a pool does; anything but a 200 is a failure."""
    plant_id = first
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", "/plants", body=json.dumps({"id": plant_id, "name": "Fern"}), headers=AUTH)
            response = conn.getresponse()
            body = response.read()
            if response.status == 200:
                acknowledged.append(plant_id)
            else:
                failures.append(f"{plant_id}: {response.status} {body[:200]!r}")
        except OSError as exc:
            failures.append(f"{plant_id}: {exc!r}")
        finally:
            conn.close()
        plant_id += CLIENTS


def worker_pids(master: int) -> set[str]:
    return set(Path(f"/proc/{master}/task/{master}/children").read_text().split())


def reload_under_load(server: SocketActivated, reloads: int = 2) -> list[int]:
    """SIGHUP `reloads` times while CLIENTS clients create; the acknowledged ids."""
    acknowledged: list[int] = []
    failures: list[str] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=creator, args=(server.port, first, acknowledged, failures, stop))
        for first in range(1, CLIENTS + 1)
    ]
    for thread in threads:
        thread.start()
    try:
        for _ in range(reloads):
            time.sleep(0.5)
            before, count = worker_pids(server.process.pid), len(acknowledged)
            server.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 60
            # Reloaded: a new worker alone, and serving creates again.
            while not (worker_pids(server.process.pid) - before and len(acknowledged) > count + 20):
                assert time.monotonic() < deadline, server.output()[-3000:]
                time.sleep(0.05)
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert failures == [], server.output()[-3000:]
    assert acknowledged  # and some after each reload (the loop above waits for them)
    return acknowledged


def assert_all_readable(server: SocketActivated, acknowledged: list[int]) -> None:
    conn = server.connection()
    missing = []
    for plant_id in acknowledged:
        conn.request("GET", f"/plants/{plant_id}", headers=AUTH)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            missing.append((plant_id, response.status))
    conn.close()
    assert missing == []


def gunicorn_command() -> list[str]:
    return [sys.executable, "-m", "gunicorn", "-c", "python:app.server.gunicorn_conf"]


def test_a_reload_on_the_memory_store_fails_nothing_and_keeps_every_plant(tmp_path):
    server = SocketActivated(gunicorn_command(), service_env(), cwd=tmp_path)
    try:
        hook = {"url": "http://no-such-host.invalid/hook"}
        status, _, body = call(server.connection(), "POST", "/webhooks", hook, AUTH)
        assert status == 201, body
        endpoint = json.loads(body)["id"]
        for plant_id in (-3, -2, -1):
            assert (
                call(server.connection(), "POST", "/plants", {"id": plant_id, "name": "Moss"}, AUTH)[0] == 200
            )
        status, _, body = call(server.connection(), "GET", "/plants?limit=2", headers=AUTH)
        cursor = json.loads(body)["next"]
        acknowledged = reload_under_load(server)
        assert_all_readable(server, acknowledged)
        # The webhook endpoints went over too, and a cursor made before is still good.
        assert call(server.connection(), "GET", f"/webhooks/{endpoint}", headers=AUTH)[0] == 200
        status, _, body = call(server.connection(), "GET", f"/plants?limit=1&after={cursor}", headers=AUTH)
        assert (status, json.loads(body)["plants"]) == (200, [{"id": -1, "name": "Moss"}])
        # The feed went over with the plants: one created event per plant, from the first.
        status, _, body = call(server.connection(), "GET", "/events?limit=1000", headers=AUTH)
        assert status == 200
        events = json.loads(body)["events"]
        assert [event["type"] for event in events] == ["plant.created"] * min(1000, len(acknowledged) + 3)
        assert {event["plant"]["id"] for event in events} <= {*acknowledged, -3, -2, -1}
    finally:
        server.stop()
    assert "took over" in server.output()


def test_a_reload_on_redis_keeps_gunicorns_overlap_and_fails_nothing(tmp_path):
    redis = RedisServer(tmp_path)
    server = SocketActivated(
        gunicorn_command(), service_env(PLANTS_STORE_URL=redis.url, WEB_CONCURRENCY="2"), cwd=tmp_path
    )
    try:
        acknowledged = reload_under_load(server, reloads=1)
        assert_all_readable(server, acknowledged)
    finally:
        server.stop()
        redis.stop()


def test_a_reload_to_a_password_the_store_refuses_is_refused_and_the_workers_serve_on(tmp_path):
    """New workers would reach Redis with a password it refuses and answer only 503: the reload is
    refused, as a bad setting is, and the running workers serve on with the password they have."""
    redis = RedisServer(tmp_path)
    redis.command("CONFIG", "SET", "requirepass", "the-pw")
    url = tmp_path / "store-url"
    url.write_text(redis.url.replace("redis://", "redis://:the-pw@"))
    env = service_env(PLANTS_STORE_URL_FILE=str(url), WEB_CONCURRENCY="2")
    server = SocketActivated(gunicorn_command(), env, cwd=tmp_path)
    try:
        plants = create_plants(server, 5)
        url.write_text(redis.url.replace("redis://", "redis://:n0t-the-pw@"))
        why = "PLANTS_STORE_URL_FILE names a store that refuses its user or password"
        refused_reload(server, plants, why, workers=2)
        assert "n0t-the-pw" not in server.output()
    finally:
        server.stop()
        redis.stop()


def create_plants(server: SocketActivated, count: int) -> list[int]:
    conn = server.connection()
    for plant_id in range(1, count + 1):
        status, _, body = call(conn, "POST", "/plants", {"id": plant_id, "name": f"Fern {plant_id}"}, AUTH)
        assert status == 200, body
    conn.close()
    return list(range(1, count + 1))


def wait_for(server: SocketActivated, text: str, count: int = 1) -> None:
    deadline = time.monotonic() + 60
    while server.output().count(text) < count:
        assert server.process.poll() is None, server.output()[-3000:]
        assert time.monotonic() < deadline, server.output()[-3000:]
        time.sleep(0.05)


def reloads_ended(output: str) -> int:
    """The reloads `output` says are over, with 50 plants: each handed over, or refused as
    another was under way."""
    return output.count("took over 50 plants") + output.count("another reload is under way")


def refused_reload(server: SocketActivated, plants: list[int], why: str, workers: int = 1) -> None:
    """SIGHUP, which the master refuses: the same workers serve every plant on, one ERROR says why."""
    worker = worker_pids(server.process.pid)
    server.process.send_signal(signal.SIGHUP)
    wait_for(server, "reload refused")
    time.sleep(1.0)  # time enough for a reload that wrongly went on to replace the worker
    assert worker_pids(server.process.pid) == worker
    assert_all_readable(server, plants)
    (line,) = [line for line in server.output().splitlines() if "reload refused" in line]
    assert "ERROR" in line
    assert why in line
    assert server.output().count("Booting worker") == workers  # no worker started, none lost


def tokens_file_env(tokens: Path) -> dict[str, str]:
    env = service_env(PLANTS_API_TOKENS_FILE=str(tokens))
    del env["PLANTS_API_TOKENS"]
    return env


@pytest.mark.parametrize(
    "content",
    ["", f"{TOKEN} # rotated on Monday\n"],
    ids=["emptied mid-rewrite", "a line the parser refuses"],
)
def test_a_reload_with_refused_settings_keeps_the_worker_its_plants_and_its_settings(tmp_path, content):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    server = SocketActivated(gunicorn_command(), tokens_file_env(tokens), cwd=tmp_path)
    try:
        plants = create_plants(server, 50)
        tokens.write_text(content)
        refused_reload(server, plants, "PLANTS_API_TOKENS_FILE")
        # Put right, the reload goes through: a new worker, and every plant handed over.
        tokens.write_text(f"{TOKEN}\n")
        server.process.send_signal(signal.SIGHUP)
        wait_for(server, "took over 50 plants")
        assert_all_readable(server, plants)
    finally:
        server.stop()
    assert TOKEN not in server.output()


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        # Not the length of the file's good value: Python may read a file's cached bytecode again
        # when its size and its mtime's second are the same (gunicorn imports the file).
        ('raw_env = ["PLANTS_MAX_PLANTS=unlimited"]', "PLANTS_MAX_PLANTS must be a whole number"),
        ("threads = 0", "--threads is 0"),
        ("workers = 2", "2 workers with the in-memory store"),
        ("raise ValueError('half-written')", "configuration could not be read again"),
        ('raw_env = ["MAX_CONTENT_LENGTH=999999999"]', "does not fit in GUNICORN_MEMORY_BUDGET"),
    ],
    ids=["raw_env", "threads", "workers", "unreadable", "body-past-budget"],
)
def test_a_reload_whose_gunicorn_file_is_refused_keeps_the_worker_and_its_plants(tmp_path, setting, why):
    """A reload reads gunicorn's configuration file again (its raw_env too): the master checked the
    environment it had, and a file that set a bad value went on to new workers that could not
    boot, and gunicorn's master then stopped; a file it could not read stopped it at once."""
    conf = tmp_path / "plants.conf.py"
    packaged = "from app.server.gunicorn_conf import *  # noqa: F403\n"
    conf.write_text(packaged + 'raw_env = ["PLANTS_MAX_PLANTS=1000"]\n')
    command = [sys.executable, "-m", "gunicorn", "-c", str(conf)]
    server = SocketActivated(command, service_env(), cwd=tmp_path)
    try:
        plants = create_plants(server, 50)
        conf.write_text(packaged + setting + "\n")
        refused_reload(server, plants, why)
        conf.write_text(packaged + 'raw_env = ["PLANTS_MAX_PLANTS=1000"]\n')
        server.process.send_signal(signal.SIGHUP)
        wait_for(server, "took over 50 plants")
        assert_all_readable(server, plants)
    finally:
        server.stop()


@pytest.mark.parametrize(
    "content",
    ["", f"{TOKEN} # rotated on Monday\n", f"{TOKEN}\nadded-without-a-reload\n"],
    ids=["emptied", "a line the parser refuses", "a token added"],
)
def test_a_worker_that_replaces_a_dead_one_reads_the_files_the_master_accepted(tmp_path, content):
    """A worker killed (the OOM killer's SIGKILL, a timeout) is replaced with the token file as
    the master last accepted it: a file changed since, and not reloaded, neither stops the
    service (a worker that failed to boot stopped gunicorn's master) nor changes its tokens."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    server = SocketActivated(gunicorn_command(), tokens_file_env(tokens), cwd=tmp_path)
    try:
        create_plants(server, 1)
        tokens.write_text(content)
        (worker,) = worker_pids(server.process.pid)
        os.kill(int(worker), signal.SIGKILL)
        wait_for(server, "Booting worker", 2)
        status, _, body = call(server.connection(), "POST", "/plants", {"id": 2, "name": "Fern"}, AUTH)
        assert status == 200, server.output()[-3000:]
        added = {**AUTH, "Authorization": "Bearer added-without-a-reload"}
        status, _, body = call(server.connection(), "GET", "/plants/2", headers=added)
        assert status == 401, body
        assert server.process.poll() is None
        assert "Traceback" not in server.output()
    finally:
        server.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_a_snapshot_that_does_not_fit_refuses_the_reload_and_loses_nothing(tmp_path):
    with small_tmpfs(tmp_path / "tmp", "1m") as small:
        # TMPDIR as a container's small --tmpfs /tmp: the snapshot's directory and, were it not
        # moved to /dev/shm, the metrics' files.
        server = SocketActivated(gunicorn_command(), service_env(TMPDIR=str(small)), cwd=tmp_path)
        try:
            plants = create_plants(server, 200)
            statvfs = os.statvfs(small)
            (small / "filler").write_bytes(b"x" * (statvfs.f_bavail * statvfs.f_frsize - 16384))
            refused_reload(server, plants, "does not fit")
            assert not list(small.glob("*/*.partial"))
            # Only the handoff's directory there: the metrics' memory-mapped files are elsewhere.
            assert [path.name for path in small.iterdir() if path.name != "filler"] == [
                directory.name for directory in small.glob("plant-store-handoff-*")
            ]
            # Room again: the reload goes through, every plant handed over.
            (small / "filler").unlink()
            server.process.send_signal(signal.SIGHUP)
            wait_for(server, "took over 200 plants")
            assert_all_readable(server, plants)
        finally:
            server.stop()


def test_a_snapshot_a_master_left_unread_is_read_by_the_next_start(tmp_path):
    runtime = tmp_path / "run"  # systemd's RuntimeDirectory=, kept across restarts
    runtime.mkdir()
    env = service_env(RUNTIME_DIRECTORY=str(runtime))
    server = SocketActivated(gunicorn_command(), env, cwd=tmp_path)
    try:
        plants = create_plants(server, 30)
        # The master stops mid-handoff: the old worker wrote its snapshot, no new worker read it.
        (directory,) = runtime.glob("plant-store-handoff-*")
        (directory / "handoff-wanted").touch()
    finally:
        server.stop()
    assert f"keeping the unread snapshot {directory / 'store.snapshot'}" in server.output()
    again = SocketActivated(gunicorn_command(), env, cwd=tmp_path)
    try:
        assert_all_readable(again, plants)
        assert f"found the unread snapshot {directory / 'store.snapshot'}" in again.output()
        assert "took over 30 plants" in again.output()
    finally:
        again.stop()
    assert not directory.exists()  # read, then gone with its master


def test_a_second_reload_during_the_first_is_refused_or_done_after_never_interleaved(tmp_path):
    server = SocketActivated(gunicorn_command(), service_env(), cwd=tmp_path)
    try:
        plants = create_plants(server, 50)
        server.process.send_signal(signal.SIGHUP)
        time.sleep(0.05)
        server.process.send_signal(signal.SIGHUP)
        # Each SIGHUP ends in one line: the second's is its refusal, or, let through once the
        # first was done, its own handoff's, a whole reload later (seconds on a loaded machine).
        deadline = time.monotonic() + 60
        while (ended := reloads_ended(output := server.output())) < 2:
            assert time.monotonic() < deadline, output[-3000:]
            time.sleep(0.05)
        assert ended == 2, output[-3000:]
        assert_all_readable(server, plants)
        # The next reload is checked anew, and goes through.
        done = server.output().count("took over 50 plants")
        server.process.send_signal(signal.SIGHUP)
        wait_for(server, "took over 50 plants", done + 1)
        assert reloads_ended(server.output()) == 3  # nor a late line of the first two since
        assert_all_readable(server, plants)
    finally:
        server.stop()


def test_an_old_worker_killed_mid_handoff_leaves_the_service_up_and_says_what_was_lost(tmp_path):
    """SIGKILL (the OOM killer's) of the worker that holds the plants cannot keep them; the master
    says so in one ERROR where the reload is logged, and a new worker serves."""
    # Its handoff's directory in tmp_path: the system's temporary directory may hold another
    # server's, left by a process that was killed, with a worker's pid that this worker's reuses.
    server = SocketActivated(gunicorn_command(), service_env(TMPDIR=str(tmp_path)), cwd=tmp_path)
    try:
        create_plants(server, 20)
        # A kill that came after the snapshot was written (a starved machine ran this test more
        # than the stop's 2 s late) handed the plants over: the reload is tried again, bounded.
        for attempt in range(1, 4):
            if killed_mid_handoff(server, tmp_path, attempt):
                break
        else:
            raise AssertionError("every kill came after the handoff: " + server.output()[-3000:])
        wait_for(server, "Booting worker", attempt + 1)
        status, _, body = call(server.connection(), "GET", "/plants", headers=AUTH)
        assert (status, json.loads(body)["plants"]) == (200, [])
    finally:
        server.stop()


def killed_mid_handoff(server: SocketActivated, tmp_path: Path, attempt: int) -> bool:
    """The `attempt`th reload, its old worker killed once the handoff began: whether the master
    said the plants were lost (False: the worker had handed them over first)."""
    kept = server.connection()
    try:
        # A kept-alive client: the stopping worker waits for it (2 s) before it writes its snapshot,
        # so the kill lands before the write unless this test is that late to get the CPU.
        kept.request("GET", "/healthz")
        kept.getresponse().read()
        (worker,) = worker_pids(server.process.pid)
        (directory,) = tmp_path.glob(f"plant-store-handoff-*/ready-{worker}")
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while not (directory.parent / "handoff-wanted").exists():
            assert time.monotonic() < deadline, server.output()[-3000:]
            time.sleep(0.001)
        with contextlib.suppress(ProcessLookupError):  # gone: it had handed the plants over
            os.kill(int(worker), signal.SIGKILL)
    finally:
        kept.close()
    lost, handed = "without handing its plants over", "took over 20 plants"
    deadline = time.monotonic() + 60
    while (output := server.output()).count(handed) < attempt and lost not in output:
        assert server.process.poll() is None, output[-3000:]
        assert time.monotonic() < deadline, output[-3000:]
        time.sleep(0.05)
    return lost in output


def stalled_watch(port: int) -> socket.socket:
    """A stream of the feed whose client takes nothing of it: its head came, and is left unread."""
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    stalled.settimeout(10)
    stalled.connect(("127.0.0.1", port))
    stalled.sendall(
        f"GET /events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    assert stalled.recv(15, socket.MSG_PEEK | socket.MSG_WAITALL) == b"HTTP/1.1 200 OK"
    return stalled


def test_watchers_that_take_nothing_do_not_hold_the_reloads_handoff(tmp_path):
    """The stopping worker ends a stream at once, and its client has the stop's linger (2 s), not
    its read timeout, to take that end: a watcher that read nothing held the old worker, and with
    it every new connection (no worker accepts during the handoff), for the graceful timeout."""
    env = service_env(GUNICORN_READ_TIMEOUT="60", GUNICORN_GRACEFUL_TIMEOUT="30")
    server = SocketActivated(gunicorn_command(), env, cwd=tmp_path)
    stalled: list[socket.socket] = []
    try:
        stalled += [stalled_watch(server.port) for _ in range(4)]
        conn = server.connection()
        for plant_id in range(1, 401):  # far more than the streams' socket buffers hold
            body = {"id": plant_id, "name": "\U0001f33f" * 200}
            assert call(conn, "POST", "/plants", body, AUTH)[0] == 200
        conn.close()
        time.sleep(1.0)  # each stream has sent what its socket takes, and waits for its client
        # A long-poll that reads its answer: the stopping worker ends it only once it has stopped
        # accepting, so its page says the next connection waits for the new worker.
        watches = watches_started(server, TOKEN)
        poll = server.connection(timeout=90)
        poll.request("GET", "/events?after=now&wait=55", headers=AUTH)
        wait_for_watches(server, TOKEN, watches + 1)
        server.process.send_signal(signal.SIGHUP)
        page = poll.getresponse()
        assert (page.status, json.loads(page.read())["events"]) == (200, [])
        poll.close()
        started = time.monotonic()
        status, _, body = call(
            server.connection(timeout=90), "POST", "/plants", {"id": 0, "name": "Honest"}, AUTH
        )
        waited = time.monotonic() - started
        assert status == 200, body
        # Well within the 30 s the stalled clients held it for before.
        assert waited < 10, (waited, server.output()[-3000:])
        assert "took over 400 plants" in server.output()  # answered by the new worker
        assert_all_readable(server, list(range(401)))
    finally:
        for sock in stalled:
            sock.close()
        server.stop()


@pytest.mark.parametrize("sent", ["with_the_watch", "while_it_waits"])
def test_requests_pipelined_behind_a_long_poll_are_answered_at_a_reload(tmp_path, sent):
    """A client pipelines two writes behind a long-poll on one connection, in the same packet or
    while the long-poll waits; a reload stops the worker that holds them. The long-poll answers
    its empty page, then each write is answered in turn, the last with `Connection: close`, and
    their plants are in the store the next worker serves. The writes were dropped unanswered."""
    server = SocketActivated(gunicorn_command(), service_env(), cwd=tmp_path)
    try:
        status, _, body = call(server.connection(), "GET", "/events?after=now", headers=AUTH)
        cursor = json.loads(body)["next"]
        watches = watches_started(server, TOKEN)
        auth = f"Host: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        watch = f"GET /events?after={cursor}&wait=30 HTTP/1.1\r\n{auth}\r\n".encode()
        behind = b""
        for plant_id in (7, 8):
            plant = json.dumps({"name": f"Pipelined {plant_id}"}).encode()
            head = f"PUT /plants/{plant_id} HTTP/1.1\r\n{auth}Content-Type: application/json\r\n"
            behind += f"{head}Content-Length: {len(plant)}\r\n\r\n".encode() + plant
        client = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        client.sendall(watch + behind if sent == "with_the_watch" else watch)
        wait_for_watches(server, TOKEN, watches + 1)
        if sent == "while_it_waits":
            client.sendall(behind)  # on the loopback, in the server's socket once sent
        server.process.send_signal(signal.SIGHUP)
        answers = responses(client, 4)  # until the server closes
        client.close()
        got = [(answer.status, answer.headers["Connection"], answer.json()) for answer in answers]
        assert got == [
            (200, "keep-alive", {"events": [], "next": cursor}),
            (201, "keep-alive", {"name": "Pipelined 7"}),
            (201, "close", {"name": "Pipelined 8"}),
        ], server.output()[-3000:]
        for plant_id in (7, 8):
            status, _, body = call(server.connection(), "GET", f"/plants/{plant_id}", headers=AUTH)
            assert (status, json.loads(body)["name"]) == (200, f"Pipelined {plant_id}")
        assert "took over 2 plants" in server.output()  # from the worker that answered them
    finally:
        server.stop()


def test_under_gthread_open_watches_do_not_hold_the_reloads_handoff(tmp_path):
    """gunicorn's gthread worker waits for its request threads as it stops, and a watch holds one
    for as long as it lasts (a stream 300 s): its old worker lingered past the graceful timeout
    until the master killed it, and no worker accepted meanwhile. SIGTERM ends every watch now, as
    the packaged worker's stop does: the stream with `retry:`, the long-poll with its page."""
    env = service_env(GUNICORN_WORKER_CLASS="gthread", GUNICORN_THREADS="4", GUNICORN_GRACEFUL_TIMEOUT="30")
    server = SocketActivated(gunicorn_command(), env, cwd=tmp_path)
    try:
        assert call(server.connection(), "POST", "/plants", {"id": 1, "name": "Fern"}, AUTH)[0] == 200
        watches = watches_started(server, TOKEN)
        stream = server.connection(timeout=120)
        stream.request("GET", "/events?after=now", headers={**AUTH, "Accept": "text/event-stream"})
        streamed = stream.getresponse()
        assert streamed.status == 200
        poll = server.connection(timeout=120)
        poll.request("GET", "/events?after=now&wait=55", headers=AUTH)
        wait_for_watches(server, TOKEN, watches + 2)
        server.process.send_signal(signal.SIGHUP)
        # Each ends as its worker stops: the stream's end says when to reconnect.
        assert streamed.read().endswith(b"retry: 1000\n")
        page = poll.getresponse()
        assert (page.status, json.loads(page.read())["events"]) == (200, [])
        # The new worker took the plants over, well within the 90 s the old one held them
        # (the graceful timeout and the snapshot's minute) while the watches lasted. (The old
        # one may still take a connection between its watches' end and its listener's close.)
        wait_for(server, "took over 1 plants")
        status, _, body = call(server.connection(timeout=120), "GET", "/plants/1", headers=AUTH)
        assert status == 200, body
    finally:
        server.stop()
