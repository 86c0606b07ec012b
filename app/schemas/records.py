"""marshmallow schemas for the interface's records: NewPlant in, Plant and Error out."""

from __future__ import annotations

from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, missing, validate

from app.store import Plant

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Length bounds, in Unicode code points, for name and tag.
NAME_MAX_LENGTH = 200
TAG_MAX_LENGTH = 100


class PlainField(fields.Field):
    """A field that can tell cheaply whether a value is plainly valid: it loads as itself.

    `deserialize` returns such a value at once; anything else takes marshmallow's own path,
    which refuses it with marshmallow's messages. The answer is the same either way; the
    shortcut skips marshmallow's per-field machinery.
    """

    def is_plain(self, value: Any) -> bool:
        raise NotImplementedError

    def deserialize(self, value: Any, attr: str | None = None, data: Any = None, **kwargs: Any) -> Any:
        if self.is_plain(value):
            return value
        return super().deserialize(value, attr, data, **kwargs)


class BoundedString(PlainField, fields.String):
    """A string of `min_length` to `max_length` code points, declared with marshmallow's Length."""

    def __init__(self, *, min_length: int, max_length: int, **kwargs: Any) -> None:
        super().__init__(validate=validate.Length(min=min_length, max=max_length), **kwargs)
        self._min_length, self._max_length = min_length, max_length

    def is_plain(self, value: Any) -> bool:
        return type(value) is str and self._min_length <= len(value) <= self._max_length


class StrictInt64(PlainField, fields.Integer):
    """A JSON integer in the int64 range; true, 1.0 and "1" are refused (marshmallow's strict)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(strict=True, validate=validate.Range(min=INT64_MIN, max=INT64_MAX), **kwargs)

    def is_plain(self, value: Any) -> bool:
        # type() is int excludes bool, which is an int subclass.
        return type(value) is int and INT64_MIN <= value <= INT64_MAX


class FlatSchema(Schema):
    """A schema of PlainFields whose `load` and `dump` of a dict skip marshmallow's general loop.

    marshmallow's loop serves nesting, `many`, `partial`, hooks, `data_key` and `attribute`,
    and costs most of a small record's load and dump. A schema that uses none of them loads
    here by calling each field's own `deserialize` (marshmallow's required, type and
    validator checks and messages), collecting errors as marshmallow does; it dumps a plain
    value as itself. A schema or a call that uses any of them takes marshmallow's own path.
    tests/unit/test_properties.py checks that both paths give the same answers.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        simple = (
            not self.many
            and not self.partial
            and self.unknown == RAISE
            and not any(type(self).resolve_hooks().values())
            and type(self).get_attribute is Schema.get_attribute
            and all(
                isinstance(field, PlainField) and field.data_key is None and field.attribute is None
                for field in self.fields.values()
            )
        )
        self._flat_load = tuple(self.load_fields.items()) if simple else None
        self._flat_dump = tuple(self.dump_fields.items()) if simple else None
        self._load_names = frozenset(self.load_fields)

    def load(self, data: Any, *, many: Any = None, partial: Any = None, unknown: Any = None) -> Any:
        if self._flat_load is None or type(data) is not dict or many or partial or unknown:
            return super().load(data, many=many, partial=partial, unknown=unknown)
        result: dict[str, Any] = {}
        errors: dict[str, Any] = {}
        for name, field in self._flat_load:
            value = data.get(name, missing)
            try:
                value = field.deserialize(value, name, data)
            except ValidationError as error:
                errors[name] = list(error.messages)  # a copy, as marshmallow's error store makes
                continue
            if value is not missing:
                result[name] = value
        if not self._load_names.issuperset(data):
            for key in set(data) - self._load_names:
                errors[key] = [self.error_messages["unknown"]]
        if errors:
            exc = ValidationError(errors, data=data, valid_data=result)
            self.handle_error(exc, data, many=False, partial=self.partial)
            raise exc
        return result

    def dump(self, obj: Any, *, many: Any = None) -> Any:
        if self._flat_dump is None or type(obj) is not dict or many:
            return super().dump(obj, many=many)
        result: dict[str, Any] = {}
        for name, field in self._flat_dump:
            value = obj.get(name, missing)
            if value is missing or not field.is_plain(value):  # type: ignore[attr-defined]
                value = field.serialize(name, obj, accessor=self.get_attribute)
                if value is missing:
                    continue
            result[name] = value
        return result


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
