-- KEYS: the endpoints' sorted set (by when each was added), the new endpoint's hash, the
-- endpoints' sequence. ARGV: T (the endpoints' hash tag), '1' on a cluster, the most endpoints
-- kept, the endpoint's id, then its fields and values. Answers 1, or 0 (keeping nothing) when the
-- most are kept already.
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[2], unpack(ARGV, 5))
redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[3]), ARGV[4])
return 1
