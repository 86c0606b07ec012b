"""app.server.access_log.AccessLogger writes the same access lines as gunicorn's own logger."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from gunicorn import glogging
from gunicorn.config import Config

from app.server.access_log import AccessLogger, _Atoms

ENVIRON = {
    "REMOTE_ADDR": "203.0.113.9",
    "REQUEST_METHOD": "POST",
    "RAW_URI": '/plants?q="x"',
    "SERVER_PROTOCOL": "HTTP/1.1",
    "PATH_INFO": "/plants",
    "QUERY_STRING": 'q="x"',
    "wsgi.url_scheme": "https",
    "HTTP_USER_AGENT": 'agent "7"',
    "HTTP_AUTHORIZATION": "Basic dXNlcjpwdw==",
}
REQUEST = SimpleNamespace(headers=[("USER-AGENT", 'agent "7"'), ("AUTHORIZATION", "Basic dXNlcjpwdw==")])
FORMATS = [
    '%(h)s %({wsgi.url_scheme}e)s "%(r)s" %(s)s %(b)s %(M)sms',  # the shipped format
    '%(h)s %(l)s %(u)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"',  # gunicorn's default
    "%(D)s %(T)s %(L)s %(m)s %(U)s %(q)s %(H)s %(B)s %(p)s",
    "%({user-agent}i)s %({content-type}o)s %({PATH_INFO}e)s %({absent}e)s %({absent}i)s %(zz)s",
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sent", [None, 0, 57])
def test_lines_match_gunicorns(fmt, sent):
    logger = AccessLogger(Config())
    headers = [("Content-Type", "application/json")]
    response = SimpleNamespace(status="201 CREATED", sent=sent, headers=headers)
    took = timedelta(seconds=2, microseconds=345678)
    ours = fmt % _Atoms(logger, response, REQUEST, ENVIRON, took)
    gunicorns = fmt % glogging.SafeAtoms(glogging.Logger.atoms(logger, response, REQUEST, ENVIRON, took))
    assert ours == gunicorns
    assert '"POST /plants?q=\\"x\\" HTTP/1.1"' in ours or "%(r)s" not in fmt
