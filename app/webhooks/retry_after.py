"""A receiver's `Retry-After` (RFC 9110 §10.2.3), read strictly: delay-seconds (ASCII digits) or an
HTTP-date (§5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms). Anything else, from a
stray byte to a date that does not exist, is no Retry-After at all."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_LONG_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH = "(?P<month>" + "|".join(_MONTHS) + ")"
_TIME = r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
_IMF_FIXDATE = re.compile(
    "(?P<day_name>"
    + "|".join(_DAYS)
    + r"), (?P<day>[0-9]{2}) "
    + _MONTH
    + r" (?P<year>[0-9]{4}) "
    + _TIME
    + " GMT"
)
_RFC850 = re.compile(
    "(?P<day_name>"
    + "|".join(_LONG_DAYS)
    + r"), (?P<day>[0-9]{2})-"
    + _MONTH
    + r"-(?P<year>[0-9]{2}) "
    + _TIME
    + " GMT"
)
_ASCTIME = re.compile(
    "(?P<day_name>"
    + "|".join(_DAYS)
    + r") "
    + _MONTH
    + r" (?P<day>[ 0-9][0-9]) "
    + _TIME
    + r" (?P<year>[0-9]{4})"
)
_DIGITS = re.compile("[0-9]+")


def seconds_from_now(value: str | None, now: float | None = None) -> float | None:
    """The wait `value` asks for, in seconds (0 for a date past); None when it is no Retry-After."""
    if value is None:
        return None
    value = value.strip(" \t")
    if _DIGITS.fullmatch(value):
        return float(value)  # float: no limit on the digits, and min() caps it later
    now = time.time() if now is None else now
    when = _http_date(value, now)
    return None if when is None else max(0.0, when - now)


def _http_date(value: str, now: float) -> float | None:
    for form in (_IMF_FIXDATE, _RFC850, _ASCTIME):
        found = form.fullmatch(value)
        if found is not None:
            break
    else:
        return None
    year = int(found["year"])
    if form is _RFC850:
        # §5.6.7: a two-digit year more than 50 years ahead is the latest past year ending so.
        this_year = time.gmtime(now).tm_year
        year += this_year - this_year % 100
        if year > this_year + 50:
            year -= 100
    try:
        # A leap second (60) counts as the second before it; 31 February is no date.
        when = datetime(
            year,
            _MONTHS.index(found["month"]) + 1,
            int(found["day"]),
            int(found["hour"]),
            int(found["minute"]),
            min(int(found["second"]), 59),
            tzinfo=UTC,
        )
    except ValueError:
        return None
    return when.timestamp()
