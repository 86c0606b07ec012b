"""Redis's own CPU over a batch of calls: `INFO cpu` before and after (all of it: reading, waking
up, the script, the answer) and `INFO commandstats` for the script's share. (Over a whole wrk
run, `load.wrk` reads a redis-server's CPU from /proc instead.)

It imports nothing of the project: bench/harness/direct.py loads it beside another tree's `app`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import redis


def random_ids(count: int) -> list[int]:
    """`count` distinct ids spread over the 63-bit range, the same in every run."""
    rng = random.Random(25)
    found: set[int] = set()
    while len(found) < count:
        found.add(rng.randrange(-(2**62), 2**62))
    return sorted(found, key=lambda _: rng.random())


@dataclass
class RedisCPU:
    """One window of Redis's CPU: `start()` resets the command counts, `per_call(n)` says what the
    window cost per call, in µs: all of Redis's CPU, and `command`'s own (EVALSHA, FCALL)."""

    client: redis.Redis
    command: str = "evalsha"
    _before: float = 0.0

    def _used(self) -> float:
        cpu = self.client.info("cpu")
        return cpu["used_cpu_user"] + cpu["used_cpu_sys"]

    def start(self) -> RedisCPU:
        self.client.config_resetstat()
        self._before = self._used()
        return self

    def per_call(self, calls: int) -> dict[str, float]:
        used = self._used() - self._before
        stats = self.client.info("commandstats").get(f"cmdstat_{self.command}", {})
        return {"redis_cpu_us": used * 1e6 / calls, "script_us": stats.get("usec", 0) / calls}
