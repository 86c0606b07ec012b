"""The settings of JWT access tokens (PLANTS_JWT_*, PLANTS_JWKS_URL), from the loaded settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from app.settings.configuration_error import ConfigurationError
from app.settings.schema import AUDIENCE_REQUIRED

_NEED_ISSUER = ("PLANTS_JWT_AUDIENCE", "PLANTS_JWKS_URL")


class JwtSettings(NamedTuple):
    issuer: str
    audience: str
    #: None: the `jwks_uri` of the issuer's OpenID Connect discovery document.
    jwks_url: str | None
    algorithms: frozenset[str]
    leeway: int
    read_scope: str
    write_scope: str
    webhooks_scope: str

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


def jwt_settings(values: Mapping[str, Any]) -> JwtSettings | None:
    """The JWT settings, or None when PLANTS_JWT_ISSUER is not set (JWT access tokens are off)."""
    issuer = values["PLANTS_JWT_ISSUER"]
    if not issuer:
        for key in _NEED_ISSUER:
            if values[key]:
                raise ConfigurationError(key, "is set, but {PLANTS_JWT_ISSUER} is not: set the issuer too")
        return None
    if "?" in issuer:
        # OpenID Connect Discovery §3: an issuer has no query; its discovery URL (a path after
        # it) would be the query's tail, and the keys never fetched.
        raise ConfigurationError("PLANTS_JWT_ISSUER", "must be an https:// URL with no query")
    audience = values["PLANTS_JWT_AUDIENCE"]
    if not audience or not audience.strip():
        raise ConfigurationError("PLANTS_JWT_AUDIENCE", AUDIENCE_REQUIRED)
    return JwtSettings(
        issuer=issuer,
        audience=audience.strip(),
        jwks_url=values["PLANTS_JWKS_URL"],
        algorithms=frozenset(values["PLANTS_JWT_ALGORITHMS"]),
        leeway=values["PLANTS_JWT_LEEWAY"],
        read_scope=values["PLANTS_JWT_READ_SCOPE"],
        write_scope=values["PLANTS_JWT_WRITE_SCOPE"],
        webhooks_scope=values["PLANTS_JWT_WEBHOOKS_SCOPE"],
    )
