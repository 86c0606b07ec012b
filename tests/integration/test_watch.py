"""Watching the change feed on a real gunicorn: long-polls (`wait`) and server-sent events,
with the same cursors as a page; on memory (one worker, one request thread) and on Redis (two
workers, so that a write reaches a watcher of the other worker through Redis)."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from app.settings.schema import LONGEST_WAIT
from bench.watch import hold, wake
from tests.conftest import redis_settings, settings_for_store
from tests.helpers import in_time, wait_for_watches, watches_started
from tests.receiver import Receiver
from tests.servers import TOKEN, Gunicorn, Nginx

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SETTINGS = {
    "PLANTS_EVENTS_HEARTBEAT": "1",
    "PLANTS_EVENTS_STREAM_MAX": "4",
    "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "300",
}


def start(request: pytest.FixtureRequest, settings: dict[str, str]) -> Gunicorn:
    env = dict(settings)
    if request.param == "redis":
        env.update(redis_settings(request.getfixturevalue("redis_server")), WEB_CONCURRENCY="2")
    else:
        env["GUNICORN_THREADS"] = "1"
    return Gunicorn(env=env)


@pytest.fixture(scope="module", params=["memory", "redis"])
def server(request):
    server = start(request, SETTINGS)
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["memory", "redis"])
def long_streams(request):
    """As `server`, but a stream lasts the default 300 s: the benchmark's streams must outlast its
    writes (some 7 s from the first stream's start on a loaded machine), not end at 4 s."""
    settings = {name: value for name, value in SETTINGS.items() if name != "PLANTS_EVENTS_STREAM_MAX"}
    server = start(request, settings)
    yield server
    server.stop()


def get(server: Gunicorn, path: str, headers: dict | None = None, method: str = "GET"):
    conn = server.connection(timeout=70)
    conn.request(method, path, headers={**AUTH, **(headers or {})})
    response = conn.getresponse()
    return response.status, response.headers, response.read()


def create(server: Gunicorn, plant_id: int, name: str = "watched") -> None:
    conn = server.connection()
    body = json.dumps({"id": plant_id, "name": name})
    conn.request("POST", "/plants", body, {**AUTH, "Content-Type": "application/json"})
    assert conn.getresponse().status == 200


def now_cursor(server: Gunicorn) -> str:
    status, _, body = get(server, "/events?after=now")
    assert status == 200
    return json.loads(body)["next"]


def in_background(function, *args):
    result: dict = {}

    def run():
        started = time.monotonic()
        result["answer"] = function(*args)
        result["done"] = time.monotonic()
        result["seconds"] = result["done"] - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


# --- long-poll -----------------------------------------------------------------------------------


def test_a_long_poll_answers_at_once_when_events_are_there(server):
    cursor = now_cursor(server)
    create(server, 710_001)
    # At once, not at its wait: within in_time's generous bound, well before 55 s.
    status, headers, body = in_time(lambda: get(server, f"/events?after={cursor}&wait=55"))
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    page = json.loads(body)
    assert [event["plant"]["id"] for event in page["events"]] == [710_001]


def test_a_long_poll_waits_for_the_next_write_and_answers_it(server):
    cursor = now_cursor(server)
    polls = watches_started(server, TOKEN)
    thread, result = in_background(get, server, f"/events?after={cursor}&wait=55")
    wait_for_watches(server, TOKEN, polls + 1)
    assert thread.is_alive()  # waiting: nothing was written yet
    create(server, 710_002)
    thread.join(30)  # generous for a loaded machine, and well before its 55 s: at the write
    assert not thread.is_alive()
    status, headers, body = result["answer"]
    assert status == 200
    assert int(headers["Content-Length"]) == len(body)
    page = json.loads(body)
    assert [event["plant"]["id"] for event in page["events"]] == [710_002]
    status, _, body = get(server, f"/events?after={page['next']}")
    assert json.loads(body)["events"] == []  # the page's next follows on after it


def test_a_long_poll_with_nothing_written_answers_an_empty_page_at_its_end(server):
    cursor = now_cursor(server)
    started = time.monotonic()
    status, _, body = in_time(lambda: get(server, f"/events?after={cursor}&wait=1"))
    # Its end, not before: a bound derived from `wait`, which a loaded machine only lengthens.
    assert time.monotonic() - started >= 0.9
    assert status == 200
    assert json.loads(body) == {"events": [], "next": cursor}


@pytest.mark.parametrize("wait", ["0", "56", "1.5", "soon"])
def test_a_wait_out_of_range_is_400_naming_it(server, wait):
    status, _, body = get(server, f"/events?after=now&wait={wait}")
    assert status == 400
    record = json.loads(body)
    assert record["error"] == 400
    assert "wait" in json.dumps(record)


def test_head_with_wait_answers_at_once(server):
    # At once, not at its wait: within in_time's generous bound, well before 55 s.
    status, headers, body = in_time(lambda: get(server, "/events?after=now&wait=55", method="HEAD"))
    assert (status, body) == (200, b"")
    assert headers["Content-Type"] == "application/json"


# --- server-sent events --------------------------------------------------------------------------


def open_stream(server: Gunicorn, headers: dict | None = None, path: str = "/events") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    lines = [f"GET {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {TOKEN}", "Accept: text/event-stream"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return sock


def read_stream(sock: socket.socket, until: bytes = b"\r\n0\r\n\r\n", seconds: float = 10) -> bytes:
    data = b""
    deadline = time.monotonic() + seconds
    while until not in data and time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return data


def dechunk(data: bytes) -> tuple[bytes, bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    text = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        text, body = text + rest[:size], rest[size + 2 :]
    return head, text


def frames(text: bytes) -> list[dict[str, str]]:
    """The blocks a blank line ends, each as its fields; comment lines under "comment"."""
    parsed = []
    for block in text.decode().split("\n\n"):
        if block:
            fields: dict[str, str] = {}
            for line in block.strip("\n").split("\n"):
                name, _, value = line.partition(": ") if not line.startswith(":") else ("", "", line)
                fields[name or "comment"] = value
            parsed.append(fields)
    return parsed


def test_a_stream_sends_each_event_with_its_cursor_then_heartbeats_and_ends(server):
    cursor = now_cursor(server)
    sock = open_stream(server, path=f"/events?after={cursor}")  # the write is in it, however late it starts
    create(server, 710_010, "streamed")
    data = read_stream(sock)
    sock.close()
    head, text = dechunk(data)
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"Content-Type: text/event-stream" in head
    # Behind a token, as every other answer: no shared cache keeps it, whatever the proxy.
    assert b"\r\nCache-Control: private, no-cache\r\n" in head
    assert b"X-Accel-Buffering: no" in head
    assert data.endswith(b"\r\n0\r\n\r\n")  # it ended cleanly, after PLANTS_EVENTS_STREAM_MAX
    parsed = frames(text)
    # No block without data: clients that dispatch every blank line (httpx-sse) see only events.
    # The reconnection delay rides with the first event; the heartbeats after it end no block.
    complete = parsed if text.endswith(b"\n\n") else parsed[:-1]
    assert all("data" in frame for frame in complete), text
    assert parsed[0]["retry"] == "3000"
    events = [frame for frame in parsed if "event" in frame]
    assert [json.loads(frame["data"])["plant"] for frame in events] == [{"id": 710_010, "name": "streamed"}]
    assert events[0]["event"] == "plant.created"
    assert any(frame.get("comment") == ": keep-alive" for frame in parsed)
    # The event's id is the cursor after it: a page from there is empty.
    status, _, body = get(server, f"/events?after={events[0]['id']}")
    assert (status, json.loads(body)["events"]) == (200, [])


def test_last_event_id_resumes_after_it_and_wins_over_after(server):
    cursor = now_cursor(server)
    create(server, 710_020)
    create(server, 710_021)
    _, _, body = get(server, f"/events?after={cursor}&limit=1")
    first = json.loads(body)["next"]
    sock = open_stream(server, {"Last-Event-ID": first}, path=f"/events?after={cursor}")
    _, text = dechunk(read_stream(sock))
    sock.close()
    ids = [json.loads(frame["data"])["plant"]["id"] for frame in frames(text) if "event" in frame]
    assert ids == [710_021]


def test_a_stream_from_a_position_no_longer_kept_is_410_before_it_starts(tmp_path):
    server = Gunicorn(env={"PLANTS_EVENTS_RETAIN": "3"})
    try:
        cursor = now_cursor(server)
        for plant_id in range(710_030, 710_036):
            create(server, plant_id)
        sock = open_stream(server, path=f"/events?after={cursor}")
        data = read_stream(sock, until=b"}", seconds=5)
        sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 410 ")
        assert b"Content-Type: application/json" in head
        assert json.loads(body)["error"] == 410
    finally:
        server.stop()


# --- caps, threads, stopping ---------------------------------------------------------------------


def test_watches_past_the_tokens_cap_are_429_with_retry_after(tmp_path):
    server = Gunicorn(env={"PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "2", "PLANTS_EVENTS_MAX_WATCHERS": "3"})
    try:
        waiting = [in_background(get, server, "/events?after=now&wait=4") for _ in range(2)]
        wait_for_watches(server, TOKEN, 2)
        status, headers, body = get(server, "/events?after=now&wait=4")
        assert status == 429
        assert headers["Retry-After"] == "5"
        assert "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN" in json.loads(body)["message"]
        # A HEAD answers its GET's status (RFC 9110 §9.3.2), a stream's too, and holds no place.
        status, headers, _ = get(server, "/events?after=now&wait=4", method="HEAD")
        assert (status, headers["Retry-After"]) == (429, "5")
        assert get(server, "/events", {"Accept": "text/event-stream"}, method="HEAD")[0] == 429
        for thread, _ in waiting:
            thread.join(10)
        assert get(server, "/events?after=now&wait=1")[0] == 200  # the places were given back
    finally:
        server.stop()


def test_no_watch_answered_without_watching_keeps_its_place(tmp_path):
    """A watch takes its place under the caps before its preconditions are judged: its 412 and its
    304 give the place back, as a HEAD's answer does, a 400 or 403 takes none, nor does OPTIONS.
    Many of them on the packaged worker, with room for one watch, and a watch is still let in."""
    server = Gunicorn(env={"PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "1", "PLANTS_EVENTS_MAX_WATCHERS": "1"})
    stream = None
    try:
        status, _, body = get(server, "/events/tickets", method="POST")
        assert status == 200
        ticket = json.loads(body)["ticket"]
        poll, sse = "/events?after=now&wait=20", {"Accept": "text/event-stream"}
        answered = [
            ("GET", poll, {"If-Match": '"abc"'}, 412),
            ("GET", poll, {"If-None-Match": "*"}, 304),
            ("GET", "/events", {**sse, "If-Match": '"abc"'}, 412),
            ("GET", "/events", {**sse, "If-None-Match": "*"}, 304),
            ("GET", f"/events?ticket={ticket}&after=now&wait=20", {"If-None-Match": "*"}, 304),
            ("GET", f"/events?ticket={ticket}&after=now&wait=20", {"If-Match": '"abc"'}, 412),
            ("GET", f"/events?ticket={ticket}", {}, 403),
            ("GET", "/events", {**sse, "Last-Event-ID": "now"}, 400),
            ("GET", "/events?after=nonsense&wait=20", {}, 400),
            ("GET", "/events?snapshot=true&after=now", sse, 400),
            ("HEAD", poll, {}, 200),
            ("HEAD", "/events", {**sse, "If-Match": '"abc"'}, 412),
            ("OPTIONS", poll, {}, 204),
        ]
        conn = server.connection()
        for _ in range(5):
            for method, path, headers, expected in answered:
                sent = headers if "ticket=" in path else {**AUTH, **headers}
                conn.request(method, path, headers=sent)
                response = conn.getresponse()
                response.read()
                assert (method, path, response.status) == (method, path, expected)
        conn.close()
        status, _, body = get(server, "/events?after=now&wait=1")
        assert status == 200, body
        assert json.loads(body)["events"] == []
        stream = open_stream(server)
        head = read_stream(stream, until=b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert get(server, poll)[0] == 503  # the one place of the worker is the stream's
    finally:
        if stream is not None:
            stream.close()
        server.stop()


def worker_threads(master_pid: int) -> list[int]:
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    counts = []
    for pid in children:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                counts.append(int(line.split()[1]))
    return counts


def test_two_hundred_waiting_clients_hold_no_thread_and_an_honest_client_is_served(server):
    workers = 2 if "PLANTS_STORE_URL" in server.env else 1
    deadline = time.monotonic() + 30
    while len(worker_threads(server.process.pid)) < workers and time.monotonic() < deadline:
        time.sleep(0.1)  # every worker booted
    time.sleep(0.5)
    before = worker_threads(server.process.pid)
    watches = watches_started(server, TOKEN)
    socks = []
    for _ in range(100):
        socks.append(open_stream(server))
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        poll = f"GET /events?after=now&wait=55 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        sock.sendall(poll.encode())
        socks.append(sock)
    wait_for_watches(server, TOKEN, watches + 200)  # each has its position: the write below reaches it
    # Served while the long-polls (55 s) and streams (endless) wait: none holds a thread.
    status, _, _ = in_time(lambda: get(server, "/healthz"))
    assert status == 200
    # The feed's signal may have started with the first watch (its listener, and on one Redis one
    # thread following the feed's stream: two a worker); no thread per watcher.
    after = worker_threads(server.process.pid)
    assert all(now <= was + 2 for now, was in zip(after, before, strict=True)), (before, after)
    cursor = now_cursor(server)
    create(server, 710_040)
    answered = 0
    for sock in socks[1::2]:
        answer = read_stream(sock, until=b"710040", seconds=5)
        answered += b"710040" in answer
    assert answered == 100
    for sock in socks:
        sock.close()
    assert cursor


def test_on_sigterm_a_long_poll_answers_its_empty_page_at_once():
    # The graceful stop an hour: only the stop's wake-up answers it before its 55 s wait.
    server = Gunicorn(env={"GUNICORN_GRACEFUL_TIMEOUT": "3600"})
    try:
        cursor = now_cursor(server)
        thread, result = in_background(get, server, f"/events?after={cursor}&wait=55")
        wait_for_watches(server, TOKEN, 2)  # the page of now_cursor, and the long-poll
        server.process.send_signal(signal.SIGTERM)
        thread.join(30)  # generous for a loaded machine, and well before its 55 s
        assert not thread.is_alive()
        status, _, body = result["answer"]
        assert (status, json.loads(body)) == (200, {"events": [], "next": cursor})
        assert server.process.wait(20) == 0
    finally:
        server.stop()


def test_on_stock_gthread_a_long_poll_waits_in_its_thread():
    server = Gunicorn(env={"GUNICORN_WORKER_CLASS": "gthread", "GUNICORN_THREADS": "4"})
    try:
        cursor = now_cursor(server)
        thread, result = in_background(get, server, f"/events?after={cursor}&wait=55")
        wait_for_watches(server, TOKEN, 2)  # the page of now_cursor, and the long-poll
        create(server, 710_050)
        thread.join(5)
        status, _, body = result["answer"]
        assert status == 200
        assert [event["plant"]["id"] for event in json.loads(body)["events"]] == [710_050]
    finally:
        server.stop()


def test_on_stock_gthread_watches_leave_a_request_thread_for_every_other_request():
    """Under gthread a watch holds its request thread while it waits: the worker holds its threads
    but one as watches, and refuses the next with the JSON 503, so a stream never stops the
    plants' operations and the probes for as long as it lasts."""
    # A heartbeat a second: under gthread the stream's thread finds its client gone only at its
    # next write, and the stop at the end would wait that long (the 15 s default) for it.
    server = Gunicorn(
        env={"GUNICORN_WORKER_CLASS": "gthread", "GUNICORN_THREADS": "2", "PLANTS_EVENTS_HEARTBEAT": "1"}
    )
    stream = open_stream(server)
    try:
        assert read_stream(stream, until=b"retry:", seconds=5).startswith(b"HTTP/1.1 200")
        conn = server.connection(timeout=5)
        conn.request("GET", "/events?after=now&wait=20", headers=AUTH)
        refused = conn.getresponse()
        assert refused.status == 503
        assert refused.headers["Retry-After"]
        assert json.loads(refused.read())["error"] == 503
        conn = server.connection(timeout=5)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        create(server, 710_055)
    finally:
        stream.close()
        server.stop()
    assert "GUNICORN_THREADS" in server.output()


def test_through_the_shipped_nginx_a_stream_is_not_buffered(tmp_path):
    app = Gunicorn(env={"PLANTS_EVENTS_HEARTBEAT": "1", "PLANTS_TRUSTED_PROXIES": "1"})
    proxy = Nginx(app.port, tmp_path)
    try:
        cursor = now_cursor(app)
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        sock.sendall(
            f"GET /events?after={cursor} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Accept: text/event-stream\r\nAccept-Encoding: gzip\r\n\r\n".encode()
        )
        opened = read_stream(sock, until=b"retry:", seconds=10)  # through nginx, before any event
        assert b"retry:" in opened, opened[:300]
        create(app, 710_060)
        # The event arrives while the stream is open: a buffering proxy would hold it (a few bytes
        # of a 4 KiB buffer) until the stream's end, PLANTS_EVENTS_STREAM_MAX (300 s) away.
        data = opened + read_stream(sock, until=b"710060", seconds=10)
        assert b"710060" in data
        assert not data.endswith(b"\r\n0\r\n\r\n")
        assert b"Content-Encoding" not in data.partition(b"\r\n\r\n")[0]
        sock.close()
    finally:
        proxy.stop()
        app.stop()


def test_the_documented_python_client_receives_each_event_and_resumes(server):
    text = (Path(__file__).resolve().parents[2] / "docs" / "change-feed.md").read_text()
    code = text.split("**A Python client**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "docs/change-feed.md", "exec"), namespace)  # noqa: S102  # the page's own code
    received: list[dict] = []
    stream = namespace["watch"]("127.0.0.1", server.port, TOKEN)

    def consume():
        for event in stream:
            received.append(event)
            if len(received) == 2:
                return

    thread = threading.Thread(target=consume, daemon=True)
    watches = watches_started(server, TOKEN)
    thread.start()
    wait_for_watches(server, TOKEN, watches + 2)  # its position (after=now), then its stream
    create(server, 710_070, "first")
    # Past PLANTS_EVENTS_STREAM_MAX (4 s) the stream ends: the client reconnects with Last-Event-ID.
    wait_for_watches(server, TOKEN, watches + 3)
    create(server, 710_071, "second")
    thread.join(10)
    assert [event["plant"]["id"] for event in received] == [710_070, 710_071]


def first_event_of_the_documented_client(
    app: Gunicorn,
) -> tuple[threading.Thread, list[dict], list[BaseException]]:
    """docs/change-feed.md's Python client, as written, from now on in a thread of its own, until
    its first event (`received`) or its exception (`failed`)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "change-feed.md").read_text()
    code = text.split("**A Python client**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "docs/change-feed.md", "exec"), namespace)  # noqa: S102  # the page's own code
    received: list[dict] = []
    failed: list[BaseException] = []

    def consume() -> None:
        try:
            received.append(next(namespace["watch"]("127.0.0.1", app.port, TOKEN)))
        except Exception as exc:
            failed.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    return thread, received, failed


def test_the_documented_python_client_waits_out_a_refusal_for_a_while():
    """Refused for a while (429 past its token's watcher cap here; 503 with the store away), the
    documented client waits the answer's Retry-After and watches on: it raised, ending the
    caller's loop, as for a 410."""
    app = Gunicorn(env={"PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "1"})
    held = app.connection()
    try:
        held.request("GET", "/events?after=now", headers={**AUTH, "Accept": "text/event-stream"})
        stream = held.getresponse()  # kept: the token's one watch
        assert stream.status == 200
        thread, received, failed = first_event_of_the_documented_client(app)
        wait_for_watches(app, TOKEN, 1, status=429)  # its stream refused (Retry-After: 5)
        stream.close()
        held.close()
        create(app, 710_080, "after the refusal")
        thread.join(20)
        assert failed == []
        assert [event["plant"]["id"] for event in received] == [710_080]
    finally:
        held.close()
        app.stop()


def test_the_documented_python_client_waits_out_a_refusal_of_its_first_read():
    """From now on, the documented client first reads its position (`after=now`): refused for a
    while there too (429 past its token's rate limit here), it waits the answer's Retry-After and
    watches on. It raised (KeyError: the refusal has no `next`), ending the caller's loop."""
    writer, scraper = "writer-token", "scraper-token"
    tokens = f"{TOKEN},{writer},{scraper}@100/second"  # the scrapes below spend no budget of theirs
    app = Gunicorn(env={"PLANTS_API_TOKENS": tokens, "PLANTS_RATE_LIMIT": "2 per 2 seconds"})
    try:
        assert [get(app, "/plants")[0] for _ in range(3)][-1] == 429  # the token's budget spent
        thread, received, failed = first_event_of_the_documented_client(app)
        # Its first read refused (429, Retry-After within 2 s), then its position read: what is
        # written from then on is its to receive, however late a loaded machine lets it read.
        wait_for_watches(app, scraper, 1, status=429)
        wait_for_watches(app, scraper, 1)
        conn = app.connection()
        body = json.dumps({"id": 710_090, "name": "after the refusal"})
        conn.request(
            "POST", "/plants", body, {"Authorization": f"Bearer {writer}", "Content-Type": "application/json"}
        )
        assert conn.getresponse().status == 200
        conn.close()
        thread.join(20)
        assert failed == []
        assert [event["plant"]["id"] for event in received] == [710_090]
    finally:
        app.stop()


def test_the_watch_benchmark_in_small(long_streams):
    """bench/watch.py's two scenarios, small: holding watchers adds no thread, and every stream
    gets every event of an open-loop writer, in the feed's order."""
    server = long_streams
    held = hold(server.port, server.process.pid, 200, 1.0, token=TOKEN)
    # At most the feed signal's threads, which start with a worker's first watch (its listener,
    # and on one Redis one thread following the feed's stream).
    assert held["threads_after"] <= held["threads_before"] + 2
    assert held["rss_kib_per_watcher"] < 40
    woken = wake(server.port, 50, 20.0, 2.0, token=TOKEN)
    assert woken["creates"] >= 30
    assert woken["streams_with_every_event_in_order"] == 50


def test_a_webhook_leaves_within_a_fraction_of_a_second_whichever_host_took_the_write(redis_server):
    """Two hosts on one Redis, and only the first delivers: it hears the second's writes through
    the feed's listener (the one the watchers use), not at its next look (2 s)."""
    receiver = Receiver()
    shared = redis_settings(redis_server)
    delivering = Gunicorn(env={**shared, "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1"})
    writing = Gunicorn(
        env={**shared, "PLANTS_WEBHOOKS_DELIVER": "false", "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1"}
    )
    try:
        conn = writing.connection()
        body = json.dumps({"url": receiver.url})
        conn.request("POST", "/webhooks", body, {**AUTH, "Content-Type": "application/json"})
        assert conn.getresponse().status == 201
        # A first delivery, however late: the delivering host has seen the endpoint (it looks
        # every 2 s, later under load), so what follows times the wake-up alone.
        create(writing, 729_999)
        receiver.wait_for(1, timeout=10)
        delays = []
        for number in range(1, 9):
            create(writing, 730_000 + number)
            written = time.monotonic()
            delivery = receiver.wait_for(number + 1, timeout=10)[number]
            delays.append(delivery.at - written)
            time.sleep(0.3 * (number % 3))  # writes at several points of the look's period
        assert max(delays) < 1.0, delays  # not at the next look (2 s)
    finally:
        writing.stop()
        delivering.stop()
        receiver.stop()


def test_a_stream_whose_client_never_reads_is_closed_and_gives_its_place_back():
    server = Gunicorn(env={"GUNICORN_READ_TIMEOUT": "1", "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "1"})
    try:
        conn = server.connection()
        # About 3.5 MB of events: more than the kernel's buffers on both ends hold.
        for plant_id in range(750_000, 760_000):
            body = json.dumps({"id": plant_id, "name": "n" * 200, "tag": "t" * 100})
            conn.request("POST", "/plants", body, {**AUTH, "Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            assert response.status == 200
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        head = f"GET /events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        sock.sendall(head.encode() + b"Accept: text/event-stream\r\n\r\n")
        wait_for_watches(server, TOKEN, 1)
        assert get(server, "/events?after=now&wait=1")[0] == 429  # its one place is taken
        # It reads nothing: past the read timeout it is closed, and its place is back within the
        # 5 s this test always gave it (asked again until then, not slept through).
        deadline = time.monotonic() + 5.0
        while (status := get(server, "/events?after=now&wait=1")[0]) == 429 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status == 200  # the place came back
        sock.settimeout(5)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        sock.close()
        assert not data.endswith(b"\r\n0\r\n\r\n")  # cut off, not ended: it reconnects from its id
    finally:
        server.stop()


def test_a_long_poll_that_arrives_during_the_graceful_stop_is_answered_at_once():
    server = Gunicorn(env={"GUNICORN_GRACEFUL_TIMEOUT": "20"})
    try:
        cursor = now_cursor(server)
        kept = server.connection(timeout=30)  # generous, and well before the wait's 55 s
        kept.request("GET", "/healthz")
        assert kept.getresponse().read()
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        kept.request("GET", f"/events?after={cursor}&wait=55", headers=AUTH)
        response = kept.getresponse()  # at the stop, not at the wait: within the socket's timeout
        assert (response.status, json.loads(response.read())) == (200, {"events": [], "next": cursor})
        assert server.process.wait(20) == 0
    finally:
        server.stop()


def test_a_watch_counts_once_against_the_rate_limit():
    server = Gunicorn(env={"PLANTS_RATE_LIMIT": "3/minute"})
    try:
        cursor = now_cursor(server)  # 1
        thread, result = in_background(get, server, f"/events?after={cursor}&wait=3")  # 2, however long
        thread.join(10)
        assert result["answer"][0] == 200
        assert get(server, f"/events?after={cursor}")[0] == 200  # 3
        status, headers, _ = get(server, f"/events?after={cursor}")
        assert status == 429
        assert "Retry-After" in headers
    finally:
        server.stop()


@pytest.mark.parametrize("store", ["redis", "cluster"])
def test_a_write_by_another_host_wakes_a_long_poll(request, store):
    """Two hosts on one store: a long-poll on the first is answered when the second writes (the
    first's listener blocks on the feed's streams, one per bucket group on a cluster), long before
    its wait could end: the wait is the longest there is, the test waits a fraction of it."""
    shared = settings_for_store(request, store)
    watching, writing = Gunicorn(env=shared), Gunicorn(env=shared)
    try:
        for number in range(8):
            cursor = now_cursor(watching)
            polls = watches_started(watching, TOKEN)
            thread, result = in_background(get, watching, f"/events?after={cursor}&wait={LONGEST_WAIT}")
            wait_for_watches(watching, TOKEN, polls + 1)  # waiting when the other host writes
            create(writing, 760_000 + number)
            thread.join(LONGEST_WAIT / 3)  # a hang guard: the first also starts the listener
            assert not thread.is_alive(), "the long-poll was not woken by the other host's write"
            assert [event["plant"]["id"] for event in json.loads(result["answer"][2])["events"]] == [
                760_000 + number
            ]
    finally:
        writing.stop()
        watching.stop()
