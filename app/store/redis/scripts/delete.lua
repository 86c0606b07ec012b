-- A delete: removes the plant, frees its place under the capacity, and takes it out of its
-- indexes. Answers {1, its tag ('' for none)} deleted, 0 absent, 2 refused by the precondition;
-- LATE past the deadline; UNREADABLE, having written nothing, for a stored plant not encoded as
-- this service writes (see `readable`).
local bucket_key = KEYS[1]
local count_key = KEYS[2]
local feed_key = KEYS[3]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local retention = ARGV[3]
local deadline = ARGV[4]
local plant_id = ARGV[5]
local member = ARGV[6]
local origin = ARGV[7]
-- ARGV[8] on: the precondition (see `allows`), none for an unconditional delete.
local precondition_at = 8

if past(deadline) then return redis.error_reply(LATE) end
local stored = redis.call('HGET', bucket_key, plant_id)
if not stored then return 0 end
if not readable(stored) then return unreadable(bucket_key, plant_id) end
if #ARGV >= precondition_at and not allows(stored, precondition_at) then return 2 end
local tag = tag_of(stored)
local uncounted = false
local failed = undone(function()
  redis.call('HDEL', bucket_key, plant_id)
  redis.call('DECR', count_key)
  uncounted = true
  index_remove('a', member)
  if tag ~= '' then index_remove('t' .. tag, member) end
  record(feed_key, retention, 2, plant_id, stored, origin)
end, function()
  pcall(redis.call, 'HSET', bucket_key, plant_id, stored)
  if uncounted then pcall(redis.call, 'INCR', count_key) end
  pcall(index_add, 'a', member)
  if tag ~= '' then pcall(index_add, 't' .. tag, member) end
end)
return failed or {1, tag}
