-- ACK_OWNED: one of the relay's scripts; store/relay_scripts.rs says what it does and why.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
if ARGV[4] == '1' then
  redis.call('XDEL', KEYS[1], ARGV[3])
end
return 1
