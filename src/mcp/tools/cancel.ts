import { cancelRun } from '../../manager/cancel.js';
import { invalid, parseInput, refusal, success } from '../results.js';
import { CancelInput, CancelOutput } from '../schemas.js';
import { progress, type ToolDefinition } from '../tool.js';

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
      const r = await cancelRun(env.ctx, a.runId, (ms) => progress(extra, Math.round(ms), 'stopping the run\'s processes'));
      return success({ sessionId: env.ctx.sessionId, ...r });
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
