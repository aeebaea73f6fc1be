/**
 * Runs in Redis (docs/scale-out.md, "What lives in Redis"): a run's record and status, its events, its steps' bounded
 * output, its session's index, the capacity counts and the workers' heartbeats. Mechanism only: which state follows
 * which is the manager's and the worker's business; every change that must be exact is one script (./scripts.ts).
 * Every call is bounded and fails BUSY (./connection.ts).
 */
import type { RunStatus } from '../run-types.js';
import { bounded as boundedCall, ready } from './connection.js';
import { channels, FEED_MAX_LEN, keys } from './keys.js';
import type { ScriptedRedis } from './scripts.js';

/** What a server records of a distributed run at launch; the worker adds where it runs. */
export interface DistributedRecord {
  v: 1;
  runId: string;
  sessionId: string;
  pool: string;
  mode: 'single' | 'parallel' | 'chain';
  cwd: string;
  label: string | null;
  createdAt: string;
  agents: string[];
  limits: { maxSpawns: number; maxDepth: number };
  /** Agent starts claimed from the tree's fan-out at acceptance. */
  claims: number;
  /** Agent slots the run holds while it runs: its widest step. */
  agentSlots: number;
  /** Epoch ms after which a run still queued ends failed/QUEUE_TIMEOUT. */
  queueDeadline: number;
  /**
   * The run's place in its tree (docs/scale-out.md, "Nested delegation"): 0 and itself for a launch of a server,
   * one deeper than its parent for a nested one. Absent on records written before nesting went through Redis.
   */
  depth?: number;
  rootRunId?: string;
  parentRunId?: string | null;
  parentStepKey?: string | null;
  /** SUBAGENTS_MAX_AGENTS of the tree's root server: what nested launches are charged against. */
  maxAgents?: number;
  /** A nested run's root's session, whose index lists it too. */
  rootSessionId?: string;
}

export interface StoredRun {
  record: DistributedRecord;
  status: RunStatus;
  /** The worker that took it (its id and host), once one did. */
  worker: string | null;
  host: string | null;
  dismissed: boolean;
  /** Appends the holding worker accepted (docs/scale-out.md, "What lives in Redis"). */
  appendsAccepted: number;
}

export interface WorkerBeat { id: string; host: string; pid: number; pool: string; concurrency: number; running: number; at: number }

export type ClaimOutcome =
  | { outcome: 'ADMITTED'; active: number; queued: number }
  | { outcome: 'QUEUED'; active: number; position: number; queued: number }
  | { outcome: 'FULL' | 'QUEUE_FULL'; active: number; queued: number }
  | { outcome: 'FANOUT'; used: number };

export interface NestedClaim {
  outcome: 'ADMITTED' | 'PARENT_ENDED' | 'FANOUT' | 'AGENTS';
  /** The tree's fan-out used (ADMITTED: after this launch; FANOUT: before it). */
  used: number;
  /** Agent slots in use (ADMITTED: after this launch; AGENTS: before it). */
  agents: number;
}

export class RedisRuns {
  constructor(readonly redis: ScriptedRedis) {}

  /** One bounded call, once the connection is up (./connection.ts). */
  call<T>(what: string, op: () => Promise<T>): Promise<T> {
    // A connection that comes back after the caller was answered BUSY must not run the command late: a launch
    // refused BUSY would otherwise be accepted when Redis returns, holding a slot with no job.
    return boundedCall(what, async (stillWanted) => {
      await ready(this.redis);
      if (!stillWanted()) throw new Error('timed out');
      return op();
    });
  }

  async claimLaunch(record: DistributedRecord, admitted: RunStatus, queued: RunStatus, o: { limit: number; queueAllowed: boolean; maxQueued: number }): Promise<ClaimOutcome> {
    const r = await this.call('accept the launch', () => this.redis.saClaimLaunch(
      keys.active, keys.queued, keys.queueSeq, keys.fanout(record.runId), keys.run(record.runId), keys.sessionRuns(record.sessionId), keys.allRuns,
      keys.events(record.runId), keys.feed,
      record.runId, o.limit, record.claims, record.limits.maxSpawns, o.queueAllowed ? 1 : 0, o.maxQueued,
      JSON.stringify(record), Date.parse(record.createdAt), JSON.stringify(admitted), JSON.stringify(queued),
      JSON.stringify({ ts: record.createdAt, type: '', mode: record.mode, pool: record.pool }), record.sessionId, FEED_MAX_LEN));
    const [outcome, a, position, q] = [String(r[0]), Number(r[1]), Number(r[2]), Number(r[3])];
    if (outcome === 'FANOUT') return { outcome, used: a };
    if (outcome === 'QUEUED') return { outcome, active: a, position, queued: q };
    if (outcome === 'ADMITTED') return { outcome, active: a, queued: q };
    return { outcome: outcome as 'FULL' | 'QUEUE_FULL', active: a, queued: q };
  }

  /** A nested launch's acceptance (./scripts.ts CLAIM_NESTED); the record names its parent, root and step. */
  async claimNested(record: DistributedRecord, status: RunStatus, rootSessionId: string, o: { maxAgents: number }): Promise<NestedClaim> {
    const parent = record.parentRunId!;
    const r = await this.call('accept the nested launch', () => this.redis.saClaimNested(
      keys.run(parent), keys.fanout(record.rootRunId!), keys.run(record.runId), keys.sessionRuns(record.sessionId),
      keys.sessionRuns(rootSessionId), keys.allRuns, keys.agents, keys.agentsTotal, keys.children(parent),
      record.runId, record.claims, record.limits.maxSpawns, record.agentSlots, o.maxAgents, JSON.stringify(record),
      Date.parse(record.createdAt), JSON.stringify(status), record.parentStepKey ?? ''));
    return { outcome: r[0] as NestedClaim['outcome'], used: Number(r[1]), agents: Number(r[2]) };
  }

  /** The nested runs launched from a run, with the step that launched each. */
  async children(runId: string): Promise<Array<{ runId: string; stepKey: string }>> {
    const h = await this.call('read the nested runs', () => this.redis.hgetall(keys.children(runId)));
    return Object.entries(h).map(([id, stepKey]) => ({ runId: id, stepKey }));
  }

  /** 1: start it now; 0: not yet (no slot, or not its turn); -1: it ended or is unknown, never start it. */
  async startRun(runId: string, limit: number, agentSlots: number, maxAgents: number, nested = false): Promise<1 | 0 | -1> {
    const r = await this.call('start the run', () => this.redis.saStartRun(keys.active, keys.queued, keys.agents, keys.agentsTotal, keys.run(runId), runId, limit, agentSlots, maxAgents, nested ? 1 : 0));
    return Number(r) as 1 | 0 | -1;
  }

  /** A non-terminal status (never replacing a terminal one), with fields such as the worker; false when it had ended. */
  async putStatus(status: RunStatus, fields: Record<string, string> = {}): Promise<boolean> {
    const extra = Object.entries(fields).flat();
    const r = await this.call('record the run\'s status', () => this.redis.saPutStatus(keys.run(status.runId), JSON.stringify(status), channels.run(status.runId), ...extra));
    return r === 1;
  }

  /** Which worker holds the run (its id, host and local run id), whatever the run's state. */
  async recordHolder(runId: string, fields: Record<string, string>): Promise<void> {
    await this.call('record the run\'s worker', () => this.redis.hset(keys.run(runId), fields));
  }

  /**
   * The run's end (the first end wins), its slots returned and its `ended` event recorded (with `fields`, such as the
   * worker); false when it had already ended. `unstarted`: the fan-out claims of its agents that never started, given
   * back to its tree's count in the same step (only its worker's status says for sure which agents started).
   */
  async endRun(status: RunStatus, fields: Record<string, unknown> = {}, unstarted?: { rootRunId: string; claims: number }): Promise<boolean> {
    const event = JSON.stringify({ ts: status.endedAt ?? new Date().toISOString(), type: 'ended', state: status.state, ...(status.error ? { error: status.error.code } : {}), ...fields });
    const r = await this.call('record the run\'s end', () => this.redis.saEndRun(keys.run(status.runId), keys.active, keys.queued, keys.agents, keys.agentsTotal, keys.events(status.runId), keys.feed,
      keys.fanout(unstarted?.rootRunId ?? status.runId), status.runId, JSON.stringify(status), channels.run(status.runId), event, FEED_MAX_LEN, unstarted?.claims ?? 0));
    return r === 1;
  }

  async read(runId: string): Promise<StoredRun | null> {
    const h = await this.call('read the run', () => this.redis.hgetall(keys.run(runId)));
    if (!h.record || !h.status) return null;
    return { record: JSON.parse(h.record) as DistributedRecord, status: JSON.parse(h.status) as RunStatus, worker: h.worker ?? null, host: h.host ?? null, dismissed: h.dismissed !== undefined, appendsAccepted: Number(h.appendsAccepted ?? 0) };
  }

  /**
   * An append's claim on its tree's fan-out (./scripts.ts CLAIM_APPEND): all or nothing, against the same count the
   * launches and nested runs of the tree claim from. `used` is the tree's count after a claim, before a refusal.
   */
  async claimAppend(rootRunId: string, claims: number, maxSpawns: number): Promise<{ claimed: boolean; used: number }> {
    const [ok, used] = await this.call('claim the append\'s fan-out', () => this.redis.saClaimAppend(keys.fanout(rootRunId), claims, maxSpawns));
    return { claimed: Number(ok) === 1, used: Number(used) };
  }

  /** Returns an append's claim that was taken but not recorded (./scripts.ts RETURN_FANOUT): never below zero. */
  async returnFanout(rootRunId: string, claims: number): Promise<void> {
    await this.call('return the append\'s fan-out', () => this.redis.saReturnFanout(keys.fanout(rootRunId), claims));
  }

  /**
   * Counts an append the holding worker accepted (its fan-out was claimed before, by `claimAppend`), and wakes the
   * run's watchers (its pending appends and fan-out changed).
   */
  async recordAppend(runId: string): Promise<void> {
    await this.call('record the append', () => this.redis.multi()
      .hincrby(keys.run(runId), 'appendsAccepted', 1)
      .publish(channels.run(runId), 'append')
      .exec());
  }

  async readState(runId: string): Promise<string | null> {
    return this.call('read the run', () => this.redis.hget(keys.run(runId), 'state'));
  }

  async appendOutput(runId: string, stepKey: string, bytes: Buffer, capBytes: number): Promise<number> {
    return this.call('store the output', () => this.redis.saAppendCapped(keys.output(runId, stepKey), bytes, capBytes));
  }

  /** A whole stored text at once (an isolated step's patch): written again, it is the same, never doubled. */
  async putOutput(runId: string, stepKey: string, bytes: Buffer): Promise<void> {
    await this.call('store the output', () => this.redis.set(keys.output(runId, stepKey), bytes));
  }

  async outputLength(runId: string, stepKey: string): Promise<number> {
    return this.call('read the output', () => this.redis.strlen(keys.output(runId, stepKey)));
  }

  /** Bytes [start, end] (inclusive, as GETRANGE) of a step's stored output. */
  async outputRange(runId: string, stepKey: string, start: number, end: number): Promise<Buffer> {
    return this.call('read the output', () => this.redis.getrangeBuffer(keys.output(runId, stepKey), start, end));
  }

  /** One event of the run, in its events and the feed (./keys.ts); `ev.ts` defaults to now. */
  async event(runId: string, ev: Record<string, unknown>): Promise<void> {
    await this.call('record the event', () => this.redis.saEvent(keys.run(runId), keys.events(runId), keys.feed, runId, JSON.stringify({ ts: new Date().toISOString(), ...ev }), FEED_MAX_LEN));
  }

  async events(runId: string): Promise<Array<Record<string, unknown>>> {
    const lines = await this.call('read the events', () => this.redis.lrange(keys.events(runId), 0, -1));
    return lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  }

  /** Every run id, newest first. */
  async allRuns(max = 100_000): Promise<string[]> {
    return this.call('list the runs', () => this.redis.zrevrange(keys.allRuns, 0, max - 1));
  }

  /** A session's run ids, newest first. */
  async sessionRuns(sessionId: string, max = 1000): Promise<string[]> {
    return this.call('list the session\'s runs', () => this.redis.zrevrange(keys.sessionRuns(sessionId), 0, max - 1));
  }

  /** Removes an ended run's keys and its index entries (gc); the caller checked that it has ended. */
  async remove(run: StoredRun): Promise<void> {
    const { runId, sessionId } = run.record;
    const outputs: string[] = [];
    await this.call('list the run\'s output', async () => {
      let cursor = '0';
      do {
        const [next, found] = await this.redis.scan(cursor, 'MATCH', `${keys.run(runId)}:out:*`, 'COUNT', 200);
        cursor = next;
        outputs.push(...found);
      } while (cursor !== '0');
    });
    // Its removal is an event of the feed only: a session's servers announce their changed list.
    const removed = JSON.stringify({ ts: new Date().toISOString(), type: 'removed' });
    await this.call('remove the run', () => this.redis.multi()
      .del(keys.run(runId), keys.events(runId), keys.fanout(runId), keys.children(runId), ...outputs)
      .zrem(keys.allRuns, runId).zrem(keys.sessionRuns(sessionId), runId).zrem(keys.sessionRuns(run.record.rootSessionId ?? sessionId), runId)
      .xadd(keys.feed, 'MAXLEN', '~', FEED_MAX_LEN, '*', 'run', runId, 'session', sessionId, 'event', removed)
      .exec());
  }

  /** Hides the run from listings (it stays readable by id); who asked is kept with it. */
  async markDismissed(runId: string, by: string): Promise<void> {
    const event = JSON.stringify({ ts: new Date().toISOString(), type: 'dismissed' });
    await this.call('record the dismissal', () => this.redis.saDismiss(keys.run(runId), keys.events(runId), keys.feed, runId, by, event, FEED_MAX_LEN));
  }

  /** Whether a session has ever had a run (restore's "known" test). */
  /** A session with runs of its own, or one that restored others (it is then an ancestor to restore in turn). */
  async sessionKnown(sessionId: string): Promise<boolean> {
    return (await this.call('read the session', () => this.redis.exists(keys.sessionRuns(sessionId), keys.sessionAncestors(sessionId)))) > 0;
  }

  async addAncestors(sessionId: string, ids: string[]): Promise<void> {
    if (ids.length) await this.call('record the lineage', () => this.redis.sadd(keys.sessionAncestors(sessionId), ...ids));
  }

  /** The session and every ancestor reachable through restore links. */
  async lineage(sessionId: string): Promise<Set<string>> {
    const seen = new Set([sessionId]);
    let frontier = [sessionId];
    while (frontier.length && seen.size < 1000) {
      const next: string[] = [];
      for (const id of frontier) {
        for (const a of await this.call('read the lineage', () => this.redis.smembers(keys.sessionAncestors(id)))) {
          if (!seen.has(a)) { seen.add(a); next.push(a); }
        }
      }
      frontier = next;
    }
    return seen;
  }

  /** A queued run's 1-based place and the queue's length; null when it is not queued. */
  async queuePlace(runId: string): Promise<{ position: number; length: number } | null> {
    const [rank, length] = await this.call('read the queue', async () => Promise.all([this.redis.zrank(keys.queued, runId), this.redis.zcard(keys.queued)]));
    return rank === null ? null : { position: rank + 1, length };
  }

  async counts(): Promise<{ active: number; queued: number; agents: number }> {
    const [active, queued, agents] = await this.call('read the capacity', async () => Promise.all([
      this.redis.scard(keys.active), this.redis.zcard(keys.queued), this.redis.get(keys.agentsTotal),
    ]));
    return { active, queued, agents: Number(agents ?? 0) };
  }

  /** Run ids holding a slot or waiting for one (the repair of orphans looks at these). */
  async slotHolders(): Promise<string[]> {
    const [active, queued] = await this.call('read the capacity', async () => Promise.all([this.redis.smembers(keys.active), this.redis.zrange(keys.queued, '0', '-1')]));
    return [...active, ...queued];
  }

  async fanoutUsed(rootRunId: string): Promise<number> {
    return Number(await this.call('read the fan-out', () => this.redis.get(keys.fanout(rootRunId))) ?? 0);
  }

  /** Redis' version and persistence as INFO reports them (doctor). */
  async serverInfo(): Promise<{ version: string; aof: boolean; rdbSaves: boolean }> {
    const text = await this.call('read INFO', () => this.redis.info());
    const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(text)?.[1]?.trim() ?? '';
    // rdb_last_save_time exists either way; RDB snapshots are configured when `save` has rules (not in INFO).
    const save = await this.call('read the persistence settings', () => this.redis.config('GET', 'save').catch(() => null)) as string[] | null;
    return { version: field('redis_version'), aof: field('aof_enabled') === '1', rdbSaves: Boolean(save && save[1]) };
  }

  async heartbeat(beat: WorkerBeat): Promise<void> {
    await this.call('record the heartbeat', () => this.redis.hset(keys.workers, beat.id, JSON.stringify(beat)));
  }

  async forgetWorker(id: string): Promise<void> {
    await this.call('remove the heartbeat', () => this.redis.hdel(keys.workers, id));
  }

  async workers(): Promise<WorkerBeat[]> {
    const h = await this.call('read the workers', () => this.redis.hgetall(keys.workers));
    return Object.values(h).map((v) => JSON.parse(v) as WorkerBeat);
  }
}
