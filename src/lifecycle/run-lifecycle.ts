import type { ProcessIdentity } from '../process/identity.js';
import { SubagentError } from '../errors.js';
import type { PendingReplace } from '../store/atomic-write.js';
import type { Ledger } from '../store/ledger.js';
import type { CapacityLedger, RunStore } from '../store/ports.js';
import { isTerminalRun, isTerminalStep, unstartedAgents, type RunRecord, type RunState, type RunStatus, type StepError, type StepStatus } from '../store/run-types.js';
import { treeIsLive } from './run-tree.js';

/**
 * The run state machine (docs/contract.md, "Run states"): a run starts `starting`, its runner's start claim makes it
 * `running`, and it ends `completed`, `failed` or `cancelled`. A terminal state never changes again.
 */
export const RUN_TRANSITIONS: Readonly<Record<RunState, readonly RunState[]>> = {
  queued: ['starting', 'failed', 'cancelled'],
  starting: ['running', 'failed', 'cancelled'],
  running: ['completed', 'failed', 'cancelled'],
  completed: [],
  failed: [],
  cancelled: [],
};

export function canTransition(from: RunState, to: RunState): boolean {
  return RUN_TRANSITIONS[from].includes(to);
}

export type EndState = 'completed' | 'failed' | 'cancelled';

/** How a run ends. */
export interface RunEnd {
  state: EndState;
  error: StepError | null;
  /** Ends the run only from these states (a launch abandons only a run still starting); by default from any live state. */
  from?: readonly RunState[];
  /** Processes of the run that outlived SIGKILL, recorded on the status. */
  survivors?: ProcessIdentity[];
  /** The end of the runner's own log, for a run whose runner failed or was lost (never agent output). */
  runnerLogTail?: string;
  /**
   * For a run whose runner was lost: the bytes of a step's output its capture stored (its file), so the steps that were
   * running count what they printed before the loss instead of nothing.
   */
  storedOutput?: (stepKey: string) => number;
}

/** What ending a run needs: its files and the state home's ledger. A runner, a server and the CLI each have these. */
export interface RunEnder {
  store: RunStore;
  ledger: CapacityLedger;
}

/** The run whose end is accounted: which tree it belongs to and whether it holds a capacity slot of its own. */
export type EndingRun = Pick<RunRecord, 'runId' | 'rootRunId' | 'depth'>;

export interface EndOptions {
  /** The caller already holds the run lock (the runner decides its end together with the appends it takes). */
  locked?: boolean;
  /** The live runner's in-memory status: the base of the end, and what replaces a damaged status.json. */
  runnerStatus?: RunStatus;
  /** An earlier attempt at this same end already returned the ledger (a commit retried after a refused write). */
  ledgerReturned?: boolean;
  /**
   * Whether the ledger's return is fsynced (default true). A run's own runner passes false (`returnRunLedger`): what
   * it returns is recoverable from liveness alone.
   */
  ledgerDurable?: boolean;
  /**
   * Told as soon as the ledger entries are returned, before the status is written: a caller that retries an end whose
   * status write the disk refused passes `ledgerReturned` then, and nothing is returned twice (a nested run's
   * unstarted claims would be refunded twice).
   */
  onLedgerReturned?: () => void;
}

export interface EndResult {
  /** The status as stored afterwards: the end written here, or the terminal state someone else recorded first. */
  status: RunStatus;
  /** Whether this call recorded the end. Only that caller returns the run's ledger entries. */
  ours: boolean;
  ledgerReturned: boolean;
  /** Why the ledger could not be returned (the lock stayed busy, the disk refused); capacity pruning reclaims it. */
  ledgerError: unknown;
}

/**
 * Ends a run, the one way every caller does (the runner, reconciliation, cancel's fallback, a launch that gives up):
 * under the run lock, compare-and-set of the terminal state (a terminal state already stored wins, and nothing more is
 * done), the open steps closed, and — only by the caller that recorded the end, and only when no process of the run
 * outlived it — the run's ledger entries returned before the status is written (lock order: run, then ledger), so
 * that a client that sees the run ended can launch into its slot.
 */
export async function endRun(on: RunEnder, run: EndingRun, end: RunEnd, options: EndOptions = {}): Promise<EndResult> {
  const body = async (): Promise<EndResult> => {
    let stored: RunStatus | null;
    try {
      stored = on.store.readStatus(run.runId);
    } catch (e) {
      if (!options.runnerStatus) throw e;
      stored = null;
    }
    const current = stored ?? options.runnerStatus ?? null;
    if (!current) throw new SubagentError('STATE_CORRUPT', `status.json of ${run.runId} is missing.`);
    const already = { ours: false, ledgerReturned: options.ledgerReturned ?? false, ledgerError: null };
    if (!canTransition(current.state, end.state) || (end.from && !end.from.includes(current.state))) return { status: current, ...already };
    const next = endedStatus(options.runnerStatus ?? current, end);
    let ledgerReturned = options.ledgerReturned ?? false;
    // A runner ending its own run (it held the lock since before its read) writes the terminal status's file now, and
    // the disk commits it while the ledger is returned; it shows only after. A status it could not read (repaired
    // from its memory) or a file it could not write goes the way below, which retries the write.
    const pending = options.locked && stored !== null && !ledgerReturned && next.survivors.length === 0 ? beginWrite(on, run.runId, next) : null;
    let ledgerError: unknown = null;
    if (!ledgerReturned && next.survivors.length === 0) {
      try {
        await returnRunLedger(on, run, next, options.ledgerDurable ?? true);
        ledgerReturned = true;
        options.onLedgerReturned?.();
      } catch (e) {
        ledgerError = e;
      }
    }
    if (pending) {
      await pending.commit();
      return { status: next, ours: true, ledgerReturned, ledgerError };
    }
    const status = on.store.updateLocked(run.runId, () => next, { durable: true, repairFrom: options.runnerStatus });
    return { status, ours: status === next, ledgerReturned, ledgerError };
  };
  return options.locked ? body() : on.store.withRunLock(run.runId, body);
}

/** `beginStatusWrite`, or null when the file could not be written (the caller's `updateLocked` tries again). */
function beginWrite(on: RunEnder, runId: string, next: RunStatus): PendingReplace | null {
  try {
    return on.store.beginStatusWrite(runId, next);
  } catch {
    return null;
  }
}

/** The status of a run that ends now: its open steps closed, the state, the error and what the end recorded. */
export function endedStatus(cur: RunStatus, end: RunEnd): RunStatus {
  const now = new Date().toISOString();
  // A step whose runner was lost is failed (what its agent did is not known); one stopped by the run's end is cancelled.
  const running = end.error?.code === 'RUNNER_LOST' ? 'failed' : 'cancelled';
  const next: RunStatus = { ...cur, state: end.state, error: end.error, endedAt: now, steps: closeSteps(cur.steps, running, now, end.storedOutput) };
  if (end.survivors) next.survivors = end.survivors.map((p) => ({ pid: p.pid, startTime: p.startTime }));
  if (end.runnerLogTail) next.runnerLogTail = end.runnerLogTail;
  return next;
}

/** Steps (and group members) not ended yet: a running one becomes `running`, one that never started `skipped`. */
export function closeSteps(steps: StepStatus[], running: 'failed' | 'cancelled', at: string, storedOutput?: (stepKey: string) => number): StepStatus[] {
  const close = (s: StepStatus): StepStatus => {
    if (isTerminalStep(s.state)) return s;
    const wasRunning = s.state === 'running';
    const members = s.members?.map(close);
    const stored = wasRunning && storedOutput && !members ? storedOutput(s.key) : 0;
    const outputBytes = members ? members.reduce((n, m) => n + m.outputBytes, 0) : Math.max(s.outputBytes, stored);
    return { ...s, state: wasRunning ? running : 'skipped', endedAt: wasRunning ? at : s.endedAt, members, outputBytes };
  };
  return steps.map(close);
}

/**
 * Returns an ended run's ledger entries (see `returnRunLocked`) under the ledger lock. `durable: false` is for a run
 * that started, ended by its own runner (docs/contract.md, "Invariants", 1): it left the queue when it started, and
 * only a crash of the machine loses a write that was not fsynced — a crash that leaves no runner and no agent of the
 * home alive, so liveness pruning returns every slot, capacity slot and tree that the lost return held (a fan-out
 * refund goes with its tree). Not fsyncing it takes two fsyncs off every run's end, under the lock every run of the
 * state home shares.
 */
export async function returnRunLedger(on: RunEnder, run: EndingRun, status: RunStatus, durable = true): Promise<void> {
  const unstarted = unstartedAgents(status);
  await on.ledger.change((l) => returnRunLocked(l, on.store, run, unstarted), { durable });
}

/**
 * The accounting of a run that ended (caller holds the ledger lock): every agent slot it holds or reserved, the
 * fan-out claims of agents that never started, and — for a top-level run whose tree has ended — its capacity slot and
 * its tree. A root whose tree still lives (a nested run still going, an agent of the tree alive) keeps its slot:
 * capacity pruning returns it once the tree has ended.
 */
export function returnRunLocked(l: Ledger, store: RunStore, run: EndingRun, unstarted: number): void {
  for (const key of Object.keys(l.agents)) if (key.startsWith(`${run.runId}:`)) delete l.agents[key];
  if (l.queue) delete l.queue[run.runId];
  const tree = l.trees[run.rootRunId];
  if (tree && unstarted > 0) tree.used = Math.max(0, tree.used - unstarted);
  if (run.depth === 0 && !treeIsLive(l, store, run.runId)) {
    delete l.roots[run.runId];
    delete l.trees[run.runId];
  }
}
