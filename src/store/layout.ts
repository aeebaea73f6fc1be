import path from 'node:path';
import { isRunId } from '../ids.js';
import { guardStateHome } from './home-guard.js';

/**
 * Every path inside the state home, in one place. Run ids are validated before they are joined into a path, so a
 * client-supplied id can never name a file outside the home.
 */
export class Layout {
  constructor(readonly home: string) {
    guardStateHome(home);
  }
  get runsDir(): string { return path.join(this.home, 'runs'); }
  get locksDir(): string { return path.join(this.home, 'locks'); }
  get operatorAgentsDir(): string { return path.join(this.home, 'agents'); }
  get ledgerFile(): string { return path.join(this.home, 'ledger.json'); }
  get sessionsFile(): string { return path.join(this.home, 'sessions.json'); }
  /** Pre-booted idle runners (store/warm-pool.ts). */
  get warmDir(): string { return path.join(this.home, 'warm'); }
  runDir(runId: string): string {
    if (!isRunId(runId)) throw new Error('invalid run id');
    return path.join(this.runsDir, runId);
  }
  run(runId: string): RunPaths { return new RunPaths(this.runDir(runId)); }
}

/**
 * Names in a run directory whose changes say nothing about the run's state: writers' temp files (a status write
 * shows up as its temp's creation and writes before the rename that publishes it), the run lock, the event log, the
 * runner's log, the handshake's signals (the launch waits for them by name) and the directories the runner makes for
 * its own work (what happens inside them is not seen by a watch of the run directory anyway). Watchers skip them:
 * waking on them only re-reads an unchanged status, on the CPU the writer needs to finish its write. A name the event
 * does not carry (null) is never noise.
 */
export function isRunDirNoise(name: string | null): boolean {
  if (name === null) return false;
  return RUN_DIR_NOISE.has(name) || (name.startsWith('.') && name.endsWith('.tmp'));
}

const RUN_DIR_NOISE = new Set(['run.lock', 'events.jsonl', 'runner.log', 'ready.json', 'proceed', 'out', 'prompts', 'budget']);

/** The files of one run. */
export class RunPaths {
  constructor(readonly dir: string) {}
  /** Immutable launch record, written before the runner starts. */
  get record(): string { return path.join(this.dir, 'run.json'); }
  /** Progress and final state; the runner is its single writer while it lives. */
  get status(): string { return path.join(this.dir, 'status.json'); }
  get events(): string { return path.join(this.dir, 'events.jsonl'); }
  /** The runner's own stdout+stderr (its crash reasons; never agent output). */
  get runnerLog(): string { return path.join(this.dir, 'runner.log'); }
  get ready(): string { return path.join(this.dir, 'ready.json'); }
  /** The ready report of a queued run's n-th start attempt (each attempt's runner reports in its own file). */
  readyOf(attempt: number): string { return attempt > 0 ? path.join(this.dir, `ready.${attempt}.json`) : this.ready; }
  get proceed(): string { return path.join(this.dir, 'proceed'); }
  get cancelRequest(): string { return path.join(this.dir, 'cancel-request.json'); }
  get dismissed(): string { return path.join(this.dir, 'dismissed.json'); }
  get appendsDir(): string { return path.join(this.dir, 'appends'); }
  appendFile(seq: number): string { return path.join(this.appendsDir, `${String(seq).padStart(6, '0')}.json`); }
  get outDir(): string { return path.join(this.dir, 'out'); }
  /** The final text of a step (`0`, or `2.1` for member 1 of step 2). */
  output(stepKey: string): string { return path.join(this.outDir, `${stepKey}.txt`); }
  /** The CLI's raw stdout when an adapter parses it. */
  rawOutput(stepKey: string): string { return path.join(this.outDir, `${stepKey}.raw`); }
  stderr(stepKey: string): string { return path.join(this.outDir, `${stepKey}.err`); }
  /** An isolated step's changes as a patch (from its base to its commit). */
  patch(stepKey: string): string { return path.join(this.outDir, `${stepKey}.patch`); }
  systemPrompt(stepKey: string): string { return path.join(this.dir, 'prompts', `${stepKey}.system.md`); }
  taskFile(stepKey: string): string { return path.join(this.dir, 'prompts', `${stepKey}.task.md`); }
  get promptsDir(): string { return path.join(this.dir, 'prompts'); }
  get runOutput(): string { return path.join(this.outDir, 'run.txt'); }
  get lockTarget(): string { return path.join(this.dir, 'run'); }
  get childrenDir(): string { return path.join(this.dir, 'children'); }
  /** Hashes of the nesting secrets (SUBAGENTS_BUDGET) of running steps; a file exists only while its step runs. */
  get budgetDir(): string { return path.join(this.dir, 'budget'); }
  budgetFile(secretHash: string): string { return path.join(this.budgetDir, `${secretHash}.json`); }
  /**
   * A worker's run only (docs/scale-out.md, "Nested delegation"): the Redis its nested servers use, read by the runner
   * into each step's budget file. 0600, removed when the run ends; never in an environment.
   */
  get distributedLink(): string { return path.join(this.dir, 'distributed-link.json'); }
  /** A worker's run: its nested runs in Redis, one marker each (`<child>.json`: the step that launched it). */
  get remoteChildrenDir(): string { return path.join(this.dir, 'remote-children'); }
  remoteChild(childRunId: string): string { return path.join(this.remoteChildrenDir, `${childRunId}.json`); }
  /** The runner asks its worker to end a step's nested runs in Redis; the worker answers with `.done` once they have. */
  settleRequest(stepKey: string): string { return path.join(this.dir, `settle-${stepKey}.json`); }
  settleDone(stepKey: string): string { return path.join(this.dir, `settle-${stepKey}.done`); }
}
