-- The functions every script of the Redis store starts with (app/store/redis_scripts.py
-- prepends this file to each): the bucket group, the B-tree indexes, preconditions, the feed.
local P = ARGV[1]
local LEAF_SIZE = 128

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
    local pairs_ = {}
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
-- effect. Two fields: `e`, `<kind> <decimal id> <encoded plant>`, and `o`, the write's origin
-- (FeedEntry.origin; '' for none, and absent from entries written before it existed). Every
-- entry has the same fields, so the stream stores their names once per node.
local function record(kind, id, value, origin)
  if ARGV[3] ~= '0' then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'e', kind .. ' ' .. id .. ' ' .. value,
      'o', origin or '')
  end
end

-- Whether a write is past its deadline (ARGV[4] of every write: ms since the epoch by the
-- service's clock, '' for none) by Redis's clock. A write that reaches Redis later (held in a
-- send queue, a proxy, or the buffer of a stalled server) answers LATE, having written nothing:
-- the service has answered 503 by then (app/store/redis/deadline.py). Redis 7 replicates a
-- script's effects, not the script, so reading TIME here is allowed and a replica never judges it.
local function past(deadline)
  if deadline == '' then return false end
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > tonumber(deadline)
end
local LATE = 'LATE the write reached Redis after its deadline'

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
