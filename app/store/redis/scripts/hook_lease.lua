-- KEYS: an endpoint's lease, its hash. ARGV: T, '1' on a cluster, the owner, the lease's time in
-- ms. Takes or renews the lease for the owner and answers the endpoint's fields (HGETALL), or
-- false when another owner holds it or the endpoint is gone.
if redis.call('EXISTS', KEYS[2]) == 0 then return false end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[3] then return false end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return redis.call('HGETALL', KEYS[2])
