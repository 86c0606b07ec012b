-- Changes a webhook endpoint's fields unless it moved since the change was made from it: its
-- revision (a change through the API), or a field the change read that a delivery's outcome
-- writes (a position, a retry's time, a status), which moves no revision. Answers 1, 0 when the
-- endpoint is gone, or 2 (writing nothing) when it moved; LATE past the deadline (see `past`).
local endpoint_key = KEYS[1]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local deadline = ARGV[3]
local rev = ARGV[4] -- the revision the change was made from
local unchanged = tonumber(ARGV[5]) -- how many fields must still hold what the change read
-- ARGV[6] on: those fields and their values, then the fields and values to write.
local fields_at = 6

if past(deadline) then return redis.error_reply(LATE) end
local stored_rev = redis.call('HGET', endpoint_key, 'rev')
if not stored_rev then return 0 end
if stored_rev ~= rev then return 2 end
local written_at = fields_at + 2 * unchanged
for i = fields_at, written_at - 1, 2 do
  if redis.call('HGET', endpoint_key, ARGV[i]) ~= ARGV[i + 1] then return 2 end
end
redis.call('HSET', endpoint_key, 'rev', tonumber(stored_rev) + 1, unpack(ARGV, written_at))
return 1
