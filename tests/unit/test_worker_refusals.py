"""The worker's 408s to clients that stalled or left are logged as counted lines (tally.py)."""

from __future__ import annotations

import logging

from app.server.worker.tally import LOG_PERIOD, Refusals

LEFT = "closed before its request's body was whole"
STALLED = "did not send its whole request within 2.0s"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def counted(name: str) -> tuple[Refusals, Lines]:
    log = logging.getLogger(f"test_worker_refusals.{name}")
    log.propagate = False
    lines = Lines()
    log.addHandler(lines)
    return Refusals(log), lines


def test_the_first_is_logged_at_once_and_the_rest_counted_into_the_next_line_of_its_kind():
    refusals, lines = counted("flood")
    for n in range(1000):
        refusals.answered(408, LEFT, 100.0 + n / 1000)
    assert lines.lines == [f"Answered 408 to a client that {LEFT}"]
    refusals.answered(408, LEFT, 100.0 + LOG_PERIOD)
    assert lines.lines[1:] == [
        f"Answered 408 to 1000 clients, each one that {LEFT} (one such line per {LOG_PERIOD}s at most)"
    ]
    refusals.answered(408, LEFT, 100.0 + 2.5 * LOG_PERIOD)  # alone in its period: a line of its own
    assert lines.lines[2:] == [f"Answered 408 to a client that {LEFT}"]


def test_each_kind_has_its_own_line():
    refusals, lines = counted("kinds")
    refusals.answered(408, LEFT, 100.0)
    refusals.answered(408, STALLED, 100.1)
    refusals.answered(408, LEFT, 100.2)
    assert lines.lines == [
        f"Answered 408 to a client that {LEFT}",
        f"Answered 408 to a client that {STALLED}",
    ]
