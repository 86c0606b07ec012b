"""Settings: their defaults, reading them from the environment, and the API tokens."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

#: Every setting the service reads; the environment variable has the same name.
DEFAULTS: dict[str, Any] = {
    "PLANTS_API_TOKENS": None,
    "PLANTS_API_TOKENS_FILE": None,
    "MAX_CONTENT_LENGTH": 64 * 1024,
    "PLANTS_MAX_PLANTS": 1_000_000,
    "PLANTS_TRUSTED_PROXIES": 0,
}
_INTEGER_SETTINGS = ("MAX_CONTENT_LENGTH", "PLANTS_MAX_PLANTS", "PLANTS_TRUSTED_PROXIES")

# RFC 6750 §2.1 b64token: the only characters a bearer token can have.
TOKEN_SYNTAX = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class ConfigurationError(RuntimeError):
    """A setting is missing or invalid. The message never contains a token."""


def from_environ(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The settings found in `environ`, converted to their types."""
    settings: dict[str, Any] = {}
    for key in DEFAULTS:
        value = environ.get(key)
        if value is None or value == "":
            continue
        if key in _INTEGER_SETTINGS:
            try:
                settings[key] = int(value)
            except ValueError:
                raise ConfigurationError(f"{key} must be a whole number, not {value!r}") from None
        else:
            settings[key] = value
    return settings


def integer_setting(config: Mapping[str, Any], key: str, minimum: int = 0) -> int:
    value = config.get(key, DEFAULTS[key])
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{key} must be a whole number >= {minimum}, not {value!r}")
    return value


def api_tokens(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The accepted bearer tokens: PLANTS_API_TOKENS, else the lines of PLANTS_API_TOKENS_FILE.

    Fails closed: raises ConfigurationError when no token is configured.
    """
    source = "PLANTS_API_TOKENS"
    entries = config.get("PLANTS_API_TOKENS")
    if isinstance(entries, str):
        entries = entries.split(",")
    if not entries and config.get("PLANTS_API_TOKENS_FILE"):
        source = path = str(config["PLANTS_API_TOKENS_FILE"])
        try:
            with open(path, encoding="utf-8") as file:
                entries = file.read().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(
                f"PLANTS_API_TOKENS_FILE {path!r} cannot be read: {exc.__class__.__name__}"
            ) from None
    tokens = tuple(entry.strip() for entry in entries or () if entry.strip())
    if not tokens:
        raise ConfigurationError(
            "No API token is configured: set PLANTS_API_TOKENS (comma-separated) "
            "or PLANTS_API_TOKENS_FILE (one token per line). There is no default token."
        )
    for number, token in enumerate(tokens, start=1):
        if not TOKEN_SYNTAX.fullmatch(token):
            raise ConfigurationError(
                f"Token number {number} from {source} is not a valid bearer token: "
                "use only A-Z a-z 0-9 - . _ ~ + / and trailing '='"
            )
    return tokens
