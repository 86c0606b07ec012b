"""Strict JSON decoding for request bodies.

Python's json module accepts more than RFC 8259 JSON: NaN and Infinity,
duplicate keys (the last one silently wins) and escapes that decode to lone
surrogates, which cannot be stored or encoded as UTF-8 again. A request body
that relies on any of these is refused instead of being guessed at.

JSON has one number type (RFC 8259 section 6) and JSON Schema's `integer` is decided
by value, so an integral number written with a fraction or an exponent (`17788.0`,
`1e2`) decodes to that integer, exactly: its digits are read as a decimal, never
rounded through a float. Other numbers with a fraction stay floats.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

# A \uD800-\uDFFF escape; only a body containing one needs the surrogate check.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class InvalidJSON(ValueError):
    """The body is not strict, UTF-8 encoded JSON. The message is for a person."""


def _refuse_constant(name: str) -> Any:
    raise InvalidJSON(f"{name} is not valid JSON")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise InvalidJSON(f"duplicate key {duplicate!r}")
    return obj


# Integral numbers beyond this many digits are outside every range the interface accepts;
# they decode to a stand-in of the same sign that is just as far outside, so that an
# exponent like 1e999999999 costs nothing to refuse.
_MAX_INTEGRAL_DIGITS = 40


#: A JSON number literal's parts: sign, integer digits, fraction digits, exponent.
_PARTS = re.compile(r"(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?")
#: An exponent of more digits than this is past every bound, in either direction.
_MAX_EXPONENT_DIGITS = 12


def _parse_number_with_fraction_or_exponent(literal: str) -> int | float:
    """A JSON number literal with `.` or `e`: its exact integer when integral, else a float.

    Read from its digits, not through decimal.Decimal, whose context refuses exponents past
    about 10**18 (`1e99999999999999999999`) with InvalidOperation.
    """
    sign, whole, fraction, exponent_literal = _PARTS.fullmatch(literal).groups()  # type: ignore[union-attr]
    fraction = fraction or ""
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return 0
    significant = digits.rstrip("0")
    if len((exponent_literal or "").lstrip("+-")) > _MAX_EXPONENT_DIGITS:
        exponent = (
            -(10**_MAX_EXPONENT_DIGITS) if exponent_literal.startswith("-") else 10**_MAX_EXPONENT_DIGITS
        )
    else:
        exponent = int(exponent_literal or 0)
    # The value is significant x 10**scale.
    scale = exponent - len(fraction) + len(digits) - len(significant)
    if scale < 0:
        return float(literal)
    if len(significant) + scale > _MAX_INTEGRAL_DIGITS:
        return -(10**_MAX_INTEGRAL_DIGITS) if sign else 10**_MAX_INTEGRAL_DIGITS
    number = int(significant) * 10**scale
    return -number if sign else number


#: A JSON number (RFC 8259 section 6), as it may stand in a URL too.
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
#: Longer literals are refused unread: no int64 needs more than a few dozen characters.
_MAX_LITERAL = 100


def integral_number(literal: str) -> int | None:
    """The integer a JSON number literal names exactly (`100`, `1e2`, `100.0`), as a body's `id`
    is read; None when `literal` is not a JSON number, or not an integral one."""
    if len(literal) > _MAX_LITERAL or not _NUMBER.fullmatch(literal):
        return None
    if literal.lstrip("-").isdigit():
        return int(literal)
    value = _parse_number_with_fraction_or_exponent(literal)
    return value if isinstance(value, int) else None


_decoder = json.JSONDecoder(
    object_pairs_hook=_refuse_duplicate_keys,
    parse_constant=_refuse_constant,
    parse_float=_parse_number_with_fraction_or_exponent,
)


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


#: The values a flat object may hold for orjson's answer to be this module's answer too.
_FLAT_MEMBER_TYPES = frozenset({str, int, bool, type(None)})


def loads(body: bytes) -> Any:
    """Decode one JSON value from UTF-8 bytes, or raise InvalidJSON."""
    # The common body, a flat object of strings, integers, booleans and nulls, decoded by
    # orjson (an RFC 8259 parser that refuses bad UTF-8, lone surrogates and NaN as this module
    # does) in a fraction of the time. Only where its answer is provably this module's own:
    # - no float: orjson makes one of `1.0`, `1e2` and of integers past 64 bits, read exactly here;
    # - as many `:` in the body as keys in the object: every member has one outside its strings,
    #   so one more member (a duplicate key, which orjson would let the last of win) is one more.
    # Anything else, refusals included, is decoded below, which words the refusal.
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    else:
        if (
            type(value) is dict
            and body.count(b":") == len(value)
            and all(type(member) in _FLAT_MEMBER_TYPES for member in value.values())
        ):
            return value
    return _strict_loads(body)


def _strict_loads(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidJSON("the body is not valid UTF-8") from None
    try:
        value = _decoder.decode(text)
    except InvalidJSON:
        raise
    except RecursionError:
        raise InvalidJSON("the JSON is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise InvalidJSON(f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError:
        # int() refuses numbers longer than sys.get_int_max_str_digits().
        raise InvalidJSON("a number in the JSON is too long") from None
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(value):
        raise InvalidJSON("the JSON contains a lone surrogate escape, which is not valid Unicode")
    return value
