-- Changes and conditional reads of plants BENCH_FIRST .. BENCH_FIRST + BENCH_COUNT - 1 (which
-- exist), one at random per request, with the bearer header. BENCH_MODE:
--   put      PUT a new name, the tag kept          (200)
--   retag    PUT a new tag: two tag indexes move   (200)
--   patch    PATCH a new name (merge patch)        (200)
--   get      GET                                   (200)
--   get304   GET with If-None-Match: *             (304)
-- Every response must have the mode's status; the count of others is reported.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local report = require("report")
local mode = os.getenv("BENCH_MODE")
local first = tonumber(os.getenv("BENCH_FIRST"))
local count = tonumber(os.getenv("BENCH_COUNT"))
local token = "Bearer " .. os.getenv("BENCH_TOKEN")
local tags = {"fern", "succulent", "tropical", "vine", "flowering"}
local n = 0

math.randomseed(11)
function request()
  n = n + 1
  local path = string.format("/plants/%d", first + math.random(count) - 1)
  if mode == "get" then
    return wrk.format("GET", path, {["Authorization"] = token})
  elseif mode == "get304" then
    return wrk.format("GET", path, {["Authorization"] = token, ["If-None-Match"] = "*"})
  elseif mode == "patch" then
    return wrk.format("PATCH", path, {["Authorization"] = token, ["Content-Type"] = "application/merge-patch+json"},
      string.format('{"name": "Plant v%d"}', n))
  elseif mode == "retag" then
    return wrk.format("PUT", path, {["Authorization"] = token, ["Content-Type"] = "application/json"},
      string.format('{"name": "Plant", "tag": "%s"}', tags[n % #tags + 1]))
  end
  return wrk.format("PUT", path, {["Authorization"] = token, ["Content-Type"] = "application/json"},
    string.format('{"name": "Plant v%d", "tag": "fern"}', n))
end

report.expect(mode == "get304" and 304 or 200)
done = report.done("unexpected")
