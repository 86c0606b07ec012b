"""Tools nobody here wrote read the served document: a generated client, and openapi-core.

openapi-python-client must generate every operation without a warning, and its client must
create a plant against a running service. openapi-core checks real request and response pairs
against the document.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from openapi_core import OpenAPI
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
from werkzeug.test import EnvironBuilder

from tests.helpers import call
from tests.servers import TOKEN


@pytest.fixture
def generated_client(gunicorn, tmp_path, monkeypatch):
    status, _, body = call(gunicorn.connection(), "GET", "/openapi.json")
    assert status == 200
    document = tmp_path / "openapi.json"
    document.write_bytes(body)
    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        [str(bin_dir / "openapi-python-client"), "generate", "--path", str(document), "--meta", "none",
         "--output-path", str(tmp_path / "plant_store_client")],
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Warning" not in output, output
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("plant_store_client")
    for name in [name for name in sys.modules if name.startswith("plant_store_client")]:
        del sys.modules[name]


def test_a_generated_client_creates_a_plant(gunicorn, generated_client):
    from plant_store_client.api.default import add_plant
    from plant_store_client.models import Error, NewPlant, Plant

    client = generated_client.AuthenticatedClient(base_url=f"http://127.0.0.1:{gunicorn.port}", token=TOKEN)
    with client:
        created = add_plant.sync_detailed(client=client, body=NewPlant(id=61001, name="Fern", tag="fern"))
        assert created.status_code == 200
        assert isinstance(created.parsed, Plant)
        assert (created.parsed.name, created.parsed.tag) == ("Fern", "fern")
        conflict = add_plant.sync_detailed(client=client, body=NewPlant(id=61001, name="Other"))
        assert conflict.status_code == 409
        assert isinstance(conflict.parsed, Error)
        assert conflict.parsed.error == 409


@pytest.fixture(scope="module")
def openapi(request):
    from app import create_app

    document = create_app({"PLANTS_API_TOKENS": TOKEN}).test_client().get("/openapi.json").json
    return OpenAPI.from_dict(document)


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "valid_request"),
    [
        ("POST", "/plants", {"id": 1, "name": "Fern", "tag": "fern"}, AUTH, 200, True),
        ("POST", "/plants", {"id": 2, "name": "Fern"}, AUTH, 200, True),
        ("POST", "/plants", {"id": 3.0, "name": "Fern"}, AUTH, 200, True),
        ("POST", "/plants", {"id": 1, "name": "Other"}, AUTH, 409, True),
        ("POST", "/plants", {"id": 4, "name": ""}, AUTH, 400, False),
        ("POST", "/plants", {"id": 4, "name": "Fern", "colour": "green"}, AUTH, 400, False),
        ("POST", "/plants", {"id": 4, "name": "Fern"}, {}, 401, False),
        ("POST", "/plants", {"id": 4, "name": "Fern"}, {"Authorization": "Bearer wrong"}, 401, True),
        ("POST", "/plants", {"id": 4, "name": "x" * 70_000}, AUTH, 413, False),
        ("GET", "/healthz", None, {}, 200, True),
        ("GET", "/readyz", None, {}, 200, True),
    ],
)
def test_real_pairs_agree_with_the_document(
    make_app, openapi, method, path, body, headers, status, valid_request
):
    app = make_app()
    client = app.test_client()
    client.post("/plants", json={"id": 1, "name": "Fern", "tag": "fern"}, headers=AUTH)
    data = None if body is None else json.dumps(body)

    def builder():
        return EnvironBuilder(
            path=path, method=method, data=data, headers=headers,
            content_type="application/json" if data is not None else None, base_url="http://localhost",
        )  # fmt: skip

    response = client.open(builder())
    assert response.status_code == status
    api_request = WerkzeugOpenAPIRequest(builder().get_request())
    if valid_request:
        openapi.validate_request(api_request)
    openapi.validate_response(api_request, WerkzeugOpenAPIResponse(response))
