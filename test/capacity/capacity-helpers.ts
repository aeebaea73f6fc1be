import fs from 'node:fs';
import { isAlive } from '../../src/process/identity.js';

/**
 * An agent that waits until the file named by its task exists (at most ~60 s), then prints "ok". A shell loop, not
 * node: capacity races start hundreds of them on a shared two-core machine.
 */
export const WAIT_FOR_FILE_AGENT = ['sh', '-c', 'read -r f; i=0; while [ ! -e "$f" ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done; echo ok'];

const deadRuns = new Set<string>();

/**
 * Live runner processes of this state home: each run's runner as it reported itself (ready.json: pid and start
 * time), alive and not a zombie. A runner is spawned only after its run directory and record exist, and reports
 * ready at once, so this sees every runner that could start an agent; runs seen dead are not read again.
 */
function servesDir(pid: number, dir: string): boolean {
  try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split(/[\0 ]/).includes(dir); } catch { return false; }
}

export function liveRunners(home: string): number[] {
  const out: number[] = [];
  let names: string[] = [];
  try { names = fs.readdirSync(`${home}/runs`); } catch { return out; }
  for (const id of names) {
    const key = `${home}/${id}`;
    if (deadRuns.has(key)) continue;
    let ready: { pid: number; startTime: string } | null = null;
    try { ready = JSON.parse(fs.readFileSync(`${home}/runs/${id}/ready.json`, 'utf8')); } catch { /* not yet */ }
    if (!ready) continue;
    // A warm runner goes back to the pool after its run (docs/architecture.md, "Warm runners"): it counts for a run
    // only while its command line still names that run.
    if (isAlive(ready) && servesDir(ready.pid, `${home}/runs/${id}`)) out.push(ready.pid);
    else deadRuns.add(key);
  }
  return out;
}

export function ledgerRoots(home: string): number {
  try {
    return Object.keys(JSON.parse(fs.readFileSync(`${home}/ledger.json`, 'utf8')).roots).length;
  } catch {
    return 0;
  }
}

/** Samples the ledger's active roots and the live runner processes until stopped; reports the maxima seen. */
export function observe(home: string): { stop: () => Promise<{ maxRoots: number; maxRunners: number; samples: number }> } {
  let running = true;
  let maxRoots = 0;
  let maxRunners = 0;
  let samples = 0;
  const loop = (async () => {
    while (running) {
      maxRoots = Math.max(maxRoots, ledgerRoots(home));
      maxRunners = Math.max(maxRunners, liveRunners(home).length);
      samples++;
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  return { stop: async () => { running = false; await loop; return { maxRoots, maxRunners, samples }; } };
}

/** Runner processes of one run found by their command line (a runner that has not reported ready yet included). */
export function runnerProcessesOf(home: string, runId: string): number[] {
  const needle = `${home}/runs/${runId}`;
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${name}/cmdline`, 'utf8');
      if (!/runner\/main\.c?js/.test(cmd) || !cmd.includes(needle)) continue;
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z') out.push(Number(name));
    } catch { /* exited meanwhile */ }
  }
  return out;
}
