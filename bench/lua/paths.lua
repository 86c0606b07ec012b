-- GETs of paths read from BENCH_PATHS (one per line: plants to read, or pages after cursors),
-- each picked at random, with the bearer header. Every response must be 200; the count of
-- others is reported.
local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do table.insert(paths, line) end
local headers = {["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")}
unexpected = 0  -- global: done() reads it from each thread with thread:get

math.randomseed(7)
function request()
  return wrk.format("GET", paths[math.random(#paths)], headers)
end

function response(status, hdrs, body)
  if status ~= 200 then unexpected = unexpected + 1 end
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
