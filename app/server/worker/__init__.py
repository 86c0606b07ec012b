"""The packaged gunicorn worker, `PlantsWorker` (workers.py), imported only when gunicorn asks for it."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "PlantsWorker":
        from app.server.worker.workers import PlantsWorker

        return PlantsWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
