-- KEYS: the bucket, the count, the feed. ARGV: P, '1' on a cluster, the feed's retention, the
-- deadline (see `past`), the decimal id, the member, the capacity, '1' to create an absent
-- plant, the name ('' keeps it), the tag ('k' keeps it, 'n' removes it, 's<tag>' sets it), the
-- origin (see `record`), then the precondition (see `allows`). Answers {0, plant} created,
-- {1, plant} changed, {2, plant} unchanged (nothing written), {3} absent, {4} refused by the
-- precondition, {5} full; LATE past the deadline. A change of tag moves the plant between tag
-- indexes here.
if past(ARGV[4]) then return redis.error_reply(LATE) end
local id, member = ARGV[5], ARGV[6]
local stored = redis.call('HGET', KEYS[1], id)
local new_tag = string.sub(ARGV[10], 2)
if not stored then
  if ARGV[8] ~= '1' or ARGV[12] ~= '' then return {3} end
  if not counted(ARGV[7]) then return {5} end
  local value = string.len(ARGV[9]) .. ':' .. ARGV[9] .. new_tag
  redis.call('HSET', KEYS[1], id, value)
  index_plant(member, value)
  record(0, id, value, ARGV[11])
  return {0, value}
end
if not allows(stored, 12) then return {4} end
local name, old_tag = ARGV[9], tag_of(stored)
if name == '' then name = name_of(stored) end
local mode, tag = string.sub(ARGV[10], 1, 1), new_tag
if mode == 'k' then tag = old_tag end
local value = string.len(name) .. ':' .. name .. tag
if value == stored then return {2, stored} end
redis.call('HSET', KEYS[1], id, value)
if tag ~= old_tag then
  if old_tag ~= '' then index_remove('t' .. old_tag, member) end
  if tag ~= '' then index_add('t' .. tag, member) end
end
record(1, id, value, ARGV[11])
return {1, value}
