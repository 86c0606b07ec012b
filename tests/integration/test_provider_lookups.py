"""The identity provider's host name is looked up within its fetch's deadline: a name server that
never answers fails the fetch at the deadline, rather than holding it (and the request or the
refresh that made it) for the resolver's timeouts. A real resolver (glibc's, in a Python of its
own) asks a name server of the test's own (tests/name_servers.py): the lookup cannot be bounded
by patching it, only by where the service waits for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import name_servers
from tests.servers import ROOT

pytestmark = pytest.mark.skipif(name_servers.WHY_NOT is not None, reason=str(name_servers.WHY_NOT))

#: The resolver's own patience: 30 s a query, 3 tries (RES_OPTIONS overrides the file's options).
PATIENT = "timeout:30 attempts:3"

FETCH = (
    "import sys\n"
    "from app.auth.provider_fetch import FetchError, fetch_jwks\n"
    "try:\n"
    "    fetch_jwks(sys.argv[1] + '/.well-known/openid-configuration', None, sys.argv[1])\n"
    "except FetchError as exc:\n"
    "    print(exc)\n"
)


def test_a_name_server_that_never_answers_fails_the_fetch_at_its_deadline(tmp_path):
    with name_servers.silent_name_server() as server:
        resolv_conf = tmp_path / "resolv.conf"
        resolv_conf.write_text(f"nameserver {server.address}\noptions {PATIENT}\n")
        child = subprocess.Popen(
            [sys.executable, "-c", FETCH, "http://idp.plants.test"],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "RES_OPTIONS": PATIENT},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=name_servers.with_resolv_conf(resolv_conf),
        )
        try:
            # The resolver would give up after 90 s; the fetch's deadline is 2 s.
            out, err = child.communicate(timeout=30)
        finally:
            child.kill()
            child.wait()
        assert server.asked(), "the lookup never reached the test's name server"
    assert child.returncode == 0, err[-3000:]
    assert "idp.plants.test/.well-known/openid-configuration" in out, out
    assert "did not resolve in time" in out, out
