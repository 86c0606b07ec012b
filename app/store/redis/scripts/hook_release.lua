-- Gives up the owner's lease.
local lease_key = KEYS[1]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local owner = ARGV[3]

if redis.call('GET', lease_key) == owner then redis.call('DEL', lease_key) end
return 1
