/**
 * The worker's own state home (docs/scale-out.md, "Workers"): a worker starts each job's run with the local runner,
 * exactly as a local server does, in a home of its machine. Its context is a server's without a session's isolation
 * and without Redis (the run is mirrored into Redis by ./mirror.ts, not launched there again).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Settings } from '../config.js';
import { makeStore, type ManagerContext } from '../manager/context.js';
import { openHome } from '../manager/state-home.js';
import { realpathOrNull } from '../realpath.js';
import { selfIdentity } from '../process/identity.js';

/** The session the worker's local runs are recorded under. */
export const WORKER_SESSION = 'distributed-worker';

class EverySession extends Set<string> {
  override has(_id: string): boolean { return true; }
}

export function workerHome(given: string | null): string {
  if (given) return path.resolve(given);
  return fs.mkdtempSync(path.join(os.tmpdir(), 'subagents-worker-'));
}

export function localContext(settings: Settings, home: string, roots: string[], log: (line: string) => void): ManagerContext {
  const me = selfIdentity();
  const local: Settings = {
    ...settings, home, redisUrl: null, explicitRoots: roots,
    // Redis counts the pool's active runs and agents; this machine is bounded by the worker's concurrency.
    maxActiveRuns: 0,
  };
  openHome(local);
  // The runner stops its agents when this worker dies (src/runner/cancel-watch.ts); the Redis URL never reaches it.
  const env: NodeJS.ProcessEnv = { ...process.env, SUBAGENTS_SUPERVISOR: `${me.pid}:${me.startTime}` };
  delete env.SUBAGENTS_REDIS_URL;
  const { layout, store, ledger, sessionRegistry, server } = makeStore(local);
  const real = roots.map(realpathOrNull).filter((r): r is string => r !== null);
  const all = new EverySession();
  return {
    settings: local, layout, store, ledger, sessionRegistry, sessionId: WORKER_SESSION, server, nesting: null, env, log,
    roots: () => real,
    visibleSessions: () => all,
  };
}
