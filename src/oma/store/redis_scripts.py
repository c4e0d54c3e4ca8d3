"""Lua scripts of ``RedisStore``: every mutation touching more than one key is one script.

Redis runs a script atomically, so readers never see half an entry and ``compare_and_set`` is
atomic across every client of the server. Layout (``{ns}`` is a hash tag, so all keys of one
namespace live in one Redis Cluster slot and a script may touch them all):

``{ns}:values``   hash  key -> value
``{ns}:digests``  hash  key -> sha256(value), hex; what ``compare_and_set`` compares
``{ns}:metadata`` hash  key -> metadata JSON (absent: no metadata)
``{ns}:created``  hash  key -> creation time, microseconds since the epoch (server clock)
``{ns}:expiry``   hash  key -> expires_at_turn (absent: no expiry)
``{ns}:order``    zset  key scored by first-insertion sequence number
``{ns}:seq``      string, the last sequence number handed out

Journals (``oma.store.journal``), beside the entries:

``{ns}:jversion`` hash  key -> the journal's version
``{ns}:jcount``   hash  key -> the number its next record gets (every record written since
                        the last replace: kept or dropped)
``{ns}:jrecords`` hash  "<i>:<key>" -> record i
``{ns}:jmeta``    hash  key -> metadata JSON (absent: no metadata)
``{ns}:jcreated`` hash  key -> creation time, microseconds since the epoch (server clock)
``{ns}:jbase``    hash  key -> the base's number (absent: 0)
``{ns}:jstart``   hash  key -> the first record kept (absent: 0); records below it are dropped

A script is handed one key, ``{ns}:values``, and derives the others from it (``_DERIVE_KEYS``):
fourteen key names sent with every call were about 250 bytes of each journal append (a
delta is a few hundred), packed by the client and parsed by the server each time. Every key
shares the hash tag of the one declared, so a Redis Cluster routes the call to the slot that
holds them all, and a script without flags may touch undeclared keys of its own slot.
"""

from __future__ import annotations

MAX_RECORDS = 1_000_000  # a journal record count beyond this is damage, not a journal

FIELDS = (
    "values",
    "digests",
    "metadata",
    "created",
    "expiry",
    "order",
    "seq",
    "jversion",
    "jcount",
    "jrecords",
    "jmeta",
    "jcreated",
    "jbase",
    "jstart",
)

# Every script starts so: ``KEYS[1]`` is ``{ns}:values`` (the first of FIELDS) and KEYS becomes
# the FIELDS keys, in order, named after it.
_DERIVE_KEYS = (
    "local prefix = string.sub(KEYS[1], 1, -7)\n"
    "local KEYS = {}\n"
    "for i, field in ipairs({" + ", ".join(f"'{field}'" for field in FIELDS) + "}) do\n"
    "  KEYS[i] = prefix .. field\n"
    "end\n"
)
assert FIELDS[0] == "values"  # the one key handed to every script; 6 characters cut above


def _script(body: str) -> str:
    """A script of the store: ``body`` with KEYS as the FIELDS keys (see ``_DERIVE_KEYS``)."""
    return _DERIVE_KEYS + body


# KEYS: ``{ns}:values`` (the others derived: ``_script``).
# ARGV: key, value, digest, metadata JSON or "", expiry or "", mode, expected digest.
# mode "s": plain upsert; "a": only if absent; "c": only if the current digest is ARGV[7];
# "w": plain upsert whose value the same MULTI sets with HSET (ARGV[2] is empty): a value handed
# to a script is copied through the interpreter, which costs more than the write itself
# (RedisStore.set). Returns 1 when written, 0 when a compare failed.
WRITE = _script(
    """
local key = ARGV[1]
local mode = ARGV[6]
if mode == 'a' or mode == 'c' then
  local current = redis.call('HGET', KEYS[2], key)
  if mode == 'a' then
    if current then return 0 end
  elseif current ~= ARGV[7] then
    return 0
  end
end
-- The created hash doubles as the existence marker: HSETNX succeeds only for a new key, which
-- is when the key gets its place in the order. Updates keep both created time and position.
local now = redis.call('TIME')
local created = now[1] .. string.format('%06d', tonumber(now[2]))
if redis.call('HSETNX', KEYS[4], key, created) == 1 then
  redis.call('ZADD', KEYS[6], redis.call('INCR', KEYS[7]), key)
end
if mode ~= 'w' then
  redis.call('HSET', KEYS[1], key, ARGV[2])
end
redis.call('HSET', KEYS[2], key, ARGV[3])
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[3], key)
else
  redis.call('HSET', KEYS[3], key, ARGV[4])
end
if ARGV[5] == '' then
  redis.call('HDEL', KEYS[5], key)
else
  redis.call('HSET', KEYS[5], key, ARGV[5])
end
return 1
"""
)

# Records are start, start + 1, ... without gaps: removed up to the first missing one, so that a
# damaged record count (not a number, absurd) neither stops the delete nor keeps the server busy;
# from 0 as well, in case the start is the damaged number.
_DROP_RECORDS = """
for _, from in ipairs({tonumber(redis.call('HGET', KEYS[14], key) or '0') or 0, 0}) do
  local i = from
  while redis.call('HDEL', KEYS[10], i .. ':' .. key) == 1 do
    i = i + 1
  end
end"""

# KEYS: ``{ns}:values`` (the others derived: ``_script``).
# ARGV: key. Removes the entry and the journal of the key.
DELETE = _script(
    """
local key = ARGV[1]
for i = 1, 5 do
  redis.call('HDEL', KEYS[i], key)
end
redis.call('ZREM', KEYS[6], key)
DROP_RECORDS
redis.call('HDEL', KEYS[8], key)
redis.call('HDEL', KEYS[9], key)
redis.call('HDEL', KEYS[11], key)
redis.call('HDEL', KEYS[12], key)
redis.call('HDEL', KEYS[13], key)
redis.call('HDEL', KEYS[14], key)
return 1
""".replace("DROP_RECORDS", _DROP_RECORDS)
)

# KEYS: ``{ns}:values`` (the others derived: ``_script``).
# ARGV: key, new version, mode, has-expected ("1"/"0"), expected version, metadata JSON or "",
# drop-before ("" or a record number), then the records. mode "a": append; "b": append, the
# first record appended is the base, and the records below drop-before go; "r": replace; "f":
# replace without comparing.
# Returns 1 when written, 0 when the comparison failed or an append found no journal.
JOURNAL_WRITE = _script(
    """
local key = ARGV[1]
local mode = ARGV[3]
local current = redis.call('HGET', KEYS[8], key)
if mode ~= 'f' then
  if ARGV[4] == '0' then
    if current then return 0 end
  elseif current ~= ARGV[5] then
    return 0
  end
end
local append = mode == 'a' or mode == 'b'
if append and not current then return 0 end
local count = 0
if append then
  count = tonumber(redis.call('HGET', KEYS[9], key) or '0')
  if mode == 'b' then
    redis.call('HSET', KEYS[13], key, count)
    local start = tonumber(redis.call('HGET', KEYS[14], key) or '0') or 0
    local cut = math.min(tonumber(ARGV[7]) or start, count)
    for i = start, cut - 1 do
      redis.call('HDEL', KEYS[10], i .. ':' .. key)
    end
    if cut > start then redis.call('HSET', KEYS[14], key, cut) end
  end
else
  DROP_RECORDS
  redis.call('HDEL', KEYS[13], key)
  redis.call('HDEL', KEYS[14], key)
end
for j = 8, #ARGV do
  redis.call('HSET', KEYS[10], count .. ':' .. key, ARGV[j])
  count = count + 1
end
redis.call('HSET', KEYS[9], key, count)
redis.call('HSET', KEYS[8], key, ARGV[2])
if ARGV[6] == '' then
  redis.call('HDEL', KEYS[11], key)
else
  redis.call('HSET', KEYS[11], key, ARGV[6])
end
if not append then  -- an append found the journal, created by its first write
  local now = redis.call('TIME')
  redis.call('HSETNX', KEYS[12], key, now[1] .. string.format('%06d', tonumber(now[2])))
end
return 1
""".replace("DROP_RECORDS", _DROP_RECORDS)
)

# KEYS: ``{ns}:values`` (the others derived: ``_script``).
# ARGV: key, "h" to read every record kept (else from the base).
# Returns {} when there is no journal, else version, metadata (false = none), created, the
# number of the first record read, then the records (none when the numbers are damaged: not
# whole numbers with 0 <= start <= base < count <= MAX_RECORDS, which the reader reports).
JOURNAL_READ = _script(
    """
local key = ARGV[1]
local version = redis.call('HGET', KEYS[8], key)
if not version then return {} end
local count = tonumber(redis.call('HGET', KEYS[9], key) or '0')
local base = tonumber(redis.call('HGET', KEYS[13], key) or '0')
local start = tonumber(redis.call('HGET', KEYS[14], key) or '0')
local first = base
if ARGV[2] == 'h' then first = start end
local out = {version, redis.call('HGET', KEYS[11], key), redis.call('HGET', KEYS[12], key), first}
if not count or not base or not start or count > MAX_RECORDS or count % 1 ~= 0
    or base % 1 ~= 0 or start % 1 ~= 0 or start < 0 or start > base or base >= count then
  out[4] = false
  return out
end
for i = first, count - 1 do
  out[#out + 1] = redis.call('HGET', KEYS[10], i .. ':' .. key)
end
return out
""".replace("MAX_RECORDS", str(MAX_RECORDS))
)

# KEYS: ``{ns}:values`` (the others derived: ``_script``). ARGV: key.
# Returns {} when there is no journal, else the raw record count, base and start (false = none).
JOURNAL_SPAN = _script(
    """
local key = ARGV[1]
if not redis.call('HGET', KEYS[8], key) then return {} end
return {redis.call('HGET', KEYS[9], key), redis.call('HGET', KEYS[13], key),
        redis.call('HGET', KEYS[14], key)}
"""
)

# KEYS: ``{ns}:values`` (the others derived: ``_script``).
# ARGV: one key, or none for every key in insertion order (``list``; ``get`` reads one
# key's fields with a MULTI of HGETs instead, see RedisStore.get).
# Returns a flat array: key, value, metadata, created, expiry, key, value, ... (false = nil).
READ = _script(
    """
local keys
if #ARGV == 1 then
  keys = {ARGV[1]}
else
  keys = redis.call('ZRANGE', KEYS[6], 0, -1)
end
local out = {}
for _, key in ipairs(keys) do
  local value = redis.call('HGET', KEYS[1], key)
  if value then
    out[#out + 1] = key
    out[#out + 1] = value
    out[#out + 1] = redis.call('HGET', KEYS[3], key)
    out[#out + 1] = redis.call('HGET', KEYS[4], key)
    out[#out + 1] = redis.call('HGET', KEYS[5], key)
  end
end
return out
"""
)

# KEYS: ``{ns}:values`` (the others derived: ``_script``). ARGV: key.
# Returns {} when there is no journal, else version, metadata (false = none), created, count,
# base, start (false = none).
JOURNAL_HEAD = _script(
    """
local key = ARGV[1]
local version = redis.call('HGET', KEYS[8], key)
if not version then return {} end
return {version, redis.call('HGET', KEYS[11], key), redis.call('HGET', KEYS[12], key),
        redis.call('HGET', KEYS[9], key), redis.call('HGET', KEYS[13], key),
        redis.call('HGET', KEYS[14], key)}
"""
)
