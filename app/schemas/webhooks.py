"""marshmallow schemas of webhook endpoints: a new one, a merge patch of one, and a replay."""

from __future__ import annotations

from hmac import compare_digest
from typing import Any, ClassVar

from marshmallow import RAISE, Schema, ValidationError, fields, missing, validate

from app.schemas.refused import Refused
from app.store import EVENT_TYPES

DESCRIPTION_MAX_LENGTH = 500


class EventTypes(fields.List):
    """A list of the feed's event types, each once (an unknown one is refused, naming it)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            fields.String(validate=validate.OneOf(EVENT_TYPES, error="Must be one of: {choices}.")),
            validate=validate.Length(
                min=1,
                max=len(EVENT_TYPES),
                error=f"Must list 1 to {{max}} of the event types ({', '.join(EVENT_TYPES)}), each once;"
                " leave it out, or null, for every type.",
            ),
            **kwargs,
        )

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> list[Any]:
        types = super()._deserialize(value, attr, data, **kwargs)
        if len(set(types)) != len(types):
            raise ValidationError("Must list each event type once.")
        return [kind for kind in EVENT_TYPES if kind in types]


#: The Webhook record's fields that only the service sets (`status` too, but for enabling and
#: disabling, and `secret`, which `rotate` sets).
SET_BY_THE_SERVICE = ("id", "created", "status_reason", "next_attempt")
NOT_A_STATUS = "Must be enabled or disabled (failing is set only by the service)."
ROTATE_INSTEAD = (
    "The secret is never set by a PATCH: POST /webhooks/{id}/rotate gives the endpoint a new one"
    " (the current one signs beside it for PLANTS_WEBHOOKS_ROTATION_OVERLAP)."
)
NOT_AS_READ = "Set by the service: must be the endpoint's value as a GET answers it now, or be left out."


class NewWebhookSchema(Schema):
    class Meta:
        unknown = RAISE
        include: ClassVar[dict[str, fields.Field]] = {
            name: Refused("Set by the service: leave it out.") for name in (*SET_BY_THE_SERVICE, "status")
        }

    url = fields.String(required=True)
    events = EventTypes(allow_none=True)
    description = fields.String(validate=validate.Length(max=DESCRIPTION_MAX_LENGTH))
    secret = Refused("The service makes each endpoint's secret, and the answer to the registration holds it.")


class WebhookPatchSchema(Schema):
    """A merge patch (RFC 7396): `events: null` subscribes to every type. The fields the service
    sets may come too, so that a record read can be changed and sent back: `as_read_problems`
    checks them against the endpoint."""

    class Meta:
        unknown = RAISE
        include: ClassVar[dict[str, fields.Field]] = {
            name: fields.Raw(allow_none=True) for name in (*SET_BY_THE_SERVICE, "secret")
        }

    url = fields.String()
    events = EventTypes(allow_none=True)
    description = fields.String(validate=validate.Length(max=DESCRIPTION_MAX_LENGTH), allow_none=True)
    status = fields.String(validate=validate.OneOf(("enabled", "disabled", "failing"), error=NOT_A_STATUS))


def as_read_problems(patch: dict[str, Any], current: dict[str, Any]) -> dict[str, list[str]]:
    """The messages, by field, for each field of `patch` that the service sets and that is not
    as the endpoint's record `current` (a GET's answer) has it: a plant's `id` in a PUT is taken
    the same way. `failing` only says again what the service set."""
    problems = {
        name: [NOT_AS_READ] for name in SET_BY_THE_SERVICE if name in patch and patch[name] != current[name]
    }
    if "id" in problems:
        problems["id"] = [f"Must equal the id in the path ({current['id']}), or be left out."]
    secret = patch.get("secret", missing)
    # As bytes: compare_digest refuses a str with a character past ASCII.
    if secret is not missing and not (
        isinstance(secret, str) and compare_digest(secret.encode(), current["secret"].encode())
    ):
        problems["secret"] = [ROTATE_INSTEAD]
    if patch.get("status") == "failing" and current["status"] != "failing":
        problems["status"] = [NOT_A_STATUS]
    return problems


class ReplaySchema(Schema):
    class Meta:
        unknown = RAISE

    after = fields.String(required=True)


def load(schema: Schema, value: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
    """The loaded record, or None and each field's messages."""
    try:
        return schema.load(value), {}
    except ValidationError as exc:
        messages = exc.normalized_messages()
        return None, {key: _messages(value) for key, value in messages.items()}


def _messages(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [message for item in value.values() for message in _messages(item)]
    if isinstance(value, list):
        return [str(item) for item in value]
    return [str(value)]
