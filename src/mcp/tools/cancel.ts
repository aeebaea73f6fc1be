import { cancelRun } from '../../manager/cancel.js';
import { invalid, parseInput, refusal, success } from '../results.js';
import { CancelInput, CancelOutput } from '../schemas.js';
import { whileWaiting, type ToolDefinition } from '../tool.js';

export const cancelTool: ToolDefinition = {
  name: 'cancel',
  title: 'Cancel a run',
  description: 'Stop a run and its whole tree (SIGTERM, then SIGKILL after the grace period, verified). Answers with the final state: cancelled, or the state the run had already reached.',
  annotations: { title: 'Cancel a run', readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
  input: CancelInput,
  output: CancelOutput,
  async handler(args, extra, env) {
    try {
      const a = parseInput(CancelInput, args);
      if (a.runId === undefined) throw invalid('runId is required.');
      const runId = a.runId;
      const r = await whileWaiting(extra, () => `stopping the processes of ${runId}`, () => cancelRun(env.ctx, runId));
      return success({ sessionId: env.ctx.sessionId, ...r });
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
