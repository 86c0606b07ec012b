"""Flask past its documented interface: the handler a host app registered for an exception's class.

The plants blueprint's handler for `Exception` keeps a host's catch-all handler (its HTML error
page) off the blueprint's routes. Flask looks through the blueprint's handlers before the app's,
so that handler would also hide a host's handler for a class of its own (a `Maintenance` error
its `before_request` raises, answered 503). A host's handler for one of Python's own classes
(`ValueError`) is a catch-all as one for `Exception` is. `specific_handler` finds such a handler in
`Flask.error_handler_spec` (`{scope: {code: {class: handler}}}`, which Flask's docs call
internal), for the blueprint to call. When the attribute is not as expected, it finds none: the
blueprint's JSON 500 answers every unexpected error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask

#: Where the classes are whose handlers are a catch-all, not a host's answer to an error of its
#: own: `Exception`, and Python's own (`ValueError`, `KeyError`, `OSError`), which the blueprint's
#: code and libraries raise as unexpected errors too.
_CATCH_ALL_MODULE = "builtins"


def specific_handler(
    app: Flask, exc: BaseException, scopes: Iterable[str | None]
) -> Callable[..., Any] | None:
    """The handler registered in `scopes` (blueprint names, None for the app) for a class of
    `exc`'s more specific than Python's own (`Exception`, `ValueError`...), in Flask's own order;
    None when there is none."""
    if not SPEC_FITS:
        return None
    for scope in scopes:
        handlers = app.error_handler_spec.get(scope, {}).get(None) or {}
        for cls in type(exc).__mro__:
            if cls.__module__ == _CATCH_ALL_MODULE:
                break
            handler = handlers.get(cls)
            if handler is not None:
                return handler
    return None


def _spec_fits() -> bool:
    """Whether a handler registered for a class is where `specific_handler` looks for it."""

    class Probe(Exception):
        pass

    def handler(exc: Exception) -> str:
        return "probe"

    probe = Flask("probe")
    probe.register_error_handler(Probe, handler)
    try:
        return probe.error_handler_spec[None][None][Probe] is handler
    except (AttributeError, KeyError, TypeError):
        return False


SPEC_FITS = _spec_fits()
