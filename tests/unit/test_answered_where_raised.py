"""A view's errors answered from its wrapper (app/http/error_handler.py, `answered_where_raised`)
are the same answers as through Flask's search of its error handlers: status, headers, body."""

from __future__ import annotations

import pytest
from flask import Blueprint, Flask
from werkzeug.exceptions import Conflict, MethodNotAllowed

from app.errors import InvalidPlant
from app.http.error_handler import answered_where_raised, register_json_errors

ERRORS = {
    "invalid": lambda: InvalidPlant({"name": ["Not a valid string."]}),
    "conflict": lambda: Conflict("A plant with id 1 already exists."),
    "method": lambda: MethodNotAllowed(valid_methods=["GET", "HEAD"]),
}


def raising(name: str):
    def view() -> str:
        raise ERRORS[name]()

    view.__name__ = name
    return view


@pytest.fixture
def client():
    """A host app with its own HTML page for a 400, as an embedding host may have, and a blueprint
    whose views raise each error: once through Flask's search, once from the wrapper."""
    host = Flask(__name__)
    host.register_error_handler(400, lambda exc: ("<h1>host</h1>", 400))
    bp = Blueprint("plants", __name__)
    register_json_errors(bp)
    for name in ERRORS:
        bp.add_url_rule(f"/searched/{name}", f"searched_{name}", raising(name))
        bp.add_url_rule(f"/wrapped/{name}", f"wrapped_{name}", answered_where_raised(raising(name)))
    bp.add_url_rule("/wrapped/fine", view_func=answered_where_raised(lambda: "fine"), endpoint="fine")
    host.register_blueprint(bp)
    return host.test_client()


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_the_wrapper_answers_as_flasks_search_does(client, name):
    searched, wrapped = client.get(f"/searched/{name}"), client.get(f"/wrapped/{name}")
    assert wrapped.status_code == searched.status_code == ERRORS[name]().code
    assert wrapped.get_json() == searched.get_json()
    assert wrapped.get_json()["error"] == wrapped.status_code
    assert sorted(wrapped.headers.items()) == sorted(searched.headers.items())


def test_the_wrapper_passes_an_answer_through(client):
    response = client.get("/wrapped/fine")
    assert (response.status_code, response.get_data(as_text=True)) == (200, "fine")


def test_the_wrapped_view_keeps_its_name():
    """The route table and Flask's endpoint name a view by its __name__."""
    view = answered_where_raised(raising("invalid"))
    assert view.__name__ == "invalid"
