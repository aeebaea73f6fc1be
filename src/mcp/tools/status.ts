import { getStatus } from '../../manager/run-status.js';
import { parseInput, refusal, success } from '../results.js';
import { StatusInput, StatusOutput } from '../schemas.js';
import { combinedSignal, progress, type ToolDefinition } from '../tool.js';

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
      // A long-poll tells a client with a progress token at once that it is waiting (then every few seconds).
      if ((q.waitMs ?? 0) > 0) progress(extra, 0, q.runId ? `waiting on ${q.runId}` : 'waiting on the session\'s runs');
      const answer = await getStatus(env.ctx, q, {
        signal: combinedSignal(extra.signal, env.shutdown),
        onProgress: (ms, message) => progress(extra, Math.round(ms), message),
      });
      const { kind, ...rest } = answer;
      if (kind === 'run') {
        const v = rest as Record<string, unknown> & { runId: string; state: string; output: { text: string } };
        return success(v, `Run ${v.runId} is ${v.state}.\n${JSON.stringify(v, null, 2)}`);
      }
      return success(rest as Record<string, unknown>);
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
