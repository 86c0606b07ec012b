-- A page of one group: up to `limit` plants in ascending id order. Answers {more, id, plant, id,
-- plant, ...}, `more` 1 when another follows; NEEDSMIGRATION for a store written by 1.0.0 that
-- has no indexes yet.
local count_key = KEYS[1]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local after = ARGV[3] -- the member to start after, '' for the first page
local limit = tonumber(ARGV[4])
-- ARGV[5] on: the indexes to read, 'a' or one 't<tag>' per tag.
local indexes_at = 5

if redis.call('EXISTS', hash_tag .. ':layout') == 0 and tonumber(redis.call('GET', count_key) or '0') > 0 then
  return redis.error_reply('NEEDSMIGRATION')
end
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

if #ARGV == indexes_at then
  walk(ARGV[indexes_at])
else
  -- Several tags: their indexes are disjoint (a plant has one tag). A k-way merge by id over
  -- the indexes, each read ahead in small chunks: about `wanted` members read and compared,
  -- plus one chunk per tag, never every tag's `wanted` members sorted.
  local chunk = math.max(8, math.ceil(wanted / (#ARGV - indexes_at + 1)))
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
  for i = indexes_at, #ARGV do
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
  local value = redis.call('HGET', hash_tag .. ':b:' .. (b7 * 256 + b8), id)
  if value then
    answer[#answer + 1] = id
    answer[#answer + 1] = value
  end
end
return answer
