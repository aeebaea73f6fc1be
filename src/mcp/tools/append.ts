import { appendStep } from '../../manager/append.js';
import { invalid, parseInput, refusal, success } from '../results.js';
import { AppendInput, AppendOutput } from '../schemas.js';
import type { ToolDefinition } from '../tool.js';
import { chainEntry } from './launch.js';

export const appendTool: ToolDefinition = {
  name: 'append',
  title: 'Append a step to a running chain',
  description: 'Add one step ({ agent, task } or { parallel: [...] }) to the end of a chain run that is still starting or running. It runs after the steps already queued; "{previous}" works as in launch. A chain that has ended answers RUN_NOT_ACTIVE.',
  annotations: { title: 'Append to a chain', readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  input: AppendInput,
  output: AppendOutput,
  async handler(args, _extra, env) {
    try {
      const a = parseInput(AppendInput, args);
      if (a.runId === undefined) throw invalid('runId is required.');
      if (a.step === undefined) throw invalid('step is required: { agent, task } or { parallel: [...] }.');
      const r = await appendStep(env.ctx, a.runId, chainEntry(a.step, 'step'));
      return success({ sessionId: env.ctx.sessionId, ...r });
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
