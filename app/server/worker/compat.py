"""Which of gunicorn's internals the worker builds on, and whether this gunicorn still has them.

The worker was written against gunicorn 27.0 (setup.cfg pins that minor version). It calls or
overrides the names below, which gunicorn does not document as an API. At start,
gunicorn_conf.py asks `missing_internals()`: when one is gone or has another signature, the
server logs one warning and runs gunicorn's stock gthread worker instead, which serves the same
app but lets a slow client hold a request thread.
"""

from __future__ import annotations

import importlib
import inspect

#: The worker's own class, as gunicorn's `worker_class` names it.
WORKER_CLASS = "app.server.worker.ThreadWorker"
#: gunicorn's stock threaded worker: the fallback.
FALLBACK_WORKER_CLASS = "gthread"
#: (module, attribute path, its parameters as gunicorn 27.0 has them; None: not a callable checked).
INTERNALS: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    ("gunicorn.http", "get_parser", ("cfg", "source", "source_addr", "http2_connection")),
    ("gunicorn.http.errors", "NoMoreData", None),
    (
        "gunicorn.http.wsgi",
        "create",
        ("req", "sock", "client", "server", "cfg", "response_class", "response_args"),
    ),
    ("gunicorn.http.wsgi", "Response.__init__", ("self", "req", "sock", "cfg")),
    ("gunicorn.http.wsgi", "Response.can_sendfile", ("self",)),
    ("gunicorn.util", "write_error", ("sock", "status_int", "reason", "mesg")),
    ("gunicorn.util", "write_nonblock", ("sock", "data", "chunked")),
    (
        "gunicorn.workers.base",
        "Worker.__init__",
        ("self", "age", "ppid", "sockets", "app", "timeout", "cfg", "log"),
    ),
    ("gunicorn.workers.base", "Worker.init_process", ("self",)),
    ("gunicorn.workers.base", "Worker.load_wsgi", ("self",)),
    ("gunicorn.workers.base", "Worker.handle_exit", ("self", "sig", "frame")),
    ("gunicorn.workers.base", "Worker.handle_error", ("self", "req", "client", "addr", "exc")),
    ("gunicorn.workers.base", "Worker.notify", ("self",)),
)


def missing_internals(
    internals: tuple[tuple[str, str, tuple[str, ...] | None], ...] = INTERNALS,
) -> list[str]:
    """The internals this gunicorn lacks, or has with other parameters, each as `module.name`."""
    missing = []
    for module_name, path, parameters in internals:
        where = f"{module_name}.{path}"
        try:
            found: object = importlib.import_module(module_name)
            for part in path.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError):
            missing.append(where)
            continue
        if parameters is not None:
            try:
                names = tuple(inspect.signature(found).parameters)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                names = ()
            if names != parameters:
                missing.append(f"{where}{inspect.formatannotation(names)}")
    return missing


def worker_class() -> tuple[str, list[str]]:
    """The worker to run, and what is missing when it is the fallback."""
    missing = missing_internals()
    return (FALLBACK_WORKER_CLASS if missing else WORKER_CLASS), missing
