-- The benchmark scripts' shared parts: their one BENCH line of results, and the count of
-- responses whose status was not the expected one. Loaded with
--   package.path = wrk_dir .. "?.lua;" .. package.path; local report = require("report")
local report = {}

-- Every thread, for done() to read each one's `unexpected` count.
local threads = {}

-- Makes the script count responses whose status is not `expected` (a global each thread keeps).
function report.expect(expected)
  unexpected = 0
  function setup(thread) table.insert(threads, thread) end
  function response(status, headers, body)
    if status ~= expected then unexpected = unexpected + 1 end
  end
end

-- The BENCH line: `first` names the count reported after the duration ("non2xx" or "unexpected").
function report.done(first)
  return function(summary, latency, requests)
    local count = summary.errors.status
    if first == "unexpected" then
      count = 0
      for _, thread in ipairs(threads) do count = count + thread:get("unexpected") end
    end
    io.write(string.format(
      'BENCH {"requests": %d, "duration_us": %d, "%s": %d, "connect": %d, "read": %d, "write": %d, ' ..
      '"timeout": %d, "p50_us": %d, "p99_us": %d}\n',
      summary.requests, summary.duration, first, count, summary.errors.connect, summary.errors.read,
      summary.errors.write, summary.errors.timeout, latency:percentile(50), latency:percentile(99)))
  end
end

return report
