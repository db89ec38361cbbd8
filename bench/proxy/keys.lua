-- wrk script of bench/proxy/run: POST /v1/orders with a small JSON body and a principal, with a
-- unique Idempotency-Key per request, or the fixed one in PROXY_BENCH_KEY (the replay case).
-- done() prints one JSON line that the run script reads.
local fixed = os.getenv("PROXY_BENCH_KEY")
if fixed == "" then fixed = nil end -- the run script passes an empty value for unique keys
local run = os.getenv("PROXY_BENCH_RUN") or tostring(os.time())
local body = '{"sku":"sku_42","quantity":1,"customer":"cus_0123456789"}'
local threads = {}
local counter = 0

function setup(thread)
  -- a global of the thread's own Lua state, read by request(): keys differ across threads
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

function request()
  counter = counter + 1
  local key = fixed or string.format("%s-%d-%d", run, thread_id, counter)
  return wrk.format("POST", "/v1/orders", {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer bench",
    ["Idempotency-Key"] = key,
  }, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"errors":%d,"non2xx":%d,"p50_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99)))
end
