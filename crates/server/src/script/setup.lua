-- Run once per Lua state before any script (script/lua.rs, SETUP); line 1 kept for its line numbers.
local rawcall, errtext, call, sha1, log, setresp, killed, cjson, aclcheck = ...
local dbg = debug
debug = nil
dofile = nil; loadfile = nil; print = nil
-- getfenv/setfenv would reach the real globals table behind the proxy;
-- newproxy makes userdata with a __gc that would run inside whichever
-- script next triggers the collector, as that script's user (Redis 7.0.15
-- as Debian ships it has none of the three either).
local setfenv0 = setfenv
getfenv = nil; setfenv = nil; newproxy = nil
module = nil; require = nil; package = nil
local error, type, tostring, select, setmetatable, rawget = error, type, tostring, select, setmetatable, rawget
local rawset0 = rawset
local G = _G
local redis = {}
redis.call = call
redis.pcall = rawcall
redis.sha1hex = sha1
redis.log = log
redis.setresp = setresp
redis.acl_check_cmd = aclcheck
redis.error_reply = function(...)
  local s = ...
  if select('#', ...) ~= 1 or type(s) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {err = errtext(s)}
end
redis.status_reply = function(...)
  local s = ...
  if select('#', ...) ~= 1 or type(s) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {ok = s}
end
redis.set_repl = function(...)
  local f = ...
  if select('#', ...) ~= 1 then error({err = 'ERR redis.set_repl() requires two arguments.'}) end
  if type(f) ~= 'number' or f < 0 or f > 3 then
    error({err = 'ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.'})
  end
end
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
redis.REPL_NONE = 0; redis.REPL_AOF = 1; redis.REPL_SLAVE = 2; redis.REPL_REPLICA = 2; redis.REPL_ALL = 3
redis.LOG_DEBUG = 0; redis.LOG_VERBOSE = 1; redis.LOG_NOTICE = 2; redis.LOG_WARNING = 3
redis.REDIS_VERSION = '7.0.0'; redis.REDIS_VERSION_NUM = 458752

-- As Redis's __redis__err__handler: the error as {err=…}, with where in
-- the script it happened (past the C function that raised it, and past
-- Elsa's own wrappers).
local function handler(err)
  local l = 2
  local i = dbg.getinfo(l, 'nSl')
  if i and i.what == 'C' then l = l + 1; i = dbg.getinfo(l, 'nSl') end
  while i and i.source == '=elsa' do l = l + 1; i = dbg.getinfo(l, 'nSl') end
  -- An error raised by a library function under one of Elsa's wrappers
  -- (`pairs`, `load`…) names the wrapper's line: not the user's concern.
  if type(err) == 'string' then err = err:gsub('^elsa:%d+: ', '') end
  if type(err) ~= 'table' then err = {err = 'ERR ' .. tostring(err)} end
  if i then err['source'] = i.source; err['line'] = i.currentline end
  return err
end

G.__redis__err__handler = handler

-- Scripts compile text only: Lua 5.1 runs bytecode unverified (a crafted
-- chunk reads and writes the heap). As Redis's patched parser does, a
-- chunk starting with ESC is parsed as text and fails at its first byte;
-- the real parser words the error (ESC swapped for \1, renamed back).
local loadstring0, concat0, byte0 = loadstring, table.concat, string.byte
-- A wrapper's argument errors, worded as the C function's own.
local function argerror(n, fname, expected, ...)
  local got = select('#', ...) < n and 'no value' or type((select(n, ...)))
  error('bad argument #' .. n .. " to '" .. fname .. "' (" .. expected .. ' expected, got ' .. got .. ')', 3)
end
loadstring = function(...)
  local s, name = ...
  if type(s) == 'number' then s = tostring(s) end
  if type(s) ~= 'string' then argerror(1, 'loadstring', 'string', ...) end
  if type(s) == 'string' and byte0(s, 1) == 27 then
    local _, e = loadstring0('\1', name or s)
    return nil, (e:gsub("'char%(1%)'", "'char(27)'"))
  end
  local f, e = loadstring0(s, name)
  if f then setfenv0(f, G._G) end
  return f, e
end
-- Lua 5.1's load, reading the pieces here so that the text goes through
-- the check above.
local load0 = load
load = function(reader, name)
  -- Not a function: the real load's own error, before it reads anything.
  if type(reader) ~= 'function' then return load0(reader, name) end
  local parts = {}
  while true do
    local p = reader()
    if p == nil or p == '' then break end
    if type(p) == 'number' then p = tostring(p) end
    if type(p) ~= 'string' then error('reader function must return a string', 2) end
    parts[#parts + 1] = p
  end
  return loadstring(concat0(parts), name or '=(load)')
end

-- Redis 7's pcall: a caught {err=…} table comes back as its message.
local pcall0 = pcall
local function fixpcall(ok, ...)
  if ok then return ok, ... end
  local e = ...
  if type(e) == 'table' then
    local m = rawget(e, 'err')
    if type(m) == 'string' or type(m) == 'number' then return false, m end
  end
  return false, e
end
pcall = function(...) return fixpcall(pcall0(...)) end
-- A killed script must not catch its kill: the catchers raise it again.
local function rekill(ok, ...)
  if not ok and killed() then error((...), 0) end
  return ok, ...
end
local pcall1, xpcall0 = pcall, xpcall
pcall = function(...) return rekill(pcall1(...)) end
xpcall = function(...) return rekill(xpcall0(...)) end
if coroutine then
  local resume = coroutine.resume
  coroutine.resume = function(...) return rekill(resume(...)) end
end

local protected = {}
local function readonly() error('Attempt to modify a readonly table', 2) end
-- What `getmetatable` answers for a proxy: a read-only empty table (the
-- proxy's own metatable would hand out the real table as its __index).
local lockedmt = setmetatable({}, {__newindex = readonly, __metatable = false})
protected[lockedmt] = {}
local function protect(t)
  local p = setmetatable({}, {__index = t, __newindex = readonly, __metatable = lockedmt})
  protected[p] = t
  return p
end
do
  local setmetatable = setmetatable
  G.setmetatable = function(t, ...)
    if protected[t] then error('Attempt to modify a readonly table', 0) end
    return setmetatable(t, ...)
  end
end
-- A proxy reads as the table behind it (`pairs(string)` lists the string
-- library, as in Redis), without ever handing that table out. The
-- originals keep their names so that their errors name them.
local function pass(...) return ... end
do
  local next, pairs, rawget = next, pairs, rawget
  G.next = function(...)
    local t, k = ...
    if type(t) ~= 'table' then argerror(1, 'next', 'table', ...) end
    local real = protected[t]
    if real then return next(real, k) end
    return pass(next(t, k))
  end
  G.pairs = function(...)
    local t = ...
    if type(t) ~= 'table' then argerror(1, 'pairs', 'table', ...) end
    local real = protected[t]
    if real then return function(_, k) return next(real, k) end, t, nil end
    return pass(pairs(t))
  end
  G.rawget = function(...)
    local t, k = ...
    if type(t) ~= 'table' then argerror(1, 'rawget', 'table', ...) end
    if select('#', ...) < 2 then error("bad argument #2 to 'rawget' (value expected)", 2) end
    local real = protected[t]
    if real then return rawget(real, k) end
    return pass(rawget(t, k))
  end
end
rawset = function(t, k, v)
  if protected[t] then error('Attempt to modify a readonly table', 2) end
  return rawset0(t, k, v)
end
-- The table library writes with raw sets, past the proxies' __newindex:
-- refused on a protected table, as Redis's read-only tables refuse them.
do
  local insert, remove, sort = table.insert, table.remove, table.sort
  table.insert = function(t, ...)
    if protected[t] then error('Attempt to modify a readonly table', 0) end
    insert(t, ...)
  end
  table.remove = function(t, ...)
    if protected[t] then error('Attempt to modify a readonly table', 0) end
    return pass(remove(t, ...))
  end
  table.sort = function(t, ...)
    if protected[t] then error('Attempt to modify a readonly table', 0) end
    sort(t, ...)
  end
  -- The readers that walk a table with `next`: over the real table
  -- (they hand out its keys and values, never the table).
  local foreach, maxn = table.foreach, table.maxn
  table.foreach = function(t, f) return pass(foreach(protected[t] or t, f)) end
  table.maxn = function(t) return pass(maxn(protected[t] or t)) end
end
-- After every run: the collector as it was set up, whatever the script
-- asked of `collectgarbage` (the state is shared by every user).
local gc = collectgarbage
local function after_run()
  gc('restart'); gc('setpause', 200); gc('setstepmul', 200)
end
G.redis = protect(redis)
G.cjson = protect(cjson)
for _, name in ipairs({'string', 'math', 'table', 'coroutine', 'bit', 'struct', 'cmsgpack'}) do
  if G[name] then G[name] = protect(G[name]) end
end
local strmt = getmetatable('')
if strmt then
  strmt.__index = G.string
  strmt.__metatable = protect({__index = G.string})
end
setmetatable(G, {__index = function(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end, __newindex = readonly, __metatable = false})
local env = protect(G)
G._G = env

-- Function libraries (FUNCTION LOAD; script/libload.rs). A library's code
-- runs once in `libenv` with only Redis's load API (LIBRARY_API:
-- redis.register_function, redis.log and its levels, the version); the
-- functions it registers keep `libenv`, which outside a load reads the
-- globals a script sees, but not KEYS and ARGV (FCALL passes them as
-- arguments).
local loading, pending = false, nil
local lower, find, next0 = string.lower, string.find, next
local function missing(k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 3)
end
local function regerr(m) error({err = 'ERR ' .. m}) end
local function isstr(v) local t = type(v) return t == 'string' or t == 'number' end
local flagbits = {['no-writes'] = 1, ['allow-oom'] = 2, ['allow-stale'] = 4,
  ['no-cluster'] = 8, ['allow-cross-slot-keys'] = 16}
-- Redis's luaRegisterFunction*, with its texts.
local function register(...)
  if not loading then regerr('redis.register_function can only be called on FUNCTION LOAD command') end
  local n = select('#', ...)
  if n < 1 or n > 2 then regerr('wrong number of arguments to redis.register_function') end
  local name, desc, cb, flags = nil, nil, nil, 0
  if n == 1 then
    local t = ...
    if type(t) ~= 'table' then
      regerr('calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).')
    end
    for k, v in next0, protected[t] or t do
      if not isstr(k) then regerr('named argument key given to redis.register_function is not a string') end
      local key = lower(tostring(k))
      if key == 'function_name' then
        if not isstr(v) then regerr('function_name argument given to redis.register_function must be a string') end
        name = tostring(v)
      elseif key == 'description' then
        if not isstr(v) then regerr('description argument given to redis.register_function must be a string') end
        desc = tostring(v)
      elseif key == 'callback' then
        if type(v) ~= 'function' then regerr('callback argument given to redis.register_function must be a function') end
        cb = v
      elseif key == 'flags' then
        if type(v) ~= 'table' then
          regerr('flags argument to redis.register_function must be a table representing function flags')
        end
        local seen, i = {}, 1
        while true do
          local f = v[i]
          if f == nil then break end
          local bit = isstr(f) and flagbits[lower(tostring(f))]
          if not bit then regerr('unknown flag given') end
          if not seen[bit] then seen[bit] = true; flags = flags + bit end
          i = i + 1
        end
      else
        regerr('unknown argument given to redis.register_function')
      end
    end
    if not name then regerr('redis.register_function must get a function name argument') end
    if not cb then regerr('redis.register_function must get a callback argument') end
  else
    local a, b = ...
    if not isstr(a) then regerr('first argument to redis.register_function must be a string') end
    if type(b) ~= 'function' then regerr('second argument to redis.register_function must be a function') end
    name, cb = tostring(a), b
  end
  if #name == 0 or find(name, '[^%w_]') then
    regerr('Library names can only contain letters, numbers, or underscores(_) and must be at least one character long')
  end
  if pending.seen[name] then regerr('Function already exists in the library') end
  pending.seen[name] = true
  pending[#pending + 1] = {name, desc or false, flags, cb}
end
local libredis = {register_function = register, log = log,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REDIS_VERSION = redis.REDIS_VERSION, REDIS_VERSION_NUM = redis.REDIS_VERSION_NUM}
setmetatable(libredis, {__index = function(_, k) missing(k) end})
local libapi = {redis = protect(libredis)}
local libenv = setmetatable({}, {__index = function(_, k)
  local v
  if loading then v = rawget(libapi, k)
  elseif k ~= 'KEYS' and k ~= 'ARGV' then v = rawget(G, k) end
  if v == nil then missing(k) end
  return v
end, __newindex = readonly, __metatable = false})
-- Runs a library's compiled code: nil, and what it registered
-- ({name, description or false, flags, callback}…), or Redis's error.
local function load_library(chunk)
  loading, pending = true, {seen = {}}
  local ok, e = pcall0(chunk)
  local registered = pending
  loading, pending = false, nil
  if ok then registered.seen = nil; return nil, registered end
  if type(e) == 'table' and rawget(e, 'err') ~= nil then return tostring(rawget(e, 'err')) end
  return 'ERR ' .. tostring(e)
end
-- Calls a registered function with FCALL's keys and arguments.
local function call_function(f, keys, args)
  return xpcall0(function() return f(keys, args) end, handler)
end
return xpcall0, handler, env, after_run, libenv, load_library, call_function
