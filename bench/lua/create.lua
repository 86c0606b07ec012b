-- Valid creates: a unique id per request (thread and round offsets), realistic names
-- (12-20 characters) and tags from a handful of values, with the bearer header.
-- BENCH_ID_BASE keeps ids unique across rounds against one server; BENCH_LIMIT (per thread)
-- stops the thread after that many responses (used to preload the store).
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local report = require("report")
local next_thread = 0
function setup(thread)
  thread:set("thread_index", next_thread)
  next_thread = next_thread + 1
end

local names = {"Boston fern", "Aloe vera", "Snake plant", "Golden pothos", "Peace lily", "Spider plant",
               "Monstera deliciosa", "Rubber plant", "Jade plant", "Calathea"}
local tags = {"fern", "succulent", "tropical", "vine", "flowering"}
local counter = 0
local base, limit, headers

function init(args)
  base = tonumber(os.getenv("BENCH_ID_BASE") or "0") + (thread_index + 1) * 100000000000
  limit = tonumber(os.getenv("BENCH_LIMIT") or "0")
  headers = {["Content-Type"] = "application/json",
             ["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")}
end

function request()
  counter = counter + 1
  local body = string.format('{"id": %d, "name": "%s %05d", "tag": "%s"}', base + counter,
      names[counter % #names + 1], counter % 100000, tags[counter % #tags + 1])
  return wrk.format("POST", "/plants", headers, body)
end

if os.getenv("BENCH_LIMIT") then
  local seen = 0
  function response(status, hdrs, body)
    seen = seen + 1
    if seen >= limit then wrk.thread:stop() end
  end
end

done = report.done("non2xx")
