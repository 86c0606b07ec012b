"""The packaged gunicorn worker, `PlantsWorker` (workers.py), imported only when gunicorn asks for
it; `ThreadWorker`, its name before 1.6.0, still names it for configurations that set it."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("PlantsWorker", "ThreadWorker"):
        from app.server.worker.workers import PlantsWorker

        return PlantsWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
