"""marshmallow schemas for the interface's records: NewPlant in, Plant and Error out."""

from __future__ import annotations

from typing import Any

from marshmallow import RAISE, Schema, fields, validate

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Length bounds, in Unicode code points, for name and tag.
NAME_MAX_LENGTH = 200
TAG_MAX_LENGTH = 100


class BoundedString(fields.String):
    """A string of `min_length` to `max_length` code points, declared with marshmallow's Length.

    A value that is plainly valid is returned at once; anything else takes marshmallow's own
    path, which refuses it with marshmallow's messages. The answer is the same either way; the
    shortcut skips marshmallow's per-field machinery, most of a create's `load` cost.
    """

    def __init__(self, *, min_length: int, max_length: int, **kwargs: Any) -> None:
        super().__init__(validate=validate.Length(min=min_length, max=max_length), **kwargs)
        self._min_length, self._max_length = min_length, max_length

    def deserialize(self, value: Any, attr: str | None = None, data: Any = None, **kwargs: Any) -> Any:
        if type(value) is str and self._min_length <= len(value) <= self._max_length:
            return value
        return super().deserialize(value, attr, data, **kwargs)


class StrictInt64(fields.Integer):
    """A JSON integer in the int64 range; true, 1.0 and "1" are refused (marshmallow's strict).

    As BoundedString: a plainly valid value is returned at once, anything else takes
    marshmallow's own path and its messages.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(strict=True, validate=validate.Range(min=INT64_MIN, max=INT64_MAX), **kwargs)

    def deserialize(self, value: Any, attr: str | None = None, data: Any = None, **kwargs: Any) -> Any:
        # type() is int excludes bool, which is an int subclass.
        if type(value) is int and INT64_MIN <= value <= INT64_MAX:
            return value
        return super().deserialize(value, attr, data, **kwargs)


class PlantSchema(Schema):
    """Plant: the success response. It has no id, as in the interface."""

    name = BoundedString(required=True, min_length=1, max_length=NAME_MAX_LENGTH)
    tag = BoundedString(min_length=1, max_length=TAG_MAX_LENGTH)


class NewPlantSchema(PlantSchema):
    """NewPlant: the create request. Unknown fields are refused, never dropped."""

    class Meta:
        unknown = RAISE

    id = StrictInt64(required=True)


class ErrorSchema(Schema):
    """Error: every failure. `details` maps each offending field to its messages."""

    error = fields.Integer(required=True)
    message = fields.String(required=True)
    details = fields.Dict(keys=fields.String(), values=fields.List(fields.String()))
