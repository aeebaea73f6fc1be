/**
 * Helpers shared by the fault suite (test/faults/*): process scans by run token, temp-file scans, and reading a
 * run's files straight from the state home. Everything here observes; nothing changes the product's state.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FIXTURE_AGENTS } from '../helpers/paths.js';

export const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
export { sleep, until } from '../helpers/runs.js';

/** The run's launch record, as the runner reads it. */
export function readRecord(home: string, runId: string): Record<string, any> {
  return JSON.parse(fs.readFileSync(path.join(home, 'runs', runId, 'run.json'), 'utf8'));
}

export function readStatusFile(home: string, runId: string): Record<string, any> {
  return JSON.parse(fs.readFileSync(path.join(home, 'runs', runId, 'status.json'), 'utf8'));
}

function procState(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]!;
  } catch {
    return null;
  }
}

/** A pid that exists and is not a zombie. */
export function pidAlive(pid: number): boolean {
  const s = procState(pid);
  return s !== null && s !== 'Z';
}

/** Live (non-zombie) pids whose environment carries `SUBAGENTS_RUN_TOKEN=<token>`. */
export function pidsWithToken(token: string): number[] {
  const entry = `SUBAGENTS_RUN_TOKEN=${token}`;
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (fs.readFileSync(`/proc/${name}/environ`, 'latin1').split('\0').includes(entry) && pidAlive(Number(name))) out.push(Number(name));
    } catch { /* gone or not ours */ }
  }
  return out;
}

/** Live pids whose command line mentions `needle` (runners carry their run dir on argv). */
export function pidsWithArg(needle: string): number[] {
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (fs.readFileSync(`/proc/${name}/cmdline`, 'utf8').includes(needle) && pidAlive(Number(name))) out.push(Number(name));
    } catch { /* gone */ }
  }
  return out;
}

/** Live members of a process group. */
export function pidsInGroup(pgid: number): number[] {
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(f[2]) === pgid && f[0] !== 'Z') out.push(Number(name));
    } catch { /* gone */ }
  }
  return out;
}

/**
 * Every `.*.tmp` file or directory left anywhere under `dir`: atomic writes leave none behind even when they fail, and
 * a run directory half-built by a killed server is removed by the next server start.
 */
export function tempFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    let entries: fs.Dirent[];
    try { entries = fs.readdirSync(d, { withFileTypes: true }); } catch { return; }
    for (const e of entries) {
      const p = path.join(d, e.name);
      // In the warm pool's directory, a temp whose writer is alive is an idle runner announcing itself right now: a
      // write in progress, not one left behind. (Anywhere else a live writer's temp counts: a failed write must clean up.)
      const writer = path.basename(d) === 'warm' ? /\.(\d+)\.[0-9a-f]+\.tmp$/.exec(e.name) : null;
      // Likewise a live idle runner's rehearsal home (src/runner/rehearsal.ts): its own scratch run, still going.
      const rehearsing = path.basename(d) === 'warm' && e.isDirectory() ? /^rehearsal-(\d+)-/.exec(e.name) : null;
      if (rehearsing && pidAlive(Number(rehearsing[1]))) continue;
      if (/^\..*\.tmp$/.test(e.name) && !(writer && pidAlive(Number(writer[1])))) out.push(p);
      else if (e.isDirectory()) walk(p);
    }
  };
  walk(dir);
  return out;
}

/** Peak resident memory of a process in KiB (VmHWM), or null once it is gone. */
export function vmKiB(pid: number, field: 'VmRSS' | 'VmHWM'): number | null {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** Launches and returns the run id; a refusal fails the test with its text. */
export async function launchOk(s: { call: (n: string, a?: Record<string, unknown>) => Promise<any> }, args: Record<string, unknown>): Promise<string> {
  const r = await s.call('launch', args);
  const text = r.content?.[0]?.text ?? '';
  if (r.isError) throw new Error(`launch refused: ${text}`);
  return r.structuredContent.runId as string;
}

/** (F6) A real small file system for a state home: a tmpfs of `sizeMiB` at a fresh directory, or why it cannot be. */
export function mountTmpfs(sizeMiB: number, extra = ''): { dir: string; unmount: () => void } | string {
  if (process.platform !== 'linux') return 'tmpfs mounts are Linux only';
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-tmpfs-'));
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeMiB}m,mode=0700${extra ? `,${extra}` : ''}`, 'tmpfs', dir], { encoding: 'utf8' });
  if (r.status !== 0) {
    fs.rmdirSync(dir);
    return `mount -t tmpfs is not permitted here (${(r.stderr || r.error?.message || '').trim()})`;
  }
  return { dir, unmount: () => { spawnSync('umount', ['-l', dir]); try { fs.rmdirSync(dir); } catch { /* busy */ } } };
}
