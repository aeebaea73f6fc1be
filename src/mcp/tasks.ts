import { ErrorCode, type CallToolResult, type CreateTaskResult, type Task } from '@modelcontextprotocol/sdk/types.js';
import { SubagentError } from '../errors.js';
import { cancelRun } from '../manager/cancel.js';
import { requireVisible } from '../manager/listing.js';
import { freshStatus } from '../manager/run-status.js';
import type { RunStatus } from '../store/run-types.js';
import { listResources } from './resources.js';
import { RpcError } from './rpc-error.js';
import type { ToolEnv, ToolExtra } from './tool.js';
import { loadTool } from './tools/lazy.js';

/**
 * MCP Tasks (protocol 2025-11-25) over runs, docs/clients.md "MCP Tasks": a task-augmented `launch` is the run
 * (task id = run id), and tasks/get, tasks/result, tasks/list and tasks/cancel read and steer that run. Nothing is
 * kept in memory: a task is whatever the run's files say, so it outlives this server like the run does. Handled here
 * rather than through the SDK's task store, whose tasks/cancel only marks the store and never reaches the run.
 */

const isTerminalRun = (state: string): boolean => state === 'completed' || state === 'failed' || state === 'cancelled';

/** How often a client should poll tasks/get: runs take seconds to hours, and tasks/result blocks anyway. */
export const TASK_POLL_INTERVAL_MS = 2000;

/** The task a run is: `queued`/`starting`/`running` are `working`; a run is kept until gc, so no ttl. */
export function taskOf(runId: string, createdAt: string, s: Pick<RunStatus, 'state' | 'updatedAt' | 'error'>): Task {
  const status: Task['status'] = s.state === 'completed' || s.state === 'failed' || s.state === 'cancelled' ? s.state : 'working';
  return {
    taskId: runId,
    status,
    ttl: null,
    createdAt,
    lastUpdatedAt: s.updatedAt,
    pollInterval: TASK_POLL_INTERVAL_MS,
    ...(s.error ? { statusMessage: `${s.error.code}: ${s.error.message}`.slice(0, 500) } : status === 'working' ? { statusMessage: s.state } : {}),
  };
}

/** A refusal as a JSON-RPC error: a task-creating call answers with a task or an error, never a tool result. */
function asRpcError(r: CallToolResult, code = ErrorCode.InvalidParams): RpcError {
  const c = r.content[0];
  return new RpcError(code, c && c.type === 'text' ? c.text : 'refused');
}

/** The run behind `taskId`, as this session may see it; anything else is the spec's invalid-params "not found". */
async function runOf(env: ToolEnv, taskId: string): Promise<{ createdAt: string; status: RunStatus }> {
  try {
    if (env.ctx.distributed) return await env.ctx.distributed.runState(env.ctx, taskId);
    const { createdAt } = requireVisible(env.ctx, taskId);
    return { createdAt, status: await freshStatus(env.ctx, taskId) };
  } catch (e) {
    if (e instanceof SubagentError) throw new RpcError(ErrorCode.InvalidParams, `Task not found: ${e.text}`);
    throw e;
  }
}

/** tools/call with `task`: only `launch` runs as a task; it answers once the run has started, like a plain launch. */
export async function createTask(name: string, args: Record<string, unknown>, extra: ToolExtra, env: ToolEnv): Promise<CreateTaskResult> {
  if (name !== 'launch') throw new RpcError(ErrorCode.MethodNotFound, `${name.slice(0, 64)} does not run as a task (its execution.taskSupport is forbidden); call it without "task". Only launch runs as a task.`);
  const r = await (await loadTool('launch'))!.handler(args, extra, env);
  if (r.isError) throw asRpcError(r);
  return { task: await getTask((r.structuredContent as { runId: string }).runId, env) };
}

export async function getTask(taskId: string, env: ToolEnv): Promise<Task> {
  const { createdAt, status } = await runOf(env, taskId);
  return taskOf(taskId, createdAt, status);
}

/** tasks/result: blocks until the run has ended, then answers exactly what `status { runId }` answers. */
export async function taskResult(taskId: string, extra: ToolExtra, env: ToolEnv): Promise<CallToolResult> {
  await runOf(env, taskId);
  const status = (await loadTool('status'))!;
  for (;;) {
    if (extra.signal.aborted || env.shutdown.aborted) throw new RpcError(ErrorCode.ConnectionClosed, 'tasks/result was cancelled or the server is shutting down; ask again.');
    const r = await status.handler({ runId: taskId, waitMs: env.ctx.settings.maxWaitMs, until: 'terminal' }, extra, env);
    if (r.isError) throw asRpcError(r);
    // Once ended, the answer is a plain status call's (the wait's waitedMs and changed describe that call, not the run).
    if (isTerminalRun((r.structuredContent as { state: RunStatus['state'] }).state)) {
      const final = await status.handler({ runId: taskId }, extra, env);
      if (final.isError) throw asRpcError(final);
      return final;
    }
  }
}

/** tasks/list: the session's runs (dismissed ones left out), newest first, paged like resources/list. */
export async function listTasks(cursor: string | undefined, env: ToolEnv): Promise<{ tasks: Task[]; nextCursor?: string }> {
  const page = await listResources(env.ctx, cursor);
  const tasks: Task[] = [];
  for (const r of page.resources) {
    try { tasks.push(await getTask(r.name, env)); } catch { /* unreadable: left out (status reports it) */ }
  }
  return { tasks, ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) };
}

/** tasks/cancel: cancels the run and its tree (like the cancel tool); an ended run is the spec's invalid-params error. */
export async function cancelTask(taskId: string, env: ToolEnv): Promise<Task> {
  const s = (await runOf(env, taskId)).status;
  if (isTerminalRun(s.state)) throw new RpcError(ErrorCode.InvalidParams, `Cannot cancel task in terminal status: the run ${taskId} already ended ${s.state}.`);
  try {
    await cancelRun(env.ctx, taskId);
  } catch (e) {
    if (e instanceof SubagentError) throw new RpcError(ErrorCode.InvalidParams, e.text);
    throw e;
  }
  return getTask(taskId, env);
}
