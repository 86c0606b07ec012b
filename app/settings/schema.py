"""Every setting of the service, declared once: its environment variable, type, default and range.

The field's name is the environment variable and the `app.config` key. The order is the order
they are checked in, so that a start with several bad settings names the same one first each time.
"""

from __future__ import annotations

from typing import Any

from marshmallow import EXCLUDE, Schema, ValidationError

from app.settings.fields import (
    Entries,
    Flag,
    Hosts,
    Origins,
    RateLimit,
    Scale,
    Seconds,
    SecureUrl,
    Setting,
    Text,
    WholeNumber,
)

#: The algorithms a provider signs access tokens with: all asymmetric (RFC 8725 §3.1). A shared
#: secret (HS*) would let every service that verifies tokens also mint them.
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
#: RFC 6749 §3.3 scope-token characters (no space, quote or backslash): it goes into a challenge.
SCOPE_PATTERN = r"[\x21\x23-\x5b\x5d-\x7e]{1,128}"
SCOPE_PROBLEM = "must be one OAuth scope: no spaces, quotes or backslashes"
MAX_LEEWAY = 300
#: The longest long-poll, in seconds (the `wait` parameter's bound): under nginx's 60 s timeout.
LONGEST_WAIT = 55
AUDIENCE_REQUIRED = "is required with {PLANTS_JWT_ISSUER}: the audience this service's tokens name"


class Algorithms(Entries):
    def check(self, value: Any) -> tuple[str, ...]:
        algorithms = frozenset(super().check(value))
        refused = sorted(algorithms - ASYMMETRIC_ALGORITHMS)
        if refused or not algorithms:
            raise ValidationError(
                f"may list only asymmetric algorithms ({', '.join(sorted(ASYMMETRIC_ALGORITHMS))}), "
                f"not {', '.join(repr(name) for name in refused) or 'none at all'}: 'none' and the "
                "shared-secret HS* algorithms are never accepted"
            )
        return tuple(sorted(algorithms))


class SettingsSchema(Schema):
    """The settings the service reads; anything else in `app.config` is its host's."""

    class Meta:
        unknown = EXCLUDE

    # JWT access tokens from an identity provider (docs/identity-providers.md): off until an issuer is set.
    PLANTS_JWT_ISSUER = SecureUrl()
    PLANTS_JWT_AUDIENCE = Text(problem=AUDIENCE_REQUIRED)
    PLANTS_JWKS_URL = SecureUrl()
    PLANTS_JWT_ALGORITHMS = Algorithms(
        "RS256,ES256", problem="must be a comma-separated list, e.g. RS256,ES256"
    )
    PLANTS_JWT_LEEWAY = WholeNumber(30, maximum=MAX_LEEWAY, unit=" seconds")
    PLANTS_JWT_READ_SCOPE = Text("plants:read", pattern=SCOPE_PATTERN, problem=SCOPE_PROBLEM, shown=True)
    PLANTS_JWT_WRITE_SCOPE = Text("plants:write", pattern=SCOPE_PATTERN, problem=SCOPE_PROBLEM, shown=True)
    PLANTS_JWT_WEBHOOKS_SCOPE = Text(
        "plants:webhooks", pattern=SCOPE_PATTERN, problem=SCOPE_PROBLEM, shown=True
    )
    # Static bearer tokens (app/settings/tokens.py reads each list, else the lines of its _FILE).
    PLANTS_API_TOKENS = Entries(problem="must be a comma-separated list of tokens")
    PLANTS_API_TOKENS_FILE = Text(problem="must be a file's path")
    PLANTS_READ_TOKENS = Entries(problem="must be a comma-separated list of tokens")
    PLANTS_READ_TOKENS_FILE = Text(problem="must be a file's path")
    # The store.
    #: Unset: PLANTS_STORE_URL_FILE's content, else memory:// (settings.DEFAULT_STORE_URL).
    PLANTS_STORE_URL = Text(problem="must be a URL string")
    PLANTS_STORE_URL_FILE = Text(problem="must be a file's path")
    PLANTS_STORE_PREFIX = Text(
        "plants",
        pattern=r"[A-Za-z0-9_.:-]{1,64}",
        problem="must be 1 to 64 of A-Z a-z 0-9 _ . : - (no braces or spaces)",
        shown=True,
    )
    PLANTS_STORE_CONNECT_TIMEOUT = Seconds(1.0)
    PLANTS_STORE_TIMEOUT = Seconds(1.0)
    PLANTS_MAX_PLANTS = WholeNumber(1_000_000, minimum=1)
    PLANTS_STORE_MIN_REPLICAS = WholeNumber(0)
    #: The change feed keeps at least this many of the latest events; 0 turns it off.
    PLANTS_EVENTS_RETAIN = WholeNumber(100_000)
    # Watching the feed (docs/change-feed.md): server-sent events and long-polls.
    PLANTS_EVENTS_HEARTBEAT = WholeNumber(15, minimum=1, maximum=3600, unit=" seconds")
    #: The longest a long-poll waits, whatever its `wait` asks: lower it behind a proxy whose
    #: read timeout is shorter than 60 s. It only lowers: `wait` itself is at most this default.
    PLANTS_EVENTS_MAX_WAIT = Seconds(LONGEST_WAIT, maximum=LONGEST_WAIT)
    PLANTS_EVENTS_STREAM_MAX = WholeNumber(300, minimum=1, maximum=86_400, unit=" seconds")
    PLANTS_EVENTS_MAX_WATCHERS = WholeNumber(10_000, minimum=1)
    PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN = WholeNumber(100, minimum=1)
    #: The lifetime of a watch ticket (app/auth/watch_tickets.py), for a browser's EventSource.
    PLANTS_WATCH_TICKET_TTL = WholeNumber(60, minimum=1, maximum=3600, unit=" seconds")
    # Webhooks (docs/webhooks.md).
    PLANTS_WEBHOOKS_DELIVER = Flag(True)
    PLANTS_WEBHOOKS_MAX = WholeNumber(50)
    PLANTS_WEBHOOKS_ALLOW_HOSTS = Hosts(
        (), problem="must be a comma-separated list of host names, addresses or CIDRs"
    )
    PLANTS_WEBHOOKS_TIMEOUT = Seconds(15.0)
    #: How long a registration waits for its URL's host to resolve before answering 503 while the
    #: lookup goes on (app/webhooks/lookups.py): the longest a request thread waits on a name server.
    PLANTS_WEBHOOKS_LOOKUP_WAIT = Seconds(0.2)
    PLANTS_WEBHOOKS_RETRY_SCALE = Scale(1.0, minimum=0.00001)
    PLANTS_WEBHOOKS_ROTATION_OVERLAP = WholeNumber(86_400, maximum=30 * 86_400, unit=" seconds")
    #: Rotated-out secrets that sign at once, each until its own overlap ends: one more is a 409.
    PLANTS_WEBHOOKS_OLD_SECRETS_MAX = WholeNumber(10, minimum=1, maximum=100)
    PLANTS_RATE_LIMIT = RateLimit()
    PLANTS_AUTH_FAILURE_LIMIT = RateLimit()
    #: An IPv6 client's /48 (app/auth/address_keys.py); unset: four times PLANTS_AUTH_FAILURE_LIMIT.
    PLANTS_AUTH_FAILURE_LIMIT_PER_48 = RateLimit()
    PLANTS_METRICS = Flag(True)
    PLANTS_DOCS = Flag(True)
    #: Cross-origin requests from browser pages (app/http/cors.py): off until set.
    PLANTS_CORS_ORIGINS = Origins((), problem="must be a comma-separated list of origins, or *")
    PLANTS_REQUIRE_IF_MATCH = Flag(False)
    # The HTTP layer (Flask's own name for the body limit).
    MAX_CONTENT_LENGTH = WholeNumber(64 * 1024, minimum=1)
    PLANTS_TRUSTED_PROXIES = WholeNumber(0)
    # What the service says about itself (app/telemetry/).
    PLANTS_LOG_FORMAT = Text("text", pattern="text|json", problem="must be text or json", shown=True)


#: The declared settings, by name, in checking order.
FIELDS: dict[str, Setting] = SettingsSchema().fields  # type: ignore[assignment]
#: Every setting's default (its `app.config` key and value).
DEFAULTS: dict[str, Any] = {name: field.load_default for name, field in FIELDS.items()}
