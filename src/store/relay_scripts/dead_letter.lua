-- DEAD_LETTER: one of the relay's scripts; store/relay_scripts.rs says what it does and why.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then
  return 0
end
local e = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3])
local fields, entry_id = {}, ARGV[3]
if #e == 1 then
  fields, entry_id = original(ARGV[3], e[1][2])
end
for _, kv in ipairs({{'route', ARGV[4]}, {'entry_id', entry_id}, {'attempts', ARGV[5]},
    {'last_status', ARGV[6]}, {'last_error', ARGV[7]}, {'dead_lettered_at', ARGV[8]}}) do
  fields[#fields + 1] = kv[1]
  fields[#fields + 1] = kv[2]
end
redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
if ARGV[9] == '1' then
  redis.call('XDEL', KEYS[1], ARGV[3])
end
return 1
