-- wrk script: tools/call of gatehouse_status over one established session.
-- Env: TOKEN (optional), SID (Mcp-Session-Id), TOOL (default gatehouse_status). Each wrk thread numbers its
-- JSON-RPC ids from its own base, so ids stay unique within the session.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("base", threads * 100000000)
end

function init(args)
  counter = tonumber(base) or 0
  tool = os.getenv("TOOL")
  if not tool or tool == "" then tool = "gatehouse_status" end
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Accept"] = "application/json, text/event-stream"
  wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
  local token = os.getenv("TOKEN")
  if token and token ~= "" then wrk.headers["Authorization"] = "Bearer " .. token end
  local sid = os.getenv("SID")
  if sid and sid ~= "" then wrk.headers["Mcp-Session-Id"] = sid end
end

function request()
  counter = counter + 1
  local body = '{"jsonrpc":"2.0","id":' .. counter ..
    ',"method":"tools/call","params":{"name":"' .. tool .. '","arguments":{}}}'
  return wrk.format(nil, nil, nil, body)
end

function done(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d non2xx=%d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
