-- The functions every script of the Redis store starts with (lua.py prepends this file to each):
-- the bucket group, the B-tree indexes, preconditions, the feed. Every script's first two
-- arguments are read here; each script names its own keys and the rest at its top. The functions
-- read no KEYS, and ARGV only from where a script tells `allows` its precondition starts: a
-- script passes them what they need.
-- `hash_tag`: the group's hash tag, `{prefix}` or `{prefix:n}` (the endpoints' `{prefix:hooks}`);
-- `cluster`: '1' on a cluster, else ''.
local hash_tag = ARGV[1]
local cluster = ARGV[2]
local LEAF_SIZE = 64

-- Undeclared keys: a script declares the keys it is given (its KEYS), but the functions below
-- also build keys from `hash_tag` that no caller can name in advance: the index fences and leaves
-- (which leaf depends on what the fence holds), `:layout`, the probe, and page.lua's buckets.
-- Every one of them, like every declared key, starts with `hash_tag`, so Redis Cluster hashes
-- only the tag and puts them all in the declared keys' slot, on the node the script runs on.
-- Only a slot moving between nodes can split them, and the probe below refuses that case.
--
-- While the group's slot migrates away, this node answers for the keys still here and redirects
-- the rest; a script whose undeclared keys (the index leaves) are partly gone would write half
-- its work. A key that never exists tells: reading it is refused while the slot migrates. So the
-- script then answers TRYAGAIN, having written nothing. (The client never follows ASK with a
-- script, so no script runs on the importing node.)
if cluster ~= '' and not pcall(redis.call, 'EXISTS', hash_tag .. ':probe') then
  return redis.error_reply('TRYAGAIN the slot of this group is moving between nodes')
end

local function fence_key(index) return hash_tag .. ':f:' .. index end
local function leaf_key(index, fence) return hash_tag .. ':l:' .. string.sub(fence, 9) .. ':' .. index end

-- The fence of the leaf that holds (or would hold) `member`; nil when the index is empty.
local function fence_of(index, member)
  return redis.call('ZREVRANGEBYLEX', fence_key(index), '[' .. member, '-', 'LIMIT', 0, 1)[1]
end

local function index_add(index, member)
  local fence = fence_of(index, member)
  local first = not fence
  if first then fence = '' end
  local leaf = leaf_key(index, fence)
  -- The leaf before the fence: a leaf that is no sorted set (below: `undone`) fails the write
  -- before it has made a fence for it.
  redis.call('ZADD', leaf, 0, member)
  if first then redis.call('ZADD', fence_key(index), 0, '') end
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

-- Whether `s` is UTF-8 as Python decodes it (no surrogate, no overlong form, nothing past
-- U+10FFFF). An ASCII string, most names and tags, takes one search.
local function utf8(s)
  if not string.find(s, '[\128-\255]') then return true end
  local i, n = 1, #s
  while i <= n do
    local c = string.byte(s, i)
    if c < 128 then
      i = i + 1
    else
      local size = (c >= 194 and c <= 223) and 2 or (c >= 224 and c <= 239) and 3 or (c >= 240 and c <= 244) and 4
      if not size or i + size - 1 > n then return false end
      local low, high = 128, 191
      if c == 224 then low = 160 elseif c == 237 then high = 159 elseif c == 240 then low = 144 elseif c == 244 then high = 143 end
      local b = string.byte(s, i + 1)
      if b < low or b > high then return false end
      for j = i + 2, i + size - 1 do
        b = string.byte(s, j)
        if b < 128 or b > 191 then return false end
      end
      i = i + size
    end
  end
  return true
end

-- Whether a stored plant is encoded as this service writes plants (groups.py `decode_fields`
-- reads it by the same rule). A value another program wrote, or cut short, is refused by every
-- write before it writes anything: changed or deleted, it would reach the feed, whose readers
-- could not read it either.
local function readable(value)
  local length = string.match(value, '^(%d+):')
  if not length then return false end
  local name_end = #length + 1 + tonumber(length)
  if name_end > #value then return false end
  return utf8(string.sub(value, #length + 2, name_end)) and utf8(string.sub(value, name_end + 1))
end
-- The refusal of a write of a plant whose stored value is not `readable`.
local function unreadable(bucket_key, plant_id)
  return redis.error_reply('UNREADABLE plant ' .. plant_id .. ' (field ' .. plant_id .. ' of ' .. bucket_key
    .. ') is not stored as this service writes plants')
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

-- Appends a change to the group's feed (`feed_key`, a stream) in the write's own step; with the
-- feed off (`retention` is '0'), empties and marks the stream instead. Its entry ID, given by Redis, is when it took effect. Two
-- fields: `e`, `<kind> <decimal id> <encoded plant>`, and `o`, the write's origin
-- (FeedEntry.origin; '' for none, and absent from entries written before it existed). An update
-- that moved the plant to another tag has a third, `b`: its tag before ('t<tag>', or 'n' for
-- none; FeedEntry.tag_before), so that a filtered watch sees a plant leave its tag. Every other
-- entry has the same two fields, so the stream stores their names once per node.
local function record(feed_key, retention, kind, plant_id, value, origin, before)
  if retention == '0' then
    -- The feed is off and this write goes unrecorded: no position read before it may follow on
    -- past it, not even one taken while the stream had no event (it names no entry, and counts
    -- none). So the stream is emptied but kept, marked with an entry ID of its own that is past
    -- every position read before: its `max-deleted-entry-id`, which only XDEL and XSETID set
    -- (a trim leaves it). Its count starts again from this mark, as a new stream's would, so
    -- that a reader that reads on past it (a webhook deliverer) counts from here (events.lua).
    local mark = redis.call('XADD', feed_key, 'MAXLEN', 0, '*', 'e', '')
    redis.call('XSETID', feed_key, mark, 'ENTRIESADDED', 0, 'MAXDELETEDID', mark)
  else
    local event = kind .. ' ' .. plant_id .. ' ' .. value
    if before then
      redis.call('XADD', feed_key, 'MAXLEN', '~', retention, '*', 'e', event, 'o', origin or '', 'b', before)
    else
      redis.call('XADD', feed_key, 'MAXLEN', '~', retention, '*', 'e', event, 'o', origin or '')
    end
  end
end

-- Runs a write's `steps`, those after its first write. Redis does not roll a script back, and a
-- step fails when a key under the prefix holds another type than the service writes there
-- (WRONGTYPE: another program's, the operator's): the steps before it would stay done, a plant
-- stored and counted without its event, or deleted without one. So then `undo` puts back what
-- they did (each of its calls under pcall, since it may meet the same key), and the error is
-- answered (503), the write not done. Nil when every step was done.
local function undone(steps, undo)
  local ok, err = pcall(steps)
  if ok then return nil end
  undo()
  if type(err) == 'table' then return err end
  return redis.error_reply(tostring(err))
end

-- Whether a write is past its deadline (every write's `deadline`: ms since the epoch by the
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

-- Counts a new plant in the group (`count_key`) unless the group holds `capacity` already: one
-- INCR, taken back when over, rather than a GET before an INCR (one call fewer on every create).
-- The first plant of an empty store marks it as indexed (`:layout`).
local function counted(count_key, capacity)
  local count = redis.call('INCR', count_key)
  if count > tonumber(capacity) then
    redis.call('DECR', count_key)
    return false
  end
  if count == 1 then redis.call('SET', hash_tag .. ':layout', '2') end
  return true
end

local function index_plant(member, value)
  index_add('a', member)
  local tag = tag_of(value)
  if tag ~= '' then index_add('t' .. tag, member) end
end

-- Stores a new plant, already `counted`, with its indexes and its event (see `record`); or, when
-- a step fails (see `undone`), none of it, its count taken back: the error to answer, else nil.
local function add_plant(keys, retention, plant_id, member, value, origin)
  local bucket_key, count_key, feed_key = keys[1], keys[2], keys[3]
  return undone(function()
    redis.call('HSET', bucket_key, plant_id, value)
    index_plant(member, value)
    record(feed_key, retention, 0, plant_id, value, origin)
  end, function()
    pcall(redis.call, 'HDEL', bucket_key, plant_id)
    pcall(redis.call, 'DECR', count_key)
    pcall(index_remove, 'a', member)
    local tag = tag_of(value)
    if tag ~= '' then pcall(index_remove, 't' .. tag, member) end
  end)
end
