-- COPY_HELPERS: one of the relay's scripts; store/relay_scripts.rs says what it does and why.
local meta = {route = true, attempts = true, last_status = true, last_error = true,
  dead_lettered_at = true, entry_id = true}
local function original(id, fields)
  local out, entry_id = {}, id
  for i = 1, #fields, 2 do
    if fields[i] == 'entry_id' then
      entry_id = fields[i + 1]
    elseif not meta[fields[i]] then
      out[#out + 1] = fields[i]
      out[#out + 1] = fields[i + 1]
    end
  end
  return out, entry_id
end
