"""The packaged gunicorn worker, `PlantsWorker`: one parser (httptools), and slow clients never
hold a request thread (workers.py).

`PlantsWorker` is imported when gunicorn asks for it, so that the service can import the
interface the worker offers it (interface.py) without loading the worker. `ThreadWorker`, its
name before 1.6.0, still names it, for configurations that set it (GUNICORN_WORKER_CLASS).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.server.worker.workers import PlantsWorker

__all__ = ["PlantsWorker"]


def __getattr__(name: str) -> Any:
    if name in ("PlantsWorker", "ThreadWorker"):
        from app.server.worker.workers import PlantsWorker

        return PlantsWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
