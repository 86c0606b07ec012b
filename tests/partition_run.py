"""Writers under a network fault of a cluster in namespaces (tests/netns.py), and what the answers,
the store and the change feed say afterwards. Shared by tests/integration/test_partitions.py and
bench/partitions.py.

Four threads PUT their plants in turn, each write under a name never used before (`v<n>`, n
rising), against a real gunicorn. A plant's writes are then ordered by their number, so:
- an acknowledged write is lost when the plant ends older than it (a write that failed landed
  late, over it, or it vanished in the failover);
- the feed holds each change once, in the order the plant's writes took effect: a number that does
  not rise there is a write that landed after a later one, even if a still later one hid it.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from redis import Redis, RedisError
from redis.cluster import RedisCluster

from app.store.redis.groups import CLUSTER_GROUPS, Groups
from tests.load import AUTH, CLIENT_TIMEOUT
from tests.netns import PORT, NamespacedCluster

WRITERS = 4
PLANTS_PER_SHARD = 4  # one per writer
ACKNOWLEDGED = (200, 201)
FLAPS = 5


@dataclass
class Answer:
    plant: int
    version: int
    status: int  # 0: no HTTP answer within the client's timeout
    started: float
    answered: float
    message: str = ""  # a 503's


class Writers:
    """Threads that PUT each of their plants in turn, every name unique: each answer kept."""

    def __init__(self, port: int, plants_per_writer: list[list[int]]) -> None:
        self.port = port
        self.answers: list[Answer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(plants,)) for plants in plants_per_writer]
        for thread in self._threads:
            thread.start()

    def _run(self, plants: list[int]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=CLIENT_TIMEOUT)
        for version in itertools.count(1):
            for plant in plants:
                if self._stop.is_set():
                    conn.close()
                    return
                started = time.monotonic()
                try:
                    body = json.dumps({"id": plant, "name": f"v{version}"})
                    conn.request("PUT", f"/plants/{plant}", body=body, headers=AUTH)
                    response = conn.getresponse()
                    status, data = response.status, response.read()
                except (OSError, http.client.HTTPException):
                    conn.close()  # the next request opens a new connection
                    status, data = 0, b""
                message = json.loads(data).get("message", "") if status == 503 else ""
                with self._lock:
                    self.answers.append(Answer(plant, version, status, started, time.monotonic(), message))

    def stop(self) -> list[Answer]:
        self._stop.set()
        for thread in self._threads:
            thread.join(CLIENT_TIMEOUT * 2)
        return self.answers


# The faults: each applies itself to a primary and ends healed.


def lasting(seconds: float, start: Callable[[], None], end: Callable[[], None]) -> None:
    """`start`, then `end` `seconds` later, even if the wait is interrupted."""
    start()
    try:
        time.sleep(seconds)
    finally:
        end()


def link_down(cluster: NamespacedCluster, victim: int, seconds: float) -> None:
    lasting(seconds, lambda: cluster.cut(victim), lambda: cluster.heal(victim))


def dropped(cluster: NamespacedCluster, victim: int, seconds: float) -> None:
    lasting(seconds, lambda: cluster.drop(victim), lambda: cluster.undrop(victim))


def replica_dropped(cluster: NamespacedCluster, victim: int, seconds: float) -> None:
    replica = cluster.replicas_of(victim)[0]
    lasting(seconds, lambda: cluster.drop_between(victim, replica), lambda: cluster.undrop(victim, replica))


def flapping(cluster: NamespacedCluster, victim: int, seconds: float) -> None:
    """FLAPS times: `seconds` dropped, then `seconds` passing."""
    for _ in range(FLAPS):
        dropped(cluster, victim, seconds)
        time.sleep(seconds)


Fault = Callable[[NamespacedCluster, int, float], None]
FAULTS: dict[str, Fault] = {
    "link down": link_down,
    "packets dropped": dropped,
    "primary-replica dropped": replica_dropped,
    "flapping": flapping,
}


@dataclass
class Phase:
    """One fault under the writers: its answers, and which shard each plant was on at its start."""

    fault: str
    victim_shard: str
    shard_of: dict[int, str]
    answers: list[Answer] = field(default_factory=list)
    fault_at: float = 0.0
    healed_at: float = 0.0
    ended: float = 0.0
    #: When a replica of the faulted primary first said it was a primary, if one did.
    promoted_at: float | None = None

    def longest_without_write(self) -> dict[str, float]:
        """Per shard, the longest time between two acknowledged writes (or the last and the end)."""
        longest = {}
        for shard in set(self.shard_of.values()):
            times = sorted(
                a.answered
                for a in self.answers
                if a.status in ACKNOWLEDGED and self.shard_of[a.plant] == shard
            )
            times.append(self.ended)
            longest[shard] = max(later - earlier for earlier, later in itertools.pairwise(times))
        return longest

    def summary(self) -> dict:
        statuses = Counter(a.status for a in self.answers)
        longest = self.longest_without_write()
        refused = [a for a in self.answers if a.status == 503]
        return {
            "fault": self.fault,
            "answers": len(self.answers),
            "acknowledged": sum(statuses[s] for s in ACKNOWLEDGED),
            "503": statuses[503],
            "503 messages": dict(Counter(a.message for a in self.answers if a.status == 503)),
            "other statuses": {str(s): n for s, n in statuses.items() if s not in (*ACKNOWLEDGED, 503)},
            "longest a shard took no write s": round(max(longest.values()), 2),
            "longest the faulted shard took no write s": round(longest[self.victim_shard], 2),
            "slowest answer s": round(max(a.answered - a.started for a in self.answers), 2),
            "slowest 503 s": round(max((a.answered - a.started for a in refused), default=0), 2),
            "healthy shards' 503": sum(self.shard_of[a.plant] != self.victim_shard for a in refused),
            "replica promoted after s": (
                None if self.promoted_at is None else round(self.promoted_at - self.fault_at, 2)
            ),
            "faulted shard's first write after its replica's promotion s": self.first_write_after_promotion(),
        }

    def first_write_after_promotion(self) -> float | None:
        """From a replica's promotion to the faulted shard's next acknowledged write."""
        if self.promoted_at is None:
            return None
        after = [
            a.answered
            for a in self.answers
            if a.status in ACKNOWLEDGED
            and self.shard_of[a.plant] == self.victim_shard
            and a.answered > self.promoted_at
        ]
        return round(min(after) - self.promoted_at, 2) if after else None


def watch_promotion(
    cluster: NamespacedCluster, victim: int, replicas: list[int], phase: Phase, stop: threading.Event
) -> None:
    """Set `phase.promoted_at` when a surviving primary's CLUSTER NODES first shows one of
    `replicas` as a primary: from then on the service can learn it (it reads the slot map from
    the surviving nodes)."""
    watched = {f"{cluster.address(n)}:{PORT}" for n in replicas}
    survivor = next(n for n in cluster.primaries() if n != victim)
    client = Redis(host=cluster.address(survivor), port=PORT, socket_timeout=0.2, decode_responses=True)
    while not stop.is_set() and phase.promoted_at is None:
        with contextlib.suppress(RedisError):
            if watched & primaries_in(client.execute_command("CLUSTER", "NODES")):
                phase.promoted_at = time.monotonic()
        time.sleep(0.02)
    client.close()


def primaries_in(nodes: str | dict) -> set[str]:
    """The primaries' host:port in CLUSTER NODES, as Redis answers it or as redis-py parses it."""
    if isinstance(nodes, dict):
        flags = {address: info["flags"] for address, info in nodes.items()}
    else:
        flags = {line.split()[1].split("@")[0]: line.split()[2] for line in nodes.splitlines() if line}
    return {address for address, flag in flags.items() if "master" in flag.split(",")}


def shards_of(cluster: NamespacedCluster, prefix: str, plants: range) -> dict[int, str]:
    """Each plant's primary (its address), from the cluster's slot map."""
    groups = Groups(prefix, count=CLUSTER_GROUPS, capacity=1, cluster=True)
    probe = RedisCluster(host=cluster.address(cluster.primaries()[0]), port=PORT)
    try:
        return {plant: probe.get_node_from_key(groups.bucket_key(plant)).host for plant in plants}
    finally:
        probe.close()


def run_phase(
    cluster: NamespacedCluster, port: int, prefix: str, fault: str, *, first_plant: int, fault_s: float,
    before_s: float, after_s: float, victim_index: int = 0,
) -> Phase:  # fmt: skip
    """Writers on PLANTS_PER_SHARD new plants of each shard from `first_plant` on; `before_s` later,
    `fault` on a primary for `fault_s`; `after_s` after it healed, the writers stop."""
    by_shard: dict[str, list[int]] = {}
    for plant, shard in shards_of(cluster, prefix, range(first_plant, first_plant + 400)).items():
        by_shard.setdefault(shard, [])
        if len(by_shard[shard]) < PLANTS_PER_SHARD:
            by_shard[shard].append(plant)
    shards = sorted(by_shard)
    victim_shard = shards[victim_index % len(shards)]
    victim = next(n for n in range(cluster.count) if cluster.address(n) == victim_shard)
    phase = Phase(fault, victim_shard, {plant: shard for shard in shards for plant in by_shard[shard]})
    stop_watching = threading.Event()
    watcher = threading.Thread(
        target=watch_promotion, args=(cluster, victim, cluster.replicas_of(victim), phase, stop_watching)
    )
    writers = Writers(port, [[by_shard[shard][w] for shard in shards] for w in range(WRITERS)])
    try:
        time.sleep(before_s)
        phase.fault_at = time.monotonic()
        watcher.start()
        FAULTS[fault](cluster, victim, fault_s)
        phase.healed_at = time.monotonic()
        time.sleep(after_s)
    finally:
        phase.ended = time.monotonic()
        phase.answers = writers.stop()
        stop_watching.set()
        if watcher.is_alive():
            watcher.join()
    return phase


def get_json(port: int, path: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT)
    try:
        conn.request("GET", path, headers=AUTH)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def read_feed(port: int) -> list[dict]:
    """Every event of the feed, from its start."""
    events: list[dict] = []
    path = "/events?limit=1000"
    while True:
        status, page = get_json(port, path)
        assert status == 200, page
        events += page["events"]
        if not page["events"]:
            return events
        path = f"/events?limit=1000&after={page['next']}"


def verdict(port: int, answers: list[Answer]) -> dict[str, int]:
    """What the store and the feed say of the acknowledged writes; every count should be 0."""
    acknowledged: dict[int, set[int]] = {}
    for a in answers:
        if a.status in ACKNOWLEDGED:
            acknowledged.setdefault(a.plant, set()).add(a.version)
    in_feed: dict[int, list[int]] = {}
    for event in read_feed(port):
        plant = event["plant"]
        if plant["id"] in acknowledged:
            in_feed.setdefault(plant["id"], []).append(int(plant["name"][1:]))
    counts = Counter[str]()
    for plant, versions in acknowledged.items():
        status, stored = get_json(port, f"/plants/{plant}")
        assert status == 200, (plant, stored)
        held = int(stored["name"][1:])
        feed = in_feed.get(plant, [])
        # Acknowledged then lost: the plant ended older than it (overwritten by one that failed).
        counts["acknowledged then lost"] += sum(version > held for version in versions)
        counts["acknowledged, not in the feed"] += len(versions - set(feed))
        counts["in the feed twice"] += len(feed) - len(set(feed))
        counts["in the feed after a later one"] += sum(b <= a for a, b in itertools.pairwise(feed))
        counts["stored is not the feed's last"] += int(not feed or feed[-1] != held)
    counts["no answer, or not 200, 201 or 503"] += sum(a.status not in (*ACKNOWLEDGED, 503) for a in answers)
    return {name: counts[name] for name in sorted(counts)}
