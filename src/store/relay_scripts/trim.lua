-- TRIM: one of the relay's scripts; store/relay_scripts.rs says what it does and why.
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if type(groups) ~= 'table' or groups.err or #groups == 0 then
  return 0
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local best_ms, best_seq
local function consider(ms, seq)
  if best_ms == nil or ms < best_ms or (ms == best_ms and seq < best_seq) then
    best_ms, best_seq = ms, seq
  end
end
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do
    info[g[i]] = g[i + 1]
  end
  local ms, seq = parse(info['last-delivered-id'])
  consider(ms, seq + 1)
  if tonumber(info['pending']) > 0 then
    local first = redis.call('XPENDING', KEYS[1], info['name'])[2]
    local pms, pseq = parse(first)
    consider(pms, pseq)
  end
end
return redis.call('XTRIM', KEYS[1], 'MINID', string.format('%d-%d', best_ms, best_seq))
