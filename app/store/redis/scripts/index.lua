-- KEYS: one bucket. ARGV: P, '1' on a cluster, then pairs of member and encoded plant read from that bucket.
-- Indexes each pair whose plant is still in the bucket (a delete may have come in between);
-- indexing twice changes nothing. Answers how many pairs were indexed.
local indexed = 0
for i = 3, #ARGV, 2 do
  local member = ARGV[i]
  if redis.call('HEXISTS', KEYS[1], string.sub(member, 9)) == 1 then
    index_plant(member, ARGV[i + 1])
    indexed = indexed + 1
  end
end
return indexed
