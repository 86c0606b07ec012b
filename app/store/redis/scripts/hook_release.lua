-- KEYS: an endpoint's lease. ARGV: T, '1' on a cluster, the owner. Gives up the owner's lease.
if redis.call('GET', KEYS[1]) == ARGV[3] then redis.call('DEL', KEYS[1]) end
return 1
