import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { isAlive, readIdentity, type ProcessIdentity } from '../process/identity.js';
import { DetachedChild, spawnDetached } from '../process/spawn-detached.js';
import { ensurePrivateDir } from '../store/atomic-write.js';
import { withLock } from '../store/lock.js';
import { WarmPoolFiles, type IdleEntry } from '../store/warm-pool.js';
import { RUNNER_MAIN, type ManagerContext } from './context.js';
import { WarmDemand } from './warm-demand.js';

/**
 * The warm pool's policy (docs/architecture.md, "Warm runners"): a launch takes a pre-booted idle runner of the state
 * home when there is one, and replacements boot in the background. Idle runners hold no capacity, agent slot or
 * fan-out: the launch reserves all of that exactly as before, and binds the claimed runner's identity before proceed.
 */

/**
 * Replacements boot this long after the last launch in flight got its answer: a burst's launches are not slowed by
 * boots competing with them for the cores (and a steady stream of launches still leaves gaps where the refill runs).
 */
const REFILL_DELAY_MS = 30;
/** The startup fill waits this long: a server's own start (and its first tools/list) comes first. */
const STARTUP_FILL_DELAY_MS = 1000;
/** Room in the idle runner's command line for its run's directory (runner/warm-idle.ts sets its title to it). */
const TITLE_ROOM = '_'.repeat(96);
/** How often a claimed runner's liveness is read during its handshake (we are not its parent: no exit event). */
const LIVENESS_POLL_MS = 25;
/**
 * A runner serving a run that may bring it back to the pool counts as one of the pool's for this long after its
 * claim: a run that ends sooner (a tight loop, a burst of short agents) returns its runner in place of a replacement's
 * boot; a longer run is not waited for (the pool boots a replacement then, as without reuse).
 */
const SERVING_COUNTED_MS = 2_000;

interface PoolState {
  /** Runners this server started that have not announced themselves yet, by pid, with when to stop counting them. */
  booting: Map<number, number>;
  spawning: number;
  /** Launches in flight and the burst rule (manager/warm-demand.ts). */
  demand: WarmDemand;
  /** Idle runners a launch of this server in flight has looked at (`peekWarmRunner`) and means to take. */
  peeked: Set<string>;
  timer: NodeJS.Timeout | null;
}

const pools = new WeakMap<ManagerContext, PoolState>();

function stateOf(ctx: ManagerContext): PoolState {
  let s = pools.get(ctx);
  if (!s) pools.set(ctx, (s = { booting: new Map(), spawning: 0, demand: new WarmDemand(ctx.settings.warmRunners, ctx.settings.warmIdleMs), peeked: new Set(), timer: null }));
  return s;
}

function filesOf(ctx: ManagerContext): WarmPoolFiles {
  return new WarmPoolFiles(ctx.layout.warmDir);
}

let buildTag: string | null = null;
/**
 * This server's runner build: its entry's path and modification time. Servers of another install or version share the
 * home; each claims and counts only runners of its own build (the others retire on their own).
 */
function ownBuild(): string {
  if (buildTag === null) {
    let mtime = 0;
    try { mtime = fs.statSync(RUNNER_MAIN).mtimeMs; } catch { /* a missing entry fails the boot, not this */ }
    buildTag = `${RUNNER_MAIN}@${mtime}`;
  }
  return buildTag;
}

/** Idle runners of this build. */
function ownIdle(files: WarmPoolFiles): IdleEntry[] {
  const build = ownBuild();
  return files.listIdle().filter((e) => e.build === build);
}

/** Idle runners of this build, read one at a time as the caller goes on. */
function* ownIdleLazily(files: WarmPoolFiles): Generator<IdleEntry> {
  const build = ownBuild();
  for (const e of files.idleEntries()) if (e.build === build) yield e;
}

/**
 * A launch's first look at the pool, before its reservation: an idle runner of this build, found alive, which the
 * reservation is bound to at once (manager/capacity.ts, `reserve`) and `claimWarmRunner` then tries first; null when
 * the pool is off or has none. Entries only read, nothing taken: a launch that is refused or queued leaves the pool
 * as it was. A launch that got one calls `forgetPeek` once it no longer needs it.
 */
export function peekWarmRunner(ctx: ManagerContext): IdleEntry | null {
  if (ctx.settings.warmRunners === 0) return null;
  const state = stateOf(ctx);
  const files = filesOf(ctx);
  for (const e of ownIdleLazily(files)) {
    if (state.peeked.has(e.key)) continue; // another launch of this server has it in view: a burst spreads over the pool
    if (!isAlive(e)) { files.forget(e.key, e.log); continue; } // an idle runner that died costs nothing
    state.peeked.add(e.key);
    return e;
  }
  return null;
}

/** A warm runner taken and claimed for a run (`claimWarmRunner`). */
export interface ClaimedWarmRunner {
  child: DetachedChild;
  runner: ProcessIdentity;
  /** `beforeClaim` told this runner's run to proceed before the claim was written. */
  proceedSaid: boolean;
}

/**
 * Takes an idle runner for the run in `runDir` and hands it the run's environment: the `peeked` one if it is still
 * idle, else any other; null when the pool is off or empty (the launch boots one). The returned child reports the
 * runner's death during the handshake, as a spawned one would; `runner` is its identity as announced and found alive
 * after it was taken: the claim reaches that process alone.
 *
 * `beforeClaim` runs between the take and the claim with the taken runner's identity, and returns true when it said
 * `proceed` for the run (the launch does so for the runner its reservation is bound to: docs/architecture.md, "Warm
 * runners"). If it throws, the runner, taken and never told a run, is stopped and its names removed, and the error
 * goes to the caller. Once proceed is said, a claim that cannot be written fails the same way: no other runner may
 * be given a run that is already told to start.
 */
export function claimWarmRunner(ctx: ManagerContext, runDir: string, env: Record<string, string>, peeked: IdleEntry | null, beforeClaim?: (runner: ProcessIdentity) => boolean): ClaimedWarmRunner | null {
  if (ctx.settings.warmRunners === 0) return null;
  const state = stateOf(ctx);
  // Counted from the claim (not the look): a refill runs in a gap between launches, and a loop's next launch is
  // looking at the pool by the time the last one's refill is due. Demand is how many wanted a runner at once, not
  // how many came since the last refill: a refill may be seconds away (a serving runner's look again, or one that
  // found a launch in flight), and a sequential loop's launches of those seconds are no burst.
  state.demand.claimed();
  const files = filesOf(ctx);
  const candidates = function* () {
    if (peeked) yield peeked;
    for (const e of ownIdleLazily(files)) if (e.key !== peeked?.key && !state.peeked.has(e.key)) yield e;
  };
  for (const e of candidates()) {
    // A take first: one rename, and a runner found dead after it (the same /proc read that proves a live one) is
    // only forgotten.
    if (!files.take(e.key)) continue; // another server's, or it retired
    if (!isAlive(e)) { files.forget(e.key, e.log); continue; }
    state.booting.delete(e.pid); // announced and taken: no longer one of ours on its way up
    const runner = { pid: e.pid, startTime: e.startTime };
    let proceedSaid = false;
    try {
      proceedSaid = beforeClaim?.(runner) ?? false;
    } catch (err) {
      stopIdle(e);
      files.forget(e.key, e.log);
      throw err;
    }
    try {
      files.writeClaim(e.key, { runDir, env, pool: { size: state.demand.size(performance.now()), maxRuns: ctx.settings.warmRunnerRuns } });
    } catch (err) {
      stopIdle(e);
      files.forget(e.key, e.log);
      if (proceedSaid) throw err;
      continue;
    }
    return { child: watched(e, ctx.settings.handshakeTimeoutMs), runner, proceedSaid };
  }
  return null;
}

/** Test seam (SUBAGENTS_TEST_FAULT=warm-taken-after-reserve): an idle runner taken as another server's claim takes it. */
export function takeForTest(ctx: ManagerContext, e: IdleEntry): void {
  filesOf(ctx).take(e.key);
}

/** A launch is done with the runner it looked at (claimed, lost to another server, or never needed). */
export function forgetPeek(ctx: ManagerContext, peeked: IdleEntry | null): void {
  if (peeked) stateOf(ctx).peeked.delete(peeked.key);
}

/**
 * A launch that called `claimWarmRunner` has its answer (either way): the runner it claimed is no longer polled (its
 * handshake is over), and the pool refills once none is in flight.
 */
export function warmLaunchSettled(ctx: ManagerContext, claimed: { child: DetachedChild } | null = null): void {
  if (claimed) stopWatching(claimed.child);
  if (ctx.settings.warmRunners === 0) return;
  const state = stateOf(ctx);
  if (state.demand.settled()) scheduleRefill(ctx, REFILL_DELAY_MS);
}

/** An identity-checked kill of a runner that was never given a run (its group: it is a group leader). */
function stopIdle(id: ProcessIdentity): void {
  if (!isAlive(id)) return;
  try { process.kill(-id.pid, 'SIGKILL'); } catch { /* gone */ }
}

/** The liveness polls of claimed runners whose launch has not settled yet. */
const polls = new WeakMap<DetachedChild, NodeJS.Timeout>();

function stopWatching(child: DetachedChild): void {
  const timer = polls.get(child);
  if (timer) clearInterval(timer);
  polls.delete(child);
}

function watched(id: ProcessIdentity, forMs: number): DetachedChild {
  const child = new DetachedChild(id.pid);
  const until = performance.now() + forMs;
  const timer = setInterval(() => {
    if (isAlive(id)) {
      if (performance.now() > until) clearInterval(timer); // the handshake is over by now, one way or the other
      return;
    }
    clearInterval(timer);
    child.exited(null, null);
  }, LIVENESS_POLL_MS);
  timer.unref();
  polls.set(child, timer);
  return child;
}

function scheduleRefill(ctx: ManagerContext, delayMs: number): void {
  const state = stateOf(ctx);
  if (state.timer) return; // not pushed back: steady sequential launches must not starve the refill
  state.timer = setTimeout(() => {
    state.timer = null;
    refill(ctx).catch(() => { /* launches boot their own runners meanwhile */ });
  }, delayMs);
  state.timer.unref();
}

/**
 * Another server's runner whose boot log has had no announcement and no write for the handshake timeout is not
 * counted as on its way up any more (a boot takes well under a second); its log is removed much later, so a boot slowed
 * past the timeout by a loaded machine still finds its log when it is claimed.
 */
function bootRemovedAfterMs(ctx: ManagerContext): number { return Math.max(3 * ctx.settings.handshakeTimeoutMs, 60_000); }

/**
 * Boots the runners the pool lacks. Counted: idle ones announced, runners serving short runs, the ones this server is
 * booting, and those other servers of the home are booting (their boot logs, made before the spawn). The count and
 * the new boot logs are made under the pool's lock, so servers that fill the pool at the same moment (several started
 * at once) boot the pool once between them, not once each.
 */
export async function refill(ctx: ManagerContext): Promise<void> {
  // A nested server takes from the pool but never boots into it: it runs inside an agent's process tree, and a
  // runner booted there would descend from that agent while serving some other run.
  if (ctx.settings.warmRunners === 0 || ctx.nesting) return;
  const state = stateOf(ctx);
  if (state.demand.inFlight > 0) return; // the last of them to settle schedules it again
  const files = filesOf(ctx);
  const lack = (): number => {
    files.removeDeadWritersTemps();
    const target = state.demand.refillTarget(performance.now());
    const idle = ownIdle(files).filter((e) => {
      if (isAlive(e)) return true;
      files.forget(e.key, e.log);
      return false;
    });
    // A runner killed between its take and its claim: its names, its claim (the run's environment) and its boot log go.
    for (const e of files.listTaken()) if (!isAlive(e)) files.forget(e.key, e.log);
    const now = performance.now();
    for (const [pid, until] of state.booting) {
      if (now > until || idle.some((e) => e.pid === pid) || !readIdentity(pid)) state.booting.delete(pid);
    }
    // Runners serving short runs come back (runner/main.ts): counted, with a look again once the oldest stops counting.
    const nowMs = Date.now();
    const serving = files.listServing().filter((e) => {
      if (e.build !== ownBuild() || idle.some((i) => i.pid === e.pid)) return false;
      if (!isAlive(e)) { files.forget(e.key); return false; }
      return nowMs - e.sinceMs < SERVING_COUNTED_MS;
    });
    const missing = target - idle.length - serving.length - state.booting.size - state.spawning;
    if (serving.length > 0 && missing + serving.length > 0) {
      const oldest = Math.min(...serving.map((e) => e.sinceMs));
      scheduleRefill(ctx, Math.max(REFILL_DELAY_MS, oldest + SERVING_COUNTED_MS - nowMs + REFILL_DELAY_MS));
    }
    if (missing <= 0) return missing;
    // Short: runners other servers are booting count too (their boot logs); those that never came up are let go.
    let othersBooting = 0;
    for (const b of files.unannouncedBoots()) {
      if (b.quietMs > bootRemovedAfterMs(ctx)) files.removeBootLog(b.name);
      else if (b.serverPid !== process.pid && b.quietMs < ctx.settings.handshakeTimeoutMs) othersBooting++;
    }
    return missing - othersBooting;
  };
  // A full pool (the usual case, after every launch) is seen without the lock; a short one is counted again under it.
  if (lack() <= 0) return;
  ensurePrivateDir(files.dir);
  const logs = await withLock(path.join(files.dir, 'pool'), () => {
    const made: string[] = [];
    for (let i = lack(); i > 0; i--) made.push(files.newBootLog(randomBytes(6).toString('hex')));
    state.spawning += made.length; // counted from here: the spawns below are this server's until they have a pid
    return made;
  }, { what: 'warm pool', waitMs: 1000 });
  for (const log of logs) void bootOne(ctx, state, log);
}

async function bootOne(ctx: ManagerContext, state: PoolState, log: string): Promise<void> {
  try {
    // No run, so none of a run's environment: the claim brings it. Only what the idle runner itself needs.
    const env: Record<string, string> = {
      SUBAGENTS_WARM_IDLE_MS: String(ctx.settings.warmIdleMs),
      SUBAGENTS_WARM_CLAIM_MS: String(ctx.settings.handshakeTimeoutMs),
      SUBAGENTS_WARM_LOG: log,
      SUBAGENTS_WARM_BUILD: ownBuild(),
    };
    // A distributed worker's idle runners retire when the worker dies (runner/warm-idle.ts).
    if (ctx.env.SUBAGENTS_SUPERVISOR) env.SUBAGENTS_SUPERVISOR = ctx.env.SUBAGENTS_SUPERVISOR;
    const child = await spawnDetached([process.execPath, RUNNER_MAIN, '--warm', path.dirname(log), TITLE_ROOM], { cwd: path.dirname(log), env, logFile: log });
    if (child.pid !== undefined) state.booting.set(child.pid, performance.now() + ctx.settings.handshakeTimeoutMs);
  } catch {
    /* no replacement this time: launches boot their own (its boot log ages out of the count) */
  } finally {
    state.spawning--;
  }
}

/** Fills the pool shortly after a server starts; returns the stop function (idle runners outlive the server). */
export function startWarmPool(ctx: ManagerContext): () => void {
  if (ctx.settings.warmRunners === 0 || ctx.nesting) return () => {};
  scheduleRefill(ctx, STARTUP_FILL_DELAY_MS);
  return () => {
    const state = stateOf(ctx);
    if (state.timer) clearTimeout(state.timer);
    state.timer = null;
  };
}

/** For doctor: the idle runners of the home that are alive now. */
export function warmPoolCount(ctx: ManagerContext): number {
  return ownIdle(filesOf(ctx)).filter((e) => isAlive(e)).length;
}
