/**
 * Mirrors one local run into Redis while it lives (docs/scale-out.md, "What lives in Redis"): its status at each change
 * (each step's evidence names this worker's host), its steps' output up to the cap, and its end, which returns its
 * slots. Woken by the local run directory's changes, with a slow look behind them, as local waiters are.
 */
import fs from 'node:fs';
import type { ManagerContext } from '../manager/context.js';
import type { RedisRuns } from '../store/redis/run-store.js';
import { isTerminalRun, type RunStatus, type StepStatus } from '../store/run-types.js';
import { DirWatch } from '../wait.js';

export interface MirrorTarget {
  /** Called when Redis already holds an end this worker did not write (RUNNER_LOST after a long outage, a cancel). */
  onEndedElsewhere: () => void;
  runs: RedisRuns;
  local: ManagerContext;
  runId: string;
  localRunId: string;
  worker: { id: string; host: string };
  capBytes: number;
}

/** Bytes of `file` from `offset` on (at most 1 MiB a call); empty when there are none. */
function readFrom(file: string, offset: number): Buffer {
  let fd: number;
  try { fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW); } catch { return Buffer.alloc(0); }
  try {
    const size = fs.fstatSync(fd).size;
    if (size <= offset) return Buffer.alloc(0);
    const buf = Buffer.alloc(Math.min(size - offset, 1024 * 1024));
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
  const copyOutputs = async (s: RunStatus) => {
    for (const st of leaves(s.steps)) await copy(st.key, paths.output(st.key));
  };
  const watch = new DirWatch([paths.dir, paths.outDir]);
  try {
    for (;;) {
      try {
      const local = t.local.store.readStatus(t.localRunId);
      if (local) {
        await copyOutputs(local);
        const mirrored = translate(local, t.runId, t.worker.host);
        if (isTerminalRun(local.state)) {
          for (const st of leaves(local.steps)) {
            if (st.state === 'failed') await t.runs.appendOutput(t.runId, `${st.key}.err`, tail(paths.stderr(st.key), 512), 512);
          }
          await copy('run', paths.runOutput);
          // A run that started and ended while Redis was away never had a running status mirrored: its worker is
          // recorded here, so the record always says who ran it (docs/scale-out.md, "What lives in Redis").
          await t.runs.recordHolder(t.runId, fields);
          await t.runs.endRun(mirrored);
          await t.runs.event(t.runId, { type: 'ended', state: local.state, worker: t.worker.id, host: t.worker.host }).catch(() => {});
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
      await watch.next(1000);
    }
  } finally {
    watch.close();
  }
}
