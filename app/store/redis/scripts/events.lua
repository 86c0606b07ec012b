-- KEYS: a group's feed. ARGV: P, '1' on a cluster, the position to read after: an entry ID and
-- the number of events added up to it ('' and '' for the oldest kept, 'now' for the latest),
-- how many to read, and '1' for each event's origin too. Answers {0, id, number, entry ID,
-- event, entry ID, event, ...} (the position the entries follow, then the entries, flat; with
-- origins, entry ID, event, origin, ...), {0, id, number} for 'now', or {1} when some events
-- after the position are no longer kept. Redis counts every entry ever added
-- (`entries-added`), so the entries a trim dropped are that count less the stream's length.
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[3] ~= '' and ARGV[3] ~= 'now' and tonumber(ARGV[4]) > 0 then return {1} end
  return {0, '0-0', 0}
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local length, added, last
for i = 1, #info, 2 do
  local field = info[i]
  if field == 'length' then length = info[i + 1]
  elseif field == 'entries-added' then added = info[i + 1]
  elseif field == 'last-generated-id' then last = info[i + 1] end
end
if ARGV[3] == 'now' then return {0, last, added} end
local after, number = ARGV[3], tonumber(ARGV[4])
if after == '' then
  after, number = '0-0', added - length
elseif number < added - length or number > added then
  return {1}
end
local answer = {0, after, number}
local origins = ARGV[6] == '1'
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '(' .. after, '+', 'COUNT', ARGV[5])) do
  answer[#answer + 1] = entry[1]
  answer[#answer + 1] = entry[2][2]
  -- An entry recorded before origins were has no `o`.
  if origins then answer[#answer + 1] = entry[2][4] or '' end
end
return answer
