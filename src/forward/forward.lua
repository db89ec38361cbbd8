#!lua
-- forward.lua: atomic mode's forwarding script; src/forward/atomic.rs says what it takes,
-- what it returns and why each step comes where it does. Redis's Lua looks up every global
-- (KEYS, ARGV, redis, string) in a table each time it is named, so the script names each once,
-- as a local, and keeps per event only what differs between events.
local KEYS, ARGV, call, sub, unpack = KEYS, ARGV, redis.call, string.sub, unpack
local stream, ttl, max_len, source, provider = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local per = tonumber(ARGV[5])
local confirm = ARGV[6] == '1'
local count_duplicates = ARGV[7] == '1'
local verdicts = {}
-- Whether no record this call could read exists yet: one EXISTS over them all (in chunks, to
-- keep unpack within Lua's stack) instead of one GET per record, since under load nearly every
-- event is new. Then the only records a request can find are those an earlier request of this
-- call wrote, kept in `written`; otherwise each record is read with GET, as it stands. A call
-- of one record reads it with GET at once: an EXISTS there would save nothing for a new event
-- and cost a duplicate one more command.
local fresh = #KEYS > 2
if fresh then
  local from, total = 2, #KEYS
  while fresh and from <= total do
    local to = from + 3999
    if to > total then to = total end
    fresh = call('EXISTS', unpack(KEYS, from, to)) == 0
    from = to + 1
  end
end
local written = {}
local last = #ARGV
local a = 8
local k = 2
local v = 0
while a <= last do
  local received_at, content_type, n = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  a = a + 3
  -- One event per request is the rule (every provider but Adyen): no number to parse then.
  if n == '1' then n = 1 else n = tonumber(n) end
  local refused = false
  local found
  for i = 1, n do
    local key = KEYS[k + per * (i - 1)]
    local record
    if fresh then record = written[key] else record = call('GET', key) end
    if record then
      local fp = ARGV[a + 4 * (i - 1)]
      if sub(record, 1, 2) == 'p ' then
        verdicts[v + i] = 'x' .. record
        refused = true
      elseif sub(record, -#fp - 1) == ' ' .. fp then
        verdicts[v + i] = 'd' .. sub(record, 1, -#fp - 2)
        found = found or {}
        found[i] = {key, record}
        if count_duplicates then
          -- The event's duplicate arrivals (the console shows them): a hash beside the record,
          -- in its slot, expiring with it; written only for duplicates, so unique events pay
          -- nothing.
          local dups = (string.gsub(key, '}:d:', '}:n:', 1))
          call('HINCRBY', dups, 'count', 1)
          call('HSET', dups, 'last_at', received_at)
          local left = call('PTTL', key)
          if left > 0 then call('PEXPIRE', dups, left) end
        end
      else
        verdicts[v + i] = 'm'
        refused = true
      end
    elseif per == 2 then
      local body_key = KEYS[k + per * (i - 1) + 1]
      local seen
      if fresh then seen = written[body_key] else seen = call('GET', body_key) end
      if seen then
        verdicts[v + i] = 'b' .. string.match(seen, '^%S*')
        found = found or {}
        found[i] = {body_key, seen}
      end
    end
  end
  for i = 1, n do
    if found and found[i] and confirm and not refused then
      call('SET', found[i][1], found[i][2], 'KEEPTTL')
    end
    if verdicts[v + i] == nil then
      if refused then
        verdicts[v + i] = 'w'
      else
        local e = a + 4 * (i - 1)
        local at = k + per * (i - 1)
        local id
        if max_len == '0' then
          id = call('XADD', stream, '*',
            'source', source, 'provider', provider, 'event_id', ARGV[e + 1],
            'event_type', ARGV[e + 2], 'received_at', received_at, 'content_type', content_type,
            'body', ARGV[e + 3])
        else
          id = call('XADD', stream, 'MAXLEN', '~', max_len, '*',
            'source', source, 'provider', provider, 'event_id', ARGV[e + 1],
            'event_type', ARGV[e + 2], 'received_at', received_at, 'content_type', content_type,
            'body', ARGV[e + 3])
        end
        local done = id .. ' ' .. ARGV[e]
        call('SET', KEYS[at], done, 'PX', ttl)
        if per == 2 then
          call('SET', KEYS[at + 1], done, 'PX', ttl)
        end
        if fresh then
          written[KEYS[at]] = done
          if per == 2 then written[KEYS[at + 1]] = done end
        end
        -- The entry ID alone: it begins with a digit, every other verdict with a letter.
        verdicts[v + i] = id
      end
    end
  end
  a = a + 4 * n
  k = k + per * n
  v = v + n
end
return verdicts
