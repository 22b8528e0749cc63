-- Redis's Lua environment, built once per Lua state (scripting/vm.rs).
-- `priv` holds what Rust fills in (rcall, sha1, log, rand, resp) and what
-- Rust reads back (run, env, G); scripts never see it.
local priv = ...
local dbg, real = debug, _G
real.debug = nil
local G = {}
for _, n in ipairs({'assert', 'error', 'ipairs', 'next', 'pairs', 'pcall',
    'rawequal', 'rawget', 'select', 'setmetatable', 'getmetatable', 'tonumber',
    'tostring', 'type', 'unpack', 'xpcall', 'gcinfo', '_VERSION'}) do
  G[n] = real[n]
end

local function ro(t)
  return setmetatable({}, {__index = t, __metatable = false,
    __newindex = function() error('Attempt to modify a readonly table', 2) end})
end

-- Redis's error handler: every error becomes a table {err=...} with the
-- script's line where it was raised.
priv.handler = function(err)
  local info
  for lvl = 2, 40 do
    local i = dbg.getinfo(lvl, 'Sl')
    if not i then break end
    if i.source == '@user_script' then info = i; break end
  end
  if type(err) ~= 'table' then err = {err = 'ERR ' .. tostring(err)} end
  if info then err.source = info.source; err.line = info.currentline end
  return err
end
priv.run = function(f) return xpcall(f, priv.handler) end

local redis = {}
redis.call = function(...)
  local ok, r = priv.rcall(...)
  if not ok then error(r, 0) end
  return r
end
redis.pcall = function(...)
  local _, r = priv.rcall(...)
  return r
end
redis.sha1hex = function(...)
  if select('#', ...) ~= 1 then error('wrong number of arguments', 0) end
  return priv.sha1(tostring((...)))
end
redis.error_reply = function(e)
  if type(e) ~= 'string' then return {err = 'ERR wrong number or type of arguments'} end
  if e:sub(1, 1) == '-' then e = e:sub(2) end
  return {err = e}
end
redis.status_reply = function(s)
  if type(s) ~= 'string' then return {err = 'ERR wrong number or type of arguments'} end
  return {ok = s}
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.log = function(level, ...)
  if select('#', ...) < 1 then error('redis.log() requires two arguments or more.', 0) end
  if type(level) ~= 'number' or level < 0 or level > 3 then error('Invalid debug level.', 0) end
  local parts = {}
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    if type(v) == 'string' or type(v) == 'number' then parts[#parts + 1] = tostring(v) end
  end
  priv.log(level, table.concat(parts, ' '))
end
redis.setresp = function(...)
  if select('#', ...) ~= 1 then error('redis.setresp() requires one argument.', 0) end
  local v = ...
  if v ~= 2 and v ~= 3 then error('RESP version must be 2 or 3.', 0) end
  priv.resp = v
end
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.set_repl = function() end
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
-- Exposed through C trampolines (vm.rs) so a tail call keeps the line.
local reg = dbg.getregistry()
for _, n in ipairs({'call', 'pcall', 'sha1hex', 'setresp'}) do
  reg['l_' .. n] = redis[n]
  redis[n] = priv['c_' .. n]
end
redis.REDIS_VERSION = priv.version
redis.REDIS_VERSION_NUM = priv.version_num

local m = {}
for k, v in pairs(math) do m[k] = v end
m.random = function(...)
  local r, n = priv.rand(), select('#', ...)
  if n == 0 then return r end
  local l, u = 1, ...
  if n == 2 then l, u = ... elseif n > 2 then error('wrong number of arguments', 2) end
  if l > u then error("bad argument #" .. n .. " to 'random' (interval is empty)", 2) end
  return math.floor(r * (u - l + 1)) + l
end
m.randomseed = function(s) priv.seed(s) end

G.redis, G.math, G.string, G.table = ro(redis), ro(m), ro(string), ro(table)
G.bit = ro(priv.bit)
G.coroutine = ro(coroutine)

local env = setmetatable({}, {__metatable = false,
  __index = function(_, k)
    local v = rawget(G, k)
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end
    return v
  end,
  __newindex = function() error('Attempt to modify a readonly table', 2) end})
G._G = env
G.loadstring = function(s, name)
  local f, e = loadstring(s, name)
  if f then setfenv(f, env) end
  return f, e
end
priv.env, priv.G = env, G
