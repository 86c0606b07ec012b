-- Indexes plants read from one bucket (app/store/migrate.py): each pair whose plant is still in
-- the bucket (a delete may have come in between), as it is now; indexing twice changes nothing. Answers how
-- many pairs were indexed; UNREADABLE for a plant not encoded as this service writes (see `readable`).
local bucket_key = KEYS[1]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
-- ARGV[3] on: pairs of index member and encoded plant, read from that bucket.
local pairs_at = 3

-- Each is indexed with the value the bucket holds now: the service may have changed its tag, or
-- deleted and created it again, since the migration read it.
local indexed = 0
for i = pairs_at, #ARGV, 2 do
  local member = ARGV[i]
  local field = string.sub(member, 9)
  local value = redis.call('HGET', bucket_key, field)
  if value then
    -- Not indexed under a tag of its bytes, nor read half-way: the operator repairs it, then runs
    -- the migration again (the pairs indexed before it stay, and indexing twice changes nothing).
    if not readable(value) then return unreadable(bucket_key, field) end
    index_plant(member, value)
    indexed = indexed + 1
  end
end
return indexed
