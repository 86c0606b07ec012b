-- A page of a group's feed. Answers {0, id, number, entry ID, event, entry ID, event, ...} (the
-- position the entries follow, then the entries, flat; with origins, entry ID, event, origin,
-- tag before (`b`, '' when the entry has none), ...), {0, id, number} for 'now', or {1} when some events after the position are no longer
-- kept (or the stream lost events up to it: below). Redis counts every entry ever added (`entries-added`), so the entries a trim dropped are
-- that count less the stream's length. It reads only its declared key, so on a cluster it may
-- run on either node of a moving slot: its caller passes '' as `cluster`, which skips the probe.
-- With `select`, it judges a reader's filter here (FeedSelection, app/store/base.py): an entry it
-- does not select is answered as its entry ID and three empty strings, so that a filtered watch
-- that passes over most of the feed has only the entries it selects cross to the service.
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
-- '1': answer only the entries the filter below selects whole (with origins), the others empty.
local selecting = ARGV[8]
local kinds = ARGV[9] -- '*' for any kind, else each selected kind's digit
local id_count = ARGV[10] -- '*' for any plant, else how many ids follow from `select_at`
local tag_count = ARGV[11] -- '*' for any tag, else how many tags follow the ids
local select_at = 12

if redis.call('EXISTS', feed_key) == 0 then
  if after ~= '' and after ~= 'now' and number > 0 and read_on ~= '1' then return {1} end
  return {0, '0-0', 0}
end
local info = redis.call('XINFO', 'STREAM', feed_key)
local length, added, last, unrecorded
for i = 1, #info, 2 do
  local field = info[i]
  if field == 'length' then length = info[i + 1]
  elseif field == 'entries-added' then added = info[i + 1]
  elseif field == 'last-generated-id' then last = info[i + 1]
  elseif field == 'max-deleted-entry-id' then unrecorded = info[i + 1] end
end
if after == 'now' then return {0, last, added} end
-- Whether entry ID `a` comes after `b`.
local function later(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  if tonumber(a_ms) ~= tonumber(b_ms) then return tonumber(a_ms) > tonumber(b_ms) end
  return tonumber(a_seq) > tonumber(b_seq)
end
-- `unrecorded`: the mark of the latest write made with the feed off ('0-0' for none; `record`
-- in library.lua), which emptied the stream and counts from 0 again. A position before it would
-- follow on past a change it never gets: a 410, even one taken while the stream held no event
-- (which no count could tell); with `read_on` (a reader that keeps no copy), reading on from
-- the mark instead, as from a stream that lost events (below).
if after == '' then
  after, number = unrecorded, added - length
else
  if later(unrecorded, after) then
    if read_on ~= '1' then return {1} end
    after, number = unrecorded, 0
  end
  if number < added - length then return {1} end
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
if selecting == '1' then
  local ids, tags
  local id_total = id_count == '*' and 0 or tonumber(id_count)
  if id_count ~= '*' then
    ids = {}
    for i = select_at, select_at + id_total - 1 do ids[ARGV[i]] = true end
  end
  if tag_count ~= '*' then
    tags = {}
    for i = select_at + id_total, select_at + id_total + tonumber(tag_count) - 1 do tags[ARGV[i]] = true end
  end
  -- Whether the filter selects an event `<kind> <id> <length>:<name><tag>` whose entry's `b` is
  -- `before`: its plant matched before or after the change (an empty `b` is the tag after).
  local function selects(event, before)
    local first = string.find(event, ' ', 1, true)
    if kinds ~= '*' and not string.find(kinds, string.sub(event, 1, first - 1), 1, true) then return false end
    local second = string.find(event, ' ', first + 1, true)
    if ids and not ids[string.sub(event, first + 1, second - 1)] then return false end
    if not tags then return true end
    local colon = string.find(event, ':', second + 1, true)
    local tag = string.sub(event, colon + 1 + tonumber(string.sub(event, second + 1, colon - 1)))
    if tags[tag] then return true end
    return before ~= '' and string.sub(before, 1, 1) == 't' and tags[string.sub(before, 2)] == true
  end
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    answer[#answer + 1] = entry[1]
    local before = fields[6] or ''
    if selects(fields[2], before) then
      answer[#answer + 1] = fields[2]
      answer[#answer + 1] = fields[4] or ''
      answer[#answer + 1] = before
    else
      answer[#answer + 1] = ''
      answer[#answer + 1] = ''
      answer[#answer + 1] = ''
    end
  end
  return answer
end
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
