-- What a write whose reply was lost did (app/store/redis/lost.py): its event in the group's feed,
-- the newest whose origin is the write's and whose plant is the write's, among the events since
-- `oldest` (an entry ID before the write started). Answers {kind, encoded plant} of that event,
-- {} when there is none, and UNKNOWN when `most` events or more are that recent (so the scan may
-- not reach the write's; `most` is below the feed's retention, so no event that recent is trimmed).
local feed_key = KEYS[1]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local origin = ARGV[3]
local plant_id = ARGV[4] -- decimal
local oldest = ARGV[5]
local most = ARGV[6]

local entries = redis.call('XREVRANGE', feed_key, '+', oldest, 'COUNT', most)
for _, entry in ipairs(entries) do
  local fields = entry[2] -- 'e', event, 'o', origin (see `record`)
  if fields[4] == origin then
    local kind, id, value = string.match(fields[2], '^(%d) (%-?%d+) (.*)$')
    if id == plant_id then return {tonumber(kind), value} end
  end
end
if #entries >= tonumber(most) then
  return redis.error_reply('UNKNOWN too many events since the write started to find its own')
end
return {}
