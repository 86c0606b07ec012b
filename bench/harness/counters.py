"""What a server process does over a window, counted rather than timed: its system calls
(`strace -f -c` attached to it, every thread), its context switches (every thread's, from
/proc/PID/task/*/status) and, for a process started under callgrind, its instructions (a dump
at each end of the window). callgrind_control cannot reach a forked process (valgrind's gdbserver
is the parent's), so a window ends with a SIGWINCH, on which a worker started with callgrind_conf.py calls
`os.getpgid`, before which callgrind dumps. Each counter also measures an
idle window, so that what a process does by the clock (a heartbeat, a look every 2 s) is
subtracted from what it did per request.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def switches(pid: int) -> dict[int, tuple[int, int]]:
    """Each thread's context switches so far, voluntary (it waited) and not (it was preempted),
    by thread id."""
    counts = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if "ctxt_switches:" in line)
        waited, preempted = fields["voluntary_ctxt_switches"], fields["nonvoluntary_ctxt_switches"]
        counts[int(task.name)] = (int(waited), int(preempted))
    return counts


@dataclass
class Switches:
    """Context switches over a window. Voluntary ones, a thread waiting, split into those of the
    thread that waited most (the one serving: a client that waits for each answer has it wait once
    a request) and those of every other thread (a thread woken per request shows here); and the
    preemptions, which the machine's other load makes."""

    main: float
    others: float
    preempted: float

    @classmethod
    def over(cls, pid: int, run: Callable[[], None]) -> tuple[Switches, float]:
        """The switches while `run` runs, and how long it took."""
        before, started = switches(pid), time.monotonic()
        run()
        after, took = switches(pid), time.monotonic() - started
        waits = sorted(count[0] - before.get(tid, (0, 0))[0] for tid, count in after.items())
        preempted = sum(count[1] - before.get(tid, (0, 0))[1] for tid, count in after.items())
        return cls(waits[-1], sum(waits[:-1]), preempted), took

    def minus(self, idle: Switches, idle_s: float, took: float) -> Switches:
        share = took / idle_s
        return Switches(
            max(0.0, self.main - idle.main * share),
            max(0.0, self.others - idle.others * share),
            max(0.0, self.preempted - idle.preempted * share),
        )


def syscalls(pid: int, run: Callable[[], None]) -> tuple[dict[str, int], float]:
    """Each system call's count, every thread of `pid`, while `run` runs; and the window's length
    (from strace's attach to its detach)."""
    handle, name = tempfile.mkstemp(prefix="bench-strace-", suffix=".txt")
    os.close(handle)
    out = Path(name)
    tracer = subprocess.Popen(
        ["strace", "-f", "-c", "-q", "-o", str(out), "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = time.monotonic()
    time.sleep(0.3)  # strace attaches to every thread
    try:
        run()
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(30)
    took = time.monotonic() - started
    try:
        return _strace_counts(out.read_text()), took
    finally:
        out.unlink(missing_ok=True)


def _strace_counts(summary: str) -> dict[str, int]:
    counts = {}
    for line in summary.splitlines():
        fields = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(fields) >= 5 and re.fullmatch(r"[\d.]+", fields[0]) and fields[-1] != "total":
            counts[fields[-1]] = int(fields[3])
    return counts


#: callgrind's options for a process whose windows `Callgrind` counts.
CALLGRIND = ["valgrind", "--tool=callgrind", "--dump-before=os_getpgid"]


class Callgrind:
    """The instructions of a process started under CALLGRIND, with
    `--callgrind-out-file=DIRECTORY/cg.%p`: each `window` is the count since the last one."""

    def __init__(self, directory: Path, pid: int) -> None:
        self.directory, self.pid = directory, pid
        self.dumps = 0

    def window(self) -> int:
        """Dump the counts now; the instructions since the last dump (or the start)."""
        os.kill(self.pid, signal.SIGWINCH)
        self.dumps += 1
        dump = self.directory / f"cg.{self.pid}.{self.dumps}"
        deadline = time.monotonic() + 60
        while True:
            text = dump.read_text() if dump.exists() else ""
            match = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
            if match:
                return int(match.group(1))
            if time.monotonic() > deadline:
                raise RuntimeError(f"callgrind wrote no counts to {dump}")
            time.sleep(0.1)
