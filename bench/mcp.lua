-- wrk script of the MCP rows: tools/call round trips, every other one failing.
--
-- Arguments (after wrk's `--`): the sessions the harness initialized, one Mcp-Session-Id each
-- ("-" for a system that names none). Calls rotate over the sessions; ids are unique, since
-- a JSON-RPC id may not repeat within a session while a call is in flight. Each reply is
-- sorted by its body: a success, a tool error (`isError: true`), a tool error carrying
-- Mendpoint's failure (`mendpoint/failure`), or anything else (a JSON-RPC error, a refusal).
-- The end-of-run JSON line is report.lua's, plus those counts. The environment names the tool
-- (MCP_TOOL: a peer may rename it) and headers the system needs (MCP_HEADERS: a JSON object
-- of plain strings, a bearer token say; bench/mcp_peers.py).

local sessions = {}
local n = 0
local headers = {}
local TOOL = os.getenv("MCP_TOOL") or "read_file"
local OK = '{"jsonrpc":"2.0","id":%d,"method":"tools/call",' ..
  '"params":{"name":"' .. TOOL .. '","arguments":{"path":"/srv/notes/note-%d.txt"}}}'
local FAIL = '{"jsonrpc":"2.0","id":%d,"method":"tools/call",' ..
  '"params":{"name":"' .. TOOL .. '","arguments":{"path":"/srv/notes/missing-%d.txt"}}}'
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  for _, id in ipairs(args) do
    table.insert(sessions, id)
  end
  if #sessions == 0 then
    table.insert(sessions, "-")
  end
  headers["Content-Type"] = "application/json"
  headers["Accept"] = "application/json, text/event-stream"
  headers["MCP-Protocol-Version"] = "2025-11-25"
  -- {"Name": "value", ...}: flat string pairs, read without a JSON library
  for name, value in string.gmatch(os.getenv("MCP_HEADERS") or "", '"([^"]+)":%s*"([^"]*)"') do
    headers[name] = value
  end
  ok, failed, upgraded, other = 0, 0, 0, 0
end

function request()
  n = n + 1
  -- pairs of calls (one success, one failure) go to each session in turn
  local session = sessions[(math.floor(n / 2) % #sessions) + 1]
  if session ~= "-" then
    headers["Mcp-Session-Id"] = session
  end
  local body = string.format(n % 2 == 0 and OK or FAIL, n, n)
  return wrk.format("POST", wrk.path, headers, body)
end

function response(status, _, body)
  if status ~= 200 or not string.find(body, '"result":', 1, true) then
    other = other + 1
  elseif not string.find(body, '"isError":%s*true') then
    ok = ok + 1
  elseif string.find(body, '"mendpoint/failure":', 1, true) then
    upgraded = upgraded + 1
  else
    failed = failed + 1
  end
end

function done(summary, latency, _)
  local t = threads[1]
  local e = summary.errors
  io.write(string.format(
    '\nBENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,' ..
    '"write":%d,"status":%d,"timeout":%d,"p50_us":%.0f,"p99_us":%.0f,' ..
    '"ok":%d,"failed":%d,"upgraded":%d,"other":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50), latency:percentile(99),
    t:get("ok"), t:get("failed"), t:get("upgraded"), t:get("other")))
end
