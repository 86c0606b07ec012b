"""The create's cost in Redis, layout by layout: the key layout's trade-off table.

    python -m bench layouts                       # 100,000 plants, then the windows; 2 rounds
    python -m bench layouts --preload 1000000 --rounds 1
    python -m bench layouts --smoke
    python -m bench layouts --parts               # what each part of the shipped create costs

Each layout is the service's own CREATE script (app/store/redis/lua.py) with one thing
changed, run on one redis-server (pinned to CPU 1, this process on CPU 0) under its own prefix:

- `no index`: the create of c341a06, before the read indexes (HGET, GET, HSET, INCR);
- `B-tree, leaves of N`: the shipped layout with LEAF_SIZE = N (64 is the shipped size, 128 the one before);
- `B-tree 64, 8-byte members`: members without their decimal id, so every leaf entry is 13
  bytes shorter (the page script would have to spell the id itself);
- `one sorted set per index`: no leaves and no fence, one ZADD per index (Redis makes it a
  skiplist past 128 members).

Every layout writes the change feed's event (the default retention), as the service does. For
each it preloads `--preload` plants (pipelined, 100 calls a round trip, so that Redis is busy and
the figures are Redis's own), then counts a window of `--window` sequential ids and one of random
63-bit ids: Redis's CPU per create (`INFO cpu`, user + sys), the script's own time (`INFO
commandstats`) and `used_memory` per plant at the end, less the feed's stream (`MEMORY USAGE`).
Rounds are interleaved layout by layout.
"""

from __future__ import annotations

import uuid

import redis

from app.store.redis import lua as redis_scripts
from app.store.redis.groups import BUCKETS, encode, member
from bench.harness.redis_cpu import RedisCPU, random_ids
from bench.harness.report import benchmark_parser, finish, spread
from bench.harness.servers import scratch, start_redis

_UNINDEXED = """
local id, value = ARGV[5], ARGV[6]
local stored = redis.call('HGET', KEYS[1], id)
if stored then
  if stored == value then return 1 end
  return 2
end
if tonumber(redis.call('GET', KEYS[2]) or '0') >= tonumber(ARGV[7]) then return 3 end
redis.call('HSET', KEYS[1], id, value)
redis.call('INCR', KEYS[2])
return 0
"""
_SHIPPED = f"local LEAF_SIZE = {redis_scripts.LEAF_SIZE}"


def _leaves(size: int) -> str:
    return redis_scripts.CREATE.replace(_SHIPPED, f"local LEAF_SIZE = {size}")


def _one_set_per_index() -> str:
    return redis_scripts.CREATE.replace(
        "\nindex_plant(member, value)",
        "\nredis.call('ZADD', hash_tag .. ':z:a', 0, member)\n"
        "local tag = tag_of(value)\n"
        "if tag ~= '' then redis.call('ZADD', hash_tag .. ':z:t' .. tag, 0, member) end",
    )


#: Each layout: its CREATE script, and whether its members are the id's 8 bytes alone.
LAYOUTS = {
    "no index (c341a06)": (_UNINDEXED, False),
    "B-tree, leaves of 128": (_leaves(128), False),
    "B-tree, leaves of 64": (_leaves(64), False),
    "B-tree, leaves of 32": (_leaves(32), False),
    "B-tree 64, 8-byte members": (_leaves(64).replace("string.sub(fence, 9)", "fence"), True),
    "one sorted set per index": (_one_set_per_index(), False),
}
#: With --parts: the shipped CREATE script with parts of its work taken out, to price each part.
_INDEXING = "\nindex_plant(member, value)"
PARTS = {
    "no index (c341a06)": (_UNINDEXED, False),
    "shipped, no index and no event": (
        redis_scripts.CREATE.replace(_INDEXING, "").replace(
            "record(feed_key, retention, 0, plant_id, value, origin)", ""
        ),
        False,
    ),
    "the two fence look-ups only": (
        redis_scripts.CREATE.replace(
            _INDEXING, "\nfence_of('a', member); fence_of('t' .. tag_of(value), member)"
        ),
        False,
    ),
    "ZADD and ZCARD into a known leaf, no look-up": (
        redis_scripts.CREATE.replace(
            _INDEXING,
            """
for _, leaf in ipairs({hash_tag .. ':k:a', hash_tag .. ':k:t' .. tag_of(value)}) do
  redis.call('ZADD', leaf, 0, member)
  if redis.call('ZCARD', leaf) >= LEAF_SIZE then redis.call('DEL', leaf) end
end""",
        ),
        False,
    ),
    "index a only": (redis_scripts.CREATE.replace(_INDEXING, "\nindex_add('a', member)"), False),
    "shipped": (redis_scripts.CREATE, False),
    # The same code as a Redis 7 Function: FUNCTION LOAD once, then FCALL instead of EVALSHA.
    "shipped, as a Function (FCALL)": (
        "#!lua name=plants_bench\nredis.register_function('create', function(KEYS, ARGV)\n"
        + redis_scripts.CREATE
        + "\nend)\n",
        False,
    ),
}
TAGS = ("fern", "palm", "cactus", "ivy")


def creates(client: redis.Redis, sha: str | None, prefix: str, ids: list[int], short: bool) -> None:
    """Creates `ids` through the script, 100 calls a round trip; every answer must be 0 (created)."""
    tag = f"{{{prefix}}}"
    pipe = client.pipeline(transaction=False)
    for n, plant_id in enumerate(ids, 1):
        bucket = plant_id & (BUCKETS - 1)
        index_member = member(plant_id)[:8] if short else member(plant_id)
        value = encode(f"Plant {plant_id % 10**6:06d}", TAGS[plant_id % 4])
        call = (f"{tag}:b:{bucket}", f"{tag}:count", f"{tag}:events",
                tag, "", 100_000, "", plant_id, value, 10**9, index_member, "")  # fmt: skip
        if sha is None:
            pipe.fcall("create", 3, *call)
        else:
            pipe.evalsha(sha, 3, *call)
        if n % 100 == 0 or n == len(ids):
            answers = pipe.execute()
            if any(answer != 0 for answer in answers):
                raise RuntimeError(f"a create answered {set(answers)}")


def measure(client: redis.Redis, script: str, short: bool, preload: int, window: int) -> dict:
    function = script.startswith("#!lua")
    if function:
        client.function_load(script, replace=True)
    sha = None if function else client.script_load(script)
    command = "fcall" if function else "evalsha"
    prefix = f"layout-{uuid.uuid4().hex[:8]}"
    memory_before = client.info("memory")["used_memory"]
    creates(client, sha, prefix, list(range(6 * 10**12, 6 * 10**12 + preload)), short)
    windows = {
        "sequential": list(range(7 * 10**12, 7 * 10**12 + window)),
        "random": random_ids(window),
    }
    found = {}
    for name, ids in windows.items():
        counted = RedisCPU(client, command).start()
        creates(client, sha, prefix, ids, short)
        found |= {f"{name}: {key}": value for key, value in counted.per_call(window).items()}
    # The feed's events are counted apart (a retention's worth, whatever the store's size).
    events = client.memory_usage(f"{{{prefix}}}:events", samples=0) or 0
    memory = client.info("memory")["used_memory"] - memory_before - events
    found["bytes per plant"] = memory / (preload + 2 * window)
    client.flushall()
    return found


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--preload", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=30_000)
    parser.add_argument("--parts", action="store_true", help="price the parts of the shipped create instead")
    args = parser.parse_args()
    variants = PARTS if args.parts else LAYOUTS
    rounds = args.rounds or (1 if args.smoke else 2)
    preload, window = (2_000, 1_000) if args.smoke else (args.preload, args.window)
    # The listpack bounds of deploy/redis.conf, which the layouts' bytes depend on.
    server, sock = start_redis(
        scratch("layouts"),
        *("--zset-max-listpack-entries", "128", "--hash-max-listpack-entries", "256"),
        *("--hash-max-listpack-value", "1024"),
    )
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    try:
        client = redis.Redis(unix_socket_path=str(sock))
        for _ in range(rounds):
            for name, (script, short) in variants.items():
                runs[name].append(measure(client, script, short, preload, window))
    finally:
        server.terminate()
        server.wait()
    results = {"preload": preload, "window": window, "rounds": rounds, "layouts": {}}
    for name, found in runs.items():
        results["layouts"][name] = {key: spread(found, key) for key in found[0]}
    return finish(results, [], report, args.json)


def report(results: dict) -> str:
    base = results["layouts"]["no index (c341a06)"]
    lines = [
        f"{results['preload']:,} plants, then {results['window']:,} creates of sequential and of random "
        f"ids; medians of {results['rounds']} rounds; in brackets, x the index-free create.",
        "",
        "| layout | Redis CPU, sequential (µs) | script | Redis CPU, random (µs) | script "
        "| bytes per plant, feed apart |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, found in results["layouts"].items():
        cells = []
        for key in ("sequential: redis_cpu_us", "sequential: script_us", "random: redis_cpu_us",
                    "random: script_us"):  # fmt: skip
            cells.append(f"{found[key]['median']:.1f} ({found[key]['median'] / base[key]['median']:.2f}x)")
        cells.append(f"{found['bytes per plant']['median']:.0f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "VALID: every create answered 'created'."]
    return "\n".join(lines)
