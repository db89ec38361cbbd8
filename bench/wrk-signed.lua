-- wrk script of bench/run and bench/ab: every request a new, validly signed delivery, taken from a
-- file made by `hookonce-loadgen requests` (signing in Lua would cost more than the server).
--
--   wrk -t2 -c50 -d10s --latency -s bench/wrk-signed.lua http://127.0.0.1:PORT -- FILE THREADS [PATH] [close]
--
-- FILE: the requests (its format is described in tools/loadgen/src/requests.rs: a header, the
-- varying runs, one request as a template, then each request's varying bytes, fixed width).
-- THREADS: wrk's -t, so that each thread takes its own contiguous slice of the requests and no
-- request is sent twice. PATH: another request path than the file's (adnanh/webhook's route).
-- `close`: every request says `Connection: close`, so that each one pays for a new connection
-- (clients that do not keep connections alive; bench/lib.sh's BENCH_WRK_CLOSE=1).
-- A thread that runs out of requests starts its slice again and counts a wrap: done() reports
-- it, and a run with wraps sent duplicates (cheaper for the server) and must be made longer.
-- done() prints one JSON line (latencies in µs) that bench/lib.sh reads.

local threads = {}

function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

local data, width, count, pieces, runs = nil, 0, 0, {}, {}
local counter, wraps = 0, 0
local parts = {}

function init(args)
  local path, nthreads, route, close = args[1], tonumber(args[2] or "1"), args[3], args[4]
  local f = assert(io.open(path, "rb"), "cannot open " .. tostring(path))
  local magic, version, n, w, tlen = f:read("*l"):match("^(%S+) (%d+) (%d+) (%d+) (%d+)$")
  assert(magic == "hookonce-requests" and version == "1", path .. " is not a requests file")
  n, width, tlen = tonumber(n), tonumber(w), tonumber(tlen)
  for s, l in f:read("*l"):gmatch("(%d+):(%d+)") do
    table.insert(runs, { tonumber(s), tonumber(l) })
  end
  local template = f:read(tlen)
  f:read(1) -- the template's newline
  -- The static pieces between the runs (1-based Lua offsets).
  local at = 1
  for _, r in ipairs(runs) do
    table.insert(pieces, template:sub(at, r[1]))
    at = r[1] + r[2] + 1
  end
  table.insert(pieces, template:sub(at))
  local rewrite_route = route and route ~= ""
  if rewrite_route or close == "close" then
    assert(pieces[1]:find("\r\n", 1, true), "the first run starts inside the request line")
  end
  if rewrite_route then
    pieces[1] = pieces[1]:gsub("^(%S+) %S+ ", "%1 " .. route:gsub("%%", "%%%%") .. " ", 1)
  end
  if close == "close" then
    pieces[1] = pieces[1]:gsub("\r\n", "\r\nConnection: close\r\n", 1)
  end
  -- This thread's slice.
  local first = math.floor(thread_id * n / nthreads)
  count = math.floor((thread_id + 1) * n / nthreads) - first
  wrk.thread:set("capacity", count)
  f:seek("cur", first * (width + 1))
  data = f:read(count * (width + 1))
  f:close()
  assert(data and #data == count * (width + 1), path .. " is shorter than its header says")
  for i, piece in ipairs(pieces) do
    parts[2 * i - 1] = piece
  end
end

function request()
  if counter >= count then
    counter = 0
    wraps = wraps + 1
    wrk.thread:set("wraps", wraps)
  end
  local o = counter * (width + 1)
  local at = o + 1
  for i, r in ipairs(runs) do
    parts[2 * i] = data:sub(at, at + r[2] - 1)
    at = at + r[2]
  end
  counter = counter + 1
  return table.concat(parts)
end

function done(summary, latency, requests)
  local wrapped, slices = 0, 0
  for _, thread in ipairs(threads) do
    wrapped = wrapped + (thread:get("wraps") or 0)
    slices = slices + (thread:get("capacity") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    '{"client":"wrk","requests":%d,"duration_us":%d,"bytes":%d,"errors":%d,"non2xx":%d,'
      .. '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d,"mean_us":%.1f,'
      .. '"wraps":%d,"capacity":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean, wrapped, slices))
end
