-- A delivery's outcome in one step: stored only while the owner holds the lease and the epoch has
-- not moved (a replay or a resume moves it); `status` and `reason` only while the endpoint is
-- enabled (the API may have disabled it meanwhile); given a revision, only while the endpoint's
-- is still that one (an outcome decided from the endpoint as it was then). Renews the lease.
-- Answers {1, status, revision}, {2, status, revision} having stored nothing as the revision
-- moved, or {0} having stored nothing. Each outcome comes with a token of its own, kept in the
-- endpoint's `ack` field: a second run of one (its reply lost, the script sent again) finds it
-- there and stores nothing more, so that its attempt is listed once. What can fail is checked
-- before anything is written (Redis does not undo a script's writes before its error): an
-- attempts key of another kind (another program's) refuses the whole outcome, not its attempt.
local lease_key = KEYS[1]
local endpoint_key = KEYS[2]
local attempts_key = KEYS[3]
-- (ARGV[1] and ARGV[2], `hash_tag` and `cluster`, are read by library.lua.)
local owner = ARGV[3]
local lease_ms = ARGV[4]
local epoch = ARGV[5] -- the epoch the delivery read
local attempt = ARGV[6] -- '' for none
local attempts_kept = tonumber(ARGV[7])
local token = ARGV[8] -- this outcome's own
local rev = ARGV[9] -- the revision the outcome was decided from, '' for any
-- ARGV[10] on: fields and values.
local fields_at = 10

if redis.call('GET', lease_key) ~= owner then return {0} end
if redis.call('HGET', endpoint_key, 'epoch') ~= epoch then return {0} end
local attempts_type = redis.call('TYPE', attempts_key)['ok']
if attempt ~= '' and attempts_type ~= 'list' and attempts_type ~= 'none' then
  return redis.error_reply('WRONGTYPE the endpoint\'s attempts key holds a ' .. attempts_type .. ', not a list')
end
local answer = 1
if redis.call('HGET', endpoint_key, 'ack') == token then
  -- stored by this outcome's first run
elseif rev ~= '' and redis.call('HGET', endpoint_key, 'rev') ~= rev then
  answer = 2
else
  local enabled = redis.call('HGET', endpoint_key, 'status') == 'enabled'
  for i = fields_at, #ARGV, 2 do
    if enabled or (ARGV[i] ~= 'status' and ARGV[i] ~= 'reason') then
      redis.call('HSET', endpoint_key, ARGV[i], ARGV[i + 1])
    end
  end
  if attempt ~= '' then
    redis.call('LPUSH', attempts_key, attempt)
    redis.call('LTRIM', attempts_key, 0, attempts_kept - 1)
  end
  redis.call('HSET', endpoint_key, 'ack', token)
end
redis.call('PEXPIRE', lease_key, lease_ms)
return {answer, redis.call('HGET', endpoint_key, 'status'), redis.call('HGET', endpoint_key, 'rev')}
