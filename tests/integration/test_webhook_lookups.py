"""A webhook URL's host name is resolved in the background (app/webhooks/lookups.py): a
registration whose host is not resolved yet is answered 503 with Retry-After at once, the lookup
goes on, and the retry finds it; one lookup in flight per client. Tested on a real gunicorn with
one request thread, whose resolver asks a name server of the test's own (a UDP socket that never
answers, or answers late), named in a resolv.conf bound over /etc/resolv.conf in the server's
own mount namespace (root only; the machine's DNS is untouched)."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest

from app.settings import DEFAULTS
from tests import name_servers
from tests.helpers import assert_error, call
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
OTHER = {"Authorization": "Bearer other-token", "Content-Type": "application/json"}

pytestmark = pytest.mark.skipif(name_servers.WHY_NOT is not None, reason=str(name_servers.WHY_NOT))


@pytest.fixture
def silent_name_server():
    """A UDP socket on port 53 of a loopback address that takes queries and never answers."""
    with name_servers.silent_name_server() as server:
        yield server.address


@pytest.fixture
def late_name_server():
    """A name server on a loopback address that answers every A query with 127.0.0.1 and every
    other with no record, each after `late` seconds (0.5 unless the test says)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    address = f"127.{random.randrange(1, 250)}.{random.randrange(1, 250)}.54"
    sock.bind((address, 53))
    sock.settimeout(0.2)
    late = {"seconds": 0.5}
    stop = threading.Event()

    def answer(query: bytes, peer) -> None:
        time.sleep(late["seconds"])
        end = query.index(0, 12) + 1  # the question's name ends with an empty label
        qtype = struct.unpack("!H", query[end : end + 2])[0]
        records = b""
        if qtype == 1:
            records = struct.pack("!HHHIH4s", 0xC00C, 1, 1, 60, 4, socket.inet_aton("127.0.0.1"))
        header = query[:2] + struct.pack("!HHHHH", 0x8180, 1, 1 if records else 0, 0, 0)
        sock.sendto(header + query[12 : end + 4] + records, peer)

    def serve() -> None:
        while not stop.is_set():
            try:
                query, peer = sock.recvfrom(512)
            except TimeoutError:
                continue
            threading.Thread(target=answer, args=(query, peer), daemon=True).start()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    yield address, late
    stop.set()
    server.join()
    sock.close()


def serving(tmp_path, name_server: str) -> Gunicorn:
    """The service, one request thread, resolving through `name_server` (5 s a query, 2 tries)."""
    resolv_conf = tmp_path / "resolv.conf"
    resolv_conf.write_text(f"nameserver {name_server}\noptions timeout:5 attempts:2\n")
    return Gunicorn(
        {
            "PLANTS_API_TOKENS": f"{TOKEN},other-token",
            "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1,localhost,late.example",
            "GUNICORN_THREADS": "1",
            "PLANTS_WEBHOOKS_LOOKUP_WAIT": str(DEFAULTS["PLANTS_WEBHOOKS_LOOKUP_WAIT"]),
            # RES_OPTIONS would override the file's options (tests/conftest.py sets it).
            "RES_OPTIONS": "timeout:5 attempts:2",
        },
        preexec_fn=name_servers.with_resolv_conf(resolv_conf),
    )


def test_hosts_that_never_resolve_hold_no_request_thread(tmp_path, silent_name_server):
    """One client registers URLs whose name server never answers, as fast as it is answered,
    beside an honest probe (another token) that registers a URL naming an address or a name of
    /etc/hosts, and asks /healthz, every 50 ms. With one request thread, every answer comes well
    within the lookups' 10 s, and the honest registrations are 201."""
    server = serving(tmp_path, silent_name_server)
    attacker: list[tuple[int, str]] = []
    probe: list[tuple[str, int]] = []
    stop = threading.Event()

    def attack() -> None:
        n = 0
        while not stop.is_set() and n < 400:
            status, headers, body = call(
                server.connection(timeout=8), "POST", "/webhooks", {"url": f"http://slow-{n}.example/"}, AUTH
            )
            record = assert_error(status, headers, body, 503)
            assert int(headers["Retry-After"]) >= 1
            attacker.append((status, record["message"]))
            n += 1

    def honest() -> None:
        for n in range(20):
            for path, body in (
                ("/healthz", None),
                ("/webhooks", {"url": "http://127.0.0.1:9/" if n % 2 else "http://localhost:9/"}),
            ):
                # Generous, and half the 10 s a lookup is held (two tries of 5 s): a request held
                # by one would time out here.
                status, _, _ = call(
                    server.connection(timeout=5), "POST" if body else "GET", path, body, OTHER
                )
                probe.append((path, status))
            time.sleep(0.05)

    try:
        attacking = threading.Thread(target=attack)
        attacking.start()
        honest()
        stop.set()
        attacking.join(30)
        assert not attacking.is_alive()
        status, _, body = call(server.connection(), "GET", "/webhooks", headers=AUTH)
    finally:
        server.stop()
    assert len(probe) == 40
    assert set(probe) == {("/healthz", 200), ("/webhooks", 201)}
    assert len(attacker) >= 10
    messages = [message for _, message in attacker]
    assert "slow-0.example could not be checked yet: it is being resolved" in messages[0]
    # Its first lookup still under way, the client starts no other.
    assert all("another host name of this client's" in message for message in messages[1:])
    assert status == 200
    assert b"slow-" not in body  # nothing was registered for the hosts not checked


def test_the_retry_finds_the_host_resolved(tmp_path, late_name_server):
    address, late = late_name_server
    server = serving(tmp_path, address)
    try:
        url = {"url": "https://late.example/hook"}
        status, headers, body = call(server.connection(), "POST", "/webhooks", url, AUTH)
        record = assert_error(status, headers, body, 503)
        assert "late.example" in record["message"]
        retry_after = int(headers["Retry-After"])
        assert 1 <= retry_after <= 5
        time.sleep(retry_after)
        status, _, body = call(server.connection(), "POST", "/webhooks", url, AUTH)
        assert status == 201, body
        # Kept: another client's registration of the same host needs no lookup, however slow
        # the name server has become.
        late["seconds"] = 30
        status, _, body = call(server.connection(), "POST", "/webhooks", url, OTHER)
        assert status == 201, body
    finally:
        server.stop()


def test_a_patch_of_an_unknown_endpoint_waits_on_no_name_server(tmp_path, silent_name_server):
    """404 at once: the new URL's host is looked up only for an endpoint there is (it was looked
    up first, and the answer was the lookup's 503)."""
    server = serving(tmp_path, silent_name_server)
    try:
        url = {"url": "http://never-answered.example/hook"}
        status, headers, body = call(server.connection(), "PATCH", "/webhooks/wh_none", url, AUTH)
        assert "wh_none" in assert_error(status, headers, body, 404)["message"]
        # Nor did it start a lookup that holds the client's next one back.
        status, headers, body = call(server.connection(), "POST", "/webhooks", url, AUTH)
        record = assert_error(status, headers, body, 503)
        assert "never-answered.example could not be checked yet: it is being resolved" in record["message"]
    finally:
        server.stop()
