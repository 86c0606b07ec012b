-- KEYS: leases. ARGV: T, '1' on a cluster, the owner, the lease's time in ms. Renews each lease
-- the owner holds; answers 1 for each held, 0 for each lost.
local held = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[3] then
    redis.call('PEXPIRE', key, ARGV[4])
    held[i] = 1
  else
    held[i] = 0
  end
end
return held
