"""The interface document and the interactive API page (Swagger UI), both public.

`GET <prefix>/openapi.json` is app/plants/openapi.yaml with `servers` set to where the blueprint is
mounted, so "Try it out" calls the right URL behind a host's prefix or a proxy's. `GET
<prefix>/docs` is Swagger UI, from the swagger-ui-py package's own files, served here: no CDN,
nothing downloaded at run time. The page holds no token: "Authorize" asks the person for one,
and Swagger UI keeps it in the page's memory only. `PLANTS_DOCS=false` turns the page off.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import yaml
from flask import Response, current_app, request, send_from_directory
from werkzeug.http import generate_etag

from app.errors import DocsOff, FileChangedSinceRead, NoSuchPath
from app.extension import plants_state
from app.http.conditional import answered_page, require_match
from app.settings import JwtSettings
from app.telemetry.request_ids import NOSNIFF
from app.telemetry.version import VERSION

#: Only the page's own sources may load: the assets and the document, from this service.
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
#: Each document served (the interface document, the page and its assets) is taken by a browser
#: as the type it is served as, never sniffed for another (NOSNIFF: embedded, no middleware adds it).
PAGE_HEADERS = {"Content-Security-Policy": PAGE_POLICY, **dict([NOSNIFF]), "Referrer-Policy": "no-referrer"}
#: The Swagger UI files the page uses, out of the package's static folder.
ASSETS = frozenset({"swagger-ui.css", "swagger-ui-bundle.js", "favicon-32x32.png"})
#: The `Range` an asset serves: one range of bytes (a unit is case-insensitive, RFC 9110 §14.1).
#: Any other is ignored and the whole file served: one in another unit must be (§14.2), and a list
#: of ranges, which Werkzeug answers 416 as if none could be served, may be.
_ONE_BYTE_RANGE = re.compile(r"bytes=[^,]*", re.IGNORECASE)

# Relative URLs throughout: the page works under any prefix without knowing it.
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Plant Store API</title>
<link rel="stylesheet" href="docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="docs/assets/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/assets/swagger-ui-bundle.js"></script>
<script src="docs/init.js"></script>
</body>
</html>
"""
INIT_SCRIPT = """window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    validatorUrl: null,
    persistAuthorization: false,
    tryItOutEnabled: false
  });
});
"""


@functools.cache
def shipped_document() -> dict[str, Any]:
    """The shipped openapi.yaml, parsed once (read only), with the package's version and a HEAD
    beside every GET: right after it, so that the page lists it before the path's changes and its
    DELETE."""
    document = yaml.safe_load(resources.files(__package__).joinpath("openapi.yaml").read_text("utf-8"))
    document["info"]["version"] = VERSION
    shared = document["components"]["responses"]
    for path, item in document["paths"].items():
        if "get" in item:
            ordered: dict[str, Any] = {}
            for method, operation in item.items():
                ordered[method] = operation
                if method == "get":
                    ordered["head"] = _head_of(operation, shared)
            document["paths"][path] = ordered
    return document


def _head_of(get: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    """The HEAD of a GET operation (RFC 9110 §9.3.2): the same answer without its body."""
    head = {key: value for key, value in get.items() if key not in ("operationId", "responses", "summary")}
    head["operationId"] = f"{get['operationId']}Head"
    head["summary"] = f"{get.get('summary', get['operationId'])} (headers only)"
    head["description"] = (
        f"`HEAD`: the answer of `GET` ({get['operationId']}), status and headers (`Content-Length`,"
        " `ETag`, `Link`…), without its body. Same authentication, scope, rate limit and metrics."
    )
    head["responses"] = {}
    for status, response in get["responses"].items():
        if "$ref" in response:
            response = shared[response["$ref"].rpartition("/")[2]]
        head["responses"][status] = {key: value for key, value in response.items() if key != "content"}
    return head


#: The paths the standalone app serves beside the blueprint (app/health.py): a host that embeds
#: the blueprint does not serve them, so its document leaves them out.
SERVICE_PATHS = frozenset({"/healthz", "/readyz"})


@functools.lru_cache(maxsize=16)
def document_bytes(
    base: str,
    jwt: JwtSettings | None = None,
    *,
    standalone: bool = True,
    writes: frozenset[str] = frozenset(),
    webhooks: frozenset[str] = frozenset(),
) -> bytes:
    """The document as JSON, served from `base` (the mount point's path); with `jwt`, the
    provider's OpenID Connect scheme and each operation's scope (the write scope for the
    operations in `writes`); embedded (not `standalone`), only the paths the blueprint serves."""
    document = {**shipped_document(), "servers": [{"url": base or "/"}]}
    if not standalone:
        document["paths"] = {
            path: item for path, item in document["paths"].items() if path not in SERVICE_PATHS
        }
    if jwt is not None:
        document = _with_scopes(document, jwt, writes, webhooks)
    # default=str: YAML reads an unquoted date (x-sunset: 2027-06-01) as a date; JSON has only its text.
    return json.dumps(document, ensure_ascii=False, default=str).encode()


def _with_scopes(
    document: dict[str, Any], jwt: JwtSettings, writes: frozenset[str], webhooks: frozenset[str]
) -> dict[str, Any]:
    """A copy of `document` that declares JWT bearer tokens and the scope of each operation."""
    document = copy.deepcopy(document)
    schemes = document["components"]["securitySchemes"]
    schemes["bearerAuth"]["bearerFormat"] = "JWT"
    schemes["openIdConnect"] = {
        "type": "openIdConnect",
        "openIdConnectUrl": jwt.discovery_url,
        "description": f"JWT access tokens of {jwt.issuer} for the audience {jwt.audience}: "
        f"{jwt.read_scope} lists and reads, {jwt.write_scope} changes plants, and"
        f" {jwt.webhooks_scope} manages webhooks.",
    }
    document["security"] = [{"bearerAuth": []}, {"openIdConnect": [jwt.read_scope]}]
    for operations in document["paths"].values():
        for method, operation in operations.items():
            if not isinstance(operation, dict):
                continue
            operation_id = operation.get("operationId", "")
            # A HEAD needs what its GET needs (_head_of names it after the GET).
            if method == "head":
                operation_id = operation_id.removesuffix("Head")
            if operation_id in writes:
                operation["security"] = [{"bearerAuth": []}, {"openIdConnect": [jwt.write_scope]}]
            elif operation_id in webhooks:
                operation["security"] = [{"bearerAuth": []}, {"openIdConnect": [jwt.webhooks_scope]}]
            elif operation.get("security"):
                # Its own non-empty requirement (a watch ticket's mint: no ticket there) replaces
                # the document's, so it would drop the JWT the view accepts with the read scope.
                operation["security"] = [{"bearerAuth": []}, {"openIdConnect": [jwt.read_scope]}]
    return document


def _mount_point(suffix: str) -> str:
    """The path the blueprint is mounted at, from the rule that routed this request."""
    assert request.url_rule is not None
    return request.script_root + request.url_rule.rule.removesuffix(suffix)


def openapi_view(writes: frozenset[str], webhooks: frozenset[str]) -> Callable[[], Response]:
    """The view of /openapi.json, given the route table's operations that need the write scope
    and the webhooks scope (the table lists this view, so it hands them over rather than being
    imported here)."""

    def openapi() -> Response:
        standalone = "health" in current_app.blueprints  # create_app's own health and readiness
        document = document_bytes(
            _mount_point("/openapi.json"),
            _jwt_settings(),
            standalone=standalone,
            writes=writes,
            webhooks=webhooks,
        )
        return _judged(Response(document, mimetype="application/json", headers=[NOSNIFF]), document)

    return openapi


def _require_docs_enabled() -> None:
    if not plants_state().settings.docs:
        raise DocsOff()


def page() -> Response:
    _require_docs_enabled()
    return _judged(Response(PAGE, mimetype="text/html", headers=_page_headers(_jwt_settings())), PAGE)


@functools.lru_cache(maxsize=16)
def _page_headers(jwt: JwtSettings | None) -> dict[str, str]:
    """The page's headers; with an identity provider, the page may also read its discovery
    document (Swagger UI shows the provider's OpenID Connect flows from it)."""
    if jwt is None:
        return PAGE_HEADERS
    parts = urlsplit(jwt.discovery_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    policy = PAGE_POLICY.replace("connect-src 'self'", f"connect-src 'self' {origin}")
    return {**PAGE_HEADERS, "Content-Security-Policy": policy}


def _jwt_settings() -> JwtSettings | None:
    return plants_state().settings.jwt


def init_script() -> Response:
    _require_docs_enabled()
    return _judged(Response(INIT_SCRIPT, mimetype="text/javascript", headers=PAGE_HEADERS), INIT_SCRIPT)


def _judged(response: Response, body: str | bytes) -> Response:
    """`response` with its ETag, or the 304 or 412 its request's conditions call for (RFC 9110
    §13.1), as a page of plants is answered."""
    return answered_page(request, response, FileChangedSinceRead, _digest(body))


@functools.lru_cache(maxsize=32)
def _digest(body: str | bytes) -> str:
    """The ETag of a document served as it is kept (the page, its script, the interface document
    of a mount point): computed once, where a digest of the 140 KB document costs a request more
    than the rest of its answer."""
    return generate_etag(body.encode() if isinstance(body, str) else body)


def asset(name: str) -> Response:
    _require_docs_enabled()
    if name not in ASSETS:
        raise NoSuchPath()
    response = send_from_directory(
        str(resources.files("swagger_ui") / "static"), name, max_age=86400, conditional=False
    )
    response.headers.update(PAGE_HEADERS)
    # If-Match judged as on every other answer: Werkzeug's answers a JSON client the file itself
    # as its 412, and takes `*` for a tag no file has.
    try:
        require_match(request, response.get_etag()[0], FileChangedSinceRead)
    except FileChangedSinceRead:
        response.close()
        raise
    # The rest (If-None-Match, If-Modified-Since, Range, If-Range) as Werkzeug judges them.
    environ = dict(request.environ)
    environ.pop("HTTP_IF_MATCH", None)
    if not _ONE_BYTE_RANGE.fullmatch(environ.get("HTTP_RANGE", "bytes=")):
        del environ["HTTP_RANGE"]
    response.make_conditional(environ, accept_ranges=True, complete_length=response.content_length)
    return response
