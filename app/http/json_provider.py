"""JSON out: Flask's JSON provider backed by orjson, for the standalone app, and `json_response`,
which every answer of the plants blueprint is made with."""

from __future__ import annotations

from typing import Any

import orjson
from flask import Response, current_app
from flask.json.provider import DefaultJSONProvider


class OrjsonProvider(DefaultJSONProvider):
    """Compact UTF-8 JSON in insertion order, as the default provider is configured here.

    Only output changes: request JSON is decoded by app.strict_json, which refuses what
    a careful API must (duplicate keys, NaN, lone surrogates).
    """

    # Flask's `response` (jsonify, a view's dict) calls `dumps` with its indent or separators,
    # which orjson's one compact form stands in for.
    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return orjson.dumps(obj, default=self.default).decode("utf-8")


def json_response(obj: Any, status: int = 200) -> Response:
    """A JSON answer of the blueprint: compact UTF-8 in the service's own key order (`error`,
    `message`, `details`; `type`, `plant`, `time`), whatever JSON provider a host app uses."""
    # content_type, not mimetype: the type is final as it stands, and Werkzeug would only work it out.
    return current_app.response_class(
        orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE), status=status, content_type="application/json"
    )
