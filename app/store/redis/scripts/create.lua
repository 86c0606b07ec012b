-- KEYS: the bucket, the count, the feed. ARGV: P, '1' on a cluster, the feed's retention, the
-- deadline (see `past`), the decimal id, the encoded plant, the capacity, the member, and '1' to
-- rewrite a stored plant unchanged (so that a WAIT after it also covers the earlier create it
-- repeats), then the origin (see `record`). Answers 0 created, 1 identical, 2 conflict, 3 full;
-- LATE past the deadline.
if past(ARGV[4]) then return redis.error_reply(LATE) end
local id, value = ARGV[5], ARGV[6]
local stored = redis.call('HGET', KEYS[1], id)
if stored then
  if ARGV[9] == '1' then redis.call('HSET', KEYS[1], id, stored) end
  if stored == value then return 1 end
  return 2
end
if not counted(ARGV[7]) then return 3 end
redis.call('HSET', KEYS[1], id, value)
index_plant(ARGV[8], value)
record(0, id, value, ARGV[10])
return 0
