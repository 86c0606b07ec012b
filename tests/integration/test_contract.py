"""Schemathesis, with all its checks and no filter, against the served /openapi.json on a real gunicorn."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import STORES_AND_CLUSTER, settings_for_store
from tests.helpers import call
from tests.servers import ROOT, TOKEN, Gunicorn

SEED = 20261121
#: Examples per operation in the fuzzing phase, the one phase whose size they set, and most of a
#: run's time: on memory at 300 it generated 3,079 cases in 95 s of schemathesis's CPU, against
#: the coverage phase's 1,085 (each parameter's boundary and invalid values, both modes: 11 s),
#: the stateful links' 89 and the document's examples' 78 (5 s each); those three phases run in
#: full on every store. The fuzzing phase's distinct outcomes (operation, status) at 300 came
#: early: 70 of 79 by the 25th example of their operation, 77 by the 100th, 78 by the 150th; the
#: 79th was a PUT whose generated body named its path's id and created the plant (the 223rd),
#: the 78th a PATCH refused 412 (the 124th). Both are every store's in test_changes.py. Memory
#: gets the most: the refusals before a store is called are the same code on every store; Redis
#: and the cluster half as many, for the store's own part (what reaches the Lua and the keys).
#: At 300/150/150 these three runs were 322 s of CI's 20 minutes on 2 cores.
MAX_EXAMPLES = {"memory": 200, "redis": 100, "cluster": 100}


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    """This module's tests run on the cluster too."""
    return settings_for_store(request, request.param)


@pytest.fixture
def fresh_server(store_settings):
    """A new service on each store (two workers on Redis), so that generated ids meet no others.
    It keeps as many webhook endpoints as schemathesis registers (a 507 past PLANTS_WEBHOOKS_MAX is
    tested in test_webhooks.py), and sends them nothing: deliveries are not the HTTP contract.
    A long-poll waits at most 10 ms (PLANTS_EVENTS_MAX_WAIT) and a stream lasts a second, so that
    generated `wait`s keep the run's time bounded (test_watch.py holds the waits themselves)."""
    env = {
        "PLANTS_WEBHOOKS_MAX": "1000000",
        "PLANTS_WEBHOOKS_DELIVER": "false",
        "PLANTS_EVENTS_MAX_WAIT": "0.01",
        "PLANTS_EVENTS_STREAM_MAX": "1",
    }
    server = Gunicorn(env={**env, **store_settings, "WEB_CONCURRENCY": "2"} if store_settings else env)
    yield server
    server.stop()


# A schema-valid `after` is any short base64url string, and almost none is a cursor this service
# signed: for listPlants, listEvents (and their HEADs) and replayWebhook a 400 is the right answer to such
# "positive" data. Every other check,
# and the positive check of every other operation, stays as schemathesis has it; test_pages.py
# asserts that valid `limit` and `tags` are accepted. A request line past gunicorn's limit is
# refused with 414, which schemathesis's list of rejections lacks. A schema-valid If-Match (or
# If-None-Match) almost never names the plant's (or the page's, or the document's) current ETag:
# 412 (and 304 for a read) is the right answer to it, a read's and a list's included (RFC 9110
# §13.1.1). A body's
# `id` must equal the path's, which a schema cannot say: a generated one rarely does, and 400 is
# the answer (test_changes.py asserts the rest). The conditional headers are never refused (a
# member that is not an entity-tag names no plant), so a read or a delete of a plant never
# answers a valid request with 400. A webhook URL whose host resolves to a refused address
# (`http://0` is 0.0.0.0) is 400, which a schema cannot say. The operations on one webhook
# endpoint name one the test registered first (ids are random), and
# its DELETE another, so that the others still find theirs. That DELETE stays out of the
# stateful phase: there schemathesis 4.32 flags the 404 of an endpoint that its own DELETE
# removed earlier in the run (204, then 404 on every later use, as it should be) as a lost
# resource. test_webhooks.py asserts the DELETE's 204 and the 404s after it. The webhook
# operations get 50 examples each on every store: their refusals are the marshmallow schemas' and
# test_webhooks.py's, each of their fuzzing outcomes came by the 25th example at 100, and the
# suite's time is bounded (.ci/run, 20 minutes).
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = [
    "400", "401", "403", "404", "405", "406", "409", "414", "415", "422", "428", "429", "5xx",
]

[[operations]]
include-operation-id = "listPlants"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "304", "400", "401", "403", "404", "412", "429", "5xx",
]

[[operations]]
include-operation-id = "listPlantsHead"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "304", "400", "401", "403", "404", "412", "429", "5xx",
]

[[operations]]
include-operation-id = "listEvents"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "304", "400", "401", "403", "404", "410", "412", "429", "5xx",
]

[[operations]]
include-operation-id = "listEventsHead"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "304", "400", "401", "403", "404", "410", "412", "429", "5xx",
]

[[operations]]
include-operation-id = "openapi"
checks.positive_data_acceptance.expected-statuses = ["2xx", "304", "412"]

[[operations]]
include-operation-id = "openapiHead"
checks.positive_data_acceptance.expected-statuses = ["2xx", "304", "412"]

[[operations]]
include-operation-id = "docs"
checks.positive_data_acceptance.expected-statuses = ["2xx", "304", "404", "412"]

[[operations]]
include-operation-id = "docsHead"
checks.positive_data_acceptance.expected-statuses = ["2xx", "304", "404", "412"]

[[operations]]
include-operation-id = "replayWebhook"
generation.max-examples = 50
parameters = { endpoint_id = "${ENDPOINT_ID}" }
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429", "5xx"]

[[operations]]
include-operation-id = "addPlant"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "400", "401", "403", "404", "409", "412", "429", "5xx",
]

[[operations]]
include-operation-id = "createWatchTicket"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "412", "429", "5xx"]

[[operations]]
include-operation-id = "createWebhook"
generation.max-examples = 50
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429", "5xx"]

[[operations]]
include-operation-id = "patchWebhook"
generation.max-examples = 50
parameters = { endpoint_id = "${ENDPOINT_ID}" }
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429", "5xx"]

[[operations]]
include-operation-id = "deleteWebhook"
generation.max-examples = 50
phases.stateful.enabled = false
parameters = { endpoint_id = "${DELETE_ID}" }

[[operations]]
include-operation-id = "getWebhook"
generation.max-examples = 50
parameters = { endpoint_id = "${ENDPOINT_ID}" }

[[operations]]
include-operation-id = "getWebhookHead"
generation.max-examples = 50
parameters = { endpoint_id = "${ENDPOINT_ID}" }

[[operations]]
include-operation-id = "rotateWebhookSecret"
generation.max-examples = 50
parameters = { endpoint_id = "${ENDPOINT_ID}" }

[[operations]]
include-operation-id = "listWebhookAttempts"
generation.max-examples = 50
parameters = { endpoint_id = "${ENDPOINT_ID}" }

[[operations]]
include-operation-id = "listWebhookAttemptsHead"
generation.max-examples = 50
parameters = { endpoint_id = "${ENDPOINT_ID}" }

[[operations]]
include-operation-id = "getPlant"
checks.positive_data_acceptance.expected-statuses = ["2xx", "304", "401", "403", "404", "412", "429", "5xx"]

[[operations]]
include-operation-id = "getPlantHead"
checks.positive_data_acceptance.expected-statuses = ["2xx", "304", "401", "403", "404", "412", "429", "5xx"]

[[operations]]
include-operation-id = "deletePlant"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "412", "429", "5xx"]

[[operations]]
include-operation-id = "replacePlant"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "412", "429", "5xx"]

[[operations]]
include-operation-id = "patchPlant"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "412", "429", "5xx"]

[[operations]]
include-operation-id = "listWebhooks"
generation.max-examples = 50

[[operations]]
include-operation-id = "listWebhooksHead"
generation.max-examples = 50
"""


def test_service_conforms_to_its_document(fresh_server, tmp_path, request):
    store = request.node.callspec.params["store_settings"]
    (tmp_path / "schemathesis.toml").write_text(CONFIG)
    st = Path(sys.executable).with_name("st")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("ENDPOINT_ID", "DELETE_ID"):
        status, _, body = call(
            fresh_server.connection(), "POST", "/webhooks", {"url": "http://no-such-host.invalid/hook"},
            {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )  # fmt: skip
        assert status == 201, body
        env[name] = json.loads(body)["id"]
    result = subprocess.run(
        [
            str(st), "run", f"http://127.0.0.1:{fresh_server.port}/openapi.json",
            "--checks", "all",
            "--mode", "all",  # positive and negative data
            "--header", f"Authorization: Bearer {TOKEN}",
            "--max-examples", str(MAX_EXAMPLES[store]),
            "--seed", str(SEED),
            "--workers", "1",
            "--request-timeout", "10",
            "--output-sanitize", "true",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    # No failure, and no warning but this one, for these operations: PUT's body `id` must equal
    # the path's, and a webhook PATCH's fields that the service sets must be as the endpoint has
    # them, which a schema cannot say, so most generated bodies are refused (400); and a
    # generated If-Match almost never names the plant's or the page's ETag, so most DELETEs,
    # PATCHes, creates and list reads that carry one are refused (412). schemathesis says so, for some.
    if "No issues found" not in output:
        warnings = output.split("WARNINGS ===", 1)[1].split("=== SUMMARY", 1)[0]
        assert "Schema validation mismatch:" in warnings, output[-6000:]
        warned = {line.strip() for line in warnings.splitlines() if line.strip().startswith("- ")}
        conditional = {
            "- POST /plants",
            "- PUT /plants/{id}",
            "- DELETE /plants/{id}",
            "- PATCH /plants/{id}",
            "- PATCH /webhooks/{endpoint_id}",
        }
        conditional |= {
            f"- {method} {path}"
            for method in ("GET", "HEAD")
            for path in ("/plants", "/events", "/openapi.json", "/docs")
        }
        assert warned <= conditional, output[-6000:]
    generated = int(re.search(r"(\d+) generated", output).group(1))
    assert generated >= 500, output[-2000:]
    assert TOKEN not in output  # schemathesis prints "[Filtered]" for the Authorization header
