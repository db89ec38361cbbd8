#!lua
-- forward.lua: atomic mode's forwarding script; src/forward/atomic.rs says what it takes,
-- what it returns and why each step comes where it does.
local per = tonumber(ARGV[5])
local confirm = ARGV[6] == '1'
local count_duplicates = ARGV[7] == '1'
local verdicts = {}
local a = 8
local k = 2
local v = 0
while a <= #ARGV do
  local received_at, content_type, n = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local refused = false
  local found = {}
  for i = 1, n do
    local fp = ARGV[a + 4 * (i - 1)]
    local key = k + per * (i - 1)
    local record = redis.call('GET', KEYS[key])
    if record then
      if string.sub(record, 1, 2) == 'p ' then
        verdicts[v + i] = 'x' .. record
        refused = true
      elseif string.sub(record, -#fp - 1) == ' ' .. fp then
        verdicts[v + i] = 'd' .. string.sub(record, 1, -#fp - 2)
        found[i] = {KEYS[key], record}
        if count_duplicates then
          -- The event's duplicate arrivals (the console shows them): a hash beside the record,
          -- in its slot, expiring with it; written only for duplicates, so unique events pay
          -- nothing.
          local dups = (string.gsub(KEYS[key], '}:d:', '}:n:', 1))
          redis.call('HINCRBY', dups, 'count', 1)
          redis.call('HSET', dups, 'last_at', received_at)
          local ttl = redis.call('PTTL', KEYS[key])
          if ttl > 0 then redis.call('PEXPIRE', dups, ttl) end
        end
      else
        verdicts[v + i] = 'm'
        refused = true
      end
    elseif per == 2 then
      local seen = redis.call('GET', KEYS[key + 1])
      if seen then
        verdicts[v + i] = 'b' .. string.match(seen, '^%S*')
        found[i] = {KEYS[key + 1], seen}
      end
    end
  end
  for i = 1, n do
    if found[i] and confirm and not refused then
      redis.call('SET', found[i][1], found[i][2], 'KEEPTTL')
    end
    if verdicts[v + i] == nil then
      if refused then
        verdicts[v + i] = 'w'
      else
        local e = a + 4 * (i - 1)
        local key = k + per * (i - 1)
        local id
        if ARGV[2] == '0' then
          id = redis.call('XADD', KEYS[1], '*',
            'source', ARGV[3], 'provider', ARGV[4], 'event_id', ARGV[e + 1],
            'event_type', ARGV[e + 2], 'received_at', received_at, 'content_type', content_type,
            'body', ARGV[e + 3])
        else
          id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*',
            'source', ARGV[3], 'provider', ARGV[4], 'event_id', ARGV[e + 1],
            'event_type', ARGV[e + 2], 'received_at', received_at, 'content_type', content_type,
            'body', ARGV[e + 3])
        end
        local done = id .. ' ' .. ARGV[e]
        redis.call('SET', KEYS[key], done, 'PX', ARGV[1])
        if per == 2 then
          redis.call('SET', KEYS[key + 1], done, 'PX', ARGV[1])
        end
        verdicts[v + i] = 'n' .. id
      end
    end
  end
  a = a + 4 * n
  k = k + per * n
  v = v + n
end
return verdicts
