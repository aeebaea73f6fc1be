import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { readIdentity, type ProcessIdentity } from '../process/identity.js';
import { ensurePrivateDir, writeFileAtomic } from '../store/atomic-write.js';
import { RunPaths } from '../store/layout.js';
import { newStepStatus } from '../store/step-status.js';
import type { RunRecord, RunStatus, StepSpec } from '../store/run-types.js';
import { newRunId } from '../ids.js';
import { supervise } from './supervise.js';

/**
 * The idle runner's rehearsal (docs/architecture.md, "Warm runners"): before it announces itself, a warm runner
 * supervises one throwaway run of its own — a single step whose agent is `/bin/true` — in a scratch state home of its
 * own inside the warm directory, then deletes it. Node compiles a function at its first call, and Node's internal
 * modules (sockets, child processes, crypto) load at their first use: a runner that has never run a step paid all of
 * that on its first step, ~35 ms of CPU on the launch's critical path (measured: ~60 ms for a first supervised run in
 * a process, ~22 ms for the next). The rehearsal pays it while idle. It touches no file of the real home but its own
 * scratch directory, takes no capacity, slot or fan-out of the home, and a rehearsal that fails changes nothing: the
 * runner announces itself all the same (it is only slower at its first step).
 */

/** The scratch homes' names in the warm directory: `rehearsal-<pid>-<startTime>`. */
const PREFIX = 'rehearsal-';

/** Bounds the rehearsal (its agent exits at once; a machine too loaded to run it in this time gains nothing from it). */
const REHEARSAL_TIMEOUT_MS = 10_000;

/** A `true` that exists on the platforms runners run on; none: no rehearsal. */
function trueBin(): string | null {
  for (const p of ['/bin/true', '/usr/bin/true']) if (fs.existsSync(p)) return p;
  return null;
}

function scratchName(me: ProcessIdentity): string {
  return `${PREFIX}${me.pid}-${me.startTime.replace(/[^0-9A-Za-z]/g, '_')}`;
}

/** Whether the runner a scratch home is named after still lives (the same pid and start time). */
function ownerAlive(name: string): boolean {
  const pid = Number(/^rehearsal-(\d+)-/.exec(name)?.[1]);
  const id = Number.isInteger(pid) && pid > 0 ? readIdentity(pid) : null;
  return id !== null && scratchName(id) === name;
}

/** Scratch homes of rehearsals whose runner died mid-way (killed while booting): nobody else removes them. */
function removeDeadScratch(warmDir: string): void {
  let names: string[];
  try { names = fs.readdirSync(warmDir); } catch { return; }
  for (const n of names) {
    if (!n.startsWith(PREFIX) || ownerAlive(n)) continue;
    try { fs.rmSync(path.join(warmDir, n), { recursive: true, force: true }); } catch { /* another runner removes it */ }
  }
}

export async function rehearse(warmDir: string, me: ProcessIdentity): Promise<boolean> {
  const bin = trueBin();
  if (!bin) return false;
  removeDeadScratch(warmDir);
  const home = path.join(warmDir, scratchName(me));
  try {
    ensurePrivateDir(home);
    const runId = newRunId();
    const paths = new RunPaths(path.join(home, 'runs', runId));
    ensurePrivateDir(path.dirname(paths.dir));
    ensurePrivateDir(paths.dir);
    const step: StepSpec = {
      kind: 'agent', task: 'rehearsal',
      agent: {
        name: 'rehearsal', description: 'the idle runner warming up', backend: 'command', permissions: 'read-only',
        command: [bin], bin, env: [], delegate: false, body: '', source: 'home', path: bin, sha256: '', trusted: true,
      },
    };
    const createdAt = new Date().toISOString();
    const record: RunRecord = {
      v: 1, runId, sessionId: 'rehearsal', mode: 'single', cwd: home, label: null, createdAt,
      timeoutMs: REHEARSAL_TIMEOUT_MS, defaultStepTimeoutMs: REHEARSAL_TIMEOUT_MS, killGraceMs: 100,
      handshakeTimeoutMs: REHEARSAL_TIMEOUT_MS, maxOutputBytes: 1024, maxAgents: 1, passEnv: [], umask: 0o077, depth: 0,
      rootRunId: runId, parentRunId: null, parentStepKey: null, limits: { maxSpawns: 1, maxDepth: 1 },
      runToken: randomBytes(24).toString('base64url'), server: me, steps: [step],
    };
    const status: RunStatus = {
      v: 1, runId, state: 'starting', error: null, startedAt: null, endedAt: null, updatedAt: createdAt,
      runner: null, steps: [newStepStatus(0, step)], appendsTaken: 0, survivors: [],
    };
    writeFileAtomic(paths.record, JSON.stringify(record), { durable: false });
    writeFileAtomic(paths.status, JSON.stringify(status), { durable: false });
    // Not the runner's own run: no signal handlers, no priority change, no lock holder identity (the real run sets them).
    await supervise(record, paths, me, null, { processSignals: false });
    const ended = JSON.parse(fs.readFileSync(paths.status, 'utf8')) as RunStatus;
    return ended.state === 'completed';
  } catch {
    return false;
  } finally {
    try { fs.rmSync(home, { recursive: true, force: true }); } catch { /* removed by the next runner that boots */ }
  }
}
