"""marshmallow schemas for the interface's records: NewPlant in, Plant and Error out."""

from __future__ import annotations

from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate

from app.compat.marshmallow import FlatSchema, PlainField
from app.store import Plant

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Length bounds, in Unicode code points, for name and tag.
NAME_MAX_LENGTH = 200
TAG_MAX_LENGTH = 100


#: A name or tag of white space alone (" ", a tab, U+3000) reads as none in every list or page,
#: and no one can tell two such plants apart: refused. White space around a character is kept.
BLANK = "Must have a character other than white space."


def _not_blank(value: str) -> None:
    if value.isspace():
        raise ValidationError(BLANK)


class BoundedString(PlainField, fields.String):
    """A string of `min_length` to `max_length` code points, not all white space, declared with
    marshmallow's Length."""

    def __init__(self, *, min_length: int, max_length: int, **kwargs: Any) -> None:
        super().__init__(validate=[validate.Length(min=min_length, max=max_length), _not_blank], **kwargs)
        self._min_length, self._max_length = min_length, max_length

    def is_plain(self, value: Any) -> bool:
        return (
            type(value) is str and self._min_length <= len(value) <= self._max_length and not value.isspace()
        )


class StrictInt64(PlainField, fields.Integer):
    """A JSON integer in the int64 range; true, 1.0 and "1" are refused (marshmallow's strict)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(strict=True, validate=validate.Range(min=INT64_MIN, max=INT64_MAX), **kwargs)

    def is_plain(self, value: Any) -> bool:
        # type() is int excludes bool, which is an int subclass.
        return type(value) is int and INT64_MIN <= value <= INT64_MAX


class PlantSchema(FlatSchema):
    """Plant: the success response. It has no id, as in the interface."""

    name = BoundedString(required=True, min_length=1, max_length=NAME_MAX_LENGTH)
    tag = BoundedString(min_length=1, max_length=TAG_MAX_LENGTH)


class NewPlantSchema(PlantSchema):
    """NewPlant: the create request. Unknown fields are refused, never dropped."""

    class Meta:
        unknown = RAISE

    id = StrictInt64(required=True)


class ReplacementSchema(PlantSchema):
    """The body of `PUT /plants/{id}`: a Plant, and optionally the path's own `id` (so that a
    page's item can be sent back as it came). Unknown fields are refused."""

    class Meta:
        unknown = RAISE

    id = StrictInt64()


class MergePatchSchema(FlatSchema):
    """The body of `PATCH /plants/{id}`, a JSON merge patch (RFC 7396): `name` to change it, `tag`
    to set it or `null` to remove it, and optionally the path's own `id`."""

    class Meta:
        unknown = RAISE

    id = StrictInt64()
    name = BoundedString(min_length=1, max_length=NAME_MAX_LENGTH)
    tag = BoundedString(min_length=1, max_length=TAG_MAX_LENGTH, allow_none=True)


class StoredPlantSchema(PlantSchema):
    """StoredPlant: an item of a page, the plant with its id."""

    id = StrictInt64(required=True)


class ErrorSchema(Schema):
    """Error: every failure. `details` maps each offending field to its messages."""

    error = fields.Integer(required=True)
    message = fields.String(required=True)
    details = fields.Dict(keys=fields.String(), values=fields.List(fields.String()))


def plant_record(plant: Plant) -> dict[str, Any]:
    """The Plant record, as PlantSchema dumps it: the tag only when there is one."""
    name, tag = plant
    return {"name": name} if tag is None else {"name": name, "tag": tag}


def stored_plant(plant_id: int, name: str, tag: str | None) -> dict[str, Any]:
    """The StoredPlant record, as StoredPlantSchema dumps it: a page's item, a webhook's `data`."""
    return {"id": plant_id, "name": name} if tag is None else {"id": plant_id, "name": name, "tag": tag}
