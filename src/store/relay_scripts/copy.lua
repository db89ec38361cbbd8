-- COPY: one of the relay's scripts; store/relay_scripts.rs says what it does and why.
local copied = {}
for i = 2, #ARGV do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #e == 1 then
    local fields, entry_id = original(ARGV[i], e[1][2])
    fields[#fields + 1] = 'entry_id'
    fields[#fields + 1] = entry_id
    redis.call('XADD', KEYS[2], '*', unpack(fields))
    if ARGV[1] == '1' then
      redis.call('XDEL', KEYS[1], ARGV[i])
    end
    copied[#copied + 1] = ARGV[i]
  end
end
return copied
