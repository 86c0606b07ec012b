-- Removes a webhook endpoint, its attempts and its lease. Answers 1, or 0 when it was not kept;
-- LATE past the deadline (see `past`).
local ids_key = KEYS[1]
local endpoint_key = KEYS[2]
local attempts_key = KEYS[3]
local lease_key = KEYS[4]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local deadline = ARGV[3]
local endpoint_id = ARGV[4]

if past(deadline) then return redis.error_reply(LATE) end
redis.call('DEL', attempts_key, lease_key)
redis.call('ZREM', ids_key, endpoint_id)
return redis.call('DEL', endpoint_key)
