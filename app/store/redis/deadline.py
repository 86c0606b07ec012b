"""A write's deadline: after it, the write takes effect never.

Each write script gets the deadline as milliseconds since the epoch by the service's clock, and
refuses itself when Redis's own clock (TIME) is past it (`past` in scripts/library.lua), so no
queue (a send queue, a proxy, a stalled Redis's socket buffer) can land it later. The deadline is
`CLOCK_SKEW_S` short of the write's window, so that a Redis clock behind the service's by up to that
much still refuses it within the window. A timeout answers once the window is over; a write whose
outcome is unknown sooner (its connection broke once it may have been sent) is answered only then.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: How far the clocks of the service's hosts and Redis's may differ (NTP keeps a network within a
#: few ms). Beyond it a write's window stretches by the excess; a Redis clock ahead by more than the
#: window refuses every write.
CLOCK_SKEW_S = 0.1


@dataclass(frozen=True)
class Deadline:
    #: The deadline as the scripts read it: whole milliseconds since the epoch.
    ms: int
    #: When, on this process's monotonic clock, the write's fate is settled.
    settled_at: float

    @classmethod
    def after(cls, window_s: float) -> Deadline:
        """The deadline of a write that starts now and takes effect within `window_s`, or never."""
        allowance = min(CLOCK_SKEW_S, window_s / 4)
        return cls(int((time.time() + window_s - allowance) * 1000), time.monotonic() + window_s)

    def wait_until_settled(self) -> None:
        """Sleep until the write can no longer take effect."""
        left = self.settled_at - time.monotonic()
        if left > 0:
            time.sleep(left)
