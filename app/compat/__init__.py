"""The only place the service uses a library's private or undocumented interface.

Each use is here because it pays (at least 3% of the instructions of the requests it speeds,
measured) or because correctness needs it; CONTRIBUTING.md lists them with their figures. Each
module checks, at import, that the internal is as it expects, and otherwise takes the library's
public path. tests/unit/test_private_names.py keeps such uses out of the rest of app/.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any


def binds(function: Any, *arguments: Any, **keywords: Any) -> bool:
    """Whether `function` exists and takes these arguments after `self`: the check of an internal
    that a compat module calls or overrides."""
    try:
        inspect.signature(function).bind(None, *arguments, **keywords)
    except (TypeError, ValueError):
        return False
    return True


#: The warnings of the checks at import, held until the process's logging is set (`release_warnings`).
_held: list[tuple[logging.Logger, str]] = []


def warn(log: logging.Logger, message: str) -> None:
    """A check's warning at import, held: the package is imported before `flask run` (wsgi.py) and
    gunicorn's master (its configuration file) set the service's logs, so a line logged then went
    to stderr bare, in no format of the service's."""
    _held.append((log, message))


def release_warnings() -> None:
    """Log the held warnings, now the process's logging is set (or the app is made: an embedding
    host's, or a test's); each once."""
    while _held:
        log, message = _held.pop(0)
        log.warning(message)
