"""The gunicorn integration: the worker, its access log and the packaged gunicorn configuration;
and the line `flask run` prints at start (dev_server.py, for wsgi.py).

Nothing in the service itself imports this package; a reader of the service need not open it.
"""
