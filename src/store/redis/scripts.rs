//! The Lua scripts: each runs atomically in Redis, so a step that must
//! not be split (append + seq + publish, take a lease + check the journal,
//! count a connection) is one script call.

/// The append script. KEYS: events stream, meta hash, tenant index, running
/// set, run lease, idempotency key. ARGV: the writing process's instance id,
/// member, channel, the publishing command (`PUBLISH`, or `SPUBLISH` on a
/// cluster: the channel is in the thread's slot), event count, creator, agent, status, created
/// ms, updated ms, run boundary (`1`/`0`), base seq ('' = none), base
/// snapshot, fence ('' = none), control channel, the META event id under the
/// idempotency key ('' = none), the journal's epoch the writer knows ('' =
/// none known), the last seq it knows durable, a new epoch (for a journal
/// that has none yet), then the events.
/// First the journal must be the one the writer knows ([`super::epochs`]):
/// same epoch, not ending before what it has seen; otherwise `{4, epoch}`
/// (the stored epoch, '' if none) and nothing changes.
/// A META event whose idempotency key is taken is not appended: `{3, id}`
/// answers with the first one's id (keys live a day: retries come within
/// seconds). The events get the seqs after the stored last one. A
/// fenced batch that ends its run also releases the run's lease, in the same
/// step (the thread takes a new run the moment its last one is over). A
/// compacted base is stored only when it is newer than the stored one and
/// not past the journal's end. The publication names the journal's epoch.
/// Returns `{1, first seq, epoch}`, or `{2, 0, ''}` when the fence is not
/// the current lease.
pub(super) const APPEND: &str = r#"
local epoch = redis.call('HGET', KEYS[2], 'epoch')
local last = tonumber(redis.call('HGET', KEYS[2], 'last_seq') or '0')
if ARGV[17] ~= '' and (epoch ~= ARGV[17] or last < tonumber(ARGV[18])) then
  return {4, epoch or '', ''}
end
if ARGV[14] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[14] then
  return {2, 0, ''}
end
if ARGV[16] ~= '' then
  local prior = redis.call('GET', KEYS[6])
  if prior then
    return {3, prior, ''}
  end
  redis.call('SET', KEYS[6], ARGV[16], 'EX', 86400)
end
if not epoch then
  epoch = ARGV[19]
  redis.call('HSET', KEYS[2], 'epoch', epoch)
end
local n = tonumber(ARGV[5])
local first = last + 1
local payload = {ARGV[1], '\n', ARGV[2], '\n', tostring(first), '\n', epoch, '\n'}
for i = 1, n do
  local json = ARGV[19 + i]
  redis.call('XADD', KEYS[1], (first + i - 1) .. '-0', 'e', json)
  payload[#payload + 1] = #json .. ':' .. json
end
redis.call('HSETNX', KEYS[2], 'creator', ARGV[6])
redis.call('HSETNX', KEYS[2], 'created_ms', ARGV[9])
redis.call('HSET', KEYS[2], 'updated_ms', ARGV[10], 'last_seq', last + n)
if ARGV[11] == '1' then
  redis.call('HSET', KEYS[2], 'agent', ARGV[7], 'status', ARGV[8])
  if ARGV[8] == 'running' then
    redis.call('SADD', KEYS[4], ARGV[2])
  else
    redis.call('SREM', KEYS[4], ARGV[2])
  end
end
redis.call('ZADD', KEYS[3], ARGV[10], ARGV[2])
if ARGV[11] == '1' and ARGV[8] ~= 'running' and ARGV[14] ~= '' then
  redis.call('DEL', KEYS[5])
  redis.call('PUBLISH', ARGV[15], 'released\n' .. ARGV[2] .. '\n')
end
-- A base only moves forward: a node whose copy lags must never put an
-- older fold over a newer one (the events between are trimmed already).
if ARGV[12] ~= '' and tonumber(ARGV[12]) > tonumber(redis.call('HGET', KEYS[2], 'base_seq') or '0')
    and tonumber(ARGV[12]) <= last + n then
  redis.call('HSET', KEYS[2], 'base_seq', ARGV[12], 'base', ARGV[13])
  redis.call('XTRIM', KEYS[1], 'MINID', (tonumber(ARGV[12]) + 1) .. '-0')
end
if n > 0 then
  redis.call(ARGV[4], ARGV[3], table.concat(payload))
end
return {1, first, epoch}
"#;

/// Takes a run lease. KEYS: lease, meta hash, tenant index. ARGV: lease
/// value, time to live (ms), the last seq the caller has seen, creator,
/// now (ms), member, the run's agent ('' = leave as is), the epoch of a
/// new journal ([`super::epochs`]). A new thread is
/// recorded at once (so a viewer on any node finds it as soon as its first
/// run is accepted), and so is the run's agent (whose visibility rules
/// apply to what a node loading the thread from now on shows its viewers).
/// A thread still `running` with no lease (its node stopped mid-run: the
/// lease expired before a sweeper closed the run) is granted too, but
/// answered `{3, ''}`: the caller closes that run first, under this lease
/// ([`crate::store::lease::Acquired::Abandoned`]); the run's agent is not
/// recorded then (the closer's batch comes first).
/// Returns `{1, ''}` granted, `{0, holder}` held, `{2, ''}` the journal
/// moved on, `{3, ''}` granted over an abandoned run.
pub(super) const ACQUIRE: &str = r#"
local held = redis.call('GET', KEYS[1])
if held then
  return {0, held}
end
local last = tonumber(redis.call('HGET', KEYS[2], 'last_seq') or '0')
if last ~= tonumber(ARGV[3]) then
  return {2, ''}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('HSETNX', KEYS[2], 'creator', ARGV[4]) == 1 then
  redis.call('HSET', KEYS[2], 'created_ms', ARGV[5], 'updated_ms', ARGV[5], 'last_seq', 0, 'status', 'idle', 'epoch', ARGV[8])
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[6])
end
if redis.call('HGET', KEYS[2], 'status') == 'running' then
  return {3, ''}
end
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[2], 'agent', ARGV[7])
end
return {1, ''}
"#;

/// The node's heartbeat: records it alive (for connection counts) and
/// renews the leases it holds. KEYS: live-nodes sorted set, then the
/// leases; ARGV: time to live (ms), this process's instance id, then each
/// lease's value. Returns 1 per lease still held, 0 per lost. On a cluster
/// the leases of each slot group are renewed apart (one slot per call):
/// the instance id is then '' and KEYS[1] any key of the group, untouched.
pub(super) const RENEW: &str = r#"
if ARGV[2] ~= '' then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000), ARGV[2])
end
local out = {}
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    out[i - 1] = 1
  else
    out[i - 1] = 0
  end
end
return out
"#;

/// GCRA rate budget. KEYS: the budget; ARGV: emission interval (ms), burst
/// window (ms). Returns 0 when taken, else the milliseconds to wait.
pub(super) const TAKE: &str = r#"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next_tat = tat + interval
if next_tat - now > window then
  return next_tat - now - window
end
redis.call('SET', KEYS[1], next_tat, 'PX', next_tat - now)
return 0
"#;

/// Opens a counted connection. KEYS: the key's counts per instance, the
/// live-nodes set; ARGV: instance id, limit, staleness (ms). Counts of
/// instances without a recent heartbeat are dropped. Returns 1 opened, 0 at
/// the limit.
pub(super) const OPEN: &str = r#"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local counts = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #counts, 2 do
  local seen = tonumber(redis.call('ZSCORE', KEYS[2], counts[i]) or '0')
  if counts[i] == ARGV[1] or seen >= now - tonumber(ARGV[3]) then
    total = total + tonumber(counts[i + 1])
  else
    redis.call('HDEL', KEYS[1], counts[i])
  end
end
if total >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
return 1
"#;

/// Closes a counted connection. KEYS: the key's counts; ARGV: instance id.
pub(super) const CLOSE: &str = r#"
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 1
"#;

/// Releases a lease if it is still the caller's. KEYS: lease; ARGV: value.
pub(super) const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;
