"""The settings of JWT access tokens (PLANTS_JWT_*, PLANTS_JWKS_URL), checked at startup."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from ..settings import DEFAULTS, ConfigurationError, integer_setting

#: The algorithms a provider signs access tokens with: all asymmetric (RFC 8725 §3.1). A shared
#: secret (HS*) would let every service that verifies tokens also mint them.
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
#: RFC 6749 §3.3 scope-token characters (no space, quote or backslash): it goes into a challenge.
SCOPE_SYNTAX = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,128}")
MAX_LEEWAY = 300
_JWT_KEYS = ("PLANTS_JWT_AUDIENCE", "PLANTS_JWKS_URL")


class JwtSettings(NamedTuple):
    issuer: str
    audience: str
    #: None: the `jwks_uri` of the issuer's OpenID Connect discovery document.
    jwks_url: str | None
    algorithms: frozenset[str]
    leeway: int
    read_scope: str
    write_scope: str

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


def jwt_settings(config: Mapping[str, Any]) -> JwtSettings | None:
    """The JWT settings, or None when PLANTS_JWT_ISSUER is not set (JWT access tokens are off)."""
    issuer = config.get("PLANTS_JWT_ISSUER")
    if not issuer:
        for key in _JWT_KEYS:
            if config.get(key):
                raise ConfigurationError(key, "is set, but {PLANTS_JWT_ISSUER} is not: set the issuer too")
        return None
    _check_url("PLANTS_JWT_ISSUER", issuer)
    audience = config.get("PLANTS_JWT_AUDIENCE")
    if not isinstance(audience, str) or not audience.strip():
        raise ConfigurationError(
            "PLANTS_JWT_AUDIENCE",
            "is required with {PLANTS_JWT_ISSUER}: the audience this service's tokens name",
        )
    jwks_url = config.get("PLANTS_JWKS_URL") or None
    if jwks_url is not None:
        _check_url("PLANTS_JWKS_URL", jwks_url)
    return JwtSettings(
        issuer=issuer,
        audience=audience.strip(),
        jwks_url=jwks_url,
        algorithms=_algorithms(config),
        leeway=_leeway(config),
        read_scope=_scope(config, "PLANTS_JWT_READ_SCOPE"),
        write_scope=_scope(config, "PLANTS_JWT_WRITE_SCOPE"),
    )


def _check_url(key: str, url: Any) -> None:
    """An https URL; plain http only to this machine (a provider under test or development)."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("https", "http") or not parts.hostname or parts.fragment:
        raise ConfigurationError(key, "must be an https:// URL")
    try:
        parts.port  # noqa: B018 (a port that is not a number raises)
    except ValueError:
        raise ConfigurationError(key, "must be an https:// URL with a valid port") from None
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise ConfigurationError(
            key,
            "must use https: keys fetched over plain http could be replaced on the way (http is "
            "allowed only for localhost)",
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _algorithms(config: Mapping[str, Any]) -> frozenset[str]:
    value = config.get("PLANTS_JWT_ALGORITHMS") or DEFAULTS["PLANTS_JWT_ALGORITHMS"]
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple, set, frozenset)):
        raise ConfigurationError("PLANTS_JWT_ALGORITHMS", "must be a comma-separated list, e.g. RS256,ES256")
    algorithms = frozenset(str(name).strip() for name in names if str(name).strip())
    refused = sorted(algorithms - ASYMMETRIC_ALGORITHMS)
    if refused or not algorithms:
        raise ConfigurationError(
            "PLANTS_JWT_ALGORITHMS",
            f"may list only asymmetric algorithms ({', '.join(sorted(ASYMMETRIC_ALGORITHMS))}), "
            f"not {', '.join(repr(name) for name in refused) or 'none at all'}: 'none' and the "
            "shared-secret HS* algorithms are never accepted",
        )
    return algorithms


def _leeway(config: Mapping[str, Any]) -> int:
    leeway = integer_setting(config, "PLANTS_JWT_LEEWAY")
    if leeway > MAX_LEEWAY:
        raise ConfigurationError("PLANTS_JWT_LEEWAY", f"must be at most {MAX_LEEWAY} seconds, not {leeway}")
    return leeway


def _scope(config: Mapping[str, Any], key: str) -> str:
    scope = config.get(key) or DEFAULTS[key]
    if not isinstance(scope, str) or not SCOPE_SYNTAX.fullmatch(scope):
        raise ConfigurationError(key, "must be one OAuth scope: no spaces, quotes or backslashes")
    return scope
