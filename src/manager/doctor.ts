import fs from 'node:fs';
import path from 'node:path';
import { adapterFor } from '../agents/adapters/index.js';
import { globToRegExp, isNeverPass } from '../agents/agent-env.js';
import { BACKENDS, type Backend } from '../agents/types.js';
import { flagName, redactRedisUrl, type Settings } from '../config.js';
import { isAlive, type ProcessIdentity } from '../process/identity.js';
import { readEvents } from '../store/event-log.js';
import { waitingOrder } from '../lifecycle/queue.js';
import type { Ledger } from '../store/ledger.js';
import { isTerminalRun, type RunStatus } from '../store/run-types.js';
import { checkHomeEntries, checkStateHome } from '../store/state-home.js';
import { CLAUDE_ROOT_WARNING, listAgents, listBackends } from './agent-list.js';
import { loadFullCatalog } from './agent-resolver.js';
import type { DistributedHealth, ManagerContext } from './context.js';
import { warmPoolCount } from './warm-pool.js';
import { damagedRecords, listAll } from './listing.js';
import { diskBytes } from './gc.js';
import { ReadyFile, readStateFile } from '../store/state-files.js';
import { peopleCommand } from '../invocation.js';

/**
 * `doctor`: everything a person needs to trust and debug this machine's setup, read-only (it reconciles nothing,
 * creates nothing, and never prints the value of an environment variable that is not a path setting).
 */
export interface DoctorReport {
  version: string;
  node: string;
  platform: string;
  /** How a person runs this installation's commands: `subagents-mcp` when that is this installation on PATH, else `node …/dist/main.js`. */
  command: string;
  home: { path: string; source: string; exists: boolean; mode: string | null; problems: string[]; runs: number; bytes: number };
  settings: Array<{ env: string; flag: string; value: string; source: string }>;
  backends: Array<{ backend: Backend; bin: string | null; found: boolean; version: string | null; usable: boolean; problem?: string }>;
  agents: {
    projectDir: string;
    projectTrusted: boolean;
    available: Array<{ name: string; backend: string; source: string; trusted: boolean; available: boolean; problem?: string; warnings?: string[] }>;
    refused: Array<{ name?: string; path: string; source: string; reason: string }>;
  };
  passThrough: {
    /** SUBAGENTS_PASS_ENV names and globs in force. */
    patterns: string[];
    /** Names of variables set here that agents receive through those patterns (never their values). */
    set: string[];
    /** Per backend: its documented credential variables that are set here (names only). */
    credentials: Array<{ backend: Backend; set: string[]; known: string[] }>;
    /** Variables set here that are never passed to an agent, even when named. */
    blocked: string[];
  };
  capacity: { activeRuns: number; maxActiveRuns: number; liveAgents: number; maxAgents: number; queued: number; oldestQueuedMs: number | null; maxQueued: number };
  attention: Array<{ runId: string; state: string; problem: string }>;
  /** Distributed mode only (docs/scale-out.md). */
  distributed?: DistributedHealth;
  problems: string[];
  warnings: string[];
}

function settingRows(s: Settings, warmIdle: number): DoctorReport['settings'] {
  const rows: DoctorReport['settings'] = [];
  const add = (env: string, key: string, value: string) => rows.push({ env, flag: flagName(env), value, source: s.sources[key] ?? 'default' });
  add('SUBAGENTS_HOME', 'home', s.home);
  add('SUBAGENTS_ROOTS', 'roots', s.explicitRoots ? s.explicitRoots.join(path.delimiter) : "(the client's MCP roots, else the server's working directory)");
  add('SUBAGENTS_TRUST', 'trust', s.trust.length ? s.trust.join(path.delimiter) : '(none)');
  add('SUBAGENTS_MAX_ACTIVE_RUNS', 'maxActiveRuns', s.maxActiveRuns === 0 ? '0 (unlimited)' : String(s.maxActiveRuns));
  add('SUBAGENTS_MAX_AGENTS', 'maxAgents', String(s.maxAgents));
  add('SUBAGENTS_MAX_SPAWNS_PER_RUN', 'maxSpawnsPerRun', String(s.maxSpawnsPerRun));
  add('SUBAGENTS_MAX_DEPTH', 'maxDepth', String(s.maxDepth));
  add('SUBAGENTS_DEFAULT_TIMEOUT_MS', 'defaultTimeoutMs', String(s.defaultTimeoutMs));
  add('SUBAGENTS_MAX_TIMEOUT_MS', 'maxTimeoutMs', String(s.maxTimeoutMs));
  add('SUBAGENTS_KILL_GRACE_MS', 'killGraceMs', String(s.killGraceMs));
  // The session id may be a host's conversation id: shown as set or not, never its value.
  add('SUBAGENTS_SESSION_ID', 'sessionId', s.sessionId ? '(set; a fixed session id)' : '(random per server)');
  add('SUBAGENTS_AGENTS_PATH', 'agentsPath', s.agentsPath.length ? s.agentsPath.join(path.delimiter) : '(none)');
  add('SUBAGENTS_PASS_ENV', 'passEnv', s.passEnv.join(' '));
  add('SUBAGENTS_MAX_WAIT_MS', 'maxWaitMs', String(s.maxWaitMs));
  add('SUBAGENTS_HANDSHAKE_TIMEOUT_MS', 'handshakeTimeoutMs', String(s.handshakeTimeoutMs));
  add('SUBAGENTS_LOCK_WAIT_MS', 'lockWaitMs', String(s.lockWaitMs));
  add('SUBAGENTS_MAX_QUEUED', 'maxQueued', String(s.maxQueued));
  add('SUBAGENTS_QUEUE_TIMEOUT_MS', 'queueTimeoutMs', String(s.queueTimeoutMs));
  add('SUBAGENTS_MAX_OUTPUT_BYTES', 'maxOutputBytes', String(s.maxOutputBytes));
  add('SUBAGENTS_WARM_RUNNERS', 'warmRunners', s.warmRunners === 0 ? '0 (a runner boots per launch)' : `${s.warmRunners} (${warmIdle} idle in this home now; after a burst, up to 8 for one idle time)`);
  add('SUBAGENTS_WARM_IDLE_MS', 'warmIdleMs', String(s.warmIdleMs));
  add('SUBAGENTS_WARM_RUNNER_RUNS', 'warmRunnerRuns', String(s.warmRunnerRuns));
  // The URL carries the password: scheme, host and port only.
  add('SUBAGENTS_REDIS_URL', 'redisUrl', s.redisUrl ? `${redactRedisUrl(s.redisUrl)} (distributed mode)` : '(none: local mode)');
  add('SUBAGENTS_POOL', 'pool', s.pool);
  add('SUBAGENTS_STALL_INTERVAL_MS', 'stallIntervalMs', String(s.stallIntervalMs));
  for (const [b, bin] of Object.entries(s.bins)) rows.push({ env: `SUBAGENTS_BIN_${b.toUpperCase()}`, flag: '-', value: bin, source: 'env' });
  return rows;
}

function lastActivityMs(ctx: ManagerContext, runId: string): number {
  const p = ctx.store.paths(runId);
  let t = 0;
  for (const f of [p.status, p.events, p.outDir]) {
    try { t = Math.max(t, fs.statSync(f).mtimeMs); } catch { /* absent */ }
  }
  return t;
}

/** Runs a person should look at; read-only (the next listing or server sweep reconciles them). */
function runsNeedingAttention(ctx: ManagerContext): DoctorReport['attention'] {
  const out: DoctorReport['attention'] = [];
  const now = Date.now();
  for (const d of damagedRecords(ctx)) out.push({ runId: d.runId, state: 'corrupt', problem: d.problem });
  for (const m of listAll(ctx)) {
    let s: RunStatus | null;
    try {
      s = ctx.store.readStatus(m.runId);
    } catch (e) {
      out.push({ runId: m.runId, state: 'corrupt', problem: (e as Error).message });
      continue;
    }
    if (!s) { out.push({ runId: m.runId, state: 'corrupt', problem: 'status.json is missing' }); continue; }
    if (s.survivors.length) {
      const alive = s.survivors.filter((p) => isAlive(p));
      if (alive.length) out.push({ runId: m.runId, state: s.state, problem: `${alive.length} process(es) survived SIGKILL and are still alive: pid ${alive.map((p) => p.pid).join(', ')}` });
    }
    // Garbled lines are skipped wherever the log is read (docs/contract.md, invariant 6); the damage is reported here, not hidden.
    const events = ctx.store.paths(m.runId).events;
    const { skipped } = readEvents(events);
    if (skipped > 0) out.push({ runId: m.runId, state: s.state, problem: `its event log ${events} has ${skipped} unparsable line(s), skipped when read; the run itself is unaffected` });
    if (isTerminalRun(s.state)) continue;
    if (s.state === 'running' && !isAlive(s.runner)) {
      out.push({ runId: m.runId, state: s.state, problem: `its runner (pid ${s.runner?.pid ?? '?'}) is gone; \`${peopleCommand('runs')}\` or any server records it failed/RUNNER_LOST and stops its leftovers` });
      continue;
    }
    if (s.state === 'queued') continue; // waiting for a slot: the queue line above says how many and for how long
    if (s.state === 'starting' && s.attempt !== undefined) {
      if (!isAlive(s.launcher)) out.push({ runId: m.runId, state: s.state, problem: 'the process handing it its queue slot is gone; the next server launch, listing or sweep starts it again' });
      continue;
    }
    if (s.state === 'starting') {
      const rec = ctx.store.readRecord(m.runId);
      const ready = readStateFile<ProcessIdentity>(ctx.store.paths(m.runId).ready, ReadyFile);
      if (rec && !isAlive(rec.server) && !(ready && isAlive(ready))) {
        out.push({ runId: m.runId, state: s.state, problem: 'its launching server is gone before the start; the next listing records it failed/HANDSHAKE_FAILED' });
      } else if (rec && now - Date.parse(rec.createdAt) > rec.handshakeTimeoutMs * 3) {
        out.push({ runId: m.runId, state: s.state, problem: `still starting ${Math.round((now - Date.parse(rec.createdAt)) / 1000)} s after launch (handshake timeout ${rec.handshakeTimeoutMs} ms)` });
      }
      continue;
    }
    const idle = now - lastActivityMs(ctx, m.runId);
    if (idle > 30 * 60_000) {
      out.push({ runId: m.runId, state: s.state, problem: `alive but no output or state change for ${Math.round(idle / 60_000)} min; look with \`${peopleCommand(`show ${m.runId}`)}\`, stop with \`${peopleCommand(`cancel ${m.runId}`)}\`` });
    }
  }
  return out;
}

export async function runDoctor(ctx: ManagerContext, version: string): Promise<DoctorReport> {
  const s = ctx.settings;
  const problems: string[] = [];
  const warnings: string[] = [];
  const check = checkStateHome(s.home);
  problems.push(...check.problems.map((p) => `unsafe state home: ${p}`));
  let mode: string | null = null;
  try { mode = (fs.lstatSync(s.home).mode & 0o777).toString(8).padStart(3, '0'); } catch { /* absent */ }
  const safe = check.problems.length === 0 && check.exists;
  const broken = safe ? checkHomeEntries(s.home) : [];
  problems.push(...broken.map((p) => `unusable state home: ${p}`));
  const runIds = safe ? ctx.store.listRunIds() : [];

  // The same probe as the agents tool (found, version, problem), waited for to the end: each --version is bounded.
  const backends = (await listBackends(ctx)).map((b) => ({
    backend: b.backend, bin: b.path ?? null, found: b.found, version: b.version ?? null, usable: b.found && !b.problem,
    ...(b.problem ? { problem: b.problem } : {}),
  }));
  // Roots named that are no directory: launches into them are refused; none at all, every launch is.
  const missingRoots = (s.explicitRoots ?? []).filter((r) => { try { return !fs.statSync(r).isDirectory(); } catch { return true; } });
  if (s.explicitRoots && missingRoots.length === s.explicitRoots.length) problems.push(`no root SUBAGENTS_ROOTS names is an existing directory (${missingRoots.join(', ')}): every launch is refused CWD_NOT_ALLOWED`);
  else if (missingRoots.length) warnings.push(`SUBAGENTS_ROOTS names ${missingRoots.length === 1 ? 'a path that is' : 'paths that are'} not a directory (${missingRoots.join(', ')}): launches there are refused`);
  // A client's env block is read by no shell: `~/x` is a directory named `~` under the server's working directory.
  const tilde = [['SUBAGENTS_HOME', [s.home]], ['SUBAGENTS_ROOTS', s.explicitRoots ?? []], ['SUBAGENTS_TRUST', s.trust], ['SUBAGENTS_AGENTS_PATH', s.agentsPath]] as const;
  for (const [env, paths] of tilde) {
    const hit = paths.find((p) => p.split(path.sep).includes('~'));
    if (hit) warnings.push(`${env} names ${hit}: a ~ is not expanded (no shell reads the setting); give the absolute path`);
  }
  if (!backends.some((b) => b.usable)) warnings.push('no agent CLI is usable here; only `backend: command` agents (like the demo\'s) can run');

  const listing = await listAgents(ctx);
  const catalog = await loadFullCatalog(ctx);
  if (listing.refused.length) warnings.push(`${listing.refused.length} agent file(s) refused (see agents)`);
  const rootRefused = listing.agents.filter((a) => a.warnings?.includes(CLAUDE_ROOT_WARNING)).map((a) => a.name);
  if (rootRefused.length) {
    warnings.push(`running as root: Claude Code refuses permissions: full (bypassPermissions) under root, so every run of ${rootRefused.join(', ')} fails here (see agents)`);
  }

  const patterns = s.passEnv.map((p) => globToRegExp(p));
  const names = Object.keys(ctx.env).filter((n) => ctx.env[n] !== undefined && ctx.env[n] !== '').sort();
  const passed = names.filter((n) => patterns.some((re) => re.test(n)) && !isNeverPass(n) && !/^SUBAGENTS_/i.test(n));
  const credentials = BACKENDS.filter((b) => b !== 'command').map((b) => {
    const known = adapterFor(b)?.credentialEnv ?? [];
    return { backend: b, known, set: known.filter((n) => names.includes(n)) };
  });
  const blocked = names.filter((n) => isNeverPass(n));

  const ledger = safe ? ctx.ledger.read() : { roots: {}, agents: {}, queue: {} };
  const attention = safe ? runsNeedingAttention(ctx) : [];
  if (attention.length) warnings.push(`${attention.length} run(s) need attention (see runs needing attention)`);
  for (const f of safe ? ctx.sessionRegistry.damaged() : []) {
    warnings.push(`session registry file ${f} does not parse; the adoptions it recorded are rebuilt from the runs' adoption markers, so listings and restore still work. Its server rewrites it while it runs; otherwise remove it`);
  }
  if (process.platform === 'win32') warnings.push('launch is not supported on Windows (PLATFORM_UNSUPPORTED); agents and doctor work');
  const distributed = ctx.distributed ? await ctx.distributed.health() : undefined;
  if (distributed) {
    if (!distributed.reachable) problems.push(`Redis (${distributed.url}) is not usable: ${distributed.problem ?? 'unknown'}; launches answer BUSY until it is`);
    else {
      if (!distributed.persistence?.aof && !distributed.persistence?.rdb) warnings.push(`Redis (${distributed.url}) has persistence off: a Redis restart loses every run, queue and slot (turn on appendonly yes)`);
      else if (!distributed.persistence?.aof) warnings.push(`Redis (${distributed.url}) saves RDB snapshots only: launches acknowledged since the last snapshot are lost in a restart (turn on appendonly yes)`);
      if (!distributed.workers.some((w) => w.pool === s.pool)) warnings.push(`no worker of pool ${s.pool} has sent a heartbeat recently: launches wait in the queue until one starts (subagents-mcp worker --pool ${s.pool})`);
    }
  }

  return {
    version,
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    command: peopleCommand(''),
    home: { path: s.home, source: s.sources.home ?? 'default', exists: check.exists, mode, problems: [...check.problems, ...broken], runs: runIds.length, bytes: safe ? diskBytes(s.home) : 0 },
    settings: settingRows(s, warmPoolCount(ctx)),
    backends,
    agents: { projectDir: catalog.projectDir, projectTrusted: catalog.projectTrusted, available: listing.agents, refused: listing.refused },
    passThrough: { patterns: s.passEnv, set: passed, credentials, blocked },
    capacity: { activeRuns: Object.keys(ledger.roots).length, maxActiveRuns: s.maxActiveRuns, liveAgents: Object.keys(ledger.agents).length, maxAgents: s.maxAgents, ...queueFigures(ledger), maxQueued: s.maxQueued },
    attention,
    ...(distributed ? { distributed } : {}),
    problems,
    warnings,
  };
}

/** The queue's length and how long its oldest waiting launch has waited (docs/limits.md, "The queue"). */
function queueFigures(l: { queue?: Ledger['queue'] }): { queued: number; oldestQueuedMs: number | null } {
  const waiting = waitingOrder({ v: 1, roots: {}, trees: {}, agents: {}, ...l });
  const oldest = waiting[0]?.[1];
  return { queued: waiting.length, oldestQueuedMs: oldest ? Math.max(0, Date.now() - Date.parse(oldest.at)) : null };
}
