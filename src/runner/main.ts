/**
 * The detached runner: one per run, in its own process group, stdio to `runner.log`. Until it reports ready it loads
 * only Node built-ins (a launch waits for this), then it loads the supervisor while it waits to be told to proceed.
 */
import fs from 'node:fs';
import path from 'node:path';
import { writeFileAtomic } from '../store/atomic-write.js';
import { readJsonFile } from '../store/json-file.js';
import { WarmPoolFiles } from '../store/warm-pool.js';
import { RunPaths } from '../store/layout.js';
import { isAlive, selfIdentity, supervisorOf, type ProcessIdentity } from '../process/identity.js';
import { waitUntil } from '../wait.js';
import { claimStartQuickly } from './claim-start.js';
import { adoptRun, awaitWarmClaim, leaveRun } from './warm-idle.js';
import { loadCachedBundle, supervisorCacheFile } from './code-cache.js';
import { installClockJump } from './test-clock.js';
import type { RunRecord } from '../store/run-types.js';
import type { AgentStub as AgentStubType } from './agent-stub.js';

/** How long a runner back in the pool waits before it starts its next agent stub. */
const STUB_DELAY_MS = 30;

/** Test seam: die at a named handshake phase (the reliability matrix kills the runner at each). */
function fault(phase: string): void {
  if (process.env.SUBAGENTS_TEST_FAULT === phase) process.kill(process.pid, 'SIGKILL');
}

/** Test seam: never report ready (the launch's handshake timeout must end it); gives up on its own after 2 minutes. */
async function hangBeforeReady(): Promise<void> {
  if (process.env.SUBAGENTS_TEST_FAULT !== 'hang-before-ready') return;
  await new Promise((r) => setTimeout(r, 120_000));
  process.exit(3);
}

/**
 * The start attempt this runner belongs to: 0 for a launch's own runner, n for the n-th hand-off of a queued run
 * (docs/limits.md, "The queue"). A runner of an attempt that is no longer the run's never starts it.
 */
export const MY_ATTEMPT = Number(process.env.SUBAGENTS_RUN_ATTEMPT ?? 0) || 0;

function abandoned(paths: RunPaths): boolean {
  try {
    const s = readJsonFile<{ state: string; attempt?: number }>(paths.status);
    return s !== null && (s.state !== 'starting' || (s.attempt ?? 0) !== MY_ATTEMPT);
  } catch {
    return false;
  }
}

/**
 * `runner --warm <warmDir>`: booted before its run exists; loads and rehearses its supervisor, then waits idle until a
 * launch claims it (runner/warm-idle.ts). After a run that ended cleanly it goes back to the pool when the pool wants
 * it, up to the claim's number of runs, as long as the run left nothing in the process (runner/reuse.ts); else it
 * exits as a runner of one run does (docs/architecture.md, "Warm runners"). Returns its exit code.
 */
async function serveFromPool(warmDir: string): Promise<number> {
  const bootEnv = { ...process.env };
  const me = selfIdentity();
  const files = new WarmPoolFiles(warmDir);
  const build = process.env.SUBAGENTS_WARM_BUILD ?? '';
  const idleMs = Number(process.env.SUBAGENTS_WARM_IDLE_MS) || 300_000;
  const claimWaitMs = Number(process.env.SUBAGENTS_WARM_CLAIM_MS) || 10_000;
  let bootLog = process.env.SUBAGENTS_WARM_LOG;
  const loaded = await loadSupervisor(warmDir);
  const supervisor = loaded.exports;
  // Its first step's one-time costs paid now, while idle (runner/rehearsal.ts), and what that compiled kept for the
  // runners that boot after it (runner/code-cache.ts).
  if (await supervisor.rehearse(warmDir, me)) loaded.saveCache();
  const baseline = await supervisor.reuseBaseline();
  // The next run's first agent, pre-started while idle (runner/agent-stub.ts): not part of the baseline.
  let stub: AgentStubType | null = await supervisor.AgentStub.start(warmDir);
  let back = false;
  for (let served = 0; ; ) {
    // Back from a run, the stub starts a moment later: runs that end together (a burst) have their answers to give
    // first, and the stub's spawn would take the cores from them. A claim before then spawns its first agent.
    let starting: Promise<void> | null = null;
    const later = stub || !back ? null : setTimeout(() => { starting = supervisor.AgentStub.start(warmDir).then((s) => { stub = s; }); }, STUB_DELAY_MS);
    const got = await awaitWarmClaim({
      warmDir, me, build, bootLog, idleMs, claimWaitMs, owner: supervisorOf(bootEnv),
      serving: (claim) => served + 1 < (claim.pool?.maxRuns ?? 1),
      onAnnounced: (key) => { if (back) files.endServing(key); },
    });
    if (later) clearTimeout(later);
    if (starting) await starting;
    if (!got) {
      await stub?.dispose();
      if (bootLog) fs.rmSync(bootLog, { force: true });
      return 0;
    }
    const paths = new RunPaths(got.claim.runDir);
    adoptRun(got.claim, bootLog, paths.runnerLog);
    served++;
    const maxRuns = got.claim.pool?.maxRuns ?? 1;
    const run = await serveRun(paths, supervisor, served < maxRuns, stub);
    stub = null;
    const left = run.clean && served < maxRuns && process.env.SUBAGENTS_TEST_FAULT === undefined ? await supervisor.leftFromRun(baseline) : null;
    if (left) process.stderr.write(`runner: not going back to the warm pool (${left}); exiting\n`);
    const again = left === '' && ownIdle(files, build, me) < (got.claim.pool?.size ?? 0);
    bootLog = again ? files.returnLog(me, served) : undefined;
    if (!again || !leaveRun({ bootEnv, warmDir, runnerLog: paths.runnerLog, bootLog: bootLog! })) {
      if (bootLog) fs.rmSync(bootLog, { force: true }); // a log moved half-way: the run's own name keeps its copy
      files.endServing(got.key);
      return run.code;
    }
    supervisor.reopenLocks();
    back = true;
  }
}

/** Live idle runners of this build in the pool other than this one. */
function ownIdle(files: WarmPoolFiles, build: string, me: ProcessIdentity): number {
  return files.listIdle().filter((e) => e.build === build && e.pid !== me.pid && isAlive(e)).length;
}

async function main(): Promise<number> {
  process.umask(0o077);
  const runDir = process.argv[2];
  if (runDir === '--warm' && process.argv[3]) return serveFromPool(process.argv[3]);
  if (!runDir || runDir === '--warm') {
    process.stderr.write('usage: runner <runDir> | runner --warm <warmDir>\n');
    return 2;
  }
  return (await serveRun(new RunPaths(runDir), null, false)).code;
}

/**
 * The handshake's runner side and the run: ready, proceed, the start claim, supervision, then the hand-off of the slot
 * it freed. `clean`: the run ended here cleanly (runner/supervise.ts, `onEnd`) and handed nothing off, so that a warm
 * runner may serve another.
 */
async function serveRun(paths: RunPaths, preloaded: Supervisor | null, mayServeAgain: boolean, agentStub: AgentStubType | null = null): Promise<{ code: number; clean: boolean }> {
  try {
    return await serveRunWith(paths, preloaded, mayServeAgain, agentStub);
  } finally {
    await agentStub?.dispose(); // unused (the run never reached its first agent): it exits with the run, not after
  }
}

async function serveRunWith(paths: RunPaths, preloaded: Supervisor | null, mayServeAgain: boolean, agentStub: AgentStubType | null): Promise<{ code: number; clean: boolean }> {
  installClockJump(process.env.SUBAGENTS_TEST_FAULT);
  fault('before-ready');
  await hangBeforeReady();
  const record = readJsonFile<RunRecord>(paths.record);
  if (!record) {
    process.stderr.write('runner: run.json missing\n');
    return { code: 2, clean: false };
  }
  const me = selfIdentity();
  writeFileAtomic(paths.readyOf(MY_ATTEMPT), JSON.stringify({ pid: me.pid, startTime: me.startTime, at: new Date().toISOString() }), { durable: false });
  fault('after-ready');
  // A launch whose server died before we reported ready may already be ended by a reconciler that could not know our
  // pid (it re-reads ready.json after ending the run, so one of us always sees the other): nobody will say proceed.
  if (abandoned(paths)) {
    process.stderr.write('runner: the launch was ended before this runner reported ready; exiting without starting an agent\n');
    return { code: 3, clean: false };
  }
  // A server that never says proceed (it died, or gave up) must not leave us waiting: exit on our own.
  const proceed = await waitUntil({
    dirs: [paths.dir], filter: (name) => name === path.basename(paths.proceed), pollMs: 250, timeoutMs: record.handshakeTimeoutMs,
    check: () => (fs.existsSync(paths.proceed) ? true : null),
  });
  if (!proceed) {
    process.stderr.write('runner: not told to proceed within the handshake timeout; exiting without starting an agent\n');
    return { code: 3, clean: false };
  }
  fault('after-proceed');
  const claimed = claimStartQuickly(paths, me, MY_ATTEMPT);
  // The home's warm directory holds the supervisor's code cache (runner/code-cache.ts), read-only here.
  const { supervise, settleLocks, handOffFreedSlot } = preloaded ?? (await loadSupervisor(path.join(path.dirname(path.dirname(paths.dir)), 'warm'))).exports;
  let clean = false;
  try {
    const host = { processSignals: true, mayServeAgain, agentStub, onEnd: (ok: boolean) => { clean = ok; } };
    const code = await supervise(record, paths, me, claimed, host, MY_ATTEMPT);
    // The slot this run held is free (or was never taken): the head of the queue gets it from us, the one process
    // that knows the moment it freed (docs/limits.md, "The queue"). A runner that launched a queued run is its
    // launcher until that run started: it does not go back to the pool.
    const handedOff = await handOffFreedSlot(paths, me).catch((e: unknown) => {
      process.stderr.write(`runner: handing the freed slot to the queue failed (${e instanceof Error ? e.message : 'unknown'}); the next server launch, listing or sweep does it\n`);
      return 1;
    });
    return { code, clean: clean && code === 0 && handedOff === 0 };
  } finally {
    await settleLocks(); // never exit with a lock acquisition in flight (it would leave a lock nobody holds)
  }
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`runner: fatal: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  },
);

/**
 * The supervisor, loaded once the start is claimed (the launch has its answer by then, unless the quick claim could
 * not take the run lock and the supervisor claims): in the bundled build this entry is CommonJS
 * (dist/runner/main.cjs) and requires its one-file bundle (dist/runner-supervisor.cjs); else the module graph (a
 * tsc-only build, or running from source). Nothing loads while we wait for proceed: compiling the supervisor then
 * held a proceed unseen for ~11 ms, and even Node's own modules loaded in turns delayed it by ~3 ms and took CPU from
 * the other runners of concurrent launches.
 */
type Supervisor = typeof import('./supervise.js');

async function loadSupervisor(warmDir: string): Promise<{ exports: Supervisor; saveCache: () => void }> {
  const none = () => {};
  capOptimizingTier();
  // Computed specifiers: the bundler must leave the supervisor out of this entry (it loads only after ready).
  if (typeof require === 'function' && typeof __dirname === 'string') {
    const bundle = path.join(__dirname, '..', 'runner-supervisor.cjs');
    try {
      return loadCachedBundle<Supervisor>(bundle, supervisorCacheFile(warmDir, bundle), require);
    } catch {
      return { exports: require(bundle) as Supervisor, saveCache: none }; // as Node loads it, without the cache
    }
  }
  return { exports: await (import(new URL('./supervise.js', import.meta.url).href) as Promise<Supervisor>), saveCache: none };
}

/**
 * V8 compiles no function of this process past Sparkplug, its baseline tier (docs/performance.md, "Runner boot and
 * RSS"). The runner waits on files, sockets and children; no function of it is hot enough for an optimizing compiler
 * to pay off. Uncapped, TurboFan optimizes path functions it calls often (Node's `normalizeString`), ~38 ms of CPU on
 * a background thread, and that compiler's code in the node binary, ~3.7 MiB, joins every runner's RSS. Set before
 * the supervisor loads, so that its code cache is made and read under the same flags; nothing is hot before.
 */
function capOptimizingTier(): void {
  try {
    // Not `--max-opt=1`: set at run time, Node 24's V8 ignores it (Maglev still compiles); these two it obeys, as Node 20's.
    process.getBuiltinModule('node:v8').setFlagsFromString('--no-turbofan --no-maglev');
  } catch { /* runs as before */ }
}
