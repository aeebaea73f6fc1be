import fs from 'node:fs';
import { sc, textOf, type Started } from './server.js';

export const TERMINAL = ['completed', 'failed', 'cancelled'];

/**
 * Long-polls `status` until `pred` holds for the run's status; throws if the run ends first (unless `pred` accepts
 * that) or after `maxMs` (a bound on hangs, not a speed check).
 */
export async function waitStatus(s: Started, runId: string, pred: (v: Record<string, any>) => boolean, maxMs = 30_000): Promise<Record<string, any>> {
  const end = Date.now() + maxMs;
  for (;;) {
    const r = await s.call('status', { runId, waitMs: 1000 });
    if (r.isError) throw new Error(`status failed: ${textOf(r)}`);
    const v = sc(r);
    if (pred(v)) return v;
    if (TERMINAL.includes(v.state)) throw new Error(`run ${runId} ended ${v.state} before the awaited condition held: ${JSON.stringify(v.steps)}`);
    if (Date.now() > end) throw new Error(`run ${runId}: condition not reached after ${maxMs} ms (state ${v.state})`);
  }
}

/** A process as pid + kernel start time (field 22 of /proc/<pid>/stat), or null if it is gone or a zombie. */
export function procIdentity(pid: number): { pid: number; startTime: string } | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (f[0] === 'Z') return null;
    return { pid, startTime: f[19]! };
  } catch {
    return null;
  }
}

/** Whether the process that had this identity still runs (a reused pid with another start time is not it). */
export function stillAlive(id: { pid: number; startTime: string }): boolean {
  const now = procIdentity(id.pid);
  return now !== null && now.startTime === id.startTime;
}

/** Whether a pid is a live fake agent (used when only the pid was recorded). */
export function fakeAgentAlive(pid: number): boolean {
  if (procIdentity(pid) === null) return false;
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('fake-agent.mjs');
  } catch {
    return false;
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A cheap echo agent: the task arrives on stdin and comes back verbatim as the output. */
export const CAT = fs.existsSync('/bin/cat') ? '/bin/cat' : '/usr/bin/cat';

/**
 * Calls a tool that must succeed; a refusal fails the test with its text. BUSY (a lock held past its 5 s bound —
 * on a loaded shared machine — nothing recorded) is retried a few times, as a client would.
 */
export async function ok(s: Started, tool: string, args: Record<string, unknown>): Promise<Record<string, any>> {
  for (let attempt = 1; ; attempt++) {
    const r = await s.call(tool, args);
    if (r.isError && textOf(r).startsWith('BUSY: ') && attempt < 4) continue;
    if (r.isError) throw new Error(`${tool} refused: ${textOf(r)}`);
    return sc(r);
  }
}

/** Polls `cond` until it holds or `maxMs` passes: a bound on a hang, never a speed grade. */
export async function until(cond: () => boolean, maxMs = 10_000, everyMs = 50): Promise<boolean> {
  const end = performance.now() + maxMs;
  while (performance.now() < end) {
    if (cond()) return true;
    await sleep(everyMs);
  }
  return cond();
}
