"""The packaged gunicorn worker: one parser (httptools), and slow clients never hold a request
thread (thread_worker.py).

`ThreadWorker` is imported when gunicorn asks for it, so that the service can import the
interface the worker offers it (interface.py) without loading the worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.server.worker.thread_worker import ThreadWorker

__all__ = ["ThreadWorker"]


def __getattr__(name: str) -> Any:
    if name == "ThreadWorker":
        from app.server.worker.thread_worker import ThreadWorker

        return ThreadWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
