"""Tools nobody here wrote read the served document: generated clients, and openapi-core.

openapi-python-client must generate every operation without a warning, and its client must
create a plant against a running service; so must openapi-generator's `python` client (its pip
package bundles the generator's jar; Java is Debian's). openapi-core checks real request and
response pairs against the document.
"""

from __future__ import annotations

import importlib
import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest
from openapi_core import OpenAPI
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
from werkzeug.test import EnvironBuilder

from tests.helpers import call
from tests.servers import TOKEN


def url_of(server) -> str:
    return f"http://127.0.0.1:{server.port}"


def served_document(server, directory: Path) -> Path:
    """The document `server` serves, written into `directory` for a generator to read."""
    status, _, body = call(server.connection(), "GET", "/openapi.json")
    assert status == 200
    document = directory / "openapi.json"
    document.write_bytes(body)
    return document


@pytest.fixture
def generated_client(either_worker, tmp_path, monkeypatch):
    document = served_document(either_worker, tmp_path)
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


def test_a_generated_client_creates_a_plant(either_worker, generated_client):
    from plant_store_client.api.default import add_plant
    from plant_store_client.models import Error, NewPlant, Plant

    client = generated_client.AuthenticatedClient(base_url=url_of(either_worker), token=TOKEN)
    with client:
        created = add_plant.sync_detailed(client=client, body=NewPlant(id=61001, name="Fern", tag="fern"))
        assert created.status_code == 200
        assert isinstance(created.parsed, Plant)
        assert (created.parsed.name, created.parsed.tag) == ("Fern", "fern")
        conflict = add_plant.sync_detailed(client=client, body=NewPlant(id=61001, name="Other"))
        assert conflict.status_code == 409
        assert isinstance(conflict.parsed, Error)
        assert conflict.parsed.error == 409


def test_openapi_generators_python_client_imports_and_creates_a_plant(gunicorns, tmp_path, monkeypatch):
    server = gunicorns("memory")
    document = served_document(server, tmp_path)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "openapi-generator-cli"), "generate", "-g", "python",
         "-i", str(document), "-o", str(tmp_path / "generated"), "--package-name", "plants_generated"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    # One API class for the paths: nothing generated over it (a 3.1 `webhooks` section was).
    assert "FILEPATH_COLLISION" not in output, output[-3000:]
    for source in (tmp_path / "generated").rglob("*.py"):
        py_compile.compile(str(source), doraise=True)
    monkeypatch.syspath_prepend(str(tmp_path / "generated"))
    try:
        generated = importlib.import_module("plants_generated")
        configuration = generated.Configuration(host=url_of(server), access_token=TOKEN)
        with generated.ApiClient(configuration) as client:
            api = generated.DefaultApi(client)
            created = api.add_plant(generated.NewPlant(id=61_004, name="Fern", tag="generator"))
            assert (created.name, created.tag) == ("Fern", "generator")
            assert api.get_plant(61_004).name == "Fern"
            with pytest.raises(generated.ApiException) as conflict:
                api.add_plant(generated.NewPlant(id=61_004, name="Other"))
            assert conflict.value.status == 409
    finally:
        for name in [name for name in sys.modules if name.startswith("plants_generated")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def openapi(request):
    from app import create_app

    document = create_app({"PLANTS_API_TOKENS": TOKEN}).test_client().get("/openapi.json").json
    return OpenAPI.from_dict(document)


AUTH = {"Authorization": f"Bearer {TOKEN}"}
READER = {"Authorization": "Bearer reader-token"}


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
        ("GET", "/plants", None, AUTH, 200, True),
        ("GET", "/plants?limit=1", None, AUTH, 200, True),
        ("GET", "/plants?tags=fern&tags=palm", None, READER, 200, True),
        ("GET", "/plants?limit=0", None, AUTH, 400, False),
        ("GET", "/plants?after=forged", None, AUTH, 400, True),
        ("GET", "/plants", None, {}, 401, False),
        ("GET", "/plants/1", None, READER, 200, True),
        ("GET", "/plants/2", None, AUTH, 404, True),
        ("GET", "/plants/abc", None, AUTH, 400, False),
        ("DELETE", "/plants/1", None, AUTH, 204, True),
        ("DELETE", "/plants/1", None, READER, 403, True),
        ("DELETE", "/plants/2", None, AUTH, 404, True),
        ("POST", "/plants", {"id": 5, "name": "Fern"}, READER, 403, True),
        ("GET", "/events", None, READER, 200, True),
        ("GET", "/events?after=now&limit=5", None, AUTH, 200, True),
        ("GET", "/events?after=forged", None, AUTH, 400, True),
        ("GET", "/events?limit=0", None, AUTH, 400, False),
        ("GET", "/events", None, {}, 401, False),
        ("GET", "/healthz", None, {}, 200, True),
        ("GET", "/readyz", None, {}, 200, True),
    ],
)
def test_real_pairs_agree_with_the_document(
    make_app, openapi, method, path, body, headers, status, valid_request
):
    app = make_app(PLANTS_READ_TOKENS="reader-token")
    client = app.test_client()
    for plant_id in (1, 8):
        client.post("/plants", json={"id": plant_id, "name": "Fern", "tag": "fern"}, headers=AUTH)
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


def test_a_generated_client_reads_deletes_and_pages_through_1000_plants(either_worker, generated_client):
    from plant_store_client.api.default import add_plant, delete_plant, get_plant, list_plants
    from plant_store_client.models import Error, NewPlant, Plant, PlantPage
    from plant_store_client.types import UNSET

    base = 62_000_000
    client = generated_client.AuthenticatedClient(base_url=url_of(either_worker), token=TOKEN)
    with client:
        for n in range(1000):
            tag = "generated" if n % 2 else "generated-odd"
            created = add_plant.sync_detailed(
                client=client, body=NewPlant(id=base + n, name=f"Plant {n}", tag=tag)
            )
            assert created.status_code == 200
        read = get_plant.sync_detailed(base + 1, client=client)
        assert read.status_code == 200
        assert isinstance(read.parsed, Plant)
        assert (read.parsed.name, read.parsed.tag) == ("Plant 1", "generated")
        seen, after, pages = [], UNSET, 0
        while True:
            page = list_plants.sync_detailed(
                client=client, tags=["generated", "generated-odd"], limit=64, after=after
            )
            assert page.status_code == 200
            assert isinstance(page.parsed, PlantPage)
            seen += [(plant.id, plant.name) for plant in page.parsed.plants]
            pages += 1
            if isinstance(page.parsed.next_, type(UNSET)):
                break
            after = page.parsed.next_
        assert seen == [(base + n, f"Plant {n}") for n in range(1000)]
        assert pages == 16
        deleted = delete_plant.sync_detailed(base + 1, client=client)
        assert (deleted.status_code, deleted.content) == (204, b"")
        gone = get_plant.sync_detailed(base + 1, client=client)
        assert gone.status_code == 404
        assert isinstance(gone.parsed, Error)
        assert gone.parsed.error == 404


def test_a_generated_client_changes_a_plant_under_if_match(either_worker, generated_client):
    from plant_store_client.api.default import add_plant, get_plant, patch_plant, replace_plant
    from plant_store_client.models import Error, MergePatch, NewPlant, Plant, Replacement

    client = generated_client.AuthenticatedClient(base_url=url_of(either_worker), token=TOKEN)
    with client:
        created = add_plant.sync_detailed(client=client, body=NewPlant(id=61002, name="Fern"))
        etag = created.headers["ETag"]
        replaced = replace_plant.sync_detailed(
            61002, client=client, body=Replacement(name="Fern", tag="green"), if_match=etag
        )
        assert replaced.status_code == 200
        assert isinstance(replaced.parsed, Plant)
        assert replaced.parsed.tag == "green"
        stale = patch_plant.sync_detailed(61002, client=client, body=MergePatch(name="Moss"), if_match=etag)
        assert stale.status_code == 412
        assert isinstance(stale.parsed, Error)
        patched = patch_plant.sync_detailed(
            61002, client=client, body=MergePatch(name="Moss"), if_match=replaced.headers["ETag"]
        )
        assert (patched.status_code, patched.parsed.name, patched.parsed.tag) == (200, "Moss", "green")
        unchanged = get_plant.sync_detailed(61002, client=client, if_none_match=patched.headers["ETag"])
        assert unchanged.status_code == 304


def test_a_generated_client_follows_the_change_feed(either_worker, generated_client):
    from plant_store_client.api.default import add_plant, delete_plant, list_events
    from plant_store_client.models import EventPage, EventType, NewPlant

    client = generated_client.AuthenticatedClient(base_url=url_of(either_worker), token=TOKEN)
    with client:
        now = list_events.sync_detailed(client=client, after="now")
        assert now.status_code == 200
        assert isinstance(now.parsed, EventPage)
        assert now.parsed.events == []
        add_plant.sync_detailed(client=client, body=NewPlant(id=61003, name="Fern", tag="feed"))
        delete_plant.sync_detailed(61003, client=client)
        # The session's server is shared: keep this test's own plant's events.
        page = list_events.sync_detailed(client=client, after=now.parsed.next_, limit=1000)
        mine = [event for event in page.parsed.events if event.plant.id == 61003]
        assert [(event.type_, event.plant.name, event.plant.tag) for event in mine] == [
            (EventType.PLANT_CREATED, "Fern", "feed"),
            (EventType.PLANT_DELETED, "Fern", "feed"),
        ]
        assert mine[0].time <= mine[1].time  # parsed as datetimes
