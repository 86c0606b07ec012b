-- A page of a group's feed. Answers {0, id, number, entry ID, event, entry ID, event, ...} (the
-- position the entries follow, then the entries, flat; with origins, entry ID, event, origin,
-- tag before (`b`, '' when the entry has none), ...), {0, id, number} for 'now', or {1} when some events after the position are no longer
-- kept (or the stream lost events up to it: below). Redis counts every entry ever added (`entries-added`), so the entries a trim dropped are
-- that count less the stream's length. It reads only its declared key, so on a cluster it may
-- run on either node of a moving slot: its caller passes '' as `cluster`, which skips the probe.
local feed_key = KEYS[1]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
-- The position to read after: an entry ID and the number of events added up to it ('' and ''
-- for the oldest kept, 'now' and '' for the latest).
local after = ARGV[3]
local number = tonumber(ARGV[4])
local limit = ARGV[5] -- how many to read
local origins = ARGV[6] -- '1' for each event's origin and tag before too
-- '1': a position whose events the stream lost (below) reads on after its entry ID instead.
local read_on = ARGV[7]

if redis.call('EXISTS', feed_key) == 0 then
  if after ~= '' and after ~= 'now' and number > 0 and read_on ~= '1' then return {1} end
  return {0, '0-0', 0}
end
local info = redis.call('XINFO', 'STREAM', feed_key)
local length, added, last
for i = 1, #info, 2 do
  local field = info[i]
  if field == 'length' then length = info[i + 1]
  elseif field == 'entries-added' then added = info[i + 1]
  elseif field == 'last-generated-id' then last = info[i + 1] end
end
if after == 'now' then return {0, last, added} end
if after == '' then
  after, number = '0-0', added - length
elseif number < added - length then
  return {1}
end
-- Read from the position's own entry on: a stream that keeps it (its number is past the trimmed
-- ones) must hold it. Without it, or with a number past every entry added, the stream lost
-- events this reader had (Redis restarted without them, a replica promoted before it had them),
-- and what it holds after the position's time is another history: a 410, or with `read_on`
-- every entry after that time, the count taken again from the stream.
local entries = redis.call('XRANGE', feed_key, after, '+', 'COUNT', limit + 1)
local own = entries[1] ~= nil and entries[1][1] == after
if own then table.remove(entries, 1) elseif #entries > tonumber(limit) then table.remove(entries) end
if number > added or (number > added - length and number > 0 and not own) then
  if read_on ~= '1' then return {1} end
  number = added - #redis.call('XRANGE', feed_key, '(' .. after, '+')
end
local answer = {0, after, number}
local with_origins = origins == '1'
for _, entry in ipairs(entries) do
  answer[#answer + 1] = entry[1]
  answer[#answer + 1] = entry[2][2]
  -- An entry recorded before origins were has no `o`.
  if with_origins then
    answer[#answer + 1] = entry[2][4] or ''
    answer[#answer + 1] = entry[2][6] or ''
  end
end
return answer
