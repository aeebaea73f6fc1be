import { dismissRun } from '../../manager/dismiss.js';
import { invalid, parseInput, refusal, success } from '../results.js';
import { DismissInput, DismissOutput } from '../schemas.js';
import type { ToolDefinition } from '../tool.js';

export const dismissTool: ToolDefinition = {
  name: 'dismiss',
  title: 'Dismiss a run from listings',
  description: 'Hide a finished run from status listings (still readable by runId; listed with all: true). An active run needs cancel: true. Dismissing never frees capacity by itself.',
  annotations: { title: 'Dismiss a run', readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
  input: DismissInput,
  output: DismissOutput,
  async handler(args, _extra, env) {
    try {
      const a = parseInput(DismissInput, args);
      if (a.runId === undefined) throw invalid('runId is required.');
      const r = await dismissRun(env.ctx, a.runId, a.cancel ?? false);
      env.onListChanged({ existing: true });
      return success({ sessionId: env.ctx.sessionId, ...r });
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
