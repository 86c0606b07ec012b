"""marshmallow schemas of webhook endpoints: a new one, a merge patch of one, and a replay."""

from __future__ import annotations

from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, missing, validate

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


class Refused(fields.Field):
    """A field no request may set, refused with why and what to do instead, where marshmallow
    would say only `Unknown field.` of a field every answer holds."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self._refusal = message

    def deserialize(self, value: Any, attr: str | None = None, data: Any = None, **kwargs: Any) -> Any:
        if value is missing:
            return missing  # left out, as it should be
        raise ValidationError(self._refusal)  # null too


class NewWebhookSchema(Schema):
    class Meta:
        unknown = RAISE

    url = fields.String(required=True)
    events = EventTypes(allow_none=True)
    description = fields.String(validate=validate.Length(max=DESCRIPTION_MAX_LENGTH))
    secret = Refused("The service makes each endpoint's secret, and the answer to the registration holds it.")


class WebhookPatchSchema(Schema):
    """A merge patch (RFC 7396): `events: null` subscribes to every type; `failing` is the service's."""

    class Meta:
        unknown = RAISE

    url = fields.String()
    events = EventTypes(allow_none=True)
    description = fields.String(validate=validate.Length(max=DESCRIPTION_MAX_LENGTH), allow_none=True)
    status = fields.String(
        validate=validate.OneOf(
            ("enabled", "disabled"), error="Must be enabled or disabled (failing is set only by the service)."
        )
    )
    secret = Refused(
        "The secret is never set by a PATCH: POST /webhooks/{id}/rotate gives the endpoint a new one"
        " (the current one signs beside it for PLANTS_WEBHOOKS_ROTATION_OVERLAP)."
    )


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
