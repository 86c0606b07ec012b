"""A webhook URL's host name is resolved on a bound (app/webhooks/lookups.py): a client naming
hosts that resolve slowly holds no request thread past the wait, and no more lookups run at once
than allowed. Tested on a real gunicorn whose resolver asks a name server that never answers: a
UDP socket of the test's own, named in a resolv.conf bound over /etc/resolv.conf in the server's
own mount namespace (root only; the machine's DNS is untouched)."""

from __future__ import annotations

import ctypes
import os
import random
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.webhooks.lookups import AT_ONCE
from tests.helpers import assert_error, call
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
_CLONE_NEWNS, _MS_REC, _MS_PRIVATE, _MS_BIND = 0x20000, 0x4000, 0x40000, 0x1000

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/etc/resolv.conf").exists(),
    reason="only root binds a resolv.conf over /etc/resolv.conf in a mount namespace",
)


def _with_resolv_conf(path: Path):
    """A preexec_fn: the child gets a mount namespace of its own, where `path` is /etc/resolv.conf."""

    def enter() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if (
            libc.unshare(_CLONE_NEWNS) != 0
            # Private first, so that the bind below does not reach the machine's namespace.
            or libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0
            or libc.mount(str(path).encode(), b"/etc/resolv.conf", None, _MS_BIND, None) != 0
        ):
            raise OSError(ctypes.get_errno(), "could not bind a resolv.conf of the test's own")

    return enter


@pytest.fixture
def silent_name_server():
    """A UDP socket on port 53 of a loopback address that takes queries and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    address = f"127.{random.randrange(1, 250)}.{random.randrange(1, 250)}.53"
    sock.bind((address, 53))
    yield address
    sock.close()


@pytest.fixture
def server(tmp_path, silent_name_server):
    resolv_conf = tmp_path / "resolv.conf"
    # glibc's defaults, said out loud: 5 s a query, 2 attempts, so 10 s for a lookup.
    resolv_conf.write_text(f"nameserver {silent_name_server}\noptions timeout:5 attempts:2\n")
    gunicorn = Gunicorn(
        # RES_OPTIONS would override the file's options (tests/conftest.py sets it).
        {
            "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1",
            "GUNICORN_THREADS": "8",
            "RES_OPTIONS": "timeout:5 attempts:2",
        },
        preexec_fn=_with_resolv_conf(resolv_conf),
    )
    yield gunicorn
    gunicorn.stop()


def test_a_host_that_resolves_slowly_is_answered_503_and_holds_no_request_thread(server):
    def register(n: int):
        # The connection's timeout is under the resolver's 10 s: a request waiting for the whole
        # lookup fails here.
        return call(
            server.connection(timeout=8), "POST", "/webhooks", {"url": f"http://slow-{n}.example/"}, AUTH
        )

    with ThreadPoolExecutor(AT_ONCE + 2) as pool:
        answers = list(pool.map(register, range(AT_ONCE + 2)))
    messages = []
    for n, (status, headers, body) in enumerate(answers):
        record = assert_error(status, headers, body, 503)
        assert int(headers["Retry-After"]) >= 1
        assert f"slow-{n}.example" in record["message"]
        messages.append(record["message"])
    # AT_ONCE waited for their lookups; the others found that many under way and did not wait.
    assert sum("did not resolve in time" in message for message in messages) == AT_ONCE
    assert sum("other host names are being resolved" in message for message in messages) == 2

    # The lookups still running hold no request thread: the worker serves, and a URL whose host
    # is an address needs no lookup.
    assert call(server.connection(), "GET", "/healthz")[0] == 200
    status, _, body = call(server.connection(), "POST", "/webhooks", {"url": "http://127.0.0.1:9/"}, AUTH)
    assert status == 201, body
    status, _, body = call(server.connection(), "GET", "/webhooks", headers=AUTH)
    assert status == 200
    assert b"slow-" not in body  # nothing was registered for the hosts not checked
