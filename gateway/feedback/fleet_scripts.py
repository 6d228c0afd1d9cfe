"""The Lua the fleet store runs: one script per write, atomic on the Redis server
(docs/operations.md#fleet; the callers are gateway.feedback.shared).

Each takes one argument, a table `a` (a JSON object in the batch's plan). An open failure
is stored as JSON under `{p}:fu:open:<key>` with its request id, route, code, rule, digests,
whether it is retryable, its advised delay, and three Unix-millisecond times: when its
request started, when it was answered, and when its chain of failures began. Outcomes
follow the table of gateway.feedback.followups.decide.

- `open`: stores a failure, counts it, and publishes it. One already under the key is settled
  as followed by this one (or, when its news came later than this one's, as its follow-up);
  a success remembered under `{p}:fu:ok:<key>` that began after this failure settles it.
- `follow`: settles the failure a request follows: the one the replica matched, if still
  open; else the latest under the key that began before the request. A success that finds
  none is remembered for a few seconds, for the failure whose news is on its way.
- `sweep`: failures past their deadline, counted abandoned once.
- `gap`: an unmatched signature in a bounded top-N (space-saving, its sample dropped with
  it), counted in its time bucket's sorted set (at most the table's capacity of members),
  and its redacted sample kept when one comes with it (gateway.feedback.signatures).
- `publish`: an event for the other replicas as it is (what a `tools/list` said of its tools'
  annotations, gateway.mcp.tool_hints), kept nowhere.

They are sent as one script, `batch_script`: a process's queued writes go in one EVALSHA,
each run in order inside Redis as a function of its own (its keys and arguments as they
would be alone), isolated by `pcall`, the results answered as one JSON list. One command per
batch, not one per write: redis-py's per-command cost is paid on the gateway's event loop.
Likewise the events: `publish(channel, text, from)` collects them, and the batch sends one
PUBLISH per channel, `<sender>\x1f<a JSON list of its events in order>`: the sender is the
replica every event is from, or empty when any is for every replica, its sender included
(`from` empty). Every subscriber reads one message per batch instead of one per failure, and
the sender drops its own unread (the error path's cost with a store, docs/performance.md).
"""

from __future__ import annotations

SCRIPTS = {
    "open": """
local e, sep = a.entry, a.sep
local function count(route, code, field)
  redis.call('HINCRBY', KEYS[3], route .. sep .. code .. sep .. field, 1)
end
local function decide(p, f)  -- p followed up by f, a failure (gateway.feedback.followups.decide)
  if p.identity == f.identity then
    if not p.retryable then return 'retried_unchanged' end
    if f.started_wall_ms - p.answered_wall_ms < p.retry_after_ms then
      return 'retried_too_early'
    end
    return 'retried_as_advised'
  end
  if f.code == p.code then return 'failed_again_same_code' end
  return 'failed_differently'
end
local function opened(f)
  count(f.route, f.code, 'failures')
  redis.call('HSET', KEYS[4], f.route .. sep .. f.code .. sep, f.rule)
  redis.call('EXPIRE', KEYS[3], a.counts_ttl_s)
  redis.call('EXPIRE', KEYS[4], a.counts_ttl_s)
end
local settled = false
local found = redis.call('GET', KEYS[1])
if found then
  local p = cjson.decode(found)
  if p.request_id == e.request_id then return false end  -- a replay of a write that landed
  if p.started_wall_ms > e.started_wall_ms then
    -- This failure's news is later than its follow-up's: p follows e, and stays open.
    opened(e)
    local outcome = decide(e, p)
    count(e.route, e.code, outcome)
    if e.chain_wall_ms < p.chain_wall_ms then
      p.chain_wall_ms = e.chain_wall_ms
      redis.call('SET', KEYS[1], cjson.encode(p), 'KEEPTTL')
    end
    publish(KEYS[5], cjson.encode({op = 'open', from = '', entry = p}), '')
    return {e.route, e.code, outcome}
  end
  local outcome = 'abandoned'
  if e.started_wall_ms - p.answered_wall_ms <= a.window_ms then
    outcome = decide(p, e)
    e.chain_wall_ms = p.chain_wall_ms
  end
  count(p.route, p.code, outcome)
  settled = {p.route, p.code, outcome}
end
opened(e)
local ok = redis.call('GET', KEYS[6])
if ok then  -- a success that began after this failure, heard of first: its follow-up
  local s = cjson.decode(ok)
  if s.started_wall_ms > e.started_wall_ms
      and s.started_wall_ms - e.answered_wall_ms <= a.window_ms then
    redis.call('DEL', KEYS[6])
    local outcome = 'recovered'
    if s.identity == e.identity then
      outcome = e.retryable and 'retried_as_advised' or 'retried_unchanged'
    end
    count(e.route, e.code, outcome)
    local recovery_ms = math.max(0, s.now_ms - e.chain_wall_ms)
    local samples = KEYS[7] .. e.route .. sep .. e.code
    redis.call('LPUSH', samples, recovery_ms)
    redis.call('LTRIM', samples, 0, a.samples - 1)
    redis.call('EXPIRE', samples, a.counts_ttl_s)
    publish(KEYS[5], cjson.encode({op = 'close', from = '', key = a.key,
      request_id = e.request_id}), '')
    if settled then return {settled[1], settled[2], settled[3], e.route, e.code, outcome} end
    return {e.route, e.code, outcome}
  end
end
redis.call('SET', KEYS[1], cjson.encode(e), 'PX', a.ttl_ms)
redis.call('ZADD', KEYS[2], a.deadline_ms, a.key)
publish(KEYS[5], cjson.encode({op = 'open', from = a.from, entry = e}), a.from)
return settled
""",
    "follow": """
local f, sep = a.attempt, a.sep
local found = redis.call('GET', KEYS[1])
local p = found and cjson.decode(found)
local outcome = false
if p and a.request_id ~= cjson.null and p.request_id == a.request_id then
  outcome = a.outcome  -- the failure the replica matched: its decision
elseif p and p.started_wall_ms < f.started_wall_ms
    and f.started_wall_ms - p.answered_wall_ms <= a.window_ms then
  -- A later failure under the key, whose news had not reached the replica: this request
  -- follows that one (gateway.followups.decide).
  if p.identity == f.identity then
    if not p.retryable then outcome = 'retried_unchanged'
    elseif f.status < 400 then outcome = 'retried_as_advised'
    elseif f.started_wall_ms - p.answered_wall_ms < p.retry_after_ms then
      outcome = 'retried_too_early'
    else outcome = 'retried_as_advised' end
  elseif f.status < 400 then outcome = 'recovered'
  elseif f.code == p.code then outcome = 'failed_again_same_code'
  else outcome = 'failed_differently' end
end
if not outcome then
  if f.status < 400 then
    -- The failure it follows may still be on its way: the open that brings it finds this
    -- success and settles it (a few seconds' memory).
    redis.call('SET', KEYS[6], cjson.encode({identity = f.identity,
      started_wall_ms = f.started_wall_ms, now_ms = a.now_ms}), 'PX', a.remember_ms)
  end
  return false
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], a.key)
redis.call('HINCRBY', KEYS[3], p.route .. sep .. p.code .. sep .. outcome, 1)
redis.call('EXPIRE', KEYS[3], a.counts_ttl_s)
local recovery_ms = ''
if f.status < 400 then
  recovery_ms = math.max(0, a.now_ms - p.chain_wall_ms)
  local samples = KEYS[4] .. p.route .. sep .. p.code
  redis.call('LPUSH', samples, recovery_ms)
  redis.call('LTRIM', samples, 0, a.samples - 1)
  redis.call('EXPIRE', samples, a.counts_ttl_s)
end
publish(KEYS[5], cjson.encode({op = 'close', from = a.from, key = a.key,
  request_id = p.request_id}), a.from)
return {p.route, p.code, outcome, tostring(recovery_ms)}
""",
    "sweep": """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', a.now_ms, 'LIMIT', 0, a.limit)
local out = {}
for _, key in ipairs(due) do
  redis.call('ZREM', KEYS[1], key)
  local found = redis.call('GET', a.open_prefix .. key)
  if found then
    local e = cjson.decode(found)
    if e.answered_wall_ms + a.window_ms <= a.now_ms then
      redis.call('DEL', a.open_prefix .. key)
      redis.call('HINCRBY', KEYS[2], e.route .. a.sep .. e.code .. a.sep .. 'abandoned', 1)
      table.insert(out, e.route)
      table.insert(out, e.code)
    else  -- a later failure under the key: due at its own deadline
      redis.call('ZADD', KEYS[1], e.answered_wall_ms + a.window_ms, key)
    end
  end
end
return out
""",
    "gap": """
if redis.call('ZSCORE', KEYS[1], a.member) then
  redis.call('ZINCRBY', KEYS[1], 1, a.member)
elseif redis.call('ZCARD', KEYS[1]) < a.capacity then
  redis.call('ZADD', KEYS[1], 1, a.member)
else
  local floor = redis.call('ZPOPMIN', KEYS[1], 1)
  redis.call('HDEL', KEYS[2], floor[1])
  redis.call('ZADD', KEYS[1], tonumber(floor[2]) + 1, a.member)
end
if redis.call('ZSCORE', KEYS[3], a.member) or redis.call('ZCARD', KEYS[3]) < a.capacity then
  redis.call('ZINCRBY', KEYS[3], 1, a.member)
end
redis.call('EXPIRE', KEYS[3], a.bucket_ttl_s)
if a.sample then redis.call('HSET', KEYS[2], a.member, a.sample) end
redis.call('EXPIRE', KEYS[1], a.counts_ttl_s)
redis.call('EXPIRE', KEYS[2], a.counts_ttl_s)
return 1
""",
    "publish": """
publish(KEYS[1], a.event, a.from)
return 1
""",
}


PUBLISHED = """local published, channels, sender, SEP = {}, {}, {}, '\\31'
local function publish(channel, text, from)  -- one event's JSON, sent with the batch's others
  local events = published[channel]
  if not events then
    events = {}
    published[channel] = events
    table.insert(channels, channel)
    sender[channel] = from
  end
  if sender[channel] ~= from then sender[channel] = '' end  -- also for another replica
  table.insert(events, text)
end
"""


def batch_script(scripts: dict[str, str]) -> str:
    """One script running a list of `[name, key places, argument]` calls of `scripts`, each
    over the keys at those places of KEYS (1-based; a key several calls name is sent once);
    answers a JSON pair: the list of results, an error as `{"err": text}`, and the messages
    to publish, `[channel, text]` each. The gateway signs and publishes those itself: the
    fleet's key never reaches Redis (docs/security.md#fleet-store). Each argument is an
    object inside the plan, not JSON text of its own: encoded once on the gateway (json.dumps
    of the plan) and decoded once in Redis."""
    handlers = "".join(
        f"handlers[{name!r}] = function(KEYS, a)\n{text.strip()}\nend\n"
        for name, text in scripts.items()
    )
    return (
        "local handlers = {}\n"
        + PUBLISHED
        + handlers
        + """local plan = cjson.decode(ARGV[1])
local out = {}
for i, call in ipairs(plan) do
  local keys = {}
  for j, at in ipairs(call[2]) do keys[j] = KEYS[at] end
  local ok, result = pcall(handlers[call[1]], keys, call[3])
  if not ok then
    result = {err = type(result) == 'table' and tostring(result.err) or tostring(result)}
  elseif result == nil then
    result = false
  end
  out[i] = result
end
local messages = {}
for _, channel in ipairs(channels) do
  table.insert(messages, {channel,
    sender[channel] .. SEP .. '[' .. table.concat(published[channel], ',') .. ']'})
end
return cjson.encode({out, messages})
"""
    )
