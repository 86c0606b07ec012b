-- Takes or renews an endpoint's lease for the owner and answers the endpoint's fields (HGETALL),
-- or false when another owner holds it or the endpoint is gone.
local lease_key = KEYS[1]
local endpoint_key = KEYS[2]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local owner = ARGV[3]
local lease_ms = ARGV[4]

if redis.call('EXISTS', endpoint_key) == 0 then return false end
local holder = redis.call('GET', lease_key)
if holder and holder ~= owner then return false end
redis.call('SET', lease_key, owner, 'PX', lease_ms)
return redis.call('HGETALL', endpoint_key)
