"""The packaged gunicorn worker: slow clients never hold a request thread (thread_worker.py)."""

from app.server.worker.thread_worker import ThreadWorker

__all__ = ["ThreadWorker"]
