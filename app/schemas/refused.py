"""A field or query parameter no request may send, refused with a message of its own."""

from __future__ import annotations

from typing import Any

from marshmallow import ValidationError, fields, missing


class Refused(fields.Field):
    """A field (or parameter) no request may send, refused with why and what to do instead, where
    marshmallow would say only that it is unknown, of a name the client had good reason to send."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self._refusal = message

    def deserialize(self, value: Any, attr: str | None = None, data: Any = None, **kwargs: Any) -> Any:
        if value is missing:
            return missing  # left out, as it should be
        raise ValidationError(self._refusal)  # null too
