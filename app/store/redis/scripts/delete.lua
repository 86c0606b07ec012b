-- KEYS: the bucket, the count, the feed. ARGV: P, '1' on a cluster, the feed's retention, the
-- deadline (see `past`), the decimal id, the member, the origin (see `record`), and the
-- precondition (see `allows`; none for an unconditional delete). Answers 1 deleted, 0 absent,
-- 2 refused by the precondition; LATE past the deadline.
if past(ARGV[4]) then return redis.error_reply(LATE) end
local id, member = ARGV[5], ARGV[6]
local stored = redis.call('HGET', KEYS[1], id)
if not stored then return 0 end
if #ARGV > 7 and not allows(stored, 8) then return 2 end
redis.call('HDEL', KEYS[1], id)
redis.call('DECR', KEYS[2])
index_remove('a', member)
local tag = tag_of(stored)
if tag ~= '' then index_remove('t' .. tag, member) end
record(2, id, stored, ARGV[7])
return 1
