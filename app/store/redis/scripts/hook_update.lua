-- Changes a webhook endpoint's fields unless its revision moved since the change was made from
-- it. Answers 1, 0 when the endpoint is gone, or 2 (writing nothing) when its revision moved.
local endpoint_key = KEYS[1]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local rev = ARGV[3] -- the revision the change was made from
-- ARGV[4] on: fields and values.
local fields_at = 4

local stored_rev = redis.call('HGET', endpoint_key, 'rev')
if not stored_rev then return 0 end
if stored_rev ~= rev then return 2 end
redis.call('HSET', endpoint_key, 'rev', tonumber(stored_rev) + 1, unpack(ARGV, fields_at))
return 1
