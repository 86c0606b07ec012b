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


@pytest.mark.parametrize("formatter", ["text", "json"])
def test_the_record_writes_the_bytes_logging_would(formatter):
    """The access record skips logging's lookups (caller, thread, process), not a byte of the line."""
    import logging

    from app.server.access_log import AccessRecord
    from app.telemetry.logs import JsonFormatter, TextFormatter

    fmt, atoms = FORMATS[0], {"h": "203.0.113.9", "{wsgi.url_scheme}e": "https", "r": "GET / HTTP/1.1"}
    atoms |= {"s": "200", "b": "17", "M": 3}
    fields = {"request_id": "r-1", "method": "GET", "route": "/plants", "status": 200, "duration_ms": 3.2}
    ours = AccessRecord("gunicorn.access", fmt, atoms, fields)
    logging_s = logging.getLogger("gunicorn.access").makeRecord(
        "gunicorn.access", logging.INFO, __file__, 1, fmt, (atoms,), None, extra=fields
    )
    logging_s.created, logging_s.msecs = ours.created, ours.msecs
    chosen = TextFormatter() if formatter == "text" else JsonFormatter()
    assert chosen.format(ours) == chosen.format(logging_s)
    assert "203.0.113.9 https" in chosen.format(ours)
