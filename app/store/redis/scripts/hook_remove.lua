-- KEYS: the endpoints' set, an endpoint's hash, its attempts, its lease. ARGV: T, '1' on a
-- cluster, its id. Answers 1, or 0 when it was not kept.
redis.call('DEL', KEYS[3], KEYS[4])
redis.call('ZREM', KEYS[1], ARGV[3])
return redis.call('DEL', KEYS[2])
