-- OWNED_ENTRY: one of the relay's scripts; store/relay_scripts.rs says what it does and why.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then
  return {}
end
local e = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3])
if #e == 1 then
  return e[1]
end
return {ARGV[3]}
