import { launch, DEFAULT_CONCURRENCY, type ChainEntryInput, type LaunchInput as ManagerLaunchInput } from '../../manager/launch.js';
import { invalid, parseInput, refusal, success } from '../results.js';
import { LaunchInput, LaunchOutput, MAX_TASK_BYTES } from '../schemas.js';
import { whileWaiting, withCombinedSignal, type ToolDefinition } from '../tool.js';
import type * as z from 'zod';

type ChainEntry = NonNullable<z.output<typeof LaunchInput>['chain']>[number];

function checkTask(task: string, where: string): void {
  const bytes = Buffer.byteLength(task);
  if (bytes > MAX_TASK_BYTES) throw invalid(`${where}: the task is ${bytes} bytes; the limit is ${MAX_TASK_BYTES} (1 MiB). Put large material in a file under the run's cwd and name it in the task.`);
}

/** A chain entry is exactly one of `{ agent, task }` and `{ parallel, concurrency?, failFast? }`. */
export function chainEntry(e: ChainEntry, where: string): ChainEntryInput {
  if (e.parallel !== undefined) {
    if (e.agent !== undefined || e.task !== undefined) throw invalid(`${where}: give either agent+task or parallel, not both.`);
    e.parallel.forEach((m, j) => checkTask(m.task, `${where}.parallel.${j}`));
    return { parallel: e.parallel, concurrency: e.concurrency ?? DEFAULT_CONCURRENCY, failFast: e.failFast ?? false };
  }
  if (e.agent === undefined || e.task === undefined) throw invalid(`${where}: a step needs both agent and task (or parallel: [...]).`);
  if (e.concurrency !== undefined || e.failFast !== undefined) throw invalid(`${where}: concurrency and failFast apply to a parallel group only.`);
  checkTask(e.task, where);
  return { agent: e.agent, task: e.task };
}

/** Which of the three launch shapes the arguments are; anything else is INVALID_INPUT. */
export function toLaunch(a: z.output<typeof LaunchInput>): ManagerLaunchInput {
  const common = { cwd: a.cwd, timeoutMs: a.timeoutMs, label: a.label, model: a.model, isolation: a.isolation, baseRef: a.baseRef, queue: a.queue, queueTimeoutMs: a.queueTimeoutMs };
  const shapes = [a.agent !== undefined || a.task !== undefined, a.tasks !== undefined, a.chain !== undefined].filter(Boolean).length;
  if (shapes !== 1) throw invalid('give exactly one of: agent + task (single), tasks (parallel), or chain. See the tool description for the shapes.');
  if (a.chain !== undefined || a.agent !== undefined) {
    if (a.concurrency !== undefined || a.failFast !== undefined) throw invalid('concurrency and failFast apply to tasks (parallel) or to a parallel entry of a chain.');
  }
  if (a.agent !== undefined || a.task !== undefined) {
    if (a.agent === undefined || a.task === undefined) throw invalid('a single launch needs both agent and task.');
    checkTask(a.task, 'task');
    return { ...common, mode: 'single', step: { agent: a.agent, task: a.task } };
  }
  if (a.tasks !== undefined) {
    a.tasks.forEach((t, i) => checkTask(t.task, `tasks.${i}`));
    return { ...common, mode: 'parallel', group: { parallel: a.tasks, concurrency: a.concurrency ?? DEFAULT_CONCURRENCY, failFast: a.failFast ?? false } };
  }
  return { ...common, mode: 'chain', chain: a.chain!.map((e, i) => chainEntry(e, `chain.${i}`)) };
}

/** The `next` of a launch: models that see only structuredContent learn from it how to wait (docs/clients.md). */
export function launchNext(runId: string): string {
  return `Wait for it with status { runId: "${runId}", waitMs: 30000, until: "terminal" }; repeat while the state is not completed, failed or cancelled, then read output.text.`;
}

export const launchTool: ToolDefinition = {
  name: 'launch',
  title: 'Launch a subagent run',
  description: [
    'Start a background run of one or more subagents and get its runId at once (the run lives on after this call, the server and the client).',
    'Shapes: single { agent, task }; parallel { tasks: [{ agent, task }, …], concurrency?, failFast? };',
    'chain { chain: [ { agent, task } | { parallel: [...] }, … ] } where "{previous}" in a task is replaced by the previous step\'s output.',
    'isolation: "worktree" runs each step in its own git worktree and branch (baseRef: the commit to start from; default HEAD).',
    'Then wait with status { runId, waitMs: 30000 } (repeat until the state is completed, failed or cancelled) and read the output there.',
    'At a full home the run is accepted as state "queued" with queue { position, length } and starts by itself when a slot frees: it needs nothing from you but that same status wait (queue: false refuses instead).',
    'Call agents first to see which agents exist.',
  ].join(' '),
  annotations: { title: 'Launch a subagent run', readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  // A task-augmented call is the run as an MCP task (../tasks.ts); a plain call still answers at once.
  execution: { taskSupport: 'optional' },
  input: LaunchInput,
  output: LaunchOutput,
  async handler(args, extra, env) {
    try {
      const input = toLaunch(parseInput(LaunchInput, args));
      let phase = 'reserve';
      const r = await whileWaiting(extra, () => `launch: ${phase}: waiting for the run's runner`,
        () => withCombinedSignal(extra.signal, env.shutdown, (signal) => launch(env.ctx, input, { signal, onProgress: (p) => { phase = p; } })));
      env.onListChanged();
      const v = { ...r, next: launchNext(r.runId) };
      const what = r.queue ? `Queued ${r.runId} (${r.mode}, position ${r.queue.position} of ${r.queue.length}); it starts by itself when a slot frees.` : `Launched ${r.runId} (${r.mode}, ${r.state}).`;
      return success(v, `${what} ${v.next}\n${JSON.stringify(v, null, 2)}`);
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
