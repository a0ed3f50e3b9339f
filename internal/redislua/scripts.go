// Package redislua holds the Lua scripts and key layout shared by the redis
// and redlock stores, so that both speak the same protocol to a Redis node.
package redislua

import (
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// Key layout of one resource R, all in one hash slot through the tag {R}:
//
//	<prefix>{R}           the lock: owner (32 hex) followed by metadata, PX
//	                      ttl; in the redis store, owner, the queue mark
//	                      (MarkAlone or MarkQueued), the grant's time
//	                      (GrantTimeLen digits, µs since the epoch),
//	                      metadata
//	<prefix>{R}:fence     the last fencing token issued for R
//	<prefix>{R}:queue     waiters in arrival order (a list of owner values)
//	<prefix>{R}:live      waiter -> liveness deadline in ms (a sorted set)
//	<prefix>{R}:wake:<w>  waiter w's wake-up list, pushed when it is its turn
//	                      ("1") or when the lock was handed to it ("g <token>
//	                      <waiting> <attempt>"), redis store only
//	<prefix>{R}:req       redis store only: waiter -> its latest attempt,
//	                      "<attempt> <ttl ms> <metadata>", for the release
//	                      that hands it the lock
//	<prefix>{R}:label     redlock only: the holder's last relabel, owner (32
//	                      hex), version (16 decimal digits), metadata
//	<prefix>{R}:watch     a pub/sub channel, not a key: the redis store's
//	                      change notices for R
//
// The redis store's scripts take the lock key alone (except Extend and
// Leave) and build the others from it, as do redlock's acquire and release
// (the others name theirs, or build the wake-up keys only); each carries
// the lock key's hash tag, so all live in its slot.

// handoffLua is shared by the redis store's scripts that may free the lock
// or change the queue's head. The clock is read once per call, and only
// when needed: clock() returns TIME, nowms() it in milliseconds. first()
// drops waiters whose liveness deadline has passed and returns the first
// live one (the caller, if given, counts as live: it is calling; w, if
// given, is the queue's first entry, read already), and forgets the dropped
// ones' requests. wake() tells a waiter that it is its turn, on its wake-up
// list (the lock key followed by ":wake:" and the waiter), unless once is
// set and the list still holds a wake-up the waiter has not popped.
const handoffLua = `
local clockv
local function clock()
  if not clockv then clockv = redis.call('TIME') end
  return clockv
end
local function nowms()
  local t = clock()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function first(queue, live, caller, w)
  w = w or redis.call('LINDEX', queue, 0)
  while w do
    if w == caller then return w end
    local dl = redis.call('ZSCORE', live, w)
    if dl and tonumber(dl) > nowms() then return w end
    redis.call('LPOP', queue)
    redis.call('ZREM', live, w)
    redis.call('HDEL', KEYS[1] .. ':req', w)
    w = redis.call('LINDEX', queue, 0)
  end
  return nil
end
local function wake(w, livems, once)
  local k = KEYS[1] .. ':wake:' .. w
  if once and redis.call('EXISTS', k) == 1 then return end
  redis.call('RPUSH', k, '1')
  redis.call('PEXPIRE', k, livems)
end
`

// waitingLua counts the live waiters of a resource: those whose liveness
// deadline in the live set has not passed.
const waitingLua = `
local function waiting(live)
  return redis.call('ZCOUNT', live, '(' .. string.format('%.0f', nowms()), '+inf')
end
`

// tokenLua issues a grant's fencing token: the resource's counter plus
// one (INCR), floored at the server clock in microseconds when the counter
// is new, so that tokens keep growing when the counter is lost (expiry,
// restart without persistence): one command in the usual case. The counter
// then lives for the fence retention from its creation; a busy resource's
// counter that lapses is floored again, above every token it issued, unless
// grants came faster than one a microsecond on average or the clock stepped
// back. INCR on a new counter reads 1: any reading below minClockToken
// (10^15) is taken for a new counter.
const tokenLua = `
local function token(fence, retention)
  local n = redis.call('INCR', fence)
  if n < 1e15 then
    local t = clock()
    n = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', fence, string.format('%.0f', n), 'PX', retention)
  end
  return n
end
`

// Acquire makes one attempt. KEYS: lock (the script builds the resource's
// other keys from it, as KeysFor lays them out). ARGV: owner, ttl ms, the
// caller's clock followed by the metadata (TimeThen: the clock is written
// in the lock as the grant's time), queueing ("0" not to queue if not
// granted, "1" to queue, "2" to refresh the place of a caller that queued
// before, which skips the fast path), the store's Settings, then
// optionally "1" if the caller listens on its wake-up list (it is then
// sent "stop" on a grant, ending its blocking pop) and the caller's name
// for this attempt (queueing attempts only: a release that hands the lock
// over echoes it). The arguments are few, the settings one, and the last
// two left out when not needed, because every argument costs Redis a
// string to parse and to make in Lua on every call.
//
// It grants when the lock is free and nobody live is queued ahead of the
// caller (no barging), with the token of tokenLua. When the resource has
// no queue at all, the usual case without contention, that is one EXISTS,
// one SET NX and the token's INCR (the fast path, written out before the
// helpers so that it defines none); the queue is read only when there is
// one. The fast path's grant is marked MarkAlone; a grant from the queue's
// path, and a lock held by another when the caller queues, are marked
// MarkQueued (the latter by SETRANGE, only while it reads MarkAlone), so
// that the release of a lock nobody queued for skips the queue.
//
// A waiter's every attempt leaves its request (the attempt's name, TTL and
// metadata) for the release that will hand it the lock (see Release). A
// caller that holds the lock already (the lock was handed to it, or an
// earlier attempt's reply was lost) is granted again with its TTL renewed
// from this call.
//
// Returns the token alone when the fast path grants (an integer, the
// cheapest reply), {1, token, waiting} when the queue's path grants (or
// the caller held the lock already: the counter's value),
// waiting the number of live waiters left in the queue behind the grant,
// and {0, pttl, isHead} when not, pttl read only for the head of the queue
// (0 otherwise).
var Acquire = goredis.NewScript(`
if ARGV[4] ~= '2' and redis.call('EXISTS', KEYS[1] .. ':queue') == 0 and redis.call('SET', KEYS[1], ARGV[1] .. '` + MarkAlone + `' .. ARGV[3], 'NX', 'PX', ARGV[2]) then
  local fence = KEYS[1] .. ':fence'
  local n = redis.call('INCR', fence)
  if n < 1e15 then
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', fence, string.format('%.0f', n), 'PX', string.match(ARGV[5], ' (%d+)$'))
  end
  if ARGV[6] == '1' then
    local k = KEYS[1] .. ':wake:' .. ARGV[1]
    redis.call('RPUSH', k, 'stop')
    redis.call('PEXPIRE', k, string.match(ARGV[5], '^%d+'))
  end
  return n
end
` + handoffLua + waitingLua + tokenLua + `
local fence, queue, live = KEYS[1] .. ':fence', KEYS[1] .. ':queue', KEYS[1] .. ':live'
local owner, queueing, listening = ARGV[1], ARGV[4] ~= '0', ARGV[6] == '1'
local livems, retention = string.match(ARGV[5], '^(%d+) (%d+)$')
livems = tonumber(livems)
local function granted(behind)
  if listening then
    local k = KEYS[1] .. ':wake:' .. owner
    redis.call('RPUSH', k, 'stop')
    redis.call('PEXPIRE', k, livems)
  end
  return {1, token(fence, retention), behind}
end
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, 32) == owner then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', fence) or '0'), waiting(live)}
end
if cur and not queueing then
  return {0, 0, 0}
end
local head = first(queue, live, owner)
if not cur and (not head or head == owner) then
  local behind = 0
  if head then
    redis.call('LPOP', queue)
    redis.call('ZREM', live, owner)
    redis.call('HDEL', KEYS[1] .. ':req', owner)
    behind = waiting(live)
  end
  redis.call('SET', KEYS[1], owner .. '` + MarkQueued + `' .. ARGV[3], 'PX', ARGV[2])
  return granted(behind)
end
if not cur and head then
  wake(head, livems, true)
end
local isHead = 0
if queueing then
  local req = KEYS[1] .. ':req'
  if cur and string.sub(cur, 33, 33) == '` + MarkAlone + `' then
    redis.call('SETRANGE', KEYS[1], 32, '` + MarkQueued + `')
  end
  if head ~= owner and (ARGV[4] == '1' or not redis.call('ZSCORE', live, owner)) then
    redis.call('RPUSH', queue, owner)
  end
  redis.call('HSET', req, owner, ARGV[7] .. ' ' .. ARGV[2] .. ' ' .. string.sub(ARGV[3], ` + strconv.Itoa(GrantTimeLen+1) + `))
  redis.call('ZADD', live, nowms() + livems, owner)
  redis.call('PEXPIRE', queue, 2 * livems)
  redis.call('PEXPIRE', live, 2 * livems)
  redis.call('PEXPIRE', req, 2 * livems)
  if not head or head == owner then isHead = 1 end
end
if isHead == 0 then return {0, 0, 0} end
return {0, redis.call('PTTL', KEYS[1]), 1}
`)

// Release frees the lock if the owner holds it and hands it to the first
// live waiter: it sets the lock to that waiter with the TTL and metadata
// of the waiter's latest attempt, issues its token, takes it out of the
// queue and pushes "g <token> <waiting> <attempt>" to its wake-up list, so
// that the waiter has the lock the moment it pops, without another call.
// The attempt named is one that ran before this release, so the waiter
// counts its TTL from that attempt's send time. The handed lock's grant
// time is the releasing caller's clock. A waiter whose request is not
// recorded is woken instead ("1") to try for itself. Without a queue it
// reads no clock; a lock marked MarkAlone (nobody queued for it since its
// grant) is freed without looking for one: GET and DEL, as an unfair
// lock's release. KEYS: lock (the script builds the others from it). ARGV:
// owner, the caller's clock followed by the store's Settings (TimeThen),
// read only when the lock is handed over.
// Returns 1 released, 0 held by another owner, -1 not held by anyone.
var Release = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local res = -1
if cur then
  if string.sub(cur, 1, 32) ~= ARGV[1] then return 0 end
  redis.call('DEL', KEYS[1])
  if string.sub(cur, 33, 33) == '` + MarkAlone + `' then return 1 end
  res = 1
end
local queue = KEYS[1] .. ':queue'
local w = redis.call('LINDEX', queue, 0)
if not w then return res end
` + handoffLua + waitingLua + tokenLua + `
local live = KEYS[1] .. ':live'
local head = first(queue, live, nil, w)
if not head then return res end
local at = string.sub(ARGV[2], 1, ` + strconv.Itoa(GrantTimeLen) + `)
local livems, retention = string.match(ARGV[2], '^(%d+) (%d+)$', ` + strconv.Itoa(GrantTimeLen+1) + `)
livems = tonumber(livems)
local req = KEYS[1] .. ':req'
local r = redis.call('HGET', req, head)
local a = r and string.find(r, ' ', 1, true)
local b = a and string.find(r, ' ', a + 1, true)
if not b then
  wake(head, livems)
  return res
end
redis.call('SET', KEYS[1], head .. '` + MarkQueued + `' .. at .. string.sub(r, b + 1), 'PX', string.sub(r, a + 1, b - 1))
redis.call('LPOP', queue)
redis.call('ZREM', live, head)
redis.call('HDEL', req, head)
local k = KEYS[1] .. ':wake:' .. head
redis.call('RPUSH', k, 'g ' .. string.format('%.0f', token(KEYS[1] .. ':fence', retention)) .. ' ' .. waiting(live) .. ' ' .. string.sub(r, 1, a - 1))
redis.call('PEXPIRE', k, livems)
return res
`)

// Leave takes a waiter out of the queue, frees the lock if a release handed
// it to the waiter, and if the lock is free hands the turn on (the waiter
// may have been woken for it). It sends "stop" to the waiter's own wake-up
// list to end its blocking pop. KEYS: lock, queue, live. ARGV: owner,
// liveness ms.
var Leave = goredis.NewScript(handoffLua + `
local k = KEYS[1] .. ':wake:' .. ARGV[1]
redis.call('LREM', KEYS[2], 1, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[1] .. ':req', ARGV[1])
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, 32) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('DEL', k)
redis.call('RPUSH', k, 'stop')
redis.call('PEXPIRE', k, tonumber(ARGV[2]))
if redis.call('EXISTS', KEYS[1]) == 0 then
  local head = first(KEYS[2], KEYS[3])
  if head then wake(head, tonumber(ARGV[2])) end
end
return 1
`)

// Extend resets the lock's TTL if the owner holds it, and tells whether
// live waiters queue behind it; it reads the clock and counts them only
// when the resource has a live set at all, so a lock nobody waits for costs
// one EXISTS more, and it does not look when ARGV[3] is "0" (the holder
// knows already). KEYS: lock, live. ARGV: owner, ttl ms, "1" to look for
// waiters. Returns 1 extended, 2 extended with live waiters queued, 0 held
// by another owner, -1 not held.
var Extend = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return -1 end
if string.sub(cur, 1, 32) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if ARGV[3] ~= '1' or redis.call('EXISTS', KEYS[2]) == 0 then return 1 end
local t = redis.call('TIME')
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('ZCOUNT', KEYS[2], '(' .. string.format('%.0f', nowms), '+inf') > 0 then return 2 end
return 1
`)

// Relabel sets the metadata of the lock in place, keeping its TTL, its
// queue mark and its grant time, if the owner holds it. KEYS: lock. ARGV: owner, metadata.
// Returns 1 relabelled, 0 held by another owner, -1 not held.
var Relabel = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return -1 end
if string.sub(cur, 1, 32) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], string.sub(cur, 1, 32 + ` + strconv.Itoa(StampLen) + `) .. ARGV[2], 'KEEPTTL')
return 1
`)

// Keys are the Redis keys of one resource and one owner, and the name of
// the resource's pub/sub channel.
type Keys struct {
	Lock, Fence, Queue, Live, WakeBase, Wake, Label string
	// Watch is the channel of the resource's change notices.
	Watch string
}

// KeysFor returns the keys of resource for owner under prefix.
func KeysFor(prefix, resource, owner string) Keys {
	base := prefix + "{" + Escape(resource) + "}"
	return Keys{
		Lock:     base,
		Fence:    base + ":fence",
		Queue:    base + ":queue",
		Live:     base + ":live",
		WakeBase: base + ":wake:",
		Wake:     base + ":wake:" + owner,
		Label:    base + ":label",
		Watch:    base + ":watch",
	}
}

// Escape makes a resource name safe inside a hash tag: '}' would end the tag
// early, so it is written %7D (and '%' as %25 to keep the mapping one-to-one).
func Escape(name string) string {
	if !strings.ContainsAny(name, "%}") {
		return name
	}
	return strings.NewReplacer("%", "%25", "}", "%7D").Replace(name)
}
