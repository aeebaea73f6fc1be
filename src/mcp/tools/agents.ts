import { listAgents } from '../../manager/agent-list.js';
import { parseInput, refusal, success } from '../results.js';
import { AgentsInput, AgentsOutput } from '../schemas.js';
import type { ToolDefinition } from '../tool.js';

export const agentsTool: ToolDefinition = {
  name: 'agents',
  title: 'List agents',
  description: 'The agents this server can launch: name, description, backend, where the definition comes from, whether it is trusted and available (and why not). Also lists agent files that were refused and why.',
  annotations: { title: 'List agents', readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  input: AgentsInput,
  output: AgentsOutput,
  async handler(args, _extra, env) {
    try {
      parseInput(AgentsInput, args);
      return success({ ...listAgents(env.ctx) });
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
