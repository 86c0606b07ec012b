"""The packaged gunicorn worker: one parser (httptools), and slow clients never hold a request
thread (thread_worker.py)."""

from app.server.worker.thread_worker import ThreadWorker

__all__ = ["ThreadWorker"]
