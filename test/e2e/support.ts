/**
 * Observation helpers for the spine's end-to-end tests: processes by identity, the state home's files, bounded waits.
 * Nothing here changes the product's state.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import type { Started } from '../helpers/server.js';

export const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
export const TREE = path.join(FIXTURE_AGENTS, 'tree-agent.mjs');
export { sleep, until } from '../helpers/runs.js';
export { procIdentity as identityOf } from '../helpers/runs.js';
import { procIdentity as identityOf } from '../helpers/runs.js';

export interface Identity { pid: number; startTime: string }

/** The very process we saw is still running (a reused pid with another start time is not it). */
export function stillRunning(id: Identity): boolean {
  const now = identityOf(id.pid);
  return now !== null && now.startTime === id.startTime;
}

/** Live pids (not this test process) whose command line or environment mentions `needle`. */
export function pidsMentioning(needle: string): number[] {
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const hit = fs.readFileSync(`/proc/${name}/cmdline`, 'latin1').includes(needle)
        || fs.readFileSync(`/proc/${name}/environ`, 'latin1').includes(needle);
      if (hit && identityOf(Number(name))) out.push(Number(name));
    } catch { /* gone, or not ours to read */ }
  }
  return out;
}

export function runDirs(home: string): string[] {
  try { return fs.readdirSync(path.join(home, 'runs')).filter((n) => n.startsWith('r-')); } catch { return []; }
}

export function readJson(file: string): any {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

export function ledger(home: string): { roots: Record<string, unknown>; trees: Record<string, { used: number }>; agents: Record<string, unknown> } {
  try { return readJson(path.join(home, 'ledger.json')); } catch { return { roots: {}, trees: {}, agents: {} }; }
}

/** The server's own process (the SDK transport keeps it private; its stdin is what the client closes). */
export function serverProcess(s: Started): ChildProcess {
  const p = (s.transport as unknown as { _process?: ChildProcess })._process;
  if (!p) throw new Error('the server process is not running');
  return p;
}

/**
 * Resolves with the exit of `child`, or with null when `maxMs` passes first. `on: 'close'` waits until its stdio
 * streams have ended too, so everything it wrote has been read (at 'exit' a message on stderr may still be in the pipe).
 */
export function exitWithin(child: ChildProcess, maxMs: number, on: 'exit' | 'close' = 'exit'): Promise<{ code: number | null; signal: NodeJS.Signals | null } | null> {
  if (on === 'exit' && (child.exitCode !== null || child.signalCode !== null)) return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve) => {
    const t = setTimeout(() => { child.off(on, onEnd); resolve(null); }, maxMs);
    const onEnd = (code: number | null, signal: NodeJS.Signals | null) => { clearTimeout(t); resolve({ code, signal }); };
    child.once(on, onEnd);
  });
}

/** Every entry under `dir` with its permission bits (symlinks reported as such). */
export function modesUnder(dir: string): Array<{ path: string; kind: 'file' | 'dir' | 'symlink' | 'other'; mode: number }> {
  const out: Array<{ path: string; kind: 'file' | 'dir' | 'symlink' | 'other'; mode: number }> = [];
  const walk = (d: string) => {
    let names: string[];
    try { names = fs.readdirSync(d); } catch { return; }
    for (const n of names) {
      const p = path.join(d, n);
      let st: fs.Stats;
      try { st = fs.lstatSync(p); } catch { continue; } // removed meanwhile (a released lock)
      const kind = st.isSymbolicLink() ? 'symlink' : st.isDirectory() ? 'dir' : st.isFile() ? 'file' : 'other';
      out.push({ path: p, kind, mode: st.mode & 0o777 });
      if (kind === 'dir') walk(p);
    }
  };
  walk(dir);
  return out;
}
