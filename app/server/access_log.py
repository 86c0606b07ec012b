"""gunicorn's logger, with an access line that computes only the atoms its format names.

`logger_class = "app.server.access_log.AccessLogger"` (app/server/gunicorn_conf.py). gunicorn's own `access()`
builds every atom for every request: a timestamp, the basic-auth user, and one entry per request
header, response header and environ key, each escaped. That was about a sixth of the worker's
time per request. Here the atoms the shipped format uses are computed directly, and any other
atom comes from gunicorn's own `atoms()`, so every format still logs what gunicorn would.

One atom is added: `%(time)s`, when the response was finished, in UTC as RFC 3339 with
milliseconds (`2026-11-23T09:11:55.123Z`), for joining logs by time. Each line also carries the
request's fields (app/telemetry/logs.py), its status and its duration, for the JSON log.

A watch ticket in the query (`/events?ticket=...`, app/auth/watch_tickets.py), the value of any
parameter the service does not define, and such a name without a value (`?s3cr3t`, which may be a
client's token: app/telemetry/redact.py), are replaced in every atom.

The line's record is made directly (`AccessRecord`) and handed to the logger's `handle`, the same
bytes as `Logger.info` would write, without what logging looks up for every record and the shipped
formats never show: the caller's frame, file and function, the thread's name and the process's
name, and the process id (a `getpid` system call a line; here read once per process).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from datetime import UTC, datetime, timedelta
from typing import Any

from gunicorn import glogging

from app.telemetry.logs import request_fields
from app.telemetry.redact import scrub_query, scrub_uri, uri_holds_secret


class _Atoms(dict):
    """The common atoms, filled in eagerly; any other one from gunicorn, on first use."""

    def __init__(
        self, logger: AccessLogger, resp: Any, req: Any, environ: dict, request_time: timedelta
    ) -> None:
        status = resp.status
        if isinstance(status, str):
            status = status.split(None, 1)[0]
        super().__init__(
            # A unix socket's peer has no address (REMOTE_ADDR is empty): "-", as for any atom
            # without a value, not an empty field that shifts every later one.
            h=_escape(environ.get("REMOTE_ADDR") or "-"),
            r=_escape(f"{environ['REQUEST_METHOD']} {environ['RAW_URI']} {environ['SERVER_PROTOCOL']}"),
            s=status,
            b="-" if resp.sent is None else str(resp.sent),
            M=request_time.seconds * 1000 + request_time.microseconds // 1000,
        )
        self._source = (logger, resp, req, environ, request_time)

    def __missing__(self, key: str) -> Any:
        if key == "time":
            return rfc3339_now()
        environ = self._source[3]
        if key.startswith("{") and key.endswith("}e"):
            name = key[1:-2].lower()
            if name in environ:
                return _escape(environ[name])
            return next((_escape(v) for k, v in environ.items() if k.lower() == name), "-")
        return glogging.SafeAtoms(glogging.Logger.atoms(*self._source))[key]


def rfc3339_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _escape(value: Any) -> Any:
    # As gunicorn's SafeAtoms: a quote in a value must not end a quoted field early.
    return value.replace('"', '\\"') if isinstance(value, str) else value


#: This process's id, for its records (a forked worker reads its own).
_pid = os.getpid()


def _read_pid() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_read_pid)
#: When this module was loaded: the records' `relativeCreated` counts from here.
_LOADED = time.time()


class AccessRecord(logging.LogRecord):
    """An access line's record, as `Logger.makeRecord` makes it with logging's documented switches
    of its lookups off (`logThreads`, `logMultiprocessing`, no caller), and the process id kept."""

    #: Python 3.12's asyncio task name, which logging then looks up: none here (a class attribute,
    #: so that python-json-logger, which reads a record's own fields, adds none on 3.11).
    taskName = None

    def __init__(self, name: str, msg: str, atoms: dict, fields: dict[str, Any]) -> None:
        now = time.time()
        self.name, self.msg, self.args = name, msg, atoms
        self.levelname, self.levelno = "INFO", logging.INFO
        self.pathname = self.filename = "(unknown file)"
        self.module, self.funcName, self.lineno = "Unknown module", "(unknown function)", 0
        self.exc_info = self.exc_text = self.stack_info = None
        self.created, self.msecs = now, int((now - int(now)) * 1000) + 0.0
        self.relativeCreated = (now - _LOADED) * 1000
        self.thread, self.threadName, self.processName = threading.get_ident(), None, None
        self.process = _pid
        self.__dict__.update(fields)


class AccessLogger(glogging.Logger):
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        # When gunicorn itself logs access lines, from its documented settings: the condition of
        # every gunicorn the project supports (27 names it `access_log_enabled`; 23 has no name).
        self._logs_access = bool(
            cfg.accesslog
            or cfg.logconfig
            or cfg.logconfig_dict
            or cfg.logconfig_json
            or (cfg.syslog and not cfg.disable_redirect_access_to_syslog)
        )

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: timedelta) -> None:
        if not self._logs_access:
            return
        try:
            query = environ.get("QUERY_STRING", "")
            if uri_holds_secret(environ["RAW_URI"], query):  # a credential: never in a log line
                environ = {
                    **environ,
                    "RAW_URI": scrub_uri(environ["RAW_URI"]),
                    "QUERY_STRING": scrub_query(query),
                }
            atoms = _Atoms(self, resp, req, environ, request_time)
            fields = {
                **request_fields(environ),
                "status": int(atoms["s"]),
                "duration_ms": round(request_time.total_seconds() * 1000, 3),
            }
            logger = self.access_log
            if logger.isEnabledFor(logging.INFO):
                logger.handle(AccessRecord(logger.name, self.cfg.access_log_format, atoms, fields))
        except Exception:
            self.error(traceback.format_exc())
