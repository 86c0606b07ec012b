"""The worker process's open-file limit, raised to what its connections need where the hard limit
allows: container runtimes (containerd 2, Docker 29) start a process at a soft limit of 1024 under
a far higher hard one, and leave it to the process to raise its own. Where a sandbox forbids it
(systemd's SystemCallFilter=~@resources, EPERM) the limit stays as given, and the packaged worker
lowers its connection cap to fit (app/server/worker/loop.py's Admission).
"""

from __future__ import annotations

import contextlib
import resource


def raise_soft_limit(wanted: int) -> int:
    """The open-file soft limit, first raised toward `wanted` within the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft
