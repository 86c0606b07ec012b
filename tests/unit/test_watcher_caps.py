"""The feed's watchers per process and per caller (app/watch/feed_signal.py): a watcher past either cap
is refused, saying which, and a place given back can be taken again."""

from __future__ import annotations

import pytest

from app.watch.feed_signal import FeedSignal
from app.watch.watcher_caps import WatchersFull


def test_a_watcher_past_either_cap_is_refused_saying_which():
    signal = FeedSignal(lambda: None, max_watchers=3, max_per_caller=2)
    signal.admit(b"a")
    signal.admit(b"a")
    with pytest.raises(WatchersFull) as refused:
        signal.admit(b"a")
    assert refused.value.per_caller
    signal.admit(b"b")
    with pytest.raises(WatchersFull) as refused:
        signal.admit(b"c")  # a caller with none yet, but the process is full
    assert not refused.value.per_caller
    signal.release(b"a")
    signal.admit(b"c")  # the place given back
    with pytest.raises(WatchersFull):
        signal.admit(b"a")
