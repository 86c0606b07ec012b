-- KEYS: an endpoint's lease, its hash, its attempts. ARGV: T, '1' on a cluster, the owner, the
-- lease's time in ms, the epoch the delivery read, the attempt ('' for none), how many attempts to
-- keep, then fields and values. A delivery's outcome in one step: stored only while the owner holds
-- the lease and the epoch has not moved (a replay or a resume moves it); `status` and `reason` only
-- while the endpoint is enabled (the API may have disabled it meanwhile). Renews the lease.
-- Answers {1, status, revision}, or {0} having stored nothing.
if redis.call('GET', KEYS[1]) ~= ARGV[3] then return {0} end
if redis.call('HGET', KEYS[2], 'epoch') ~= ARGV[5] then return {0} end
local enabled = redis.call('HGET', KEYS[2], 'status') == 'enabled'
for i = 8, #ARGV, 2 do
  if enabled or (ARGV[i] ~= 'status' and ARGV[i] ~= 'reason') then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  end
end
if ARGV[6] ~= '' then
  redis.call('LPUSH', KEYS[3], ARGV[6])
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[7]) - 1)
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, redis.call('HGET', KEYS[2], 'status'), redis.call('HGET', KEYS[2], 'rev')}
