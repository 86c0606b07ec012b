"""marshmallow past its documented interface: flat records loaded and dumped beside its own loop.

marshmallow's `Schema.load` and `dump` run a general loop that serves nesting, `many`,
`partial`, hooks, `data_key` and `attribute`; for a record of two or three plain fields it costs
most of the load and dump. `FlatSchema` loads a schema that uses none of them by calling each
field's own `deserialize` (marshmallow's required, type and validator checks and messages),
collecting errors as marshmallow does, and dumps a plain value as itself; its fields
(`PlainField`) answer at once for a value that plainly loads as itself. Any other schema or call
takes marshmallow's path, and so does every one when the schema and field methods the flat path
calls are not as this module expects (checked at import). tests/unit/test_properties.py checks
that both paths give the same answers.
"""

from __future__ import annotations

import logging
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, missing

from app.compat import binds, warn

log = logging.getLogger(__name__)


def marshmallow_fits() -> bool:
    """Whether the schema and field methods the flat path calls are there, taking these arguments."""
    try:
        probe = Schema()
        return (
            isinstance(probe.load_fields, dict)
            and isinstance(probe.dump_fields, dict)
            and "unknown" in probe.error_messages
            and callable(Schema.resolve_hooks)
            and binds(Schema.handle_error, ValidationError("x"), {}, many=False, partial=None)
            and binds(fields.Field.deserialize, None, "name", {})
            and binds(fields.Field.serialize, "name", {}, accessor=None)
        )
    except (AttributeError, TypeError):
        return False


#: Whether flat records take the flat path; otherwise every schema loads and dumps through marshmallow.
FLAT = marshmallow_fits()
if not FLAT:
    warn(log, "marshmallow's schema or field methods have changed: records load through Schema.load")


class PlainField(fields.Field):
    """A field that can tell cheaply whether a value is plainly valid: it loads as itself.

    `deserialize` returns such a value at once; anything else takes marshmallow's own path,
    which refuses it with marshmallow's messages. The answer is the same either way.
    """

    def is_plain(self, value: Any) -> bool:
        raise NotImplementedError

    def deserialize(self, value: Any, attr: str | None = None, data: Any = None, **kwargs: Any) -> Any:
        if FLAT and self.is_plain(value):
            return value
        return super().deserialize(value, attr, data, **kwargs)


class FlatSchema(Schema):
    """A schema of PlainFields whose `load` and `dump` of a dict skip marshmallow's general loop,
    when it uses none of what that loop serves; a schema or a call that does takes marshmallow's
    own path."""

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
        if not FLAT or self._flat_load is None or type(data) is not dict or many or partial or unknown:
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
        if not FLAT or self._flat_dump is None or type(obj) is not dict or many:
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
