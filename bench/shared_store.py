"""Transitional: the names bench/webhooks.py imports, from the harness, until its imports name it
(the benchmark that was here is `python -m bench create`)."""

from bench.harness.load import wrk_beside_redis
from bench.harness.servers import cpu_seconds as redis_cpu_seconds
from bench.harness.servers import start_redis

__all__ = ["redis_cpu_seconds", "start_redis", "wrk_beside_redis"]
