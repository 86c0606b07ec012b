"""The packaged gunicorn worker, `PlantsWorker` (workers.py)."""

from app.server.worker.workers import PlantsWorker

__all__ = ["PlantsWorker"]
