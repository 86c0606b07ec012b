// Open-loop creates: k6's constant-arrival-rate executor starts BENCH_RATE iterations a second
// whatever the answers' latency (no coordinated omission). Each iteration is one create of a new
// id (BENCH_ID_BASE + the iteration's number in the test). The summary (p50, p90, p99, p99.9,
// dropped iterations, non-2xx) goes to the file BENCH_SUMMARY as JSON.
import http from "k6/http";
import exec from "k6/execution";

const rate = parseInt(__ENV.BENCH_RATE);
const names = ["Boston fern", "Aloe vera", "Snake plant", "Golden pothos", "Peace lily"];
const tags = ["fern", "succulent", "tropical", "vine", "flowering"];

export const options = {
  discardResponseBodies: true,
  summaryTrendStats: ["p(50)", "p(90)", "p(99)", "p(99.9)", "max"],
  scenarios: {
    creates: {
      executor: "constant-arrival-rate",
      rate: rate,
      timeUnit: "1s",
      duration: __ENV.BENCH_DURATION,
      // Enough VUs that the offered rate never waits for one: a VU is busy for one latency.
      preAllocatedVUs: Math.max(20, Math.ceil(rate / 20)),
      maxVUs: Math.max(200, rate),
    },
  },
};

const params = {
  headers: { "Content-Type": "application/json", Authorization: `Bearer ${__ENV.BENCH_TOKEN}` },
  timeout: "10s",
};

export default function () {
  const n = exec.scenario.iterationInTest;
  const id = parseInt(__ENV.BENCH_ID_BASE) + n;
  const body = `{"id": ${id}, "name": "${names[n % 5]} ${n % 100000}", "tag": "${tags[n % 5]}"}`;
  http.post(`${__ENV.BENCH_URL}/plants`, body, params);
}

export function handleSummary(data) {
  const duration = data.metrics.http_req_duration.values;
  const dropped = data.metrics.dropped_iterations;
  const failed = data.metrics.http_req_failed.values;
  const summary = {
    requests: data.metrics.http_reqs.values.count,
    p50_ms: duration["p(50)"],
    p90_ms: duration["p(90)"],
    p99_ms: duration["p(99)"],
    p999_ms: duration["p(99.9)"],
    max_ms: duration.max,
    dropped: dropped ? dropped.values.count : 0,
    non2xx: failed.passes,
  };
  return { [__ENV.BENCH_SUMMARY]: JSON.stringify(summary) };
}
