-- Redis's Lua environment, built once per Lua state (scripting/vm.rs).
-- `priv` holds what Rust fills in (c_call, sha1, log, rand, modes, libraries)
-- and what Rust reads back (run, env, G); scripts never see it.
--
-- Redis protects its globals and libraries with a readonly flag its
-- patched Lua keeps on tables; ours is stock Lua 5.1, so scripts see
-- read-only views instead: an empty table whose metatable reads through to
-- the real one (views of nested tables on the way) and refuses writes.
-- setmetatable, rawset, rawget, getmetatable, next and pairs know views, so
-- the tricks Redis's tests try fail the same way.
local priv = ...
local dbg, real = debug, _G
real.debug = nil
local rawgetmt, rawsetmt, rawnext, rawpairs = getmetatable, setmetatable, next, pairs
local rawset_, rawget_, type_, error_ = rawset, rawget, type, error

local view_of = rawsetmt({}, {__mode = 'k'})   -- real table -> its view
local real_of = rawsetmt({}, {__mode = 'k'})   -- view -> real table
local meta_view = rawsetmt({}, {__mode = 'k'}) -- view -> what getmetatable shows

local function readonly_error() error_('Attempt to modify a readonly table', 2) end

-- A view's reads are cached in a table its __index points to (a missing
-- key falls through to the function): a second read of redis.call is a
-- table lookup done by the VM, not a Lua call. The tables behind views
-- (globals' libraries, redis, metatables) do not change once built.
local function ro(t)
  local v = view_of[t]
  if v then return v end
  v = {}
  local seen = rawsetmt({}, {
    __index = function(c, k)
      local x = t[k]
      if type_(x) == 'table' and not real_of[x] then x = ro(x) end
      if x ~= nil then rawset_(c, k, x) end
      return x
    end,
  })
  rawsetmt(v, {
    __index = seen,
    __newindex = readonly_error,
    __metatable = false,
  })
  view_of[t], real_of[v] = v, t
  return v
end
priv.ro = ro

local G = {}
for _, n in ipairs({'assert', 'error', 'ipairs', 'pcall', 'rawequal', 'select',
    'tonumber', 'tostring', 'type', 'xpcall', 'gcinfo', 'collectgarbage',
    '_VERSION'}) do
  G[n] = real[n]
end

-- A killed script stays killed: pcall does not keep it alive (Redis's
-- line hook raises the error again after every pcall).
local real_pcall, real_xpcall = pcall, xpcall
local function rekill(ok, ...)
  if not ok and priv.killed then error_(priv.killed, 0) end
  return ok, ...
end
G.pcall = function(...) return rekill(real_pcall(...)) end
G.xpcall = function(...) return rekill(real_xpcall(...)) end

G.setmetatable = function(t, mt)
  if real_of[t] then error_('Attempt to modify a readonly table', 0) end
  return rawsetmt(t, mt)
end
G.rawset = function(t, k, v)
  if real_of[t] then error_('Attempt to modify a readonly table', 0) end
  return rawset_(t, k, v)
end
G.rawget = function(t, k)
  local r = real_of[t]
  if r then
    local x = rawget_(r, k)
    if type_(x) == 'table' then return ro(x) end
    return x
  end
  return rawget_(t, k)
end
local string_meta = rawgetmt('')
G.getmetatable = function(o)
  if real_of[o] then return meta_view[o] end
  if type_(o) == 'string' then return ro(string_meta) end
  return rawgetmt(o)
end
local function view_next(t, k)
  local r = real_of[t]
  if not r then return rawnext(t, k) end
  local k2, x = rawnext(r, k)
  if type_(x) == 'table' then x = ro(x) end
  return k2, x
end
G.next = view_next
G.pairs = function(t)
  if real_of[t] then return view_next, t, nil end
  return rawpairs(t)
end

-- unpack: stock 5.1 computes the count in an int that can overflow (what
-- Redis patched, CVE-2025-46817): refuse such ranges before it runs.
local real_unpack = unpack
G.unpack = function(...)
  local t, i, j = ...
  if type_(t) == 'table' then
    local a = tonumber(i) or 1
    local b = tonumber(j) or #t
    if a <= b and b - a >= 2147483647 then
      error_('too many results to unpack', 3)
    end
  end
  -- as many arguments as given: they count against the C stack's limit
  return real_unpack(...)
end

-- Redis's error handler: every error becomes a table {err=...} with the
-- script's line where it was raised.
priv.handler = function(err)
  local info
  for lvl = 2, 40 do
    local i = dbg.getinfo(lvl, 'Sl')
    if not i then break end
    if i.source == '@user_script' or i.source == '@user_function' then info = i; break end
  end
  if priv.killed then
    err = {err = priv.killed.err}
  elseif type_(err) ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  end
  if info then err.source = info.source; err.line = info.currentline end
  return err
end
-- The run's modes: [1] the protocol (redis.setresp), [2] the replication
-- (redis.set_repl). redis.call and redis.pcall (C functions, stack.rs) read
-- them from this table, their environment.
local modes = priv.modes
-- Every run (stack.rs's run_script and run_function, C functions) starts
-- with redis.setresp and set_repl's modes and the kill reset, and returns
-- the protocol with its result. (redis.call and acl_check_cmd act on the
-- run Rust binds; outside one they fail.)

-- An error reply as redis.pcall returns it (luaPushErrorBuff): "-CODE msg"
-- keeps its code, anything else gets ERR.
local function error_table(e)
  if e:sub(1, 1) == '-' then
    local sp = e:find(' ', 1, true)
    if sp then
      e = e:sub(2, sp - 1) .. ' ' .. e:sub(sp + 1)
    else
      e = 'ERR ' .. e:sub(2)
    end
  else
    e = 'ERR ' .. e
  end
  return {err = (e:gsub('[\r\n]+$', ''))}
end

local redis = {}
redis.sha1hex = function(...)
  if select('#', ...) ~= 1 then error_({err = 'ERR wrong number of arguments'}, 0) end
  return priv.sha1(tostring((...)))
end
redis.error_reply = function(...)
  local e = ...
  if select('#', ...) ~= 1 or type_(e) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  if e:sub(1, 1) ~= '-' then e = '-' .. e end
  return error_table(e)
end
redis.status_reply = function(...)
  local s = ...
  if select('#', ...) ~= 1 or type_(s) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {ok = s}
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.log = function(...)
  local n = select('#', ...)
  if n < 2 then error_({err = 'ERR redis.log() requires two arguments or more.'}, 0) end
  local level = ...
  if type_(level) ~= 'number' then
    error_({err = 'ERR First argument must be a number (log level).'}, 0)
  end
  if level < 0 or level > 3 then error_({err = 'ERR Invalid debug level.'}, 0) end
  local parts = {}
  for i = 2, n do
    local v = select(i, ...)
    if type_(v) == 'string' or type_(v) == 'number' then parts[#parts + 1] = tostring(v) end
  end
  priv.log(level, table.concat(parts, ' '))
end
redis.setresp = function(...)
  if select('#', ...) ~= 1 then error_({err = 'ERR redis.setresp() requires one argument.'}, 0) end
  local v = tonumber((...))
  if v ~= 2 and v ~= 3 then error_({err = 'ERR RESP version must be 2 or 3.'}, 0) end
  modes[1] = v
end
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.set_repl = function(...)
  if select('#', ...) ~= 1 then error_({err = 'ERR redis.set_repl() requires two arguments.'}, 0) end
  local v = tonumber((...)) or 0
  if v < 0 or v > 3 or v % 1 ~= 0 then
    error_({err = 'ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.'}, 0)
  end
  modes[2] = v
end
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
redis.acl_check_cmd = function(...)
  local ok, r = priv.bound_acl_check(select('#', ...), {...})
  if not ok then error_(r, 0) end
  return r
end
-- Exposed through C trampolines (vm.rs) so a tail call keeps the line;
-- redis.call and redis.pcall are C functions themselves (stack.rs).
local reg = dbg.getregistry()
for _, n in ipairs({'sha1hex', 'setresp', 'acl_check_cmd', 'log', 'set_repl'}) do
  reg['l_' .. n] = redis[n]
  redis[n] = priv['c_' .. n]
end
redis.call, redis.pcall = priv.c_call, priv.c_pcall
reg.l_unpack = G.unpack
G.unpack = priv.c_unpack
redis.REDIS_VERSION = priv.version
redis.REDIS_VERSION_NUM = priv.version_num
priv.redis = redis

local m = {}
for k, v in rawpairs(math) do m[k] = v end
m.random = function(...)
  local r, n = priv.rand(), select('#', ...)
  if n == 0 then return r end
  local l, u = 1, ...
  if n == 2 then l, u = ... elseif n > 2 then error_('wrong number of arguments', 2) end
  if l > u then error_("bad argument #" .. n .. " to 'random' (interval is empty)", 2) end
  return math.floor(r * (u - l + 1)) + l
end
m.randomseed = function(s) priv.seed(s) end

-- cjson: Rust returns (ok, value or message); raise the message as the C
-- library's luaL_error does.
if priv.cjson_raw then
  local cj = {}
  for k, f in rawpairs(priv.cjson_raw) do
    if type_(f) == 'function' then
      cj[k] = function(...)
        local ok, r = f(...)
        if not ok then error_(r, 2) end
        return r
      end
    else
      cj[k] = f
    end
  end
  cj._NAME, cj._VERSION = 'cjson', '2.1.0'
  -- Through C trampolines (vm.rs), so a tail call keeps the script's line.
  local reg = dbg.getregistry()
  for _, n in ipairs({'encode', 'decode'}) do
    local f = priv.cjson_raw[n]
    reg['l_cjson_' .. n] = function(...)
      local ok, r = f(...)
      if not ok then error_(r, 3) end
      return r
    end
    cj[n] = priv['c_cjson_' .. n]
  end
  priv.cjson = cj
end

-- cmsgpack: the same convention, with any number of results.
if priv.cmsgpack_raw then
  local function check(ok, ...)
    if not ok then error_((...), 3) end
    return ...
  end
  local mp = {}
  for k, f in rawpairs(priv.cmsgpack_raw) do
    mp[k] = function(...) return check(f(...)) end
  end
  mp._NAME, mp._VERSION = 'cmsgpack', 'lua-cmsgpack 0.4.0'
  priv.cmsgpack = mp
end

G.redis, G.math, G.string, G.table = redis, m, string, table
G.coroutine = coroutine
for _, lib in ipairs({'bit', 'cjson', 'cmsgpack', 'struct'}) do
  if priv[lib] then G[lib] = priv[lib] end
end

-- Chunks loaded by a script run in the script's environment; binary
-- chunks are refused (Redis's Lua has no undump).
local real_loadstring, real_load, real_setfenv = loadstring, load, setfenv
local env
G.loadstring = function(s, name)
  if type_(s) == 'string' and s:byte(1) == 27 then
    return nil, 'binary chunks are not allowed'
  end
  local f, e = real_loadstring(s, name)
  if f then real_setfenv(f, env) end
  return f, e
end
G.load = function(reader, name)
  local first, binary = true, false
  local f, e = real_load(function()
    local p = reader()
    if first and type_(p) == 'string' and #p > 0 then
      first = false
      if p:byte(1) == 27 then binary = true; return nil end
    end
    return p
  end, name)
  if binary then return nil, 'binary chunks are not allowed' end
  if f then real_setfenv(f, env) end
  return f, e
end

local function missing(_, k)
  error_("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end
-- KEYS and ARGV are the script's own tables, as in Redis.
local own = {KEYS = true, ARGV = true}
env = {}
-- What env has shown, cached as in ro(); not KEYS and ARGV (new each run).
local env_seen = rawsetmt({}, {
  __index = function(c, k)
    local v = rawget_(G, k)
    if v == nil then
      error_("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end
    if own[k] then return v end
    if type_(v) == 'table' and not real_of[v] then v = ro(v) end
    rawset_(c, k, v)
    return v
  end,
})
rawsetmt(env, {
  __index = env_seen,
  __newindex = readonly_error,
  __metatable = false,
})
real_of[env] = G
view_of[G] = env
meta_view[env] = ro({__index = missing})
G._G = env
priv.env, priv.G = env, G

-- An EVAL script runs through `stack::run_script` (C): KEYS and ARGV go
-- into G and into what env has shown (env_seen), so reading KEYS is a
-- table lookup, not a call of env_seen's __index.
priv.env_seen = env_seen

-- FUNCTION libraries. A library's code runs once per state to register
-- its functions, in `fenv` while `loading`: only `redis` (register_function,
-- log, the version) is there then, as in Redis; its functions, called
-- later, see the globals EVAL scripts see (but no KEYS/ARGV: they get
-- keys and arguments as parameters).
local loading, registered = false, nil
local function reg_error(m) error_({err = 'ERR ' .. m}, 0) end
local function is_str(v) return type_(v) == 'string' or type_(v) == 'number' end
local known_flags = {}
for _, f in ipairs(priv.flag_names) do known_flags[f] = true end
local lib_redis = {}
lib_redis.register_function = function(...)
  if not loading then
    reg_error('redis.register_function can only be called on FUNCTION LOAD command')
  end
  local n = select('#', ...)
  if n < 1 or n > 2 then reg_error('wrong number of arguments to redis.register_function') end
  local name, cb, desc, flags = nil, nil, nil, {}
  if n == 1 then
    local t = ...
    if type_(t) ~= 'table' then
      reg_error('calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).')
    end
    for k, v in rawpairs(t) do
      if not is_str(k) then reg_error('named argument key given to redis.register_function is not a string') end
      local key = tostring(k):lower()
      if key == 'function_name' then
        if not is_str(v) then reg_error('function_name argument given to redis.register_function must be a string') end
        name = tostring(v)
      elseif key == 'description' then
        if not is_str(v) then reg_error('description argument given to redis.register_function must be a string') end
        desc = tostring(v)
      elseif key == 'callback' then
        if type_(v) ~= 'function' then reg_error('callback argument given to redis.register_function must be a function') end
        cb = v
      elseif key == 'flags' then
        if type_(v) ~= 'table' then
          reg_error('flags argument to redis.register_function must be a table representing function flags')
        end
        local i = 1
        while v[i] ~= nil do
          local f = v[i]
          if not is_str(f) or not known_flags[tostring(f):lower()] then reg_error('unknown flag given') end
          flags[#flags + 1] = tostring(f):lower()
          i = i + 1
        end
      else
        reg_error('unknown argument given to redis.register_function')
      end
    end
    if not name then reg_error('redis.register_function must get a function name argument') end
    if not cb then reg_error('redis.register_function must get a callback argument') end
  else
    local a, b = ...
    if not is_str(a) then reg_error('first argument to redis.register_function must be a string') end
    if type_(b) ~= 'function' then reg_error('second argument to redis.register_function must be a function') end
    name, cb = tostring(a), b
  end
  if #name == 0 or name:find('[^%w_]') then
    reg_error('Library names can only contain letters, numbers, or underscores(_) and must be at least one character long')
  end
  if registered[name] then reg_error('Function already exists in the library') end
  registered[name] = true
  registered[#registered + 1] = {name = name, callback = cb, description = desc, flags = flags}
end
lib_redis.log = redis.log
lib_redis.LOG_DEBUG, lib_redis.LOG_VERBOSE, lib_redis.LOG_NOTICE, lib_redis.LOG_WARNING = 0, 1, 2, 3
lib_redis.REDIS_VERSION, lib_redis.REDIS_VERSION_NUM = redis.REDIS_VERSION, redis.REDIS_VERSION_NUM
local lib_redis_view = {}
rawsetmt(lib_redis_view, {
  __index = function(_, k)
    local v = rawget_(lib_redis, k)
    if v == nil then
      error_("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end
    return v
  end,
  __newindex = readonly_error,
  __metatable = false,
})
real_of[lib_redis_view] = lib_redis
-- While a library loads, fenv shows `redis` (lib_redis_view) only; once
-- loaded, its functions see G but KEYS and ARGV, through a cache as env's
-- (env_seen): a second read of `redis` is a table lookup, not a call.
local function loading_index(_, k)
  if k == 'redis' then return lib_redis_view end
  error_("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end
local fenv_seen = rawsetmt({}, {
  __index = function(c, k)
    local v
    if not own[k] then v = rawget_(G, k) end
    if v == nil then
      error_("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end
    if type_(v) == 'table' and not real_of[v] then v = ro(v) end
    rawset_(c, k, v)
    return v
  end,
})
local fenv_meta = {
  __index = fenv_seen,
  __newindex = readonly_error,
  __metatable = false,
}
local fenv = rawsetmt({}, fenv_meta)
real_of[fenv] = G
meta_view[fenv] = meta_view[env]
priv.fenv = fenv
-- Runs a library's compiled code: true and what it registered, or false
-- and the error's text.
priv.load_library = function(f)
  loading, registered = true, {}
  fenv_meta.__index = loading_index
  local ok, err = pcall(f)
  loading = false
  fenv_meta.__index = fenv_seen
  if priv.killed then ok, err, priv.killed = false, priv.killed, false end
  local r = registered
  registered = nil
  if not ok then
    if type_(err) == 'table' and type_(err.err) == 'string' then
      return false, err.err
    end
    return false, 'ERR ' .. tostring(err)
  end
  return true, r
end
-- FUNCTIONs are called by stack.rs's run_function, a C function:
-- one lua_pcall with the handler below the function, as Redis's.
