-- Adds a webhook endpoint. Answers 1, or 0 (keeping nothing) when the most are kept already;
-- LATE past the deadline (see `past`).
local ids_key = KEYS[1] -- the endpoints' ids, a sorted set scored by when each was added
local endpoint_key = KEYS[2] -- the new endpoint's hash
local sequence_key = KEYS[3] -- the endpoints' sequence
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local deadline = ARGV[3]
local most = tonumber(ARGV[4]) -- the most endpoints kept
local endpoint_id = ARGV[5]
-- ARGV[6] on: its fields and values.
local fields_at = 6

if past(deadline) then return redis.error_reply(LATE) end
if redis.call('ZCARD', ids_key) >= most then return 0 end
-- The sequence's number first: Redis does not roll a script back, so a sequence key another
-- program made of another type (WRONGTYPE) fails the script before it has written the endpoint,
-- which no list would then name (its signing secret kept for good). The ids' type is ZCARD's.
local added = redis.call('INCR', sequence_key)
redis.call('HSET', endpoint_key, unpack(ARGV, fields_at))
redis.call('ZADD', ids_key, added, endpoint_id)
return 1
