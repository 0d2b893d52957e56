-- wrk script: tools/call of gatehouse_status over one established session.
-- Env: TOKEN (optional), SID (Mcp-Session-Id), TOOL (default gatehouse_status). Each wrk thread numbers its
-- JSON-RPC ids from its own base, so ids stay unique within the session.
-- A 2xx answer (JSON or SSE) carrying a JSON-RPC error, or a tool result with isError true, is counted as
-- rpc_errors in the RESULT line, beside wrk's socket errors and its non2xx (status > 399).
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("base", #threads * 100000000)
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

rpc_errors = 0
function response(status, headers, body)
  if status < 300 and body and (body:find('"error"%s*:%s*{') or body:find('"isError"%s*:%s*true')) then
    rpc_errors = rpc_errors + 1
  end
end

function request()
  counter = counter + 1
  local body = '{"jsonrpc":"2.0","id":' .. counter ..
    ',"method":"tools/call","params":{"name":"' .. tool .. '","arguments":{}}}'
  return wrk.format(nil, nil, nil, body)
end

function done(summary, latency, requests)
  local rpc = 0
  for _, thread in ipairs(threads) do rpc = rpc + (tonumber(thread:get("rpc_errors")) or 0) end
  io.write(string.format("RESULT rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d non2xx=%d rpc_errors=%d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status, rpc))
end
