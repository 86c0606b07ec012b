"""The app's copy of the worker's parking interface (app/watch/parkable.py) names the same environ
key as the worker's (app/server/worker/parking.py): an app that looked under another key would
never park, and every watch would hold a request thread."""

from app.server.worker import parking as worker
from app.watch import parkable


def test_the_app_and_the_worker_agree_on_the_parking_key():
    assert parkable.PARKING == worker.PARKING


def test_the_watches_offer_what_the_worker_parks():
    from app.watch.watches import EventStream, LongPoll

    for kind in (EventStream, LongPoll):
        assert all(callable(getattr(kind, name)) for name in ("subscribe", "deadline", "stop", "close"))
        assert isinstance(kind.streaming, bool)
