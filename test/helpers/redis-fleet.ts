/**
 * Worker processes for tests of distributed mode (docs/scale-out.md): each `subagents-mcp worker` gets its own temp
 * state home, standing in for a machine, and is stopped by the test. Every wait is bounded and waits for a condition.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { MAIN_JS } from './paths.js';

export interface WorkerProc { child: ChildProcess; home: string; log: () => string; id: () => string | null }

/** Waits for `cond` (sync or async) with a bound; throws naming `what` when it never holds. */
export async function until(cond: () => boolean | Promise<boolean>, maxMs: number, what = 'the condition'): Promise<void> {
  const end = performance.now() + maxMs;
  while (performance.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  if (!(await cond())) throw new Error(`${what} did not hold within ${maxMs} ms`);
}

/**
 * Starts a worker on `home` (made if missing) for `roots`, resolved once it has said it is up. `agents(dir)` writes
 * the agent files of that machine.
 */
export async function startWorker(o: { redisUrl: string; home: string; roots: string[]; agents?: (dir: string) => void; concurrency?: number; env?: Record<string, string> }): Promise<WorkerProc> {
  fs.mkdirSync(o.home, { recursive: true, mode: 0o700 });
  o.agents?.(path.join(o.home, 'agents'));
  let out = '';
  const args = [MAIN_JS, 'worker', '--redis', o.redisUrl, '--home', o.home, '--concurrency', String(o.concurrency ?? 2)];
  for (const r of o.roots) args.push('--root', r);
  const child = spawn(process.execPath, args, {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, SUBAGENTS_STALL_INTERVAL_MS: '10000', SUBAGENTS_KILL_GRACE_MS: '1000', ...o.env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr!.on('data', (c: Buffer) => { out += c.toString(); });
  const w: WorkerProc = { child, home: o.home, log: () => out, id: () => /worker (w-[\w-]+) on/.exec(out)?.[1] ?? null };
  await until(() => w.id() !== null || child.exitCode !== null, 30_000, 'the worker\'s start');
  if (!w.id()) throw new Error(`worker did not start: ${out}`);
  return w;
}

export async function stopWorker(w: WorkerProc, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (w.child.exitCode !== null || w.child.signalCode !== null) return;
  const exited = new Promise((r) => w.child.once('exit', r));
  w.child.kill(signal);
  await exited;
}
