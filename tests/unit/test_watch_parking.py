"""The app's copy of the worker's parking interface (app/watch/parkable.py) names the same environ
key as the worker's (app/server/worker/parking.py). The worker parks any iterable that has
`subscribe` and `deadline`, whatever the key: an app that looked under another key would still be
parked, but its watch, believing itself unparked, would wait inside each of the worker's steps
(`Watch._block`), holding a request thread for the whole wait."""

from app.server.worker import parking as worker
from app.watch import parkable


def test_the_app_and_the_worker_agree_on_the_parking_key():
    assert parkable.PARKING == worker.PARKING


def test_the_watches_offer_what_the_worker_parks():
    from app.watch.watches import EventStream, LongPoll

    for kind in (EventStream, LongPoll):
        assert all(callable(getattr(kind, name)) for name in ("subscribe", "deadline", "stop", "close"))
        assert isinstance(kind.streaming, bool)
