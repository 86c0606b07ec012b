"""The kinds of setting: marshmallow fields that read a setting's text (from the environment) and
check its value (from `app.config`), each refusal one phrase for ConfigurationError."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from marshmallow import ValidationError, fields
from marshmallow.utils import missing

from app.settings.web_origin import serialise

_BOOLEANS = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}


class Setting(fields.Field):
    """One setting: its default, how its environment text reads, and what values it takes.

    The environment is read first (`from_text`, only the type), into `app.config`; every value is
    then checked from there (`check`), so both ways of setting it meet the same rules.
    """

    def __init__(self, default: Any = None, **kwargs: Any) -> None:
        super().__init__(load_default=default, **kwargs)

    def from_text(self, text: str) -> Any:
        """The value of an environment variable's text; ValueError says what it must be."""
        return text

    def check(self, value: Any) -> Any:
        """The setting's value, or ValidationError saying what is wrong (never quoting a secret)."""
        return value

    def deserialize(
        self, value: Any, attr: str | None = None, data: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Any:
        # None and "" mean "not set" in a config, as in the environment; no marshmallow "null" error.
        if value is missing or value is None or value == "":
            value = self.load_default
            return value if value is None else self.check(value)
        return self.check(value)


#: The most any whole-number setting may be: Redis reads its script and command arguments as
#: signed 64-bit integers, and answered an error to every write past it (`PLANTS_EVENTS_RETAIN`
#: trims the feed with it; `PLANTS_STORE_MIN_REPLICAS` is WAIT's).
MAX_WHOLE_NUMBER = 2**63 - 1


def _as_given(value: Any) -> str:
    """A refused value as a message quotes it. Only the environment's text is read as a number: in
    `app.config` a number setting takes a number, so `'0'` there is named the string it is, not
    left to read as the number it looks like."""
    return f"the string {value!r} (app.config takes a number)" if isinstance(value, str) else repr(value)


class _AsWritten:
    """A number read from an environment variable: its repr, which a refusal quotes, is the text
    as its reader wrote it (`56`, where the float read from it would say `56.0`, and `1e400`
    rather than `inf`). Its str stays the number's, as a message that states it prints it."""

    text: str

    def __repr__(self) -> str:
        return self.text

    def __str__(self) -> str:
        # The number's own repr (int and float take their str from it).
        return super().__repr__()


class _WrittenWhole(_AsWritten, int):
    pass


class _WrittenNumber(_AsWritten, float):
    pass


def _as_written(kind: type[_WrittenWhole | _WrittenNumber], text: str) -> Any:
    """`text` read as a `kind` of number that a message quotes as `text` (ValueError if it is none)."""
    number = kind(text)
    number.text = text.strip()
    return number


class WholeNumber(Setting):
    def __init__(
        self, default: int, *, minimum: int = 0, maximum: int = MAX_WHOLE_NUMBER, unit: str = ""
    ) -> None:
        super().__init__(default)
        self.minimum, self.maximum, self.unit = minimum, maximum, unit

    def from_text(self, text: str) -> Any:
        try:
            return _as_written(_WrittenWhole, text)
        except ValueError:
            raise ValueError(f"must be a whole number, not {text!r}") from None

    def check(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum:
            raise ValidationError(f"must be a whole number >= {self.minimum}, not {_as_given(value)}")
        if value > self.maximum:
            raise ValidationError(f"must be at most {self.maximum}{self.unit}, not {value!r}")
        return int(value)


class _Number(Setting):
    """A setting written as a decimal number."""

    def from_text(self, text: str) -> Any:
        try:
            return _as_written(_WrittenNumber, text)
        except ValueError:
            raise ValueError(f"must be a number, not {text!r}") from None


class Seconds(_Number):
    """A number of seconds above 0, at most `maximum` (an hour)."""

    def __init__(self, default: float, *, maximum: float = 3600) -> None:
        super().__init__(default)
        self.maximum = maximum

    def check(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValidationError(f"must be a number of seconds above 0, not {_as_given(value)}")
        if value > self.maximum:
            raise ValidationError(f"must be at most {self.maximum:g} seconds, not {value!r}")
        return float(value)


class Scale(_Number):
    """A factor from `minimum` to 1."""

    def __init__(self, default: float, *, minimum: float) -> None:
        super().__init__(default)
        self.minimum = minimum

    def check(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not self.minimum <= value <= 1:
            # The bound in decimal, as a reader writes it, not in the exponent form Python prints.
            bound = f"{self.minimum:f}".rstrip("0")
            raise ValidationError(f"must be a number from {bound} to 1, not {_as_given(value)}")
        return float(value)


class Flag(Setting):
    """true or false; 1/0, yes/no and on/off too, as each refusal says. In `app.config`, a bool
    or one of those texts: the number 1 is no flag there (a value of its type, or its text)."""

    def from_text(self, text: str) -> Any:
        try:
            return _BOOLEANS[text.strip().lower()]
        except KeyError:
            raise ValueError(f"must be true or false (or 1/0, yes/no, on/off), not {text!r}") from None

    def check(self, value: Any) -> bool:
        if isinstance(value, str):
            value = _BOOLEANS.get(value.strip().lower(), value)
        if not isinstance(value, bool):
            raise ValidationError(
                f"must be True or False, or its text (true/false, 1/0, yes/no, on/off), not {value!r}"
            )
        return value


class Text(Setting):
    """A string matching `pattern`; `problem` says what it must be, and, when `shown`, what it
    was (never for a value that may hold a secret: a URL, a path)."""

    def __init__(
        self, default: str | None = None, *, pattern: str = r".+", problem: str = "", shown: bool = False
    ) -> None:
        super().__init__(default)
        self.pattern, self.problem, self.shown = re.compile(pattern, re.S), problem, shown

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not self.pattern.fullmatch(value):
            raise ValidationError(f"{self.problem}, not {value!r}" if self.shown else self.problem)
        return value


class RateLimit(Setting):
    """A limit in the `limits` notation ("100/second;10000/hour"); unset is off."""

    def check(self, value: Any) -> str:
        check_rate_limit(value, "is not")
        return value


#: The longest period a rate limit may have. Past it a budget is renewed in no deployment's life;
#: far past it Redis refuses the window's expiry: the first request was a 503, its count kept forever.
MAX_LIMIT_PERIOD_S = 10 * 365 * 86_400
#: Each period's count as written (`/0 second`): `limits` reads a 0 as no count at all, so
#: `1/0 second` was one a second.
_PERIOD_COUNTS = re.compile(r"(?:/|per)\s*([0-9]+)", re.IGNORECASE)


def check_rate_limit(value: Any, problem: str) -> None:
    from limits import parse_many

    try:
        items = parse_many(value) if isinstance(value, str) else None
        if not items:
            raise ValueError
    except ValueError:
        raise ValidationError(
            f"{problem} a rate limit in the limits notation, e.g. 100/second;10000/hour"
        ) from None
    if any(item.amount < 1 for item in items):
        # `limits` takes 0/second, which refuses every request: leave the setting unset for none.
        raise ValidationError(f"{problem} a rate limit that allows a request (unset it for no limit)")
    if any(int(count) == 0 for count in _PERIOD_COUNTS.findall(value)):
        raise ValidationError(
            f"{problem} a rate limit whose periods are above 0 (`limits` reads `1/0 second` as 1/second)"
        )
    if any(item.amount > MAX_WHOLE_NUMBER for item in items):
        # Never met: Redis holds a count as a signed 64-bit integer.
        raise ValidationError(f"{problem} a rate limit of at most {MAX_WHOLE_NUMBER} requests a period")
    if any(item.get_expiry() > MAX_LIMIT_PERIOD_S for item in items):
        raise ValidationError(
            f"{problem} a rate limit with a period of at most ten years ({MAX_LIMIT_PERIOD_S} seconds)"
        )


#: RFC 3986's path characters, but for `%`.
_PATH_CHARACTERS = r"[A-Za-z0-9._~!$&'()*+,;=:@-]"
#: A path of such segments, none empty but a last one (`/a/`): `//evil.example` would be a URL of
#: another host wherever the prefix starts one (the document's `servers`, which "Try it out"
#: sends the token to). An encoded prefix may hold percent-encodings, each `%` and two hex digits.
_PLAIN_PREFIX = re.compile(rf"(?:/{_PATH_CHARACTERS}+)*/?")
_ENCODED_PREFIX = re.compile(rf"(?:/(?:{_PATH_CHARACTERS}|%[0-9A-Fa-f]{{2}})+)*/?")


def is_path_prefix(text: str, *, encoded: bool) -> bool:
    """Whether the URLs handed out may start with `text` as their path: `/` and segments (or
    nothing), none `.` or `..` (even encoded), which a client would resolve away, out of the
    prefix. `encoded`: as a URL writes it (`X-Forwarded-Prefix`), else as WSGI's `SCRIPT_NAME`
    holds it, which Werkzeug writes into a URL as it is, so that a `%` there makes no URL the
    server matches it with."""
    if not (_ENCODED_PREFIX if encoded else _PLAIN_PREFIX).fullmatch(text):
        return False
    return not any(unquote(segment) in (".", "..") for segment in text.split("/"))


class Entries(Setting):
    """A comma-separated list (or, in `app.config`, a list): its non-empty entries, stripped."""

    def check(self, value: Any) -> tuple[str, ...]:
        entries = value.split(",") if isinstance(value, str) else value
        if not isinstance(entries, (list, tuple, set, frozenset)):
            raise ValidationError(self.problem)
        return tuple(str(entry).strip() for entry in entries if str(entry).strip())

    def __init__(self, default: Any = None, *, problem: str = "must be a comma-separated list") -> None:
        super().__init__(default)
        self.problem = problem


class Hosts(Entries):
    """Host names, IP addresses and CIDRs, comma-separated; never a link-local or unspecified one."""

    def check(self, value: Any) -> tuple[str, ...]:
        hosts = tuple(without_address_dot(host) for host in super().check(value))
        for host in hosts:
            try:
                network = ipaddress.ip_network(host, strict=False)
            except ValueError:
                # An underscore as a webhook URL's host takes one (a compose service's name); a
                # trailing dot too (a fully qualified name, looked up as written).
                if not re.fullmatch(r"[A-Za-z0-9_]([A-Za-z0-9._-]{0,251}[A-Za-z0-9_])?\.?", host):
                    raise ValidationError(
                        f"must list host names, IP addresses or CIDRs, and {host!r} is none of them"
                    ) from None
                continue
            if (
                network.is_link_local
                or network.is_unspecified
                or network.overlaps(_LINK_LOCAL[network.version])
            ):
                raise ValidationError(
                    f"may not allow {host}: link-local and unspecified addresses (the cloud metadata"
                    " endpoint 169.254.169.254 among them) are always refused"
                )
        return tuple(host.lower() for host in hosts)


_LINK_LOCAL = {4: ipaddress.ip_network("169.254.0.0/16"), 6: ipaddress.ip_network("fe80::/10")}


def without_address_dot(host: str) -> str:
    """`host`, but an IPv4 address with a trailing dot (`127.0.0.1.`) without it: the address, as a
    browser's URL parser reads it (WHATWG URL), where a resolver finds no such name. A name's dot
    stays (a fully qualified name, looked up as written)."""
    if host.endswith("."):
        try:
            ipaddress.IPv4Address(host[:-1])
        except ValueError:
            return host
        return host[:-1]
    return host


class Origins(Entries):
    """Exact web origins (`https://app.example.com`, `http://127.0.0.1:5173`), or `*` alone, each
    kept as a browser writes it in `Origin` (web_origin.py)."""

    def check(self, value: Any) -> tuple[str, ...]:
        origins = super().check(value)
        if "*" in origins and len(origins) > 1:
            raise ValidationError("must be either `*` (every origin) alone or a list of exact origins")
        try:
            return tuple(dict.fromkeys(origin if origin == "*" else serialise(origin) for origin in origins))
        except ValueError as exc:
            raise ValidationError(str(exc)) from None


class SecureUrl(Setting):
    """An https URL; plain http only to this machine (a provider under test or development)."""

    def check(self, value: Any) -> str:
        if isinstance(value, str):
            # Spaces around it are an env file's (docker's `--env-file` keeps a trailing one) or a
            # YAML block's line end, never the URL's: dropped, as around the audience. Within it,
            # refused: urlsplit passes a space in a host and drops a tab or line end anywhere, so
            # the value kept them, and every fetch of the keys failed (InvalidURL) after the start.
            value = value.strip()
            if any(char.isspace() or char < " " or char == "\x7f" for char in value):
                raise ValidationError("must be an https:// URL with no space or control character")
        parts = urlsplit(value) if isinstance(value, str) else None
        if parts is None or parts.scheme not in ("https", "http") or not parts.hostname or parts.fragment:
            raise ValidationError("must be an https:// URL")
        try:
            parts.port  # noqa: B018 (a port that is not a number raises)
        except ValueError:
            raise ValidationError("must be an https:// URL with a valid port") from None
        if "@" in parts.netloc:
            # Never sent (the keys are fetched without them), and the URL is in the log of every
            # fetch that fails: the message does not repeat them either.
            raise ValidationError(
                "must hold no credentials (user:password@): the keys are fetched without them"
            )
        if not is_dns_name(parts.hostname):
            raise ValidationError(f"must be an https:// URL, and {parts.hostname!r} is not a valid host name")
        if parts.scheme == "http" and not _is_loopback(parts.hostname):
            raise ValidationError(
                "must use https: keys fetched over plain http could be replaced on the way (http is "
                "allowed only for localhost)"
            )
        return value


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_dns_name(host: str) -> bool:
    """Whether `host` can be looked up at all: IDNA encodes it, so each of its dot-separated
    labels has 1 to 63 characters (one trailing dot allowed). A name that fails here makes the
    resolver raise UnicodeError, not a lookup error."""
    try:
        host.encode("idna")
    except UnicodeError:
        return False
    return True
