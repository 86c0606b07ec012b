"""The served OpenAPI document: valid OpenAPI 3.1, faithful to the seed, and in step with the schemas."""

from __future__ import annotations

import pytest
from marshmallow import RAISE, Schema, fields, validate
from openapi_spec_validator import validate as validate_spec

from app.schemas.records import ErrorSchema, NewPlantSchema, PlantSchema, StoredPlantSchema
from tests.helpers import deref, node_ref_parts

JSON_TYPES = {fields.Integer: "integer", fields.String: "string", fields.Dict: "object", fields.List: "array"}


@pytest.fixture(scope="module")
def document():
    from app import create_app

    return create_app({"PLANTS_API_TOKENS": "t"}).test_client().get("/openapi.json").json


def test_document_is_valid_openapi_3_1(document):
    validate_spec(document)
    assert document["openapi"] == "3.1.0"


def test_document_keeps_the_seed_facts(document):
    assert document["info"]["version"] == "1.6.0"
    assert document["info"]["license"]["name"] == "MIT"
    assert document["security"] == [{"bearerAuth": []}]
    bearer = document["components"]["securitySchemes"]["bearerAuth"]
    assert {**bearer, "description": ""} == {"type": "http", "scheme": "bearer", "description": ""}
    assert set(document["components"]["securitySchemes"]) == {"bearerAuth"}  # no issuer set
    operation = document["paths"]["/plants"]["post"]
    assert operation["requestBody"]["required"] is True
    assert (
        deref(document, operation["requestBody"]["content"]["application/json"]["schema"])
        is (document["components"]["schemas"]["NewPlant"])
    )


def test_document_lists_every_status_the_service_returns(document):
    responses = document["paths"]["/plants"]["post"]["responses"]
    assert set(responses) == {
        "200",
        "400",
        "401",
        "403",
        "408",
        "409",
        "412",
        "413",
        "415",
        "429",
        "500",
        "503",
        "507",
    }
    assert deref(document, responses["429"])["headers"]["Retry-After"]["required"] is True
    assert set(responses["200"]["headers"]) == {
        "ETag",
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
    }
    unauthorized = deref(document, responses["401"])
    assert unauthorized["headers"]["WWW-Authenticate"]["required"] is True
    assert deref(document, responses["503"])["headers"]["Retry-After"]["required"] is True
    for status in ("400", "401", "408", "409", "412", "413", "415", "429", "500", "503", "507"):
        schema = deref(document, responses[status])["content"]["application/json"]["schema"]
        assert deref(document, schema) is document["components"]["schemas"]["Error"]
    assert (
        deref(document, responses["200"]["content"]["application/json"]["schema"])
        is (document["components"]["schemas"]["Plant"])
    )


def test_the_new_operations_extend_1_0_0_and_each_has_its_own_id(document):
    operations = {
        (path, method): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in ("get", "post", "delete")
    }
    ids = [operation["operationId"] for operation in operations.values()]
    assert len(ids) == len(set(ids))
    new = {("/plants", "get"): "listPlants", ("/plants/{id}", "get"): "getPlant"}
    new[("/plants/{id}", "delete")] = "deletePlant"
    for key, operation_id in new.items():
        operation = operations[key]
        assert operation["operationId"] == operation_id
        assert "Extends the 1.0.0 interface" in operation["description"]
        assert "security" not in operation  # the document's global bearer requirement
        responses = operation["responses"]
        assert {"400", "401", "429", "503"} <= set(responses)
        for status, response in responses.items():
            if status.startswith(("4", "5")):
                schema = deref(document, response)["content"]["application/json"]["schema"]
                assert deref(document, schema) is document["components"]["schemas"]["Error"]
    get = operations[("/plants/{id}", "get")]["responses"]
    assert set(get) == {"200", "304", "400", "401", "403", "404", "412", "429", "503"}
    assert "content" not in get["304"]
    assert set(get["200"]["headers"]) >= {"ETag"}
    # 403 on a read: a JWT access token with neither scope.
    assert 'scope="plants:read"' in deref(document, get["403"])["headers"]["WWW-Authenticate"]["description"]
    delete = operations[("/plants/{id}", "delete")]["responses"]
    assert set(delete) == {"204", "400", "401", "403", "404", "412", "428", "429", "503"}
    assert "content" not in delete["204"]
    assert delete["204"]["links"]["GetDeletedPlant"]["operationId"] == "getPlant"
    created = operations[("/plants", "post")]["responses"]["200"]["links"]
    assert {link["operationId"] for link in created.values()} == {
        "getPlant",
        "deletePlant",
        "replacePlant",
        "patchPlant",
    }
    scope = deref(document, delete["403"])["headers"]["WWW-Authenticate"]
    assert scope["required"] is True
    assert 'error="insufficient_scope"' in scope["description"]
    page = operations[("/plants", "get")]
    names = {deref(document, parameter)["name"] for parameter in page["parameters"]}
    assert names == {"limit", "after", "tags", "If-Match", "If-None-Match"}
    assert "Link" in page["responses"]["200"]["headers"]
    assert (
        deref(document, page["responses"]["200"]["content"]["application/json"]["schema"])
        is (document["components"]["schemas"]["PlantPage"])
    )


def test_unauthenticated_endpoints_declare_no_security(document):
    assert document["paths"]["/healthz"]["get"]["security"] == []
    assert document["paths"]["/readyz"]["get"]["security"] == []
    assert document["paths"]["/docs"]["get"]["security"] == []
    assert "security" not in document["paths"]["/metrics"]["get"]  # the document's bearer default
    assert document["paths"]["/openapi.json"]["get"]["security"] == []


def expected_property(field: fields.Field) -> dict:
    prop = {"type": next(JSON_TYPES[cls] for cls in type(field).__mro__ if cls in JSON_TYPES)}
    for validator in field.validators:
        if isinstance(validator, validate.Length):
            prop.update(minLength=validator.min, maxLength=validator.max)
        elif isinstance(validator, validate.Range):
            prop.update(minimum=validator.min, maximum=validator.max)
    return prop


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("Plant", PlantSchema()),
        ("NewPlant", NewPlantSchema()),
        ("StoredPlant", StoredPlantSchema()),
        ("Error", ErrorSchema()),
    ],
)
def test_document_agrees_with_the_marshmallow_schemas(document, name, schema: Schema):
    component = document["components"]["schemas"][name]
    properties = {key: deref(document, value) for key, value in component["properties"].items()}
    assert set(properties) == set(schema.fields)
    assert set(component["required"]) == {key for key, field in schema.fields.items() if field.required}
    for key, field in schema.fields.items():
        declared = {
            k: v
            for k, v in properties[key].items()
            if k in ("type", "minLength", "maxLength", "minimum", "maximum")
        }
        assert declared == expected_property(field), key
    if name == "NewPlant":
        assert component["additionalProperties"] is False
        assert schema.unknown == RAISE
        assert properties["id"]["format"] == "int64"


def test_every_reference_names_a_component(document):
    """Generators (openapi-python-client) drop operations whose schemas point inside another's."""
    refs = []

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert refs
    for ref in refs:
        parts = node_ref_parts(ref)
        assert len(parts) == 3, ref
        assert parts[0] == "components", ref


def test_lists_declare_their_etag_and_conditional_answers(document):
    for path in ("/plants", "/events"):
        get = document["paths"][path]["get"]
        names = {deref(document, parameter)["name"] for parameter in get["parameters"]}
        assert {"If-Match", "If-None-Match"} <= names
        assert {"304", "412"} <= set(get["responses"])
        assert "content" not in deref(document, get["responses"]["304"])
        assert "ETag" in get["responses"]["200"]["headers"]


def test_1_2_0_changes_a_plant_with_preconditions(document):
    item = document["paths"]["/plants/{id}"]
    put, patch = item["put"], item["patch"]
    assert (put["operationId"], patch["operationId"]) == ("replacePlant", "patchPlant")
    for operation in (put, patch, item["delete"]):
        names = {deref(document, parameter)["name"] for parameter in operation["parameters"]}
        assert names == {"If-Match", "If-None-Match"}
        assert {"412", "428"} <= set(operation["responses"])
    assert set(put["responses"]) >= {"200", "201", "400", "403", "412", "415", "507"}
    assert put["responses"]["201"]["headers"]["Location"]["required"] is True
    assert set(patch["requestBody"]["content"]) == {"application/merge-patch+json", "application/json"}
    assert patch["responses"]["415"]["headers"]["Accept-Patch"]["required"] is True
    merge = document["components"]["schemas"]["MergePatch"]
    assert merge["additionalProperties"] is False
    assert {"type": "null"} in merge["properties"]["tag"]["oneOf"]


def test_every_success_of_a_rate_limited_operation_declares_the_rate_limit_headers(document):
    """The service sends RateLimit-* on every answer under a limit (PLANTS_RATE_LIMIT), writes,
    the feed and webhooks included: the document says so wherever a client may read them."""
    from app.plants.routes import OPERATIONS

    limited = {route.operation_id for route in OPERATIONS if route.limited and route.operation_id}
    operations = {
        operation["operationId"]: operation
        for item in document["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    assert limited <= set(operations)
    for operation_id in sorted(limited):
        for status, response in operations[operation_id]["responses"].items():
            if status.startswith("2"):
                headers = deref(document, response).get("headers", {})
                assert {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} <= set(headers), (
                    operation_id,
                    status,
                )
