"""Settings: their defaults, reading them from the environment, and checking each one.

The standalone service reads the environment; an embedded blueprint reads only its host's
`app.config`. A ConfigurationError names the setting the way its reader sets it, and never
contains a token or a password.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

#: Every setting the service reads, with its default; the environment variable has the same name.
DEFAULTS: dict[str, Any] = {
    "PLANTS_API_TOKENS": None,
    "PLANTS_API_TOKENS_FILE": None,
    "PLANTS_READ_TOKENS": None,
    "PLANTS_READ_TOKENS_FILE": None,
    "MAX_CONTENT_LENGTH": 64 * 1024,
    "PLANTS_MAX_PLANTS": 1_000_000,
    "PLANTS_TRUSTED_PROXIES": 0,
    "PLANTS_STORE_URL": "memory://",
    "PLANTS_STORE_URL_FILE": None,
    "PLANTS_STORE_PREFIX": "plants",
    "PLANTS_STORE_CONNECT_TIMEOUT": 1.0,
    "PLANTS_STORE_TIMEOUT": 1.0,
    "PLANTS_STORE_MIN_REPLICAS": 0,
    "PLANTS_RATE_LIMIT": None,
    "PLANTS_AUTH_FAILURE_LIMIT": None,
    "PLANTS_DOCS": True,
    "PLANTS_METRICS": True,
    "PLANTS_REQUIRE_IF_MATCH": False,
    #: The change feed keeps at least this many of the latest events; 0 turns it off.
    "PLANTS_EVENTS_RETAIN": 100_000,
    # JWT access tokens from an identity provider (app/auth/jwt_settings.py): off until an issuer is set.
    "PLANTS_JWT_ISSUER": None,
    "PLANTS_JWT_AUDIENCE": None,
    "PLANTS_JWKS_URL": None,
    "PLANTS_JWT_ALGORITHMS": "RS256,ES256",
    "PLANTS_JWT_LEEWAY": 30,
    "PLANTS_JWT_READ_SCOPE": "plants:read",
    "PLANTS_JWT_WRITE_SCOPE": "plants:write",
}

# RFC 6750 §2.1 b64token: the only characters a bearer token can have.
TOKEN_SYNTAX = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
#: Longest accepted token: "Authorization: Bearer <token>" must fit the 8 KiB header-line limit
#: of gunicorn (limit_request_field_size, 8190) and of nginx (large_client_header_buffers 8k).
MAX_TOKEN_LENGTH = 4096
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


class ConfigurationError(RuntimeError):
    """A setting is missing or invalid: one line that names it and says what to do.

    `problem` may name settings as `{KEY}`; they are written as the reader sets them:
    `KEY` in the environment, `app.config["KEY"]` for an embedded blueprint.
    """

    def __init__(self, key: str, problem: str, *, environment: bool = False) -> None:
        self.key, self.problem, self.environment = key, problem, environment
        names = _SettingNames(environment)
        super().__init__(f"{names[key]} {problem.format_map(names)}")

    def from_environment(self) -> ConfigurationError:
        """The same error, naming environment variables."""
        return ConfigurationError(self.key, self.problem, environment=True)


class _SettingNames(dict):
    def __init__(self, environment: bool) -> None:
        super().__init__()
        self.environment = environment

    def __missing__(self, key: str) -> str:
        return key if self.environment else f'app.config["{key}"]'


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` most likely misspells, if one is close."""
    closest = difflib.get_close_matches(name, list(known), n=1, cutoff=0.8)
    return closest[0] if closest else None


def check_names(names: Iterable[str], *, environment: bool) -> None:
    """ConfigurationError for the first `PLANTS_*` name that is not a setting, with the closest
    one: a misspelled setting must stop the start, not leave its default in effect unseen."""
    for name in names:
        if name.startswith("PLANTS_") and name not in DEFAULTS:
            closest = closest_name(name, DEFAULTS)
            hint = (
                f"did you mean {{{closest}}}?" if closest else "see the README's Settings for every setting"
            )
            raise ConfigurationError(
                name, f"is not a setting of this service: {hint}", environment=environment
            )


def from_environ(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The settings found in `environ`, converted to the types of their defaults.

    An unknown `PLANTS_*` variable is a ConfigurationError that names the closest setting.
    """
    check_names(sorted(environ), environment=True)
    settings: dict[str, Any] = {}
    for key, default in DEFAULTS.items():
        value = environ.get(key)
        if value is None or value == "":
            continue
        try:
            if isinstance(default, bool):
                settings[key] = _BOOLEANS[value.strip().lower()]  # KeyError: not a boolean
            elif isinstance(default, int):
                settings[key] = int(value)
            elif isinstance(default, float):
                settings[key] = float(value)
            else:
                settings[key] = value
        except (KeyError, ValueError):
            kind = {bool: "true or false", int: "a whole number", float: "a number"}[type(default)]
            raise ConfigurationError(key, f"must be {kind}, not {value!r}", environment=True) from None
    return settings


def integer_setting(config: Mapping[str, Any], key: str, minimum: int = 0) -> int:
    value = config.get(key, DEFAULTS[key])
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(key, f"must be a whole number >= {minimum}, not {value!r}")
    return value


def seconds_setting(config: Mapping[str, Any], key: str) -> float:
    value = config.get(key, DEFAULTS[key])
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise ConfigurationError(key, f"must be a number of seconds above 0, not {value!r}")
    return float(value)


def boolean_setting(config: Mapping[str, Any], key: str) -> bool:
    value = config.get(key, DEFAULTS[key])
    if isinstance(value, str):
        value = _BOOLEANS.get(value.strip().lower(), value)
    if not isinstance(value, bool):
        raise ConfigurationError(key, f"must be true or false, not {value!r}")
    return value


def _read_secret_file(key: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            key, f"names a file that cannot be read ({exc.__class__.__name__}): {path!r}"
        ) from None


def api_tokens(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The accepted full-access bearer tokens: PLANTS_API_TOKENS, else the lines of its _FILE.

    Fails closed: raises ConfigurationError when no token is configured.
    """
    return token_settings(config).full


class TokenSettings(NamedTuple):
    #: Tokens that may create and delete as well as read (PLANTS_API_TOKENS).
    full: tuple[str, ...]
    #: Tokens that may only read (PLANTS_READ_TOKENS).
    read_only: tuple[str, ...]
    #: The tokens given a rate limit of their own (`token@limit`), of either kind.
    limits: dict[str, str]


def token_settings(config: Mapping[str, Any], *, required: bool = True) -> TokenSettings:
    """The accepted bearer tokens, full and read-only, and the ones with a rate limit of their own.

    Each list is read from its setting, else from the lines of its `_FILE`. Fails closed: raises
    ConfigurationError when no full-access token is configured (unless not `required`: JWT
    access tokens are on), and when a token is in both lists.
    """
    full, limits = _token_list(config, "PLANTS_API_TOKENS")
    if not full and required:
        raise ConfigurationError(
            "PLANTS_API_TOKENS",
            "is not set, and no API token is configured: set it (comma-separated tokens) "
            "or {PLANTS_API_TOKENS_FILE} (a file with one token per line), or turn on JWT access "
            "tokens with {PLANTS_JWT_ISSUER}. There is no default token.",
        )
    read_only, read_limits = _token_list(config, "PLANTS_READ_TOKENS")
    both = set(full) & set(read_only)
    if both:
        number = next(number for number, token in enumerate(read_only, start=1) if token in both)
        raise ConfigurationError(
            "PLANTS_READ_TOKENS",
            f"has a token (number {number}) that is also in {{PLANTS_API_TOKENS}}: a token is either "
            "full-access or read-only, so remove it from one of the two",
        )
    return TokenSettings(full, read_only, {**limits, **read_limits})


def _token_list(config: Mapping[str, Any], key: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """The tokens of `key` (else of `key`_FILE, one per line), and their own rate limits."""
    entries = config.get(key)
    if isinstance(entries, str):
        entries = entries.split(",")
    if not entries and config.get(f"{key}_FILE"):
        key = f"{key}_FILE"
        entries = _read_secret_file(key, str(config[key])).splitlines()
    pairs = [entry.strip().partition("@")[::2] for entry in entries or () if entry.strip()]
    limits = {}
    for number, (token, limit) in enumerate(pairs, start=1):
        if not TOKEN_SYNTAX.fullmatch(token):
            raise ConfigurationError(
                key,
                f"has a token (number {number}) that is not a valid bearer token: "
                "use only A-Z a-z 0-9 - . _ ~ + / and trailing '='",
            )
        if len(token) > MAX_TOKEN_LENGTH:
            raise ConfigurationError(
                key,
                f"has a token (number {number}) of {len(token)} characters, which no request could "
                f"carry through the HTTP server's 8 KiB header limit: tokens may have at most "
                f"{MAX_TOKEN_LENGTH} characters",
            )
        if limit:
            _check_limit(key, limit, f"has a rate limit for token number {number} that is not")
            limits[token] = limit
    return tuple(token for token, _ in pairs), limits


def rate_limit_setting(config: Mapping[str, Any], key: str) -> str | None:
    """A limit in the `limits` notation ("100/second;10000/hour"), or None when off."""
    value = config.get(key) or None
    if value is not None:
        _check_limit(key, value, "is not")
    return value


def _check_limit(key: str, value: Any, problem: str) -> None:
    from limits import parse_many

    try:
        if not isinstance(value, str) or not parse_many(value):
            raise ValueError
    except ValueError:
        raise ConfigurationError(
            key, f"{problem} a rate limit in the limits notation, e.g. 100/second;10000/hour"
        ) from None


def store_url(config: Mapping[str, Any]) -> str:
    """PLANTS_STORE_URL, else the content of PLANTS_STORE_URL_FILE, else memory://."""
    if config.get("PLANTS_STORE_URL_FILE") and not config.get("PLANTS_STORE_URL"):
        return _read_secret_file("PLANTS_STORE_URL_FILE", str(config["PLANTS_STORE_URL_FILE"])).strip()
    url = config.get("PLANTS_STORE_URL") or DEFAULTS["PLANTS_STORE_URL"]
    if not isinstance(url, str):
        raise ConfigurationError("PLANTS_STORE_URL", "must be a URL string")
    return url


def url_without_password(url: str) -> str:
    """A store URL fit for a log line: its password, if any, replaced by `***`."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hosts = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.partition(':')[0]}:***@{hosts}"


def store_prefix(config: Mapping[str, Any]) -> str:
    prefix = config.get("PLANTS_STORE_PREFIX") or DEFAULTS["PLANTS_STORE_PREFIX"]
    if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", prefix):
        raise ConfigurationError(
            "PLANTS_STORE_PREFIX", "must be 1 to 64 of A-Z a-z 0-9 _ . : - (no braces or spaces)"
        )
    return prefix
