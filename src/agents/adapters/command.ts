import type { BackendAdapter } from '../types.js';

/**
 * An operator-defined command: the argv from the agent file, the task on stdin, stdout verbatim as the output,
 * success = exit 0. `${agentDir}` in an argument is the directory of the agent file (so a file can ship its script).
 */
export const commandAdapter: BackendAdapter = {
  backend: 'command',
  binName: '',
  credentialEnv: [],
  supportsDelegate: false,
  versionArgs: [],
  buildInvocation(ctx) {
    const argv = ctx.agent.command ?? [];
    return { argv: [ctx.agent.bin, ...argv.slice(1).map((a) => expandAgentDir(a, ctx.agent.path))], taskVia: 'stdin' };
  },
};

export function expandAgentDir(arg: string, agentFile: string): string {
  const dir = agentFile.slice(0, Math.max(agentFile.lastIndexOf('/'), 0)) || '/';
  return arg.split('${agentDir}').join(dir);
}
