import path from 'node:path';
import { SubagentError } from '../errors.js';
import { isAlive, readIdentity, type ProcessIdentity } from '../process/identity.js';
import { writeNewFile } from '../store/atomic-write.js';
import { ReadyFile, readStateFile, RunStatusFile } from '../store/state-files.js';
import type { RunPaths } from '../store/layout.js';
import type { RunStatus } from '../store/run-types.js';
import { waitUntil } from '../wait.js';
import { peopleCommand } from '../invocation.js';

export type HandshakePhase = 'spawn' | 'ready' | 'bind' | 'proceed';

export class HandshakeFailure extends Error {
  constructor(readonly phase: HandshakePhase, readonly reason: string, readonly runner: ProcessIdentity | null) {
    super(`${phase}: ${reason}`);
  }
}

/** The started runner as the handshake sees it: a DetachedChild of the spawner thread, or a ChildProcess. */
export interface StartedRunner {
  readonly pid?: number | undefined;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  /** Set once its end was seen where neither code is known (a runner that is not this process's child). */
  readonly gone?: boolean;
  once(event: 'exit', fn: (code: number | null, signal: NodeJS.Signals | null) => void): unknown;
  off(event: 'exit', fn: (code: number | null, signal: NodeJS.Signals | null) => void): unknown;
}

export interface WaitOptions {
  paths: RunPaths;
  /** The ready report awaited: `paths.ready`, or a queued run's attempt's own (`readyOf`). */
  readyFile?: string;
  child: StartedRunner;
  deadline: number;
  signal: AbortSignal;
}

/**
 * Waits until `ready()` returns a value, the runner exits, the deadline passes or the launch is aborted (`waitUntil`:
 * a watch on the run directory for the awaited file, with a slow poll as the safety net).
 */
async function waitFor<T>(o: WaitOptions, phase: HandshakePhase, file: string, ready: () => T | null): Promise<T> {
  const stop = new AbortController();
  let exited: string | null = null;
  const onExit = (code: number | null, sig: string | null) => {
    // A warm runner is not our child: its death is seen, its exit status is not (both null).
    const how = sig ? ` (signal ${sig})` : code !== null ? ` (code ${code})` : '';
    exited = `the runner exited${how} before it ${phase === 'proceed' ? 'started the run' : 'reported ready'}`;
    stop.abort();
  };
  const onAbort = () => stop.abort();
  if (o.child.exitCode !== null || o.child.signalCode !== null || o.child.gone === true) onExit(o.child.exitCode, o.child.signalCode);
  else o.child.once('exit', onExit);
  o.signal.addEventListener('abort', onAbort, { once: true });
  try {
    if (o.signal.aborted && !exited) throw new HandshakeFailure(phase, 'the launch was cancelled or the server is shutting down', null);
    // Only events naming the awaited file (or naming none, where the platform does not say): the runner's other
    // writes in the directory (temps, its lock, the event log) are several events per launch, each a file read here.
    const name = path.basename(file);
    const v = await waitUntil({
      dirs: [o.paths.dir], filter: (changed) => changed === name, check: ready, pollMs: 200,
      timeoutMs: Math.max(0, o.deadline - performance.now()), signal: stop.signal,
    });
    if (v !== null) return v;
    if (exited) {
      // What it wrote just before it exited still counts.
      let last: T | null = null;
      try { last = ready(); } catch { /* not there */ }
      if (last !== null) return last;
      throw new HandshakeFailure(phase, exited, null);
    }
    if (o.signal.aborted) throw new HandshakeFailure(phase, 'the launch was cancelled or the server is shutting down', null);
    throw new HandshakeFailure(phase, 'the handshake timed out (SUBAGENTS_HANDSHAKE_TIMEOUT_MS)', null);
  } finally {
    o.child.off('exit', onExit);
    o.signal.removeEventListener('abort', onAbort);
  }
}

/** Phase `spawn`→`ready`: the runner proves who it is (pid and start time of the process we started). */
export async function awaitReady(o: WaitOptions): Promise<ProcessIdentity> {
  const file = o.readyFile ?? o.paths.ready;
  const ready = await waitFor(o, 'spawn', file, () => readStateFile<{ pid: number; startTime: string }>(file, ReadyFile));
  if (ready.pid !== o.child.pid) {
    throw new HandshakeFailure('ready', 'the ready report names another process than the runner that was started', null);
  }
  const actual = readIdentity(ready.pid);
  if (!actual) throw new HandshakeFailure('ready', 'the runner exited right after it reported ready', null);
  if (actual.startTime !== ready.startTime) {
    throw new HandshakeFailure('ready', 'the ready report does not match the runner process that was started', null);
  }
  return actual;
}

/**
 * Phase `proceed`: tells the runner to start. Not fsynced: proceed acknowledges nothing (the runner's durable start
 * claim does); a proceed lost to a crash only means a runner that never started, and it exits on its own after the
 * handshake timeout. The runner waits for the name alone and never reads the file: one create, no temp and link (two
 * metadata operations fewer on every launch).
 */
export function sayProceed(paths: RunPaths): void {
  try {
    writeNewFile(paths.proceed, JSON.stringify({ at: new Date().toISOString() }));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e; // already said: the runner goes on all the same
  }
}

/** Waits until the runner told to proceed has claimed the start in status.json. */
export async function awaitStart(o: WaitOptions, runner: ProcessIdentity): Promise<RunStatus> {
  return waitFor(o, 'proceed', o.paths.status, () => {
    const s = readStateFile<RunStatus>(o.paths.status, RunStatusFile);
    if (!s || s.state === 'starting') {
      if (!isAlive(runner)) throw new Error('runner gone');
      return null;
    }
    return s;
  });
}

/** Phase `proceed`: tell the runner to start, and wait until it has claimed the start in status.json. */
export async function proceedAndAwaitStart(o: WaitOptions, runner: ProcessIdentity): Promise<RunStatus> {
  sayProceed(o.paths);
  return awaitStart(o, runner);
}

export function handshakeError(f: HandshakeFailure, runId: string): SubagentError {
  return new SubagentError('HANDSHAKE_FAILED', `the run's runner failed at the ${f.phase} phase: ${f.reason}. No agent was started and nothing is held; run ${runId} is recorded failed (status { runId } shows the runner's own log). Retry the launch, and if it keeps failing run \`${peopleCommand('doctor')}\`.`);
}
