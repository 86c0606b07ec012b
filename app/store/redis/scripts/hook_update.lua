-- KEYS: an endpoint's hash. ARGV: T, '1' on a cluster, the revision the change was made from, then
-- fields and values. Answers 1, 0 when the endpoint is gone, or 2 (writing nothing) when its
-- revision moved since.
local rev = redis.call('HGET', KEYS[1], 'rev')
if not rev then return 0 end
if rev ~= ARGV[3] then return 2 end
redis.call('HSET', KEYS[1], 'rev', tonumber(rev) + 1, unpack(ARGV, 4))
return 1
