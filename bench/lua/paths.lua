-- GETs of paths read from BENCH_PATHS (one per line: plants to read, or pages after cursors),
-- each picked at random, with the bearer header. Every response must be 200; the count of
-- others is reported.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local report = require("report")
local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do table.insert(paths, line) end
local headers = {["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")}

math.randomseed(7)
function request()
  return wrk.format("GET", paths[math.random(#paths)], headers)
end

report.expect(200)
done = report.done("unexpected")
