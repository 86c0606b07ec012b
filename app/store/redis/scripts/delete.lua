-- KEYS: the bucket, the count, the feed. ARGV: P, '1' on a cluster, the feed's retention, the
-- decimal id, the member, and the precondition (see `allows`; none for an unconditional delete).
-- Answers 1 deleted, 0 absent, 2 refused by the precondition.
local id, member = ARGV[4], ARGV[5]
local stored = redis.call('HGET', KEYS[1], id)
if not stored then return 0 end
if #ARGV > 5 and not allows(stored, 6) then return 2 end
redis.call('HDEL', KEYS[1], id)
redis.call('DECR', KEYS[2])
index_remove('a', member)
local tag = tag_of(stored)
if tag ~= '' then index_remove('t' .. tag, member) end
record(2, id, stored)
return 1
