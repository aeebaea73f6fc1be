import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { sc, startServer, textOf, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

export const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
export const HOLD = path.join(path.dirname(fileURLToPath(import.meta.url)), 'hold-agent.mjs');

export interface World {
  t: ReturnType<typeof tempStateHome>;
  env: Record<string, string>;
  /** Gate directories by agent name: the agent waits for `<dir>/release`. */
  gates: Record<string, string>;
  servers: Started[];
  start: (extra?: Record<string, string>) => Promise<Started>;
  cleanup: () => Promise<void>;
}

/**
 * A state home with agents `echo`, `flood`, and gate agents (`gate`, `gate2`, …) that hold their step open until the
 * test releases them, so run lifetimes follow the test, not the clock.
 */
export function world(o: { gates?: string[]; env?: Record<string, string> } = {}): World {
  const t = tempStateHome('sa-sess-');
  const agents = path.join(t.home, 'agents');
  writeAgent(agents, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
  writeAgent(agents, 'flood', { backend: 'command', command: ['node', FAKE, 'flood', '4500000'] });
  const gates: Record<string, string> = {};
  for (const g of o.gates ?? ['gate']) {
    gates[g] = path.join(t.base, `gate-${g}`);
    writeAgent(agents, g, { backend: 'command', command: ['node', HOLD, gates[g]] });
  }
  const env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', ...o.env };
  const servers: Started[] = [];
  return {
    t, env, gates, servers,
    start: async (extra = {}) => {
      const s = await startServer({ ...env, ...extra });
      servers.push(s);
      return s;
    },
    cleanup: async () => {
      for (const g of Object.values(gates)) release(g);
      for (const s of servers) await s.close();
      t.cleanup();
    },
  };
}

/** Lets every step of a gate agent finish. */
export function release(gateDir: string): void {
  fs.mkdirSync(gateDir, { recursive: true });
  fs.writeFileSync(path.join(gateDir, 'release'), '');
}

/** Waits until a file matching `pred` appears in `dir` (bounded: a hang fails the test, speed is not graded). */
export async function waitForFile(dir: string, pred: (name: string) => boolean, maxMs = 30_000): Promise<string> {
  const end = Date.now() + maxMs;
  for (;;) {
    const hit = (() => { try { return fs.readdirSync(dir).find(pred); } catch { return undefined; } })();
    if (hit) return path.join(dir, hit);
    if (Date.now() > end) throw new Error(`no file in ${dir} after ${maxMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function launchOk(s: Started, args: Record<string, unknown>): Promise<{ runId: string; sessionId: string; state: string }> {
  const r = await s.call('launch', args);
  if (r.isError) throw new Error(`launch failed: ${textOf(r)}`);
  return sc(r);
}

export async function sessionIdOf(s: Started): Promise<string> {
  return sc((await s.call('status', {}))).sessionId;
}

/** A well-formed run id that no run has. */
export const fakeRunId = (): string => `r-${randomBytes(18).toString('base64url')}`;

/** The error message of a rejected promise. */
export async function rejection(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error('expected a rejection');
}
