-- Refused requests: BENCH_CASE=401 sends a wrong token; BENCH_CASE=400 an invalid NewPlant.
-- Every response must carry exactly that status; the count of others is reported.
local case = os.getenv("BENCH_CASE")
local token = case == "401" and "wrong-token" or os.getenv("BENCH_TOKEN")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. token
wrk.body = case == "401" and '{"id": 1, "name": "Boston fern"}' or '{"id": "1", "name": 5, "tags": "x"}'
local expected = tonumber(case)
unexpected = 0  -- global: done() reads it from each thread with thread:get

function response(status, headers, body)
  if status ~= expected then unexpected = unexpected + 1 end
end

local threads = {}
function setup(thread) table.insert(threads, thread) end

function done(summary, latency, requests)
  local wrong = 0
  for _, thread in ipairs(threads) do wrong = wrong + thread:get("unexpected") end
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "unexpected": %d, "connect": %d, "read": %d, "write": %d, ' ..
    '"timeout": %d, "p50_us": %d, "p99_us": %d}\n',
    summary.requests, summary.duration, wrong, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.timeout, latency:percentile(50), latency:percentile(99)))
end
