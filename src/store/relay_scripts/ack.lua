-- ACK: one of the relay's scripts; store/relay_scripts.rs says what it does and why.
local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] == '1' then
  redis.call('XDEL', KEYS[1], ARGV[2])
end
return n
