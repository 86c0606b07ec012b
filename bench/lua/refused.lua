-- Refused requests: BENCH_CASE=401 sends a wrong token; BENCH_CASE=400 an invalid NewPlant.
-- Every response must carry exactly that status; the count of others is reported.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local report = require("report")
local case = os.getenv("BENCH_CASE")
local token = case == "401" and "wrong-token" or os.getenv("BENCH_TOKEN")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. token
wrk.body = case == "401" and '{"id": 1, "name": "Boston fern"}' or '{"id": "1", "name": 5, "tags": "x"}'
report.expect(tonumber(case))
done = report.done("unexpected")
