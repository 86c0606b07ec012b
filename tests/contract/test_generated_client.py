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


@pytest.fixture(scope="session")
def generated_package(tmp_path_factory) -> tuple[Path, bytes]:
    """The client, generated once for the session (it takes seconds, and every worker serves the
    same document: `generated_client` checks that the one under test serves these bytes). Not
    once a module: the session's workers' parameters interleave this module's tests with others',
    and a module's fixture is made again each time its tests resume."""
    from app import create_app

    body = create_app({"PLANTS_API_TOKENS": TOKEN}).test_client().get("/openapi.json").get_data()
    directory = tmp_path_factory.mktemp("generated")
    document = directory / "openapi.json"
    document.write_bytes(body)
    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        [str(bin_dir / "openapi-python-client"), "generate", "--path", str(document), "--meta", "none",
         "--output-path", str(directory / "plant_store_client")],
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Warning" not in output, output
    return directory, body


@pytest.fixture
def generated_client(either_worker, generated_package, monkeypatch):
    directory, generated_from = generated_package
    status, _, body = call(either_worker.connection(), "GET", "/openapi.json")
    assert status == 200
    assert json.loads(body) == json.loads(generated_from)
    monkeypatch.syspath_prepend(str(directory))
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


@pytest.fixture(scope="session")
def openapi_generator_package(tmp_path_factory) -> tuple[Path, bytes]:
    """openapi-generator's `python` client, generated once for the session (the jar takes tens of
    seconds) from the document every server serves; its tests check the served bytes are these."""
    from app import create_app

    body = create_app({"PLANTS_API_TOKENS": TOKEN}).test_client().get("/openapi.json").get_data()
    directory = tmp_path_factory.mktemp("openapi-generator")
    document = directory / "openapi.json"
    document.write_bytes(body)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "openapi-generator-cli"), "generate", "-g", "python",
         "-i", str(document), "-o", str(directory / "generated"), "--package-name", "plants_generated"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    # One API class for the paths: nothing generated over it (a 3.1 `webhooks` section was).
    assert "FILEPATH_COLLISION" not in output, output[-3000:]
    for source in (directory / "generated").rglob("*.py"):
        py_compile.compile(str(source), doraise=True)
    return directory / "generated", body


@pytest.fixture
def openapi_generator_client(openapi_generator_package, monkeypatch):
    directory, _ = openapi_generator_package
    monkeypatch.syspath_prepend(str(directory))
    yield importlib.import_module("plants_generated")
    for name in [name for name in sys.modules if name.startswith("plants_generated")]:
        del sys.modules[name]


#: A page of the feed as a later minor version may send it: a type this version does not know.
LATER_EVENTS = {
    "events": [
        {"type": "plant.moved", "plant": {"id": 7, "name": "Fern"}, "time": "2027-01-02T03:04:05.678Z"},
        {"type": "plant.created", "plant": {"id": 8, "name": "Moss"}, "time": "2027-01-02T03:04:05.679Z"},
    ],
    "next": "abc",
}


def test_openapi_generators_python_client_imports_and_creates_a_plant(
    gunicorns, openapi_generator_package, openapi_generator_client, tmp_path
):
    server = gunicorns("memory")
    assert json.loads(served_document(server, tmp_path).read_bytes()) == json.loads(
        openapi_generator_package[1]
    )
    generated = openapi_generator_client
    configuration = generated.Configuration(host=url_of(server), access_token=TOKEN)
    with generated.ApiClient(configuration) as client:
        api = generated.DefaultApi(client)
        created = api.add_plant(generated.NewPlant(id=61_004, name="Fern", tag="generator"))
        assert (created.name, created.tag) == ("Fern", "generator")
        assert api.get_plant(61_004).name == "Fern"
        with pytest.raises(generated.ApiException) as conflict:
            api.add_plant(generated.NewPlant(id=61_004, name="Other"))
        assert conflict.value.status == 409


def test_openapi_generators_python_client_reads_an_event_type_it_does_not_know(openapi_generator_client):
    """A new event type is additive (docs/versions.md): the document's type is open, so a client
    generated from today's document reads a later version's feed and webhook deliveries."""
    generated = openapi_generator_client
    page = generated.EventPage.from_json(json.dumps(LATER_EVENTS))
    assert [(event.type, event.plant.id) for event in page.events] == [
        ("plant.moved", 7),
        ("plant.created", 8),
    ]
    delivery = generated.WebhookEvent.from_dict(
        {"type": "plant.moved", "timestamp": "2027-01-02T03:04:05Z", "data": {"id": 7, "name": "Fern"}}
    )
    assert delivery.type == "plant.moved"


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
    from plant_store_client.models import EventPage, NewPlant

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
            ("plant.created", "Fern", "feed"),
            ("plant.deleted", "Fern", "feed"),
        ]
        assert mine[0].time <= mine[1].time  # parsed as datetimes


def test_a_generated_client_reads_an_event_type_it_does_not_know(generated_package, monkeypatch):
    """As above, for openapi-python-client's client."""
    monkeypatch.syspath_prepend(str(generated_package[0]))
    try:
        from plant_store_client.models import EventPage, WebhookEvent

        page = EventPage.from_dict(LATER_EVENTS)
        assert [(event.type_, event.plant.id) for event in page.events] == [
            ("plant.moved", 7),
            ("plant.created", 8),
        ]
        delivery = WebhookEvent.from_dict(
            {"type": "plant.moved", "timestamp": "2027-01-02T03:04:05Z", "data": {"id": 7, "name": "Fern"}}
        )
        assert delivery.type_ == "plant.moved"
    finally:
        for name in [name for name in sys.modules if name.startswith("plant_store_client")]:
            del sys.modules[name]
