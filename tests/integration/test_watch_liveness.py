"""Liveness never waits on the store: with many long-polls parked and Redis hung (SIGSTOP), every
`/healthz` is answered while the feed's listener fails, and once Redis is back the long-polls
answer as usual (issue 48, item 5)."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time

from tests.helpers import wait_for_watches
from tests.servers import TOKEN, Gunicorn, RedisServer

AUTH = {"Authorization": f"Bearer {TOKEN}"}
LONG_POLLS = 60
#: The longest the hang lasts. The listener's blocking read times out (its 5 s block plus its
#: slack) and fails, then fails again a pause and a wait later: on an idle machine that can take
#: 13 s, so a loaded one needs the margin. The hang ends once it has failed twice in a row (the
#: outage felt as one): the probes have covered what the test looks at. Within the long-polls' wait.
HUNG_SECONDS = 25.0
#: A wide behavioural deadline, not a speed figure: blocked behind the store it was 8-10 s.
LIVENESS_DEADLINE = 2.0


def long_poll(port: int, after: str, answers: list[tuple[int, dict]]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", f"/events?after={after}&wait=40", headers=AUTH)
        response = conn.getresponse()
        answers.append((response.status, json.loads(response.read())))
    except OSError as exc:
        answers.append((0, {"error": repr(exc)}))
    finally:
        conn.close()


def healthz_seconds(port: int) -> float:
    """How long one /healthz took on a new connection (the deadline when it did not answer)."""
    started = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=LIVENESS_DEADLINE + 3)
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        assert response.status == 200
        response.read()
        conn.close()
    except OSError:
        return LIVENESS_DEADLINE + 3
    return time.monotonic() - started


def test_healthz_is_answered_while_redis_hangs_under_parked_long_polls(tmp_path):
    redis = RedisServer(tmp_path)
    server = Gunicorn(env={"PLANTS_STORE_URL": redis.url, "PLANTS_STORE_PREFIX": "liveness"})
    try:
        conn = server.connection()
        conn.request("GET", "/events?after=now", headers=AUTH)
        after = json.loads(conn.getresponse().read())["next"]
        conn.close()
        answers: list[tuple[int, dict]] = []
        polls = [
            threading.Thread(target=long_poll, args=(server.port, after, answers)) for _ in range(LONG_POLLS)
        ]
        for poll in polls:
            poll.start()
        wait_for_watches(server, TOKEN, 1 + LONG_POLLS)  # the page of `after`, then every long-poll
        assert not answers
        redis.signal(signal.SIGSTOP)
        hung = time.monotonic()
        try:
            probes = []
            while time.monotonic() - hung < HUNG_SECONDS and "2 in a row" not in server.output():
                probes.append(healthz_seconds(server.port))
                time.sleep(0.1)
        finally:
            redis.signal(signal.SIGCONT)
        assert len(probes) > 20
        assert max(probes) < LIVENESS_DEADLINE, sorted(probes)[-5:]
        assert "listener failed" in server.output()  # the hang was felt, not dodged
        # And felt as one outage: the failures count on (the watchers are woken at growing
        # intervals), never read as Redis answering again between two of them.
        assert "2 in a row" in server.output()
        conn = server.connection()
        body = json.dumps({"id": 48005, "name": "after the hang"})
        conn.request("POST", "/plants", body=body, headers={**AUTH, "Content-Type": "application/json"})
        assert conn.getresponse().status == 200
        conn.close()
        for poll in polls:
            poll.join(45)
        assert len(answers) == LONG_POLLS
        for status, page in answers:
            assert status == 200, page
            assert [event["plant"]["name"] for event in page["events"]] == ["after the hang"]
    finally:
        server.stop()
        redis.stop()
