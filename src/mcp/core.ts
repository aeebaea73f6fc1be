import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { ErrorCode, type CallToolResult, type CreateTaskResult, type Task } from '@modelcontextprotocol/sdk/types.js';
import type { Settings } from '../config.js';
import { SubagentError } from '../errors.js';
import { newSessionId } from '../ids.js';
import { makeStore, type ManagerContext } from '../manager/context.js';
import { resolveNesting } from '../manager/nesting.js';
import { fallbackRoots } from '../manager/roots.js';
import { realpathOrNull } from '../realpath.js';
import { SessionView } from '../manager/sessions.js';
import { Sweeper } from '../manager/sweep.js';
import { startWarmPool } from '../manager/warm-pool.js';
import { distributedRuns } from '../manager/distributed/index.js';
import { DASHBOARD_URI, readAppResource } from './app-resource.js';
import { completeArgument, listResources, readResource, requireResource, RESOURCE_TEMPLATES } from './resources.js';
import { protocolError, refusal } from './results.js';
import { RunWatcher } from './run-watcher.js';
import { FeedNotifier } from './feed-notifier.js';
import * as tasks from './tasks.js';
import type { ToolEnv, ToolExtra } from './tool.js';
import { loadTool, TOOL_NAMES } from './tools/lazy.js';
import { RpcError } from './rpc-error.js';

/**
 * Everything behind the protocol surface: the manager context, the tools' handlers, resources, the run watcher and
 * the sweeper. server.ts loads this module after the start-up exchange (initialize, tools/list), or at the first
 * request that needs it, so a cold start pays only for the SDK.
 */

/** Builds the manager context of one server process. */
export function buildContext(given: Settings, env: NodeJS.ProcessEnv, clientRoots: () => string[] | null, log: (line: string) => void = () => {}): { ctx: ManagerContext; sessions: SessionView } {
  const { layout, store, ledger, sessionRegistry, server } = makeStore(given);
  const sessionId = given.sessionId ?? newSessionId();
  const sessions = new SessionView(sessionRegistry, sessionId, layout.runsDir);
  const nesting = resolveNesting(env, store);
  // Started by an agent of a worker's run: its launches go to that run's Redis and pool, named by the step's budget
  // file, never by the environment (docs/scale-out.md, "Nested delegation").
  const settings: Settings = nesting?.redis ? { ...given, redisUrl: nesting.redis.url, pool: nesting.redis.pool } : given;
  const named = settings.explicitRoots;
  const resolveNamed = () => named?.map(realpathOrNull).filter((r): r is string => r !== null) ?? null;
  let explicit = resolveNamed();
  const fallback = fallbackRoots(settings.cwd, env);
  const ctx: ManagerContext = {
    settings, layout, store, ledger, sessionRegistry, sessionId, server, nesting, env, log,
    // A named root that does not exist yet is looked for again at each use: made later, it is picked up.
    roots: () => {
      if (explicit !== null && explicit.length < named!.length) explicit = resolveNamed();
      return explicit ?? clientRoots() ?? fallback;
    },
    visibleSessions: () => sessions.visible(),
    distributed: distributedRuns(settings),
  };
  return { ctx, sessions };
}

export interface CoreOptions {
  server: Server;
  /** settings.sessionId is this server's session (serve.ts registers it; the core loads once that is done). */
  settings: Settings;
  env: NodeJS.ProcessEnv;
  clientRoots: () => string[] | null;
  shutdown: AbortSignal;
  log: (line: string) => void;
}

export interface Core {
  callTool: (name: string, args: Record<string, unknown>, extra: ToolExtra) => Promise<CallToolResult>;
  listResources: (cursor: string | undefined) => ReturnType<typeof listResources>;
  readResource: (uri: string) => ReturnType<typeof readResource>;
  subscribe: (uri: string) => void | Promise<void>;
  unsubscribe: (uri: string) => void;
  complete: (name: string, value: string, context: Record<string, string> | undefined) => ReturnType<typeof completeArgument>;
  resourceTemplates: typeof RESOURCE_TEMPLATES;
  /** MCP Tasks over runs (./tasks.ts). */
  createTask: (name: string, args: Record<string, unknown>, extra: ToolExtra) => Promise<CreateTaskResult>;
  getTask: (taskId: string) => Promise<Task>;
  taskResult: (taskId: string, extra: ToolExtra) => Promise<CallToolResult>;
  listTasks: (cursor: string | undefined) => Promise<{ tasks: Task[]; nextCursor?: string }>;
  cancelTask: (taskId: string) => Promise<Task>;
  stop: () => void;
}

/** Distributed mode's resource subscriptions: uri → stop listening on the run's channel. */
const distributedSubscriptions = new Map<string, () => void>();

/** A run's resources are updated at each change published on its channel (docs/scale-out.md, "What lives in Redis"). */
async function subscribeDistributed(ctx: ManagerContext, server: Server, uri: string): Promise<void> {
  const runId = /^subagents:\/\/runs\/([^/?#]+)/.exec(uri)?.[1];
  if (!runId) throw new RpcError(ErrorCode.InvalidParams, `Resource not found: ${uri.slice(0, 200)}`);
  try {
    await ctx.distributed!.runState(ctx, runId);
  } catch (e) {
    if (e instanceof SubagentError && e.code === 'RUN_NOT_FOUND') throw new RpcError(ErrorCode.InvalidParams, `Resource not found: ${uri.slice(0, 200)}`);
    throw e;
  }
  if (distributedSubscriptions.has(uri)) return;
  const stop = await ctx.distributed!.watch(runId, () => { server.sendResourceUpdated({ uri }).catch(() => {}); });
  distributedSubscriptions.set(uri, stop);
}

/** Builds the context and starts following runs (watcher) and the state home (sweeper). */
export function startCore(o: CoreOptions): Core {
  const { ctx, sessions } = buildContext(o.settings, o.env, o.clientRoots, o.log);
  const client = o.server.getClientVersion();
  void sessions.adoptRecord(client ? { name: client.name.slice(0, 100), version: client.version.slice(0, 50) } : null).catch(() => { /* best effort */ });
  const watcher = new RunWatcher(ctx, o.server);
  // Distributed mode: the session's runs live in Redis, and so do the events that change its list.
  const notifier = ctx.distributed ? new FeedNotifier(ctx, o.server) : null;
  const onListChanged: ToolEnv['onListChanged'] = (c) => {
    if (notifier && c?.existing) void notifier.lineageChanged();
    watcher.listChanged(c?.existing ?? false);
  };
  const env: ToolEnv = { ctx, shutdown: o.shutdown, sessions: ctx.nesting ? null : sessions, onListChanged };
  watcher.start();
  notifier?.start();
  const stopSweeper = new Sweeper(ctx).start();
  // Distributed mode starts no local runner: its workers do (docs/scale-out.md).
  const stopWarmPool = ctx.distributed ? () => {} : startWarmPool(ctx);
  /** A request other than a tool call: its failure a JSON-RPC error that starts with its code (./results.ts). */
  const coded = async <T>(fn: () => T | Promise<T>): Promise<T> => {
    try { return await fn(); } catch (e) { throw protocolError(e, ctx.log); }
  };
  return {
    callTool: async (name, args, extra) => {
      if (notifier) await notifier.ready;
      const tool = loadTool(name);
      if (!tool) return refusal(new SubagentError('INVALID_INPUT', `no tool named ${JSON.stringify(name.slice(0, 64))}; the tools are ${TOOL_NAMES.join(', ')}.`), ctx.log);
      const result = await (await tool).handler(args, extra, env);
      // What a tool changed shows at the next look at the active runs. `status` and `agents` change nothing a run's
      // own file events do not already announce (a reconciliation writes the run's status).
      if (name !== 'status' && name !== 'agents') watcher.poke();
      return result;
    },
    listResources: (cursor) => listResources(ctx, cursor),
    readResource: (uri) => coded(() => (uri === DASHBOARD_URI ? readAppResource() : readResource(ctx, uri))),
    // Subscribing to a run this session cannot see answers the same not-found error as reading it.
    subscribe: (uri) => coded(async () => {
      if (ctx.distributed) return subscribeDistributed(ctx, o.server, uri);
      requireResource(ctx, uri); watcher.subscribe(uri);
    }),
    unsubscribe: (uri) => { distributedSubscriptions.get(uri)?.(); distributedSubscriptions.delete(uri); watcher.unsubscribe(uri); },
    complete: (name, value, context) => coded(() => completeArgument(ctx, name, value, context)),
    resourceTemplates: RESOURCE_TEMPLATES,
    createTask: async (name, args, extra) => {
      if (notifier) await notifier.ready;
      const r = await tasks.createTask(name, args, extra, env);
      watcher.poke();
      return r;
    },
    getTask: (taskId) => tasks.getTask(taskId, env),
    taskResult: (taskId, extra) => tasks.taskResult(taskId, extra, env),
    listTasks: (cursor) => tasks.listTasks(cursor, env),
    cancelTask: async (taskId) => {
      const t = await tasks.cancelTask(taskId, env);
      watcher.poke();
      return t;
    },
    stop: () => {
      watcher.stop(); notifier?.stop(); stopSweeper(); stopWarmPool();
      for (const stop of distributedSubscriptions.values()) stop();
      void ctx.distributed?.close();
    },
  };
}
