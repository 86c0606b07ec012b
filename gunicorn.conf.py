"""gunicorn settings for the Plant Store service: `gunicorn -c gunicorn.conf.py` (read by default).

Each setting can be changed through the environment variable named beside it.
"""

import os

wsgi_app = "wsgi:app"
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000").split(",")

# One worker process, by design: the plant store lives in the worker's memory,
# so a second worker would be a second, separate store.
workers = 1
worker_class = "app.gunicorn_worker.ThreadWorker"
threads = int(os.environ.get("GUNICORN_THREADS", "2"))
# gunicorn's pure-Python HTTP parser, whatever else is installed. The optional C parser
# (gunicorn_h1c) measured no faster here (see README, Performance) and accepts obsolete
# header line folding that this one refuses.
http_parser = "python"
# A stalled read from a client gives up after this many seconds (see app/gunicorn_worker.py).
read_timeout = float(os.environ.get("GUNICORN_READ_TIMEOUT", "10"))

# Behind a proxy that reuses upstream connections: keep idle ones open longer
# than the proxy does (nginx: keepalive_timeout 60s). Idle connections wait on
# the poller, not on a thread.
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "75"))
timeout = 30
# Never recycle the worker after N requests: a new worker starts with an empty store.
max_requests = 0
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))

# Which peers may set X-Forwarded-Proto for gunicorn itself: nobody unless set.
# Client address and scheme behind a proxy come from PLANTS_TRUSTED_PROXIES (ProxyFix).
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "")

# No management socket: nothing here uses it, and its default path is shared per user.
control_socket_disable = True

accesslog = "-"
errorlog = "-"
# gunicorn's logger, computing only the atoms the access line uses (see app/access_log.py).
logger_class = "app.access_log.AccessLogger"
# REMOTE_ADDR and the scheme as the app saw them (after ProxyFix). No request
# headers are logged, so Authorization never reaches the log.
access_log_format = '%(h)s %({wsgi.url_scheme}e)s "%(r)s" %(s)s %(b)s %(M)sms'


def on_starting(server):
    if server.cfg.workers != 1:
        raise SystemExit(
            f"Plant Store: refusing to start with workers={server.cfg.workers}. The plant store is "
            "in memory, so each worker process would hold a separate store. Run one worker "
            "(GUNICORN_THREADS sets its concurrency)."
        )


def post_worker_init(worker):
    worker.read_timeout = read_timeout
