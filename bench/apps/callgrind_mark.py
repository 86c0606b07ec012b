"""The contract peer (bench/apps/fastapi_contract_peer.py) with callgrind's dump mark, for
`python -m bench process --peer`: a SIGWINCH makes a thread call `os.getpgid`, a C function
before which callgrind dumps its counts (bench/harness/counters.py's CALLGRIND), as
bench/harness/callgrind_conf.py does for gunicorn's worker. uvloop runs a Python signal handler
only when its loop next wakes, so the signal is taken by a thread of its own, blocked in sigwait.
"""

from __future__ import annotations

import os
import signal
import threading

from bench.apps.fastapi_contract_peer import app as app


def _dump_on_sigwinch() -> None:
    while True:
        signal.sigwait({signal.SIGWINCH})
        os.getpgid(0)


# Blocked before uvicorn starts its threads, so that only the waiting thread takes the signal.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGWINCH})
threading.Thread(target=_dump_on_sigwinch, name="callgrind-mark", daemon=True).start()
