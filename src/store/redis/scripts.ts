/**
 * Capacity, agent slots, fan-out and a run's terminal state, each changed by one Lua script: Redis runs a script
 * alone, so every server and worker sees the counts exact (docs/scale-out.md, "Capacity across machines"); nothing
 * here is a read-modify-write from Node. Registered on a client with `defineScripts`.
 */
import type { Redis } from 'ioredis';

const TERMINAL = `local terminal = { completed = true, failed = true, cancelled = true }`;

/**
 * Records one event of a run: appended to the run's events and to the feed stream every watcher reads (XADD, trimmed
 * to about `maxLen` entries), in the same step as the change it reports (docs/watch-and-ui.md, "`watch` over Redis").
 */
const RECORD_EVENT = `
local function recordEvent(eventsKey, feedKey, runId, sessionId, json, maxLen)
  redis.call('RPUSH', eventsKey, json)
  return redis.call('XADD', feedKey, 'MAXLEN', '~', maxLen, '*', 'run', runId, 'session', sessionId, 'event', json)
end
local function sessionOf(runKey)
  local rec = redis.call('HGET', runKey, 'record')
  if not rec then return '' end
  return cjson.decode(rec).sessionId or ''
end`;

/**
 * A launch's acceptance, all or nothing: the tree's fan-out claim, then an active-run slot, else a place in the queue
 * (when allowed and not full), else a refusal; the run's record and first status are written in the same step, so
 * no reader sees one without the other.
 * KEYS: active, queued, queueSeq, fanout, run, sessionRuns, allRuns, events, feed. ARGV: runId, limit (0: none), claims,
 * maxSpawns, queueAllowed (1/0), maxQueued, record JSON, createdAtMs, status JSON for admitted, status JSON for queued,
 * event JSON (its type is set here: accepted or queued, with the queue position), sessionId, feed length.
 * Returns { outcome, active, position, queued } with outcome ADMITTED, QUEUED, FULL, QUEUE_FULL or FANOUT (then
 * `active` is the tree's used count).
 */
const CLAIM_LAUNCH = `
${RECORD_EVENT}
local runId, limit, claims, maxSpawns = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local used = tonumber(redis.call('GET', KEYS[4]) or '0')
if used + claims > maxSpawns then return { 'FANOUT', used, 0, 0 } end
local active = redis.call('SCARD', KEYS[1])
local queued = redis.call('ZCARD', KEYS[2])
local outcome, position
if limit == 0 or (active < limit and queued == 0) then
  redis.call('SADD', KEYS[1], runId)
  active = active + 1
  outcome, position = 'ADMITTED', 0
elseif ARGV[5] == '1' and queued < tonumber(ARGV[6]) then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), runId)
  queued = queued + 1
  outcome, position = 'QUEUED', queued
elseif ARGV[5] == '1' then
  return { 'QUEUE_FULL', active, 0, queued }
else
  return { 'FULL', active, 0, queued }
end
redis.call('INCRBY', KEYS[4], claims)
local status = ARGV[9]
if outcome == 'QUEUED' then status = ARGV[10] end
redis.call('HSET', KEYS[5], 'record', ARGV[7], 'status', status, 'state', cjson.decode(status).state)
redis.call('ZADD', KEYS[6], tonumber(ARGV[8]), runId)
redis.call('ZADD', KEYS[7], tonumber(ARGV[8]), runId)
local ev = cjson.decode(ARGV[11])
if outcome == 'QUEUED' then ev.type, ev.position = 'queued', position else ev.type = 'accepted' end
recordEvent(KEYS[8], KEYS[9], runId, ARGV[12], cjson.encode(ev), ARGV[13])
return { outcome, active, position, queued }
`;

/**
 * A nested launch's acceptance (docs/scale-out.md, "Nested delegation"), all or nothing, as local mode charges one:
 * to the tree's fan-out and to the agent slots (refused, never queued: a waiting parent could deadlock), not to the
 * active-run capacity. The parent must still be active; the run is listed among its children in the same step.
 * KEYS: parentRun, fanout (the root's), run, sessionRuns, rootSessionRuns, allRuns, agents, agentsTotal, children
 * (the parent's). ARGV: runId, claims, maxSpawns, agentSlots, maxAgents, record JSON, createdAtMs, status JSON,
 * parentStepKey. Returns { outcome, a, b }: ADMITTED (fan-out used, agents in use), PARENT_ENDED, FANOUT (used),
 * AGENTS (agents in use).
 */
const CLAIM_NESTED = `
${TERMINAL}
local runId, claims, maxSpawns, want, maxAgents = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local parent = redis.call('HGET', KEYS[1], 'state')
if not parent or terminal[parent] then return { 'PARENT_ENDED', 0, 0 } end
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
if used + claims > maxSpawns then return { 'FANOUT', used, 0 } end
local total = tonumber(redis.call('GET', KEYS[8]) or '0')
if total + want > maxAgents then return { 'AGENTS', total, 0 } end
redis.call('INCRBY', KEYS[2], claims)
redis.call('HSET', KEYS[7], runId, want)
redis.call('INCRBY', KEYS[8], want)
redis.call('HSET', KEYS[3], 'record', ARGV[6], 'status', ARGV[8], 'state', cjson.decode(ARGV[8]).state)
redis.call('ZADD', KEYS[4], tonumber(ARGV[7]), runId)
redis.call('ZADD', KEYS[5], tonumber(ARGV[7]), runId)
redis.call('ZADD', KEYS[6], tonumber(ARGV[7]), runId)
redis.call('HSET', KEYS[9], runId, ARGV[9])
return { 'ADMITTED', used + claims, total + want }
`;

/**
 * An append's claim on its tree's fan-out (docs/scale-out.md, "Capacity across machines"), counted with the launches'
 * and nested runs' claims: `used + claims <= maxSpawns` and the claim, or nothing.
 * KEYS: fanout (the root's). ARGV: claims, maxSpawns. Returns { 1, used after } claimed, { 0, used } refused.
 */
const CLAIM_APPEND = `
local claims, maxSpawns = tonumber(ARGV[1]), tonumber(ARGV[2])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used + claims > maxSpawns then return { 0, used } end
return { 1, redis.call('INCRBY', KEYS[1], claims) }
`;

/**
 * Returns claims of agents that will never start to a tree's fan-out, never below zero; a tree whose count is gone
 * (its root dismissed) is not recreated.
 */
const RETURN_FANOUT_FN = `
local function returnFanout(key, claims)
  if claims <= 0 or redis.call('EXISTS', key) == 0 then return end
  local left = tonumber(redis.call('GET', key)) - claims
  if left < 0 then left = 0 end
  redis.call('SET', key, left)
end`;

/** An append's claim that was taken but not recorded. KEYS: fanout. ARGV: claims. */
const RETURN_FANOUT = `
${RETURN_FANOUT_FN}
returnFanout(KEYS[1], tonumber(ARGV[1]))
return 1
`;

/**
 * A worker's start of a job: the run must hold an active-run slot (a queued run takes one when there is room and it
 * is the queue's head) and gets its agent slots, both or neither.
 * KEYS: active, queued, agents, agentsTotal, run. ARGV: runId, limit (0: none), agentSlots, maxAgents, nested (1/0:
 * a nested run holds no active-run slot and got its agent slots at acceptance, so it starts while it has not ended).
 * Returns 1 (start), 0 (not yet: no slot, or not the head) or -1 (the run has ended or is unknown: never start it).
 */
const START_RUN = `
${TERMINAL}
local runId, limit, want, maxAgents = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local state = redis.call('HGET', KEYS[5], 'state')
if not state or terminal[state] then return -1 end
if ARGV[5] == '1' then return 1 end
local held = redis.call('SISMEMBER', KEYS[1], runId) == 1
if not held then
  if not redis.call('ZSCORE', KEYS[2], runId) then return -1 end
  if limit ~= 0 and redis.call('SCARD', KEYS[1]) >= limit then return 0 end
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if head ~= runId then return 0 end
end
local total = tonumber(redis.call('GET', KEYS[4]) or '0')
local mine = tonumber(redis.call('HGET', KEYS[3], runId) or '0')
if mine == 0 and total + want > maxAgents then return 0 end
if not held then
  redis.call('ZREM', KEYS[2], runId)
  redis.call('SADD', KEYS[1], runId)
end
if mine == 0 then
  redis.call('HSET', KEYS[3], runId, want)
  redis.call('INCRBY', KEYS[4], want)
end
return 1
`;

/**
 * A non-terminal status change (compare-and-set: a terminal state is never replaced), announced on the run's channel.
 * KEYS: run. ARGV: status JSON, channel, extra field/value pairs. Returns 1 written, 0 refused (already ended).
 */
const PUT_STATUS = `
${TERMINAL}
local state = redis.call('HGET', KEYS[1], 'state')
if not state or terminal[state] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'state', cjson.decode(ARGV[1]).state)
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PUBLISH', ARGV[2], 'status')
return 1
`;

/**
 * The one way a run ends in Redis: compare-and-set of the terminal state (the first end wins), its active-run slot
 * or queue place and its agent slots returned in the same step, announced on the run's channel.
 * Its `ended` event is recorded in the same step, and so is the return of the fan-out claims of its agents that never
 * started (as a local run's end returns them, docs/scale-out.md, "Capacity across machines").
 * KEYS: run, active, queued, agents, agentsTotal, events, feed, fanout (the root's). ARGV: runId, status JSON
 * (terminal), channel, event JSON, feed length, unstarted claims to return (0: none).
 * Returns 1 ended here, 0 it had already ended (or is unknown).
 */
const END_RUN = `
${TERMINAL}
${RECORD_EVENT}
${RETURN_FANOUT_FN}
local state = redis.call('HGET', KEYS[1], 'state')
if not state or terminal[state] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'state', cjson.decode(ARGV[2]).state)
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local mine = tonumber(redis.call('HGET', KEYS[4], ARGV[1]) or '0')
if mine > 0 then
  redis.call('HDEL', KEYS[4], ARGV[1])
  redis.call('DECRBY', KEYS[5], mine)
end
returnFanout(KEYS[8], tonumber(ARGV[6]))
recordEvent(KEYS[6], KEYS[7], ARGV[1], sessionOf(KEYS[1]), ARGV[4], ARGV[5])
redis.call('PUBLISH', ARGV[3], 'status')
return 1
`;

/**
 * One event of a run that changes nothing else (a worker took it, a step started or ended, a dismissal).
 * KEYS: run, events, feed. ARGV: runId, event JSON, feed length. Returns the feed entry's id.
 */
const EVENT = `
${RECORD_EVENT}
return recordEvent(KEYS[2], KEYS[3], ARGV[1], sessionOf(KEYS[1]), ARGV[2], ARGV[3])
`;

/**
 * Appends to a step's stored output up to its cap (the rest is counted by the step's status, not stored).
 * KEYS: output. ARGV: bytes, cap. Returns the stored length.
 */
const APPEND_CAPPED = `
local len = redis.call('STRLEN', KEYS[1])
local cap = tonumber(ARGV[2])
if len >= cap then return len end
return redis.call('APPEND', KEYS[1], string.sub(ARGV[1], 1, cap - len))
`;

/**
 * A run's dismissal (who asked), with its `dismissed` event in the same step; a second dismissal changes nothing.
 * KEYS: run, events, feed. ARGV: runId, by, event JSON, feed length. Returns 1 dismissed here, 0 already dismissed.
 */
const DISMISS = `
${RECORD_EVENT}
if redis.call('HSETNX', KEYS[1], 'dismissed', ARGV[2]) == 0 then return 0 end
recordEvent(KEYS[2], KEYS[3], ARGV[1], sessionOf(KEYS[1]), ARGV[3], ARGV[4])
return 1
`;

export interface SubagentScripts {
  saClaimLaunch(...args: Array<string | number>): Promise<[string, number, number, number]>;
  saClaimNested(...args: Array<string | number>): Promise<[string, number, number]>;
  saClaimAppend(...args: Array<string | number>): Promise<[number, number]>;
  saReturnFanout(...args: Array<string | number>): Promise<number>;
  saStartRun(...args: Array<string | number>): Promise<number>;
  saPutStatus(...args: Array<string | number>): Promise<number>;
  saEndRun(...args: Array<string | number>): Promise<number>;
  saAppendCapped(...args: Array<string | number | Buffer>): Promise<number>;
  saEvent(...args: Array<string | number>): Promise<string>;
  saDismiss(...args: Array<string | number>): Promise<number>;
}

export type ScriptedRedis = Redis & SubagentScripts;

/** Registers the scripts (EVALSHA, loaded on first use) on a client. */
export function defineScripts(r: Redis): ScriptedRedis {
  r.defineCommand('saClaimLaunch', { numberOfKeys: 9, lua: CLAIM_LAUNCH });
  r.defineCommand('saClaimNested', { numberOfKeys: 9, lua: CLAIM_NESTED });
  r.defineCommand('saClaimAppend', { numberOfKeys: 1, lua: CLAIM_APPEND });
  r.defineCommand('saReturnFanout', { numberOfKeys: 1, lua: RETURN_FANOUT });
  r.defineCommand('saStartRun', { numberOfKeys: 5, lua: START_RUN });
  r.defineCommand('saPutStatus', { numberOfKeys: 1, lua: PUT_STATUS });
  r.defineCommand('saEndRun', { numberOfKeys: 8, lua: END_RUN });
  r.defineCommand('saEvent', { numberOfKeys: 3, lua: EVENT });
  r.defineCommand('saDismiss', { numberOfKeys: 3, lua: DISMISS });
  r.defineCommand('saAppendCapped', { numberOfKeys: 1, lua: APPEND_CAPPED });
  return r as ScriptedRedis;
}
