-- A create: stores the plant unless its id is taken. Answers 0 created, 1 identical, 2 conflict,
-- 3 full; LATE past the deadline (see `past`).
local bucket_key = KEYS[1]
local count_key = KEYS[2]
local feed_key = KEYS[3]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local retention = ARGV[3] -- the feed's, '0' for no feed (see `record`)
local deadline = ARGV[4]
local plant_id = ARGV[5] -- decimal
local value = ARGV[6] -- the encoded plant
local capacity = ARGV[7] -- the group's
local member = ARGV[8] -- the id as an index member
-- '1' to rewrite a stored plant unchanged, so that a WAIT after it also covers the earlier
-- create it repeats
local rewrite = ARGV[9]
local origin = ARGV[10] -- the write's origin (see `record`)

if past(deadline) then return redis.error_reply(LATE) end
local stored = redis.call('HGET', bucket_key, plant_id)
if stored then
  if rewrite == '1' then redis.call('HSET', bucket_key, plant_id, stored) end
  if stored == value then return 1 end
  return 2
end
if not counted(count_key, capacity) then return 3 end
return add_plant(KEYS, retention, plant_id, member, value, origin) or 0
