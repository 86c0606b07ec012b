"""When a failed webhook attempt is tried again: Standard Webhooks 1.0's schedule with ±20% jitter,
and a 429's or 503's Retry-After read as RFC 9110 §10.2.3 writes it (app/webhooks/message.py,
app/webhooks/retry_after.py)."""

from __future__ import annotations

import calendar
import time

import pytest

from app.webhooks.message import ATTEMPTS, RETRY_DELAYS_S, retry_delay
from app.webhooks.retry_after import seconds_from_now

NOW = float(calendar.timegm((2026, 11, 25, 10, 0, 0)))


def test_the_schedule_is_the_specifications_ten_attempts():
    # At once, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h.
    assert RETRY_DELAYS_S == (5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
    assert ATTEMPTS == 10


@pytest.mark.parametrize("failures", range(1, ATTEMPTS))
def test_each_wait_is_within_20_percent_and_scaled(failures):
    scheduled = RETRY_DELAYS_S[failures - 1]
    waits = [retry_delay(failures, 1.0, None) for _ in range(300)]
    assert all(0.8 * scheduled <= wait <= 1.2 * scheduled for wait in waits)
    assert len(set(waits)) > 250  # drawn, not fixed
    assert max(waits) - min(waits) > 0.3 * scheduled  # spread over the range
    assert all(
        0.8 * scheduled / 1000 <= retry_delay(failures, 0.001, None) <= 1.2 * scheduled / 1000
        for _ in range(50)
    )


def test_retry_after_lengthens_the_wait_up_to_the_longest():
    assert retry_delay(1, 1.0, 60.0) == 60.0
    assert 4.0 <= retry_delay(1, 1.0, 1.0) <= 6.0  # shorter than the schedule: the schedule's
    assert retry_delay(1, 1.0, float("inf")) == 86400.0
    assert retry_delay(1, 0.001, 10**9) == pytest.approx(86.4)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        ("0", 0.0),
        (" 7\t", 7.0),  # optional whitespace around the field value
        ("0042", 42.0),
        ("9" * 5000, float("inf")),  # no limit on its digits, capped by the schedule
        ("Wed, 25 Nov 2026 10:01:00 GMT", 60.0),  # IMF-fixdate
        ("Wednesday, 25-Nov-26 10:02:00 GMT", 120.0),  # the obsolete RFC 850 form
        ("Wed Nov 25 10:03:00 2026", 180.0),  # asctime
        ("Wed Nov  5 10:00:00 2026", 0.0),  # asctime with a space-padded day, in the past
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),  # a date past is no wait
    ],
)
def test_retry_after_as_rfc_9110_writes_it(value, seconds):
    assert seconds_from_now(value, now=NOW) == seconds


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "²",  # a superscript digit: str.isdigit() says yes, int() and float() say no
        "١٢",  # Arabic-Indic digits
        "\uff11\uff12",  # fullwidth digits
        "-1",
        "+5",
        "1.5",
        "1e3",
        "5 s",
        "0x10",
        "Wed, 31 Feb 2026 10:00:00 GMT",  # no such day
        "Wed, 25 Nov 2026 25:00:00 GMT",  # no such hour
        "Wed, 25 Nov 2026 10:00:00 UTC",  # HTTP-dates are GMT
        "wed, 25 nov 2026 10:00:00 gmt",  # case-sensitive
        "25 Nov 2026 10:00:00 GMT",
        "Wed, 25 Nov 2026 10:00:00 GMT, Thu, 26 Nov 2026 10:00:00 GMT",  # sent twice
        "120, 60",
        "\x00",
        "\xff\xfe",
    ],
)
def test_anything_else_is_no_retry_after(value):
    assert seconds_from_now(value, now=NOW) is None


def test_the_two_digit_year_of_an_rfc_850_date_is_never_more_than_50_years_ahead():
    assert seconds_from_now("Friday, 01-Jan-77 00:00:00 GMT", now=NOW) == 0.0  # 1977, not 2077
    ahead = seconds_from_now("Sunday, 01-Jan-74 00:00:00 GMT", now=NOW)  # 2074: 48 years ahead
    assert ahead is not None
    assert ahead > 40 * 365 * 86400
    assert time.gmtime(NOW).tm_year == 2026
