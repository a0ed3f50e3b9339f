package redislua

import goredis "github.com/redis/go-redis/v9"

// Scripts of the redlock store only: acquire, extend, release and the
// restart guard. They keep the key layout of the shared scripts.

// RedlockAcquire makes one attempt on one node, as the shared Acquire does
// without queueing, in fewer calls (every node of every attempt runs it):
// it grants when the lock is free and no waiter of the redis store is
// queued on the node, with the token the resource's counter plus one,
// floored at the node's clock in microseconds. KEYS: lock, fence, queue.
// ARGV: owner, ttl ms, metadata, fence retention ms. Returns {1, token}
// when granted (or already held by owner), {0, pttl} when not.
var RedlockAcquire = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  if string.sub(cur, 1, 32) == ARGV[1] then
    return {1, redis.call('GET', KEYS[2]) or '0'}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if redis.call('LLEN', KEYS[3]) > 0 then
  return {0, 0}
end
redis.call('SET', KEYS[1], ARGV[1] .. ARGV[3], 'PX', ARGV[2])
local t = redis.call('TIME')
local c = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if us > c then c = us end
local token = string.format('%.0f', c)
redis.call('SET', KEYS[2], token, 'PX', ARGV[4])
return {1, token}
`)

// RedlockExtend resets the lock's TTL if the owner holds it, and sets the
// lock again for the owner when it is missing: a node that restarted without
// persistence, or was flushed, forgets locks that the other nodes still
// hold. The caller counts only the nodes that answer 1. KEYS: lock. ARGV:
// owner, ttl ms, metadata. Returns 1 extended, 2 set again, 0 held by
// another owner.
var RedlockExtend = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1] .. ARGV[3], 'PX', ARGV[2])
  return 2
end
if string.sub(cur, 1, 32) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// RedlockRelease frees the lock if the owner holds it, and raises the
// resource's token counter to the holder's token (whoever holds the lock:
// raising a counter never hurts), so that the next grant on this node gets a
// larger token than the holder's whatever the nodes' clocks say. KEYS:
// lock, fence. ARGV: owner, token ("0" for none), fence retention ms.
// Returns 1 released, 0 held by another owner, -1 not held by anyone.
var RedlockRelease = goredis.NewScript(`
local tok = tonumber(ARGV[2])
if tok > 0 and tok > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
local cur = redis.call('GET', KEYS[1])
if not cur then return -1 end
if string.sub(cur, 1, 32) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

// RedlockAge returns the age in ms, by the node's clock, of the node's
// birth marker, a key without expiry, and writes the marker (age 0) when
// it is missing: the node is new, restarted without persistence, or was
// flushed, and may have forgotten locks. KEYS: marker.
var RedlockAge = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local born = tonumber(redis.call('GET', KEYS[1]) or '')
if not born then
  redis.call('SET', KEYS[1], string.format('%.0f', now))
  return 0
end
return now - born
`)

// RedlockRelabel sets the metadata of the lock in place, keeping its TTL,
// if the owner holds it, and records the relabel in the resource's label
// key with its version, so that a reader of several nodes can tell the
// newest metadata from an older one that a node kept (it missed the
// relabel, or an extend set the lock again there with the metadata of the
// acquisition). A relabel older than the one recorded for the owner is
// dropped and answers 1 all the same: a newer one won. KEYS: lock, label.
// ARGV: owner, metadata, version (16 decimal digits), label retention ms.
// Returns 1 relabelled, 0 held by another owner, -1 not held.
var RedlockRelabel = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return -1 end
if string.sub(cur, 1, 32) ~= ARGV[1] then return 0 end
local lab = redis.call('GET', KEYS[2])
if lab and string.sub(lab, 1, 32) == ARGV[1] then
  local v = tonumber(string.sub(lab, 33, 48))
  if v and v >= tonumber(ARGV[3]) then return 1 end
end
redis.call('SET', KEYS[1], ARGV[1] .. ARGV[2], 'KEEPTTL')
redis.call('SET', KEYS[2], ARGV[1] .. ARGV[3] .. ARGV[2], 'PX', ARGV[4])
return 1
`)

// LabelVersionDigits is the width of a relabel's version in the label key.
const LabelVersionDigits = 16
