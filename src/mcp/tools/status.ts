import { getStatus } from '../../manager/run-status.js';
import { parseInput, refusal, success } from '../results.js';
import { StatusInput, StatusOutput } from '../schemas.js';
import { whileWaiting, withCombinedSignal, type ToolDefinition } from '../tool.js';

const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

interface RunLike { runId: string; state: string; error?: { code: string } | null; output?: { truncated: boolean; uri: string } }

/** The `next` of a run's status: wait again while it is active, else where its output (or its failure) is. */
export function runNext(v: RunLike): string {
  if (!TERMINAL.has(v.state)) return `Still ${v.state}: call status { runId: "${v.runId}", waitMs: 30000, until: "terminal" } again to wait for its end.`;
  if (v.state === 'completed') {
    return v.output?.truncated ? `Ended completed: output.text is cut to head and tail; the whole output is the resource ${v.output.uri}.` : 'Ended completed: the run\'s output is output.text.';
  }
  return `Ended ${v.state}${v.error ? ` (${v.error.code})` : ''}: error says why; each step's output and stderrTail are in steps.`;
}

export const statusTool: ToolDefinition = {
  name: 'status',
  title: 'Run status (long-poll)',
  description: [
    'Status of one run ({ runId }: state, steps with exit codes and bounded output, the run\'s output) or of all runs of this session ({}).',
    'Use waitMs (up to 45000) to wait for a change instead of sleeping and polling: the call returns as soon as the run\'s state, a step or',
    'pending appends change (until: "terminal" waits for the end), or when time is up; a finished run answers at once.',
    'A queued run shows queue { position, length } and wakes the wait when it starts; waiting is all it needs.',
    'Output beyond outputBytes is cut to head and tail; the whole output is in the resource named by output.uri.',
  ].join(' '),
  annotations: { title: 'Run status', readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  input: StatusInput,
  output: StatusOutput,
  async handler(args, extra, env) {
    try {
      const q = parseInput(StatusInput, args);
      const answer = await whileWaiting(extra, () => (q.runId ? `waiting on ${q.runId}` : 'waiting on the session\'s runs'),
        () => withCombinedSignal(extra.signal, env.shutdown, (signal) => getStatus(env.ctx, q, { signal })));
      if (answer.kind === 'run') {
        const { kind: _kind, ...run } = answer;
        const v = { ...run, next: runNext(run) };
        return success(v, `Run ${v.runId} is ${v.state}. ${v.next}\n${JSON.stringify(v, null, 2)}`);
      }
      const { kind: _kind, ...rest } = answer;
      const list = rest;
      const active = list.runs.filter((x) => !TERMINAL.has(x.state)).length;
      return success(active > 0 ? { ...rest, next: `${active} run(s) active: status { waitMs: 30000 } waits for the next change of any of them.` } : rest);
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
