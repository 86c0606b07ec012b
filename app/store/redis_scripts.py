"""The Redis store's key layout and its Lua scripts: every write, and every page, is one script.

Every key of a bucket group starts with the group's hash tag (written `P` below: `{prefix}` for
the one group of a single Redis, `{prefix:n}` for each of a cluster's 24; see redis_groups.py),
so each script's keys sit in one Redis Cluster slot:

- `P:b:<n>`: one of 65,536 buckets, a small hash from the decimal id to the encoded plant (the
  layout of 1.0.0). Redis keeps small hashes as compact listpacks. The bucket is the id's low
  16 bits: fixed forever, so the same id always finds the same bucket (and group).
- `P:count`: how many plants the group holds, for its share of the capacity.
- `P:layout`: present once the indexes below hold every plant (set by the first create into an
  empty store, and by `python -m app.store.migrate` for a store written by 1.0.0).
- `{prefix}:cursor-key`: the random secret that signs page cursors, made by the first page, and
  `{prefix}:groups:<index>`, the groups each index has used (redis_hints.py): outside any group.
- Two kinds of index, each a B-tree of two levels in sorted sets: index `a` holds every plant,
  index `t<tag>` the plants with that tag. An index's *leaves* `P:l:<fence id>:<index>` are
  sorted sets of at most 128 members, so Redis keeps them as listpacks (about 25 bytes a
  member); its *fence* `P:f:<index>` holds the smallest member of each leaf (the first leaf's
  is the empty string). A leaf that reaches 128 gives its upper half to a new leaf; an emptied
  leaf is removed. Finding a member's leaf is one ZREVRANGEBYLEX on the fence: O(log n).

An index member is the id as 8 bytes that sort as the id does (big-endian, sign bit flipped),
then the decimal id. All scores are 0, so members sort by their bytes (ZRANGEBYLEX); the
decimal part names the id's bucket field. Lua compares members through their numbers, never
with `<` on strings, which follows the server's locale.

A plant is encoded as `<name length in bytes>:<name><tag>`; the tag is never empty, so a value
without tag bytes is a plant without a tag.
"""

from __future__ import annotations

LEAF_SIZE = 128

_LIBRARY = f"""
local P = ARGV[1]
local LEAF_SIZE = {LEAF_SIZE}

-- On a cluster ARGV[2] is '1'. While the group's slot migrates away, this node answers for the
-- keys still here and redirects the rest; a script whose undeclared keys (the index leaves) are
-- partly gone would write half its work. A key that never exists tells: reading it is refused
-- while the slot migrates. So the script then answers TRYAGAIN, having written nothing. (The
-- client never follows ASK with a script, so no script runs on the importing node.)
if ARGV[2] ~= '' and not pcall(redis.call, 'EXISTS', P .. ':probe') then
  return redis.error_reply('TRYAGAIN the slot of this group is moving between nodes')
end

local function fence_key(index) return P .. ':f:' .. index end
local function leaf_key(index, fence) return P .. ':l:' .. string.sub(fence, 9) .. ':' .. index end

-- The fence of the leaf that holds (or would hold) `member`; nil when the index is empty.
local function fence_of(index, member)
  return redis.call('ZREVRANGEBYLEX', fence_key(index), '[' .. member, '-', 'LIMIT', 0, 1)[1]
end

local function index_add(index, member)
  local fence = fence_of(index, member)
  if not fence then
    fence = ''
    redis.call('ZADD', fence_key(index), 0, '')
  end
  local leaf = leaf_key(index, fence)
  redis.call('ZADD', leaf, 0, member)
  if redis.call('ZCARD', leaf) >= LEAF_SIZE then
    local upper = redis.call('ZRANGE', leaf, LEAF_SIZE / 2, -1)
    local pairs_ = {{}}
    for i, m in ipairs(upper) do
      pairs_[2 * i - 1] = 0
      pairs_[2 * i] = m
    end
    redis.call('ZADD', leaf_key(index, upper[1]), unpack(pairs_))
    redis.call('ZREMRANGEBYRANK', leaf, LEAF_SIZE / 2, -1)
    redis.call('ZADD', fence_key(index), 0, upper[1])
  end
end

local function index_remove(index, member)
  local fence = fence_of(index, member)
  if not fence then return end
  local leaf = leaf_key(index, fence)
  redis.call('ZREM', leaf, member)
  if redis.call('EXISTS', leaf) == 0 then
    -- The leaf is empty (Redis removed its key). The first leaf's fence stays while the index has
    -- other leaves; an index with no plant left has no key left.
    if fence ~= '' then redis.call('ZREM', fence_key(index), fence) end
    if redis.call('ZCARD', fence_key(index)) == 1 and redis.call('EXISTS', leaf_key(index, '')) == 0 then
      redis.call('DEL', fence_key(index))
    end
  end
end

-- The tag of an encoded plant, '' when it has none.
local function tag_of(value)
  local colon = string.find(value, ':', 1, true)
  return string.sub(value, colon + 1 + tonumber(string.sub(value, 1, colon - 1)))
end

-- The name of an encoded plant.
local function name_of(value)
  local colon = string.find(value, ':', 1, true)
  return string.sub(value, colon + 1, colon + tonumber(string.sub(value, 1, colon - 1)))
end

-- Whether a write's precondition lets it change the plant stored as `value`: ARGV from `at` on
-- holds how many If-Match tags follow ('' for no If-Match), then those tags, then the same for
-- If-None-Match. ' *' (ANY_PLANT: the header's unquoted `*`) matches any plant.
-- The ETag is the one Python's plant_etag() gives.
local function allows(value, at)
  local etag = string.sub(redis.sha1hex(value), 1, 16)
  local function lists(from)
    local n = tonumber(ARGV[from])
    if not n then return false, from + 1 end
    for i = from + 1, from + n do
      if ARGV[i] == ' *' or ARGV[i] == etag then return true, from + 1 + n end
    end
    return nil, from + 1 + n
  end
  local matched, next_at = lists(at)
  if matched == nil then return false end
  local none_matched = lists(next_at)
  return not none_matched
end

-- Appends a change to the group's feed (KEYS[3], a stream) in the write's own step, unless the
-- feed is off (ARGV[3], the retention, is '0'). Its entry ID, given by Redis, is when it took
-- effect. One field, `e`: `<kind> <decimal id> <encoded plant>`; every entry has the same field,
-- so the stream stores its name once per node, and a page answers three strings per event.
local function record(kind, id, value)
  if ARGV[3] ~= '0' then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'e', kind .. ' ' .. id .. ' ' .. value)
  end
end

-- Counts a new plant in the group (KEYS[2]) unless the group holds `capacity` already: one INCR,
-- taken back when over, rather than a GET before an INCR (one call fewer on every create). The
-- first plant of an empty store marks it as indexed (`P:layout`).
local function counted(capacity)
  local count = redis.call('INCR', KEYS[2])
  if count > tonumber(capacity) then
    redis.call('DECR', KEYS[2])
    return false
  end
  if count == 1 then redis.call('SET', P .. ':layout', '2') end
  return true
end

local function index_plant(member, value)
  index_add('a', member)
  local tag = tag_of(value)
  if tag ~= '' then index_add('t' .. tag, member) end
end
"""

# KEYS: the bucket, the count, the feed. ARGV: P, '1' on a cluster, the feed's retention, the
# decimal id, the encoded plant, the capacity, the member, and '1' to rewrite a stored plant
# unchanged (so that a WAIT after it also covers the earlier create it repeats). Answers 0
# created, 1 identical, 2 conflict, 3 full.
CREATE = (
    _LIBRARY
    + """
local id, value = ARGV[4], ARGV[5]
local stored = redis.call('HGET', KEYS[1], id)
if stored then
  if ARGV[8] == '1' then redis.call('HSET', KEYS[1], id, stored) end
  if stored == value then return 1 end
  return 2
end
if not counted(ARGV[6]) then return 3 end
redis.call('HSET', KEYS[1], id, value)
index_plant(ARGV[7], value)
record(0, id, value)
return 0
"""
)

# KEYS: the bucket, the count, the feed. ARGV: P, '1' on a cluster, the feed's retention, the
# decimal id, the member, and the precondition (see `allows`; none for an unconditional delete).
# Answers 1 deleted, 0 absent, 2 refused by the precondition.
DELETE = (
    _LIBRARY
    + """
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
"""
)

# KEYS: the bucket, the count, the feed. ARGV: P, '1' on a cluster, the feed's retention, the
# decimal id, the member, the capacity, '1' to create an absent plant, the name ('' keeps it),
# the tag ('k' keeps it, 'n' removes it, 's<tag>' sets it), then the precondition (see
# `allows`). Answers {0, plant} created, {1, plant} changed, {2, plant} unchanged (nothing
# written), {3} absent, {4} refused by the precondition, {5} full. A change of tag moves the
# plant between tag indexes here.
CHANGE = (
    _LIBRARY
    + """
local id, member = ARGV[4], ARGV[5]
local stored = redis.call('HGET', KEYS[1], id)
local new_tag = string.sub(ARGV[9], 2)
if not stored then
  if ARGV[7] ~= '1' or ARGV[10] ~= '' then return {3} end
  if not counted(ARGV[6]) then return {5} end
  local value = string.len(ARGV[8]) .. ':' .. ARGV[8] .. new_tag
  redis.call('HSET', KEYS[1], id, value)
  index_plant(member, value)
  record(0, id, value)
  return {0, value}
end
if not allows(stored, 10) then return {4} end
local name, old_tag = ARGV[8], tag_of(stored)
if name == '' then name = name_of(stored) end
local mode, tag = string.sub(ARGV[9], 1, 1), new_tag
if mode == 'k' then tag = old_tag end
local value = string.len(name) .. ':' .. name .. tag
if value == stored then return {2, stored} end
redis.call('HSET', KEYS[1], id, value)
if tag ~= old_tag then
  if old_tag ~= '' then index_remove('t' .. old_tag, member) end
  if tag ~= '' then index_add('t' .. tag, member) end
end
record(1, id, value)
return {1, value}
"""
)

# KEYS: the count. ARGV: P, '1' on a cluster, the member to start after ('' for the first page),
# the limit, then the indexes to read ('a', or one 't<tag>' per tag). Answers {more, id, plant,
# id, plant, ...}: up to `limit` plants in ascending id order, `more` 1 when another follows.
PAGE = (
    _LIBRARY
    + """
if redis.call('EXISTS', P .. ':layout') == 0 and tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then
  return redis.error_reply('NEEDSMIGRATION')
end
local after, limit = ARGV[3], tonumber(ARGV[4])
local wanted = limit + 1
local members = {}

-- Appends to `members` up to `wanted` members of `index` above `after`, in ascending order.
local function walk(index)
  local fence = ''
  if after ~= '' then fence = fence_of(index, after) end
  if not fence then return end
  local low, got = after == '' and '-' or '(' .. after, 0
  while true do
    local found = redis.call('ZRANGEBYLEX', leaf_key(index, fence), low, '+', 'LIMIT', 0, wanted - got)
    for _, m in ipairs(found) do members[#members + 1] = m end
    got = got + #found
    if got >= wanted then return end
    fence = redis.call('ZRANGEBYLEX', fence_key(index), '(' .. fence, '+', 'LIMIT', 0, 1)[1]
    if not fence then return end
  end
end

if #ARGV == 5 then
  walk(ARGV[5])
else
  -- Several tags: their indexes are disjoint (a plant has one tag). A k-way merge by id over
  -- the indexes, each read ahead in small chunks: about `wanted` members read and compared,
  -- plus one chunk per tag, never every tag's `wanted` members sorted.
  local chunk = math.max(8, math.ceil(wanted / (#ARGV - 4)))
  local function fill(r)
    r.buffer, r.at = {}, 1
    while r.fence do
      local found = redis.call('ZRANGEBYLEX', leaf_key(r.index, r.fence), r.low, '+', 'LIMIT', 0, chunk)
      if #found > 0 then
        r.buffer, r.low = found, '(' .. found[#found]
        return true
      end
      r.fence = redis.call('ZRANGEBYLEX', fence_key(r.index), '(' .. r.fence, '+', 'LIMIT', 0, 1)[1]
    end
    return false
  end
  -- The id of the reader's next member as two 32-bit numbers, which order as the member does.
  local function head(r)
    local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(r.buffer[r.at], 1, 8)
    r.high, r.low_word = ((b1 * 256 + b2) * 256 + b3) * 256 + b4, ((b5 * 256 + b6) * 256 + b7) * 256 + b8
  end
  local readers = {}
  for i = 5, #ARGV do
    local r = {index = ARGV[i], fence = '', low = after == '' and '-' or '(' .. after}
    if after ~= '' then r.fence = fence_of(r.index, after) end
    if r.fence and fill(r) then
      head(r)
      readers[#readers + 1] = r
    end
  end
  while #members < wanted and #readers > 0 do
    local best = 1
    for j = 2, #readers do
      local r, b = readers[j], readers[best]
      if r.high < b.high or (r.high == b.high and r.low_word < b.low_word) then best = j end
    end
    local r = readers[best]
    members[#members + 1] = r.buffer[r.at]
    r.at = r.at + 1
    if r.at <= #r.buffer or fill(r) then head(r) else table.remove(readers, best) end
  end
end

local answer = {#members > limit and 1 or 0}
for i = 1, math.min(#members, limit) do
  local m = members[i]
  local b7, b8 = string.byte(m, 7, 8)
  local id = string.sub(m, 9)
  local value = redis.call('HGET', P .. ':b:' .. (b7 * 256 + b8), id)
  if value then
    answer[#answer + 1] = id
    answer[#answer + 1] = value
  end
end
return answer
"""
)

# KEYS: one bucket. ARGV: P, '1' on a cluster, then pairs of member and encoded plant read from that bucket.
# Indexes each pair whose plant is still in the bucket (a delete may have come in between);
# indexing twice changes nothing. Answers how many pairs were indexed.
INDEX = (
    _LIBRARY
    + """
local indexed = 0
for i = 3, #ARGV, 2 do
  local member = ARGV[i]
  if redis.call('HEXISTS', KEYS[1], string.sub(member, 9)) == 1 then
    index_plant(member, ARGV[i + 1])
    indexed = indexed + 1
  end
end
return indexed
"""
)

# KEYS: a group's feed. ARGV: P, '1' on a cluster, the position to read after: an entry ID and
# the number of events added up to it ('' and '' for the oldest kept, 'now' for the latest),
# and how many to read. Answers {0, id, number, entry ID, event, entry ID, event, ...} (the
# position the entries follow, then the entries, flat), {0, id, number} for 'now', or {1} when
# some events after the position are no longer kept. Redis counts every entry ever added
# (`entries-added`), so the entries a trim dropped are that count less the stream's length.
EVENTS = (
    _LIBRARY
    + """
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
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '(' .. after, '+', 'COUNT', ARGV[5])) do
  answer[#answer + 1] = entry[1]
  answer[#answer + 1] = entry[2][2]
end
return answer
"""
)
