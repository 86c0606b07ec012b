"""The gunicorn integration: the worker, its access log and the packaged gunicorn configuration.

Nothing in the service itself imports this package; a reader of the service need not open it.
"""
