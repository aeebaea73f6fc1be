/**
 * Mirrors one local run into Redis while it lives (docs/scale-out.md, "What lives in Redis"): its status at each change
 * (each step's evidence names this worker's host), its steps' output up to the cap, and its end, which returns its
 * slots. Woken by the local run directory's changes, with a slow look behind them, as local waiters are.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { ManagerContext } from '../manager/context.js';
import type { RedisRuns } from '../store/redis/run-store.js';
import { isTerminalRun, isTerminalStep, unstartedAgents, type RunStatus, type StepStatus } from '../store/run-types.js';
import type { TreeCancelReason } from '../manager/distributed/tree.js';
import { DirWatch } from '../wait.js';
import { reconcileRun } from '../manager/reconcile.js';

export interface MirrorTarget {
  /** Called when Redis already holds an end this worker did not write (RUNNER_LOST after a long outage, a cancel). */
  onEndedElsewhere: () => void;
  runs: RedisRuns;
  local: ManagerContext;
  runId: string;
  localRunId: string;
  worker: { id: string; host: string };
  capBytes: number;
  /**
   * Ends the run's nested runs (of one step, when given) that are still active; with `wait`, resolves once they have
   * ended (bounded). Called when a step ends, and before the run's end is recorded (docs/scale-out.md, "Nested delegation").
   */
  endChildren: (o: { reason: TreeCancelReason; stepKey?: string; wait: boolean }) => Promise<number>;
}

/** Local mode's reason (src/runner/supervise.ts): a cancel of the tree stays a cancel, any other end is the parent's. */
const childReason = (code: string | undefined): TreeCancelReason => (code === 'CANCELLED' ? 'CANCELLED' : 'PARENT_ENDED');

/** Bytes of `file` from `offset` on (at most `max`, 1 MiB unless given); empty when there are none. */
function readFrom(file: string, offset: number, max = 1024 * 1024): Buffer {
  let fd: number;
  try { fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW); } catch { return Buffer.alloc(0); }
  try {
    const size = fs.fstatSync(fd).size;
    if (size <= offset) return Buffer.alloc(0);
    const buf = Buffer.alloc(Math.min(size - offset, max));
    const n = fs.readSync(fd, buf, 0, buf.length, offset);
    return buf.subarray(0, n);
  } finally {
    fs.closeSync(fd);
  }
}

function tail(file: string, bytes: number): Buffer {
  try {
    const size = fs.statSync(file).size;
    return readFrom(file, Math.max(0, size - bytes));
  } catch { return Buffer.alloc(0); }
}

/** Local event lines the mirror forwards to Redis: the steps' (the run's start and end are recorded there directly). */
const FORWARDED = new Set(['step-started', 'step-ended', 'appended']);

const leaves = (steps: StepStatus[]): StepStatus[] => steps.flatMap((s) => (s.members ? s.members : [s]));

/** The local status as Redis keeps it: the distributed run id, and the worker's host in each step's evidence. */
function translate(s: RunStatus, runId: string, host: string): RunStatus {
  const step = (st: StepStatus): StepStatus => ({
    ...st,
    ...(st.process ? { process: { ...st.process, host } as StepStatus['process'] } : {}),
    ...(st.members ? { members: st.members.map(step) } : {}),
  });
  return { ...s, runId, steps: s.steps.map(step) };
}

export async function mirrorRun(t: MirrorTarget): Promise<RunStatus> {
  const paths = t.local.store.paths(t.localRunId);
  const sent = new Map<string, number>();
  let last = '';
  const fields = { worker: t.worker.id, host: t.worker.host, localRunId: t.localRunId };
  /** Sends what `file` gained since the last call, up to the cap, as the output `key` in Redis. */
  const copy = async (key: string, file: string) => {
    let offset = sent.get(key) ?? 0;
    while (offset < t.capBytes) {
      const chunk = readFrom(file, offset);
      if (chunk.length === 0) break;
      await t.runs.appendOutput(t.runId, key, chunk, t.capBytes);
      offset += chunk.length;
      sent.set(key, offset);
    }
  };
  const patches = new Set<string>();
  const copyOutputs = async (s: RunStatus) => {
    for (const st of leaves(s.steps)) {
      // An isolated step's patch is complete once its status shows its changes (src/runner/step-worktrees.ts).
      if (st.changes && !patches.has(st.key)) {
        await t.runs.putOutput(t.runId, `${st.key}.patch`, readFrom(paths.patch(st.key), 0, t.capBytes));
        patches.add(st.key);
      }
      await copy(st.key, paths.output(st.key));
    }
  };
  const settled = new Set<string>();
  const answering = new Set<string>();
  // The runner's requests to end a step's nested runs (src/runner/supervise.ts): answered once they have ended.
  const answerSettleRequests = () => {
    let names: string[];
    try { names = fs.readdirSync(paths.dir); } catch { return; }
    for (const name of names) {
      const m = /^settle-(.+)\.json$/.exec(name);
      if (!m || answering.has(m[1]!)) continue;
      const stepKey = m[1]!;
      answering.add(stepKey);
      let reason: TreeCancelReason = 'PARENT_ENDED';
      try { if ((JSON.parse(fs.readFileSync(path.join(paths.dir, name), 'utf8')) as { reason?: unknown }).reason === 'CANCELLED') reason = 'CANCELLED'; } catch { /* the default */ }
      settled.add(stepKey);
      void t.endChildren({ reason, stepKey, wait: true }).catch(() => 0).then(() => {
        try { fs.writeFileSync(paths.settleDone(stepKey), '', { mode: 0o600 }); } catch { /* the runner's wait is bounded */ }
      });
    }
  };
  // The steps' events of the local log go to Redis as they are written (the run's own start and end are recorded
  // there by the worker and by the end's script); each line once, in order.
  let eventsOffset = 0;
  const forwardEvents = async (s: RunStatus) => {
    const agents = new Map(leaves(s.steps).map((st) => [st.key, st.agent]));
    const base = eventsOffset;
    const chunk = readFrom(paths.events, base);
    let at = 0;
    for (;;) {
      const nl = chunk.indexOf(10, at);
      if (nl < 0) break;
      const line = chunk.subarray(at, nl).toString('utf8');
      at = nl + 1;
      let ev: Record<string, unknown> | null = null;
      try { ev = JSON.parse(line) as Record<string, unknown>; } catch { ev = null; } // a torn line: skipped, as every reader does
      if (ev && typeof ev === 'object' && FORWARDED.has(String(ev.type))) {
        const agent = typeof ev.step === 'string' ? agents.get(ev.step) : undefined;
        await t.runs.event(t.runId, { ...ev, ...(agent && ev.agent === undefined ? { agent } : {}) });
      }
      eventsOffset = base + at;
    }
  };
  const watch = new DirWatch([paths.dir, paths.outDir]);
  try {
    for (;;) {
      try {
      answerSettleRequests();
      const local = t.local.store.readStatus(t.localRunId);
      if (local) {
        await copyOutputs(local);
        await forwardEvents(local);
        let mirrored = translate(local, t.runId, t.worker.host);
        for (const st of leaves(local.steps)) {
          if (!isTerminalStep(st.state) || st.startedAt === null || settled.has(st.key)) continue;
          settled.add(st.key);
          void t.endChildren({ reason: childReason(st.error?.code), stepKey: st.key, wait: false }).catch(() => {});
        }
        if (isTerminalRun(local.state)) {
          // The run ends only once its nested runs have: a root holds its slot until its whole tree has ended.
          const reason = childReason(local.error?.code);
          const waited = await t.endChildren({ reason, wait: true }).catch(() => 0);
          for (const st of leaves(local.steps)) {
            if (st.state === 'failed') await t.runs.appendOutput(t.runId, `${st.key}.err`, tail(paths.stderr(st.key), 512), 512);
          }
          await copy('run', paths.runOutput);
          // A run that started and ended while Redis was away never had a running status mirrored: its worker is
          // recorded here, so the record always says who ran it (docs/scale-out.md, "What lives in Redis").
          await t.runs.recordHolder(t.runId, fields);
          if (waited > 0) {
            // It ended when the last of its nested runs did, not when its own runner did.
            const now = new Date().toISOString();
            mirrored = { ...mirrored, endedAt: now, updatedAt: now };
          }
          await forwardEvents(local);
          // Its agents that never started (steps skipped, appends not taken) give their fan-out claims back to the
          // tree, as a local run's end does (docs/scale-out.md, "Capacity across machines").
          const root = (await t.runs.read(t.runId))?.record.rootRunId ?? t.runId;
          await t.runs.endRun(mirrored, { worker: t.worker.id, host: t.worker.host }, { rootRunId: root, claims: unstartedAgents(mirrored) });
          // A nested launch accepted while the wait above read the children is refused from now on (its parent
          // has ended, in the same script); one accepted just before is asked here.
          await t.endChildren({ reason, wait: false }).catch(() => {});
          return mirrored;
        }
        const text = JSON.stringify(mirrored);
        if (text !== last) {
          last = text;
          if (!(await t.runs.putStatus(mirrored, fields))) {
            // The run was ended from outside (its job declared stalled while Redis was away): nobody reads this run
            // any more, so its agents must not go on (never run twice, never run unseen).
            t.onEndedElsewhere();
          }
        }
      }
      } catch {
        // Redis unreachable (BUSY): the run goes on here and is reported when Redis answers again.
        last = '';
      }
      // A quiet second: the runner may have died without a word; local reconciliation ends its run RUNNER_LOST
      // and removes its worktrees, and the next turn mirrors that.
      if (!(await watch.next(1000))) await reconcileRun(t.local, t.localRunId).catch(() => {});
    }
  } finally {
    watch.close();
  }
}
