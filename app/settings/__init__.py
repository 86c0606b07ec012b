"""Settings: declared once (schema.py), read from the environment or `app.config`, and checked
into one frozen `Settings`, which is passed down to whatever needs a setting.

The standalone service reads the environment; an embedded blueprint reads only its host's
`app.config`. A ConfigurationError names the setting the way its reader sets it, and never
contains a token or a password.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from marshmallow import ValidationError

from app.settings.configuration_error import ConfigurationError, closest_name
from app.settings.fields import is_dns_name, without_address_dot
from app.settings.jwt import JwtSettings, jwt_settings
from app.settings.schema import DEFAULTS, FIELDS, SettingsSchema
from app.settings.tokens import TokenSettings, read_secret_file, token_settings

__all__ = [
    "DEFAULTS",
    "ConfigurationError",
    "JwtSettings",
    "Settings",
    "TokenSettings",
    "check_names",
    "closest_name",
    "from_environ",
    "is_dns_name",
    "load_settings",
    "store_location",
    "without_address_dot",
]

_SCHEMA = SettingsSchema()
#: The store when neither PLANTS_STORE_URL nor PLANTS_STORE_URL_FILE is set.
DEFAULT_STORE_URL = "memory://"


@dataclass(frozen=True)
class Settings:
    """What the service was configured with, checked. Nothing here is read again from a config."""

    #: Never in a repr: the tokens and the store's URL (its password) must not reach a log.
    tokens: TokenSettings = dataclasses.field(repr=False)
    #: None: JWT access tokens are off.
    jwt: JwtSettings | None
    store_url: str = dataclasses.field(repr=False)
    #: The setting the store's URL came from (PLANTS_STORE_URL or PLANTS_STORE_URL_FILE).
    store_url_key: str
    store_prefix: str
    store_connect_timeout: float
    store_timeout: float
    max_plants: int
    store_min_replicas: int
    events_retain: int
    events_heartbeat: int
    events_max_wait: float
    events_stream_max: int
    events_max_watchers: int
    events_max_watchers_per_token: int
    watch_ticket_ttl: int
    webhooks_deliver: bool
    webhooks_max: int
    webhooks_allow_hosts: tuple[str, ...]
    webhooks_timeout: float
    webhooks_lookup_wait: float
    webhooks_retry_scale: float
    webhooks_rotation_overlap: int
    webhooks_old_secrets_max: int
    rate_limit: str | None
    auth_failure_limit: str | None
    auth_failure_limit_per_48: str | None
    metrics: bool
    docs: bool
    cors_origins: tuple[str, ...]
    require_if_match: bool
    max_content_length: int
    trusted_proxies: int
    log_format: str


def _attribute(key: str) -> str:
    """The Settings attribute of a setting read as it is: its name without PLANTS_, in lower case."""
    return key.removeprefix("PLANTS_").lower()


#: The Settings attributes that hold one setting's checked value as it is (the store's URL may
#: come from PLANTS_STORE_URL_FILE instead).
_READ_AS_IS = (
    frozenset(field.name for field in dataclasses.fields(Settings)) & set(map(_attribute, FIELDS))
) - {"store_url"}


def check_names(names: Iterable[str], *, environment: bool) -> None:
    """ConfigurationError for the first `PLANTS_*` name that is not a setting, with the closest
    one: a misspelled setting must stop the start, not leave its default in effect unseen."""
    for name in names:
        if name.startswith("PLANTS_") and name not in FIELDS:
            closest = closest_name(name, FIELDS)
            hint = (
                f"did you mean {{{closest}}}?" if closest else "see the README's Settings for every setting"
            )
            raise ConfigurationError(
                name, f"is not a setting of this service: {hint}", environment=environment
            )


def from_environ(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The settings set in `environ`, read as their types (for `app.config`); an unknown
    `PLANTS_*` variable, or a value not of its setting's type, is a ConfigurationError."""
    check_names(sorted(environ), environment=True)
    values: dict[str, Any] = {}
    for key, field in FIELDS.items():
        text = environ.get(key)
        if text:
            try:
                values[key] = field.from_text(text)
            except ValueError as exc:
                raise ConfigurationError(key, str(exc), environment=True) from None
    return values


def load_settings(config: Mapping[str, Any]) -> Settings:
    """The checked settings of `config` (an `app.config`); ConfigurationError names the first bad one."""
    check_names(config, environment=False)
    values = _load(_SCHEMA, config)
    _check_companions(values)
    jwt = jwt_settings(values)
    tokens = token_settings(values, required=jwt is None)
    store_url, store_url_key = _store_url(values)
    plain = {name: value for key, value in values.items() if (name := _attribute(key)) in _READ_AS_IS}
    return Settings(tokens=tokens, jwt=jwt, store_url=store_url, store_url_key=store_url_key, **plain)


#: A setting that works only beside another: that other, and why. Set alone, it would do nothing.
_COMPANIONS = {
    "PLANTS_AUTH_FAILURE_LIMIT_PER_48": (
        "PLANTS_AUTH_FAILURE_LIMIT",
        "the /48's limit is counted only beside the per-address one",
    )
}


def _check_companions(values: Mapping[str, Any]) -> None:
    """ConfigurationError for a setting set without the one it works beside: left to do nothing,
    it would let its operator believe in a guard that is not there."""
    for key, (needed, why) in _COMPANIONS.items():
        if values[key] and not values[needed]:
            raise ConfigurationError(key, f"is set, but {{{needed}}} is not: {why}, so set that too")


def store_location(config: Mapping[str, Any]) -> tuple[str, str, str]:
    """The store's URL, the setting it came from, and its key prefix: all that a command on the
    store (`python -m app.store.migrate`) or the server's configuration needs."""
    values = _load(_STORE_LOCATION, config)
    return (*_store_url(values), values["PLANTS_STORE_PREFIX"])


_STORE_LOCATION = SettingsSchema(only=("PLANTS_STORE_URL", "PLANTS_STORE_URL_FILE", "PLANTS_STORE_PREFIX"))


def _load(schema: SettingsSchema, config: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return schema.load({key: config[key] for key in schema.fields if key in config})
    except ValidationError as exc:
        errors = exc.normalized_messages()
        key = next(key for key in FIELDS if key in errors)
        raise ConfigurationError(key, str(errors[key][0])) from None


def _store_url(values: Mapping[str, Any]) -> tuple[str, str]:
    """PLANTS_STORE_URL, else the content of PLANTS_STORE_URL_FILE, else memory://; and its setting.
    Each without the spaces around it (an env file's, a file's line end): never a URL's."""
    url = (values["PLANTS_STORE_URL"] or "").strip()
    if values["PLANTS_STORE_URL_FILE"] and not url:
        key = "PLANTS_STORE_URL_FILE"
        return read_secret_file(key, values[key]).strip(), key
    return url or DEFAULT_STORE_URL, "PLANTS_STORE_URL"
