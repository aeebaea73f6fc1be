import fs from 'node:fs';
import path from 'node:path';
import { requestCancelOnce, type CancelReason } from '../lifecycle/cancel-request.js';
import { descendants, readyIdentity, runMayBeLive, safeRecord, safeStatus } from '../lifecycle/run-tree.js';
import { commandLineOf, type ProcessIdentity } from '../process/identity.js';
import { findRunProcesses, runnerGroups, terminateProcesses } from '../process/terminate.js';
import type { RunStore } from '../store/ports.js';
import { WarmPoolFiles } from '../store/warm-pool.js';
import { isTerminalRun } from '../store/run-types.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Whether `p` is the runner of a nested run launched from step `stepKey` of `runId` (identity from its status or ready report). */
export function isNestedRunner(store: RunStore, runId: string, stepKey: string, p: ProcessIdentity): boolean {
  for (const c of store.children(runId)) {
    if (c.stepKey !== stepKey) continue;
    const ids = [safeStatus(store, c.runId)?.runner, readyIdentity(store, c.runId)];
    if (ids.some((id) => id && id.pid === p.pid && id.startTime === p.startTime)) return true;
  }
  return false;
}

/**
 * Whether `p` is a runner that is not the step's to stop although it descends from the step's agent: the runner of
 * another run of the home, or an idle member of the warm pool. A server an agent started boots pool runners as its own
 * children, so they descend from that agent by parent links and carry no run token, yet one of them may be serving an
 * unrelated run (docs/architecture.md, "Warm runners"). Identity-checked, never taken on a name: its command line
 * names a run directory of the home whose status or ready report names this very process (pid and start time), or
 * the pool's directory holding an entry for it.
 */
export function isOtherRunsRunner(store: RunStore, p: ProcessIdentity): boolean {
  const args = commandLineOf(p.pid);
  if (args.length === 0) return false;
  const runsDir = store.layout.runsDir;
  const warm = args.indexOf('--warm');
  if (warm >= 0 && args[warm + 1] === store.layout.warmDir) {
    const key = WarmPoolFiles.keyOf(p);
    return ['idle', 'taken', 'claim', 'serving'].some((kind) => fs.existsSync(path.join(store.layout.warmDir, `${key}.${kind}`)));
  }
  const runDir = args.find((a) => path.dirname(a) === runsDir);
  if (!runDir) return false;
  const runId = path.basename(runDir);
  const ids = [safeStatus(store, runId)?.runner, readyIdentity(store, runId)];
  return ids.some((id) => id && id.pid === p.pid && id.startTime === p.startTime);
}

/**
 * Nested runs of a step still active when its agent exited are cancelled (`reason`), and the step waits until each
 * has ended. No fixed bound: a bound let a root end, and free its capacity slot, with nested runs alive (a deep tree
 * of agents that ignore SIGTERM takes a grace per level). The wait cannot hang on a dead process: a live child runner
 * ends on its own (its agent gets SIGTERM, the grace, SIGKILL, and it waits for its own children the same way), so the
 * wait ends with the leaves of the tree; a child whose runner is gone (identity-checked) has its leftovers stopped
 * here, its own children taken into this wait, and its status left for reconciliation to record; one still starting
 * is waited for only while its launch can still proceed (its server or its runner alive: both bound the handshake).
 */
export async function settleChildren(store: RunStore, parentRunId: string, stepKey: string, reason: CancelReason): Promise<void> {
  const waiting = store.children(parentRunId).filter((c) => c.stepKey === stepKey).map((c) => c.runId);
  if (waiting.length === 0) return;
  const ask = (runId: string) => {
    const s = safeStatus(store, runId);
    if (s && isTerminalRun(s.state)) return;
    // Asked again while it lives if the request is missing (a write that failed): never left to go on unasked.
    try { requestCancelOnce(store, runId, reason); } catch { /* asked again on the next round */ }
  };
  for (let round = 0; waiting.length > 0; round++) {
    for (const runId of [...waiting]) {
      if (round % 10 === 0) ask(runId);
      const s = safeStatus(store, runId);
      if (s && isTerminalRun(s.state)) { waiting.splice(waiting.indexOf(runId), 1); continue; }
      if (runMayBeLive(store, runId)) continue;
      // Not terminal and nothing can end it from inside: its runner is gone, or its launch never started.
      waiting.splice(waiting.indexOf(runId), 1);
      const record = safeRecord(store, runId);
      const runner = s?.runner ?? readyIdentity(store, runId);
      if (record && runner) {
        const find = () => findRunProcesses({ pgids: runnerGroups(runner), token: record.runToken, exclude: [process.pid] });
        await terminateProcesses(find, record.killGraceMs);
      }
      for (const id of descendants(store, runId)) if (!waiting.includes(id)) { ask(id); waiting.push(id); }
    }
    if (waiting.length > 0) await sleep(100);
  }
}
