import os from 'node:os';
import path from 'node:path';

/** Where a setting's value came from; `doctor` shows it. */
export type SettingSource = 'default' | 'env' | 'flag';

export interface Settings {
  home: string;
  /** Roots from SUBAGENTS_ROOTS / --root; null means "the client's MCP roots, else the working directory". */
  explicitRoots: string[] | null;
  trust: string[];
  maxActiveRuns: number;
  maxAgents: number;
  maxSpawnsPerRun: number;
  maxDepth: number;
  defaultTimeoutMs: number;
  maxTimeoutMs: number;
  killGraceMs: number;
  sessionId: string | null;
  agentsPath: string[];
  passEnv: string[];
  maxWaitMs: number;
  handshakeTimeoutMs: number;
  /** Queued top-level launches per state home (docs/limits.md, "The queue"); a launch past it is refused. */
  maxQueued: number;
  /** How long a queued run waits for a slot before it ends failed/QUEUE_TIMEOUT, when the launch names none. */
  queueTimeoutMs: number;
  /** How long a call waits for a lock another process holds before it answers BUSY. */
  lockWaitMs: number;
  /** Bytes of one step's output kept on disk; the rest is counted, not stored. */
  maxOutputBytes: number;
  /** Pre-booted idle runners kept per state home (0: a runner boots per launch). */
  warmRunners: number;
  /** How long an idle runner waits to be claimed before it exits. */
  warmIdleMs: number;
  /** Runs one warm runner serves in turn before it exits (1: one run each). */
  warmRunnerRuns: number;
  /**
   * The Redis of distributed mode (docs/scale-out.md); null: local mode, the state home alone. A credential: never
   * logged, listed or passed to an agent (`redactRedisUrl`).
   */
  redisUrl: string | null;
  /** The BullMQ queue a server submits to and a worker takes from, in distributed mode. */
  pool: string;
  /** A worker's job lock and stall check period: a dead worker's runs end RUNNER_LOST within about this long. */
  stallIntervalMs: number;
  bins: Record<string, string>;
  cwd: string;
  sources: Record<string, SettingSource>;
}

export const DEFAULT_PASS_ENV = ['LC_*', 'TZ', 'XDG_*', 'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'ALL_PROXY',
  'NODE_EXTRA_CA_CERTS', 'SSL_CERT_FILE', 'SSL_CERT_DIR'];

interface NumberSetting { key: keyof Settings; env: string; def: number; min: number; max?: number }
/**
 * The longest time limit a timer can hold: Node runs a setTimeout of more than 2^31 − 1 ms after 1 ms, which would end
 * every step under a longer limit at once (TIMEOUT) instead of never.
 */
const MAX_TIMER_MS = 2_147_483_647;

const NUMBERS: NumberSetting[] = [
  { key: 'maxActiveRuns', env: 'SUBAGENTS_MAX_ACTIVE_RUNS', def: 8, min: 0 },
  { key: 'maxAgents', env: 'SUBAGENTS_MAX_AGENTS', def: 16, min: 1 },
  { key: 'maxSpawnsPerRun', env: 'SUBAGENTS_MAX_SPAWNS_PER_RUN', def: 64, min: 1 },
  { key: 'maxDepth', env: 'SUBAGENTS_MAX_DEPTH', def: 3, min: 1, max: 32 },
  { key: 'defaultTimeoutMs', env: 'SUBAGENTS_DEFAULT_TIMEOUT_MS', def: 3_600_000, min: 100, max: MAX_TIMER_MS },
  { key: 'maxTimeoutMs', env: 'SUBAGENTS_MAX_TIMEOUT_MS', def: 14_400_000, min: 100, max: MAX_TIMER_MS },
  { key: 'killGraceMs', env: 'SUBAGENTS_KILL_GRACE_MS', def: 5_000, min: 0, max: 600_000 },
  { key: 'maxWaitMs', env: 'SUBAGENTS_MAX_WAIT_MS', def: 45_000, min: 0, max: 3_600_000 },
  { key: 'handshakeTimeoutMs', env: 'SUBAGENTS_HANDSHAKE_TIMEOUT_MS', def: 10_000, min: 100, max: 600_000 },
  { key: 'maxQueued', env: 'SUBAGENTS_MAX_QUEUED', def: 64, min: 0 },
  { key: 'queueTimeoutMs', env: 'SUBAGENTS_QUEUE_TIMEOUT_MS', def: 3_600_000, min: 100, max: MAX_TIMER_MS },
  { key: 'lockWaitMs', env: 'SUBAGENTS_LOCK_WAIT_MS', def: 5_000, min: 50, max: 60_000 },
  { key: 'maxOutputBytes', env: 'SUBAGENTS_MAX_OUTPUT_BYTES', def: 64 * 1024 * 1024, min: 1024 },
  { key: 'warmRunners', env: 'SUBAGENTS_WARM_RUNNERS', def: 2, min: 0, max: 16 },
  { key: 'warmIdleMs', env: 'SUBAGENTS_WARM_IDLE_MS', def: 300_000, min: 1000, max: 86_400_000 },
  { key: 'warmRunnerRuns', env: 'SUBAGENTS_WARM_RUNNER_RUNS', def: 64, min: 1, max: 10_000 },
  { key: 'stallIntervalMs', env: 'SUBAGENTS_STALL_INTERVAL_MS', def: 30_000, min: 1000, max: 600_000 },
];

/** `redis://` or `rediss://` with a host; anything else is refused before a connection is tried. */
const REDIS_URL = /^rediss?:\/\/[^\s]+$/;
const POOL_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

/** The Redis URL as it may be shown: scheme, host and port, never the user or the password. */
export function redactRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.hostname}${u.port ? `:${u.port}` : ''}`;
  } catch {
    return 'redis://(unparsable)';
  }
}

/** Each env variable's flag: SUBAGENTS_MAX_ACTIVE_RUNS → --max-active-runs. */
export function flagName(envName: string): string {
  return '--' + envName.replace(/^SUBAGENTS_/, '').toLowerCase().replace(/_/g, '-');
}

export class ConfigError extends Error {}

function splitList(value: string, delimiter: string): string[] {
  return value.split(delimiter).map((s) => s.trim()).filter(Boolean);
}

/**
 * Reads every setting from flags (which win) and the environment. Throws ConfigError with a message for people
 * when a value is malformed: a server must not start on a limit it misread.
 */
export function loadSettings(env: NodeJS.ProcessEnv, flags: Record<string, string | string[] | undefined> = {}, cwd = process.cwd()): Settings {
  const sources: Record<string, SettingSource> = {};
  const pick = (key: string, envName: string): string | undefined => {
    const f = flags[flagName(envName)];
    const flagValue = Array.isArray(f) ? f.join(path.delimiter) : f;
    if (flagValue !== undefined) { sources[key] = 'flag'; return flagValue; }
    const e = env[envName];
    if (e !== undefined && e !== '') { sources[key] = 'env'; return e; }
    sources[key] = 'default';
    return undefined;
  };
  const out: Partial<Settings> = {};
  for (const n of NUMBERS) {
    const raw = pick(n.key, n.env);
    let value = n.def;
    if (raw !== undefined) {
      if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${n.env} must be a whole number, got ${JSON.stringify(raw.slice(0, 40))}`);
      value = Number(raw.trim());
      if (value < n.min || (n.max !== undefined && value > n.max)) {
        throw new ConfigError(n.max === undefined ? `${n.env} must be at least ${n.min}, got ${value}` : `${n.env} must be between ${n.min} and ${n.max}, got ${value}`);
      }
    }
    (out as Record<string, number>)[n.key] = value;
  }
  const homeRaw = pick('home', 'SUBAGENTS_HOME');
  const xdg = env.XDG_STATE_HOME;
  const userHome = env.HOME || os.homedir();
  const home = homeRaw ?? (xdg ? path.join(xdg, 'subagents-mcp') : path.join(userHome, '.local', 'state', 'subagents-mcp'));
  // `--root` (repeatable) and `--roots` (a list) are both the flag of SUBAGENTS_ROOTS: together they win over it.
  const rootFlags = [flags['--roots'], flags['--root']].flat().filter((r): r is string => r !== undefined);
  const rootsRaw = rootFlags.length > 0 ? rootFlags.join(path.delimiter) : pick('roots', 'SUBAGENTS_ROOTS');
  if (rootFlags.length > 0) sources.roots = 'flag';
  const rootsNamed = splitList(rootsRaw ?? '', path.delimiter);
  const sessionId = pick('sessionId', 'SUBAGENTS_SESSION_ID') ?? null;
  if (sessionId !== null && (sessionId.length < 16 || sessionId.length > 128 || !/^[A-Za-z0-9_.:-]+$/.test(sessionId))) {
    throw new ConfigError('SUBAGENTS_SESSION_ID must be 16 to 128 characters of A-Z a-z 0-9 _ . : -');
  }
  const passEnvRaw = pick('passEnv', 'SUBAGENTS_PASS_ENV');
  // `--redis` is the short form of `--redis-url`: a flag, so it wins over the environment too.
  const redisFlag = flags['--redis'];
  const redisRaw = typeof redisFlag === 'string' ? redisFlag : pick('redisUrl', 'SUBAGENTS_REDIS_URL');
  if (typeof redisFlag === 'string') sources.redisUrl = 'flag';
  let redisUrl: string | null = null;
  if (redisRaw !== undefined) {
    // The message never repeats the value: it is a credential.
    let parsed: URL | null = null;
    try { parsed = new URL(redisRaw.trim()); } catch { /* refused below */ }
    if (!REDIS_URL.test(redisRaw.trim()) || !parsed || !parsed.hostname) throw new ConfigError('SUBAGENTS_REDIS_URL must be a redis:// or rediss:// URL with a host (redis://user:password@host:6379/0)');
    redisUrl = redisRaw.trim();
  }
  const pool = pick('pool', 'SUBAGENTS_POOL') ?? 'default';
  if (!POOL_NAME.test(pool)) throw new ConfigError('SUBAGENTS_POOL must be 1 to 64 characters of A-Z a-z 0-9 _ . -');
  const settings: Settings = {
    ...(out as Settings),
    home: path.resolve(cwd, homeRaw !== undefined ? home : home),
    // A list of nothing (`:`, blanks) is no list: the client's roots apply, as when it is unset.
    explicitRoots: rootsNamed.length > 0 ? rootsNamed.map((r) => path.resolve(cwd, r)) : null,
    trust: splitList(pick('trust', 'SUBAGENTS_TRUST') ?? '', path.delimiter).map((r) => path.resolve(cwd, r)),
    sessionId,
    agentsPath: splitList(pick('agentsPath', 'SUBAGENTS_AGENTS_PATH') ?? '', path.delimiter).map((r) => path.resolve(cwd, r)),
    passEnv: [...DEFAULT_PASS_ENV, ...(passEnvRaw ? passEnvRaw.split(/[\s,]+/).filter(Boolean) : [])],
    redisUrl,
    pool,
    bins: {},
    cwd,
    sources,
  };
  if (settings.defaultTimeoutMs > settings.maxTimeoutMs) settings.defaultTimeoutMs = settings.maxTimeoutMs;
  if (settings.queueTimeoutMs > settings.maxTimeoutMs) settings.queueTimeoutMs = settings.maxTimeoutMs;
  for (const [k, v] of Object.entries(env)) {
    const m = /^SUBAGENTS_BIN_([A-Z]+)$/.exec(k);
    if (m && v) settings.bins[m[1]!.toLowerCase()] = v;
  }
  return settings;
}
