package redislua

import goredis "github.com/redis/go-redis/v9"

// Scripts of the redlock store only: acquire, extend, release, leave and
// the restart guard. They keep the key layout of the shared scripts, and
// add three keys per resource for the redlock wait list (see
// RedlockQueueKeys).

// redlockQueueLua is shared by the redlock scripts that read or change a
// node's wait list. A node keeps, per resource, the tickets of its waiters
// (a sorted set owner -> ticket, a number the waiter chose when it began to
// wait, the same on every node), their liveness deadlines by the node's
// clock (a sorted set owner -> ms) and their requests (a hash owner ->
// "ttl metadata"). head() drops the waiters whose deadline has passed and
// returns the live one with the smallest ticket (ties broken by owner, as
// the sorted set orders them); enqueue() adds or refreshes a place;
// dequeue() removes one; wake() tells a waiter that the lock is free on
// this node; handoff() sets the free lock for a waiter, with its own TTL
// and metadata and a new token, takes it out of the list and tells it,
// "<token> <µs>" on its wake-up list with the node's clock at the grant.
const redlockQueueLua = `
local function nowms()
  local t = redis.call('TIME')
  return t, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function micros(t)
  return string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
local function dequeue(tickets, live, params, w)
  redis.call('ZREM', tickets, w)
  redis.call('ZREM', live, w)
  redis.call('HDEL', params, w)
end
local function head(tickets, live, params, ms)
  while true do
    local w = redis.call('ZRANGE', tickets, 0, 0)[1]
    if not w then return nil end
    local dl = redis.call('ZSCORE', live, w)
    if dl and tonumber(dl) > ms then return w end
    dequeue(tickets, live, params, w)
  end
end
local function enqueue(tickets, live, params, owner, ticket, ms, livems, spec)
  redis.call('ZADD', tickets, 'NX', ticket, owner)
  redis.call('ZADD', live, ms + livems, owner)
  redis.call('HSET', params, owner, spec)
  redis.call('PEXPIRE', tickets, 2 * livems)
  redis.call('PEXPIRE', live, 2 * livems)
  redis.call('PEXPIRE', params, 2 * livems)
end
local function wake(wakebase, w, livems)
  local k = wakebase .. w
  redis.call('RPUSH', k, '1')
  redis.call('PEXPIRE', k, livems)
end
local function fence(key, retention, t)
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local token = t[1] .. string.sub('00000' .. t[2], -6)
  local last = tonumber(redis.call('SET', key, token, 'PX', retention, 'GET') or '0')
  if last >= us then
    token = string.format('%.0f', last + 1)
    redis.call('SET', key, token, 'PX', retention)
  end
  return token
end
local function handoff(lock, fencekey, retention, tickets, live, params, wakebase, w, t, livems)
  local spec = redis.call('HGET', params, w)
  if not spec then return false end
  local sp = string.find(spec, ' ', 1, true)
  redis.call('SET', lock, w .. string.sub(spec, sp + 1), 'PX', string.sub(spec, 1, sp - 1))
  local token = fence(fencekey, retention, t)
  dequeue(tickets, live, params, w)
  local k = wakebase .. w
  redis.call('RPUSH', k, token .. ' ' .. micros(t))
  redis.call('PEXPIRE', k, livems)
  return true
end
`

// redlockGrantLua returns the token of a grant from the node's clock t
// (TIME's reply): the clock in microseconds, raised above the resource's
// counter (the fence key, kept for ARGV[4] ms) when the counter is not
// below it:
// fence() of redlockQueueLua, written out for the short way of
// RedlockAcquire, which defines no function. The reply is the token alone,
// the cheapest reply Redis writes, and its digits are joined from TIME's
// two fields rather than formatted from a number, which costs Redis a
// printf per grant (as tokenLua does for the redis store).
const redlockGrantLua = `
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local token = t[1] .. string.sub('00000' .. t[2], -6)
  local fencekey = KEYS[1] .. ':fence'
  local last = tonumber(redis.call('SET', fencekey, token, 'PX', ARGV[4], 'GET') or '0')
  if last >= us then
    token = string.format('%.0f', last + 1)
    redis.call('SET', fencekey, token, 'PX', ARGV[4])
  end
  return token
`

// RedlockAcquire makes one attempt on one node. It grants when the lock is
// free, no waiter of the redis store is queued on the node, and the node's
// wait list is empty or has the caller at its head: a new request never
// overtakes a live waiter. The token is the node's clock in microseconds,
// raised above the resource's counter when the counter is not below it.
// An owner that holds the lock already (its earlier reply was lost, or a
// release handed the lock to it) is granted again: its TTL is set anew,
// so that it runs from this call, and the reply carries the resource's
// counter.
// An attempt that does not wait, on a resource with neither queue nor wait
// list, takes the short way: one EXISTS on both, SET NX, TIME and the
// counter's SET ... GET, four commands where the general way runs seven.
// A waiting caller (ARGV[5] "1") that is not granted is put in the wait
// list, or has its place refreshed; a waiting caller that is granted
// leaves the list, and is sent "stop" on its wake-up list to end its
// blocking pop there. A caller that may not take the free lock wakes the
// head of the list.
//
// KEYS: lock; the script builds the resource's other keys from it (the
// fence, the redis store's queue, the wait list's keys of RedlockQueueKeys,
// the wake-up lists), which saves every call six keys to send and Redis
// six to read. ARGV: owner, ttl ms, metadata, fence retention ms, "1" when
// waiting, ticket, liveness ms. Returns the token
// alone when the short way grants, {1, token} when the general way grants
// (or the lock is already held by owner), {0, pttl} when not (pttl 0 when
// the lock is free but others wait first); to a waiting caller, each
// reply carries the node's clock in microseconds as a third element.
var RedlockAcquire = goredis.NewScript(`
if ARGV[5] ~= '1' and redis.call('EXISTS', KEYS[1] .. ':queue', KEYS[1] .. ':tickets') == 0 and
    redis.call('SET', KEYS[1], ARGV[1] .. ARGV[3], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('TIME')
` + redlockGrantLua + `
end
` + redlockQueueLua + `
local fencekey, queue = KEYS[1] .. ':fence', KEYS[1] .. ':queue'
local tickets, live, requests = KEYS[1] .. ':tickets', KEYS[1] .. ':alive', KEYS[1] .. ':requests'
local wakebase = KEYS[1] .. ':wake:'
local owner, waiting = ARGV[1], ARGV[5] == '1'
local livems = tonumber(ARGV[7])
local t, ms = nowms()
local function reply(ok, v)
  if waiting then return {ok, v, micros(t)} end
  return {ok, v}
end
local cur = redis.call('GET', KEYS[1])
if cur then
  if string.sub(cur, 1, 32) == owner then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return reply(1, redis.call('GET', fencekey) or '0')
  end
  if waiting then
    enqueue(tickets, live, requests, owner, ARGV[6], ms, livems, ARGV[2] .. ' ' .. ARGV[3])
  end
  return reply(0, redis.call('PTTL', KEYS[1]))
end
if redis.call('LLEN', queue) > 0 then
  return reply(0, 0)
end
if waiting then
  enqueue(tickets, live, requests, owner, ARGV[6], ms, livems, ARGV[2] .. ' ' .. ARGV[3])
end
if redis.call('EXISTS', tickets) == 1 then
  local h = head(tickets, live, requests, ms)
  if h and h ~= owner then
    wake(wakebase, h, livems)
    return reply(0, 0)
  end
  if h then dequeue(tickets, live, requests, owner) end
end
if waiting then
  local k = wakebase .. owner
  redis.call('DEL', k)
  redis.call('RPUSH', k, 'stop')
  redis.call('PEXPIRE', k, livems)
end
redis.call('SET', KEYS[1], owner .. ARGV[3], 'PX', ARGV[2])
return reply(1, fence(fencekey, ARGV[4], t))
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

// RedlockRelease frees the lock if the owner holds it and raises the
// resource's token counter to the holder's token (whoever holds the lock:
// raising a counter never hurts), so that the next grant on this node gets
// a larger token than the holder's whatever the nodes' clocks say. Then,
// when the lock is free and a live waiter other than the owner heads the
// node's wait list, it hands the lock to that waiter (with ARGV[9] "1"),
// as that waiter's own attempt would have taken it, or wakes it (with
// "0", or when the node has lost the waiter's request). The owner leaves
// the wait list, also where another owner holds the lock (a waiter granted
// by handovers from a quorum is still queued where the holder's release
// has not arrived, and must not be handed the lock there after its own
// release); with ARGV[6] "1" (an attempt of a waiter that failed on a
// quorum) it keeps its place instead, or takes it again, with its ticket
// and request.
//
// KEYS: lock (the script builds the others from it, as RedlockAcquire
// does). ARGV: owner, token ("0" for none), fence retention ms, liveness
// ms, "1" to stay queued, ticket, request ("ttl metadata"), "1" to hand
// over. Returns 1 released, 2 released and a waiter woken, 3 released and
// handed over, 0 held by another owner, -1 not held by anyone; with ARGV[5]
// "1", {that, the node's clock in microseconds}.
var RedlockRelease = goredis.NewScript(`
local fencekey, tickets = KEYS[1] .. ':fence', KEYS[1] .. ':tickets'
local got = redis.call('MGET', KEYS[1], fencekey)
local cur, tok = got[1], tonumber(ARGV[2])
if tok > 0 and tok > tonumber(got[2] or '0') then
  redis.call('SET', fencekey, ARGV[2], 'PX', ARGV[3])
end
local requeue = ARGV[5] == '1'
local res = -1
if cur then
  if string.sub(cur, 1, 32) ~= ARGV[1] then
    res = 0
  else
    redis.call('DEL', KEYS[1])
    res = 1
  end
end
if not requeue and redis.call('EXISTS', tickets) == 0 then
  return res
end
` + redlockQueueLua + `
local live, requests, wakebase = KEYS[1] .. ':alive', KEYS[1] .. ':requests', KEYS[1] .. ':wake:'
local livems = tonumber(ARGV[4])
local t, ms = nowms()
if requeue then
  enqueue(tickets, live, requests, ARGV[1], ARGV[6], ms, livems, ARGV[7])
else
  dequeue(tickets, live, requests, ARGV[1])
end
if res ~= 0 and redis.call('EXISTS', tickets) == 1 then
  local h = head(tickets, live, requests, ms)
  if h and h ~= ARGV[1] then
    if ARGV[8] == '1' and handoff(KEYS[1], fencekey, ARGV[3], tickets, live, requests, wakebase, h, t, livems) then
      if res == 1 then res = 3 end
    else
      wake(wakebase, h, livems)
      if res == 1 then res = 2 end
    end
  end
end
if requeue then return {res, micros(t)} end
return res
`)

// RedlockLeave takes a waiter out of the node's wait list and sends "stop"
// to its wake key to end its blocking pop. With ARGV[6] "1" it also frees
// the lock if a release handed it to the waiter (a waiter that gives up);
// with "0" it leaves such a lock held (a waiter granted on a quorum). If
// the lock is then free, the new head is handed the lock (ARGV[5] "1") or
// woken. KEYS: lock, tickets, live, the waiter's wake key, requests,
// fence. ARGV: owner, wake base, liveness ms, fence retention ms, "1" to
// hand over, "1" to free. Returns 1.
var RedlockLeave = goredis.NewScript(redlockQueueLua + `
local livems = tonumber(ARGV[3])
dequeue(KEYS[2], KEYS[3], KEYS[5], ARGV[1])
redis.call('DEL', KEYS[4])
redis.call('RPUSH', KEYS[4], 'stop')
redis.call('PEXPIRE', KEYS[4], livems)
local cur = redis.call('GET', KEYS[1])
if cur and ARGV[6] == '1' and string.sub(cur, 1, 32) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  cur = nil
end
if not cur and redis.call('EXISTS', KEYS[2]) == 1 then
  local t, ms = nowms()
  local h = head(KEYS[2], KEYS[3], KEYS[5], ms)
  if h and not (ARGV[5] == '1' and handoff(KEYS[1], KEYS[6], ARGV[4], KEYS[2], KEYS[3], KEYS[5], ARGV[2], h, t, livems)) then
    wake(ARGV[2], h, livems)
  end
end
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

// RedlockQueueKeys returns the keys of the redlock wait list of the
// resource whose keys are k: its tickets, its liveness deadlines and its
// requests. They carry the resource's hash tag.
func RedlockQueueKeys(k Keys) (tickets, live, requests string) {
	return k.Lock + ":tickets", k.Lock + ":alive", k.Lock + ":requests"
}

// LabelVersionDigits is the width of a relabel's version in the label key.
const LabelVersionDigits = 16
