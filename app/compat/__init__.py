"""The only place the service uses a library's private or undocumented interface.

Each use is here because it pays (at least 3% of the instructions of the requests it speeds,
measured) or because correctness needs it; CONTRIBUTING.md lists them with their figures. Each
module checks, at import, that the internal is as it expects, and otherwise takes the library's
public path. tests/unit/test_private_names.py keeps such uses out of the rest of app/.
"""

from __future__ import annotations

import inspect
from typing import Any


def binds(function: Any, *arguments: Any, **keywords: Any) -> bool:
    """Whether `function` exists and takes these arguments after `self`: the check of an internal
    that a compat module calls or overrides."""
    try:
        inspect.signature(function).bind(None, *arguments, **keywords)
    except (TypeError, ValueError):
        return False
    return True
