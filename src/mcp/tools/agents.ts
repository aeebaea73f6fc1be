import { listAgents, listBackends } from '../../manager/agent-list.js';
import { parseInput, refusal, success } from '../results.js';
import { AgentsInput, AgentsOutput } from '../schemas.js';
import type { ToolDefinition } from '../tool.js';

/** The most a call waits for CLIs to print their versions (the rest are reported by a later call). */
const BACKEND_WAIT_MS = 1500;

export const agentsTool: ToolDefinition = {
  name: 'agents',
  title: 'List agents',
  description: 'The agents this server can launch: name, description, backend, where the definition comes from, whether it is trusted and available (and why not). Also lists agent files that were refused and why, and each agent CLI backend: found or not, its version, and why it is unusable.',
  annotations: { title: 'List agents', readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  input: AgentsInput,
  output: AgentsOutput,
  async handler(args, _extra, env) {
    try {
      parseInput(AgentsInput, args);
      const listing = await listAgents(env.ctx);
      // Version probes run once per process; a slow CLI costs the first call at most this long, never more.
      const backends = await listBackends(env.ctx, { waitMs: BACKEND_WAIT_MS });
      return success({ sessionId: env.ctx.sessionId, ...listing, backends });
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
