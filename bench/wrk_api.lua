-- wrk script of bench/bench_api.py (closed-loop phases). Configured through the environment:
--   BENCH_TOKENS  comma-separated API tokens; thread N uses token N (one user per thread)
--   BENCH_MODE    "get": GET the BENCH_PATHS in turn; "post": POST "{}" to them in turn (renew);
--                 "lease": POST leases/ + POST leases/{id}/release/
--   BENCH_PATHS   "|"-separated paths for "get" ("{lease}" is replaced by the thread's BENCH_LEASES id)
--   BENCH_LEASES  comma-separated lease ids, one per token, for "{lease}" in BENCH_PATHS
--   BENCH_BODY    JSON body of the lease request
-- Round trips keep a per-thread queue: response() takes the id out of a 201 and the next request()
-- of that thread releases it, so creates and releases alternate at the rate the server allows.
-- done() prints one line "BENCH_JSON {...}" that bench_api.py parses.

local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

local function split(text, sep)
  local out = {}
  for part in string.gmatch(text or "", "([^" .. sep .. "]+)") do
    table.insert(out, part)
  end
  return out
end

function init(args)
  local tokens = split(os.getenv("BENCH_TOKENS"), ",")
  local slot = ((tid - 1) % #tokens) + 1
  mode = os.getenv("BENCH_MODE") or "get"
  headers = {["Authorization"] = "Token " .. tokens[slot], ["Content-Type"] = "application/json"}
  body = os.getenv("BENCH_BODY") or '{"pool": "bench", "gpus": 1}'
  local lease = split(os.getenv("BENCH_LEASES"), ",")[slot] or ""
  paths = {}
  for _, path in ipairs(split(os.getenv("BENCH_PATHS"), "|")) do
    table.insert(paths, (string.gsub(path, "{lease}", lease)))
  end
  queue = {}
  turn = 0
  failures = 0
  creates = 0
  releases = 0
end

function request()
  if mode == "lease" then
    local id = table.remove(queue)
    if id then
      releases = releases + 1
      return wrk.format("POST", "/api/v1/leases/" .. id .. "/release/", headers, "{}")
    end
    creates = creates + 1
    return wrk.format("POST", "/api/v1/leases/", headers, body)
  end
  turn = turn % #paths + 1
  if mode == "post" then
    return wrk.format("POST", paths[turn], headers, "{}")
  end
  return wrk.format("GET", paths[turn], headers)
end

function response(status, hdrs, text)
  if status >= 400 then
    failures = failures + 1
  elseif mode == "lease" and status == 201 then
    local id = string.match(text, '"id":%s*"([%x%-]+)"')
    if id then
      table.insert(queue, id)
    end
  end
end

function done(summary, latency, requests)
  local failed, created, released = 0, 0, 0
  for _, thread in ipairs(threads) do
    failed = failed + thread:get("failures")
    created = created + thread:get("creates")
    released = released + thread:get("releases")
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests": %d, "duration_us": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"max_us": %d, "failed": %d, "socket_errors": %d, "timeouts": %d, "creates": %d, "releases": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, failed, e.connect + e.read + e.write, e.timeout, created, released))
end
