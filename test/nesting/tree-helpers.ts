import fs from 'node:fs';
import path from 'node:path';
import { afterEach } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { isIdlePoolProcess } from '../helpers/warm-pool.js';
import { startServer, type Started } from '../helpers/server.js';
import { listProcesses, hasEnvEntry } from '../../src/process/identity.js';

export const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
export const DELEGATE = path.join(FIXTURE_AGENTS, 'delegating-agent.mjs');

export interface Ledger {
  roots: Record<string, { runner: { pid: number } | null }>;
  trees: Record<string, { used: number; limit: number; maxDepth: number }>;
  agents: Record<string, { root?: string }>;
}

export function readLedger(home: string): Ledger {
  try {
    return JSON.parse(fs.readFileSync(path.join(home, 'ledger.json'), 'utf8')) as Ledger;
  } catch {
    return { roots: {}, trees: {}, agents: {} };
  }
}

export function readRun(home: string, runId: string): { record: Record<string, any>; status: Record<string, any> } {
  const dir = path.join(home, 'runs', runId);
  return {
    record: JSON.parse(fs.readFileSync(path.join(dir, 'run.json'), 'utf8')),
    status: JSON.parse(fs.readFileSync(path.join(dir, 'status.json'), 'utf8')),
  };
}

export function runIds(home: string): string[] {
  try { return fs.readdirSync(path.join(home, 'runs')).filter((n) => n.startsWith('r-')); } catch { return []; }
}

/** Live (non-zombie) processes that belong to any run of the home: a runner's group, or a run token carrier. */
export function liveRunProcesses(home: string): number[] {
  const groups = new Set<number>();
  const tokens: string[] = [];
  for (const id of runIds(home)) {
    try {
      const { record, status } = readRun(home, id);
      tokens.push(`SUBAGENTS_RUN_TOKEN=${record.runToken}`);
      if (status.runner?.pid) groups.add(status.runner.pid);
      const ready = path.join(home, 'runs', id, 'ready.json');
      if (fs.existsSync(ready)) groups.add(JSON.parse(fs.readFileSync(ready, 'utf8')).pid);
    } catch { /* being written */ }
  }
  // A warm runner back in the pool after its run, and the agent stub it keeps, are no process of that run.
  return listProcesses()
    .filter((p) => p.state !== 'Z' && p.pid !== process.pid && (groups.has(p.pgid) || tokens.some((t) => hasEnvEntry(p.pid, t))) && !isIdlePoolProcess(home, p.pid))
    .map((p) => p.pid);
}

/** Polls `cond` until true (bounded: throws after maxMs with `what`). For conditions no event announces. */
export async function until(cond: () => boolean, what: string, maxMs = 20_000): Promise<void> {
  const end = Date.now() + maxMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** The whole output of a run, from its file (status inlines only a bounded head and tail). */
export function outputOf(home: string, runId: string): string {
  return fs.readFileSync(path.join(home, 'runs', runId, 'out', 'run.txt'), 'utf8');
}

/** The delegating agent's printed report (its step output). */
export function report(text: string): { env: Record<string, string>; results: Array<{ isError: boolean; text: string; structured: any }>; finals: any[] } {
  return JSON.parse(text);
}

/**
 * Starts servers on the test's state home (`home()`: the one the running test made) with a short kill grace; after
 * each test they are closed, no process of any run outlives it (a failed assertion must not leave runners behind
 * either), and the home is removed. Call inside `describe`.
 */
export function serversOn(home: () => { home: string; root: string; cleanup: () => void }): (extra?: Record<string, string>) => Promise<Started> {
  const servers: Started[] = [];
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close();
    for (const pid of liveRunProcesses(home().home)) { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } }
    home().cleanup();
  });
  return async (extra = {}) => {
    const h = home();
    const s = await startServer({ SUBAGENTS_HOME: h.home, SUBAGENTS_ROOTS: h.root, SUBAGENTS_KILL_GRACE_MS: '300', ...extra });
    servers.push(s);
    return s;
  };
}
