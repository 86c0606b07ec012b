"""marshmallow schemas for the interface's records: NewPlant in, Plant and Error out."""

from __future__ import annotations

from marshmallow import RAISE, Schema, fields, validate

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Length bounds, in Unicode code points, for name and tag.
NAME_MAX_LENGTH = 200
TAG_MAX_LENGTH = 100


class PlantSchema(Schema):
    """Plant: the success response. It has no id, as in the interface."""

    name = fields.String(required=True, validate=validate.Length(min=1, max=NAME_MAX_LENGTH))
    tag = fields.String(validate=validate.Length(min=1, max=TAG_MAX_LENGTH))


class NewPlantSchema(PlantSchema):
    """NewPlant: the create request. Unknown fields are refused, never dropped."""

    class Meta:
        unknown = RAISE

    # strict: only JSON integers; true, 1.0 and "1" are refused.
    id = fields.Integer(required=True, strict=True, validate=validate.Range(min=INT64_MIN, max=INT64_MAX))


class ErrorSchema(Schema):
    """Error: every failure. `details` maps each offending field to its messages."""

    error = fields.Integer(required=True)
    message = fields.String(required=True)
    details = fields.Dict(keys=fields.String(), values=fields.List(fields.String()))
