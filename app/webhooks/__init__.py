"""Push delivery: signed webhooks (Standard Webhooks 1.0.0) of the change feed's events.

Each endpoint is a cursor on the feed, kept by the store (app/store/endpoints.py) and managed
over the API (app/plants/webhooks.py). The deliverer (deliverer.py) runs apart from the request
path: a background thread in each gunicorn worker, or `python -m app.webhooks` on its own. It
sends each event at least once and in order, checking every address it sends to (addresses.py)
and signing with the `standardwebhooks` package (message.py). docs/webhooks.md has the contract.
"""

from __future__ import annotations

from app.telemetry.version import VERSION
from app.webhooks.deliverer import Deliverer

__all__ = ["Deliverer", "user_agent"]


def user_agent() -> str:
    """`plant-store/<version>`, the User-Agent of every delivery."""
    return f"plant-store/{VERSION}"
