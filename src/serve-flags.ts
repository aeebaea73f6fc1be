import { parseArgs } from 'node:util';
import { flagName } from './config.js';
import { peopleCommand } from './invocation.js';

/** Every SUBAGENTS_* setting's flag (`--max-active-runs 4`), plus repeatable `--root` and `--redis` (`--redis-url`). */
export const SETTING_ENV_NAMES = [
  'SUBAGENTS_HOME', 'SUBAGENTS_ROOTS', 'SUBAGENTS_TRUST', 'SUBAGENTS_MAX_ACTIVE_RUNS', 'SUBAGENTS_MAX_AGENTS',
  'SUBAGENTS_MAX_SPAWNS_PER_RUN', 'SUBAGENTS_MAX_DEPTH', 'SUBAGENTS_DEFAULT_TIMEOUT_MS', 'SUBAGENTS_MAX_TIMEOUT_MS',
  'SUBAGENTS_KILL_GRACE_MS', 'SUBAGENTS_SESSION_ID', 'SUBAGENTS_AGENTS_PATH', 'SUBAGENTS_PASS_ENV', 'SUBAGENTS_MAX_WAIT_MS',
  'SUBAGENTS_HANDSHAKE_TIMEOUT_MS', 'SUBAGENTS_MAX_OUTPUT_BYTES', 'SUBAGENTS_MAX_QUEUED', 'SUBAGENTS_QUEUE_TIMEOUT_MS',
  'SUBAGENTS_REDIS_URL', 'SUBAGENTS_POOL', 'SUBAGENTS_STALL_INTERVAL_MS', 'SUBAGENTS_LOCK_WAIT_MS', 'SUBAGENTS_WARM_RUNNERS',
  'SUBAGENTS_WARM_IDLE_MS', 'SUBAGENTS_WARM_RUNNER_RUNS',
];

export function settingOptions(): Record<string, { type: 'string'; multiple?: boolean }> {
  const o: Record<string, { type: 'string'; multiple?: boolean }> = { root: { type: 'string', multiple: true }, redis: { type: 'string' } };
  for (const n of SETTING_ENV_NAMES) o[flagName(n).slice(2)] = { type: 'string' };
  return o;
}

/** Parses setting flags into `{ '--max-active-runs': '4', '--root': [...] }`; unknown flags are an error for people. */
export function parseServeFlags(args: string[]): Record<string, string | string[] | undefined> {
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args, options: settingOptions(), strict: true, allowPositionals: false }));
  } catch (e) {
    process.stderr.write(`subagents-mcp: ${(e as Error).message}\nRun ${peopleCommand('--help')} for the options.\n`);
    process.exit(2);
  }
  const out: Record<string, string | string[] | undefined> = {};
  for (const [k, v] of Object.entries(values)) if (typeof v === 'string' || Array.isArray(v)) out[`--${k}`] = v as string | string[];
  return out;
}
