-- Preloads BENCH_LIMIT plants with ids from BENCH_BASE + BENCH_FIRST up: names as in create.lua;
-- tag "rare" on every 100th id (1%), else one of five. (wrk builds one request it never sends,
-- so the first id is skipped.)
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local report = require("report")
local names = {"Boston fern", "Aloe vera", "Snake plant", "Golden pothos", "Peace lily", "Spider plant",
               "Monstera deliciosa", "Rubber plant", "Jade plant", "Calathea"}
local tags = {"fern", "succulent", "tropical", "vine", "flowering"}
local base = tonumber(os.getenv("BENCH_BASE"))
local limit = tonumber(os.getenv("BENCH_LIMIT"))
local headers = {["Content-Type"] = "application/json",
                 ["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")}
local n, seen = tonumber(os.getenv("BENCH_FIRST")) - 1, 0

function request()
  n = n + 1
  local tag = n % 100 == 0 and "rare" or tags[n % 5 + 1]
  local body = string.format('{"id": %d, "name": "%s %05d", "tag": "%s"}', base + n,
      names[n % #names + 1], n % 100000, tag)
  return wrk.format("POST", "/plants", headers, body)
end

function response(status, hdrs, body)
  seen = seen + 1
  if seen >= limit then wrk.thread:stop() end
end

done = report.done("non2xx")
