-- Renews each lease the owner holds; answers 1 for each held, 0 for each lost.
-- KEYS: the leases, any number (all under the endpoints' hash tag).
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local owner = ARGV[3]
local lease_ms = ARGV[4]

local held = {}
for i, lease_key in ipairs(KEYS) do
  if redis.call('GET', lease_key) == owner then
    redis.call('PEXPIRE', lease_key, lease_ms)
    held[i] = 1
  else
    held[i] = 0
  end
end
return held
