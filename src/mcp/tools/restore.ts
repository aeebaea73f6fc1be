import { nestedRestoreRefusal, restore } from '../../manager/sessions.js';
import { invalid, parseInput, refusal, success } from '../results.js';
import { RestoreInput, RestoreOutput } from '../schemas.js';
import type { ToolDefinition } from '../tool.js';

export const restoreTool: ToolDefinition = {
  name: 'restore',
  title: 'Restore runs of earlier sessions',
  description: 'After a client restart or in a resumed conversation: adopt the runs of earlier sessions of this conversation by their sessionIds (newest first, from earlier results). Their ancestors come along, so the newest id is enough. Idempotent; unknown ids are reported.',
  annotations: { title: 'Restore by lineage', readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  input: RestoreInput,
  output: RestoreOutput,
  async handler(args, _extra, env) {
    try {
      if (!env.sessions || env.ctx.nesting) throw nestedRestoreRefusal();
      const a = parseInput(RestoreInput, args);
      if (a.lineage === undefined) throw invalid('lineage is required: the sessionIds of earlier sessions, newest first.');
      const r = await restore(env.ctx, env.sessions, a.lineage);
      env.onListChanged({ existing: true });
      return success({ ...r });
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
