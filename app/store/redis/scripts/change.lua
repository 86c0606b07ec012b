-- A PUT or PATCH: checks the precondition and changes the plant (or creates an absent one, when
-- asked), moving it between tag indexes when its tag changes. Answers {0, plant} created,
-- {1, plant, tag before ('' for none)} changed, {2, plant} unchanged (nothing written), {3}
-- absent, {4} refused by the precondition, {5} full; LATE past the deadline; UNREADABLE, having
-- written nothing, for a stored plant not encoded as this service writes (see `readable`).
local bucket_key = KEYS[1]
local count_key = KEYS[2]
local feed_key = KEYS[3]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local retention = ARGV[3]
local deadline = ARGV[4]
local plant_id = ARGV[5]
local member = ARGV[6]
local capacity = ARGV[7]
local create = ARGV[8] -- '1' to create an absent plant
local name = ARGV[9] -- '' keeps it
local tag_change = ARGV[10] -- 'k' keeps the tag, 'n' removes it, 's<tag>' sets it
local origin = ARGV[11]
-- ARGV[12] on: the precondition (see `allows`).
local precondition_at = 12

if past(deadline) then return redis.error_reply(LATE) end
local stored = redis.call('HGET', bucket_key, plant_id)
local new_tag = string.sub(tag_change, 2)
if not stored then
  -- An If-Match (its count is not '') names a plant, and there is none.
  if create ~= '1' or ARGV[precondition_at] ~= '' then return {3} end
  if not counted(count_key, capacity) then return {5} end
  local value = string.len(name) .. ':' .. name .. new_tag
  return add_plant(KEYS, retention, plant_id, member, value, origin) or {0, value}
end
if not readable(stored) then return unreadable(bucket_key, plant_id) end
if not allows(stored, precondition_at) then return {4} end
local old_tag = tag_of(stored)
if name == '' then name = name_of(stored) end
local tag = new_tag
if string.sub(tag_change, 1, 1) == 'k' then tag = old_tag end
local value = string.len(name) .. ':' .. name .. tag
if value == stored then return {2, stored} end
local before = nil
if tag ~= old_tag then before = old_tag == '' and 'n' or 't' .. old_tag end
local failed = undone(function()
  redis.call('HSET', bucket_key, plant_id, value)
  if tag ~= old_tag then
    if old_tag ~= '' then index_remove('t' .. old_tag, member) end
    if tag ~= '' then index_add('t' .. tag, member) end
  end
  record(feed_key, retention, 1, plant_id, value, origin, before)
end, function()
  pcall(redis.call, 'HSET', bucket_key, plant_id, stored)
  if tag ~= old_tag then
    if tag ~= '' then pcall(index_remove, 't' .. tag, member) end
    if old_tag ~= '' then pcall(index_add, 't' .. old_tag, member) end
  end
end)
return failed or {1, value, old_tag}
