import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema, CancelTaskRequestSchema, CompleteRequestSchema, GetTaskPayloadRequestSchema, GetTaskRequestSchema,
  ListResourcesRequestSchema, ListResourceTemplatesRequestSchema, ListTasksRequestSchema, ListToolsRequestSchema,
  ReadResourceRequestSchema, SubscribeRequestSchema, UnsubscribeRequestSchema, type CallToolResult, type CreateTaskResult,
} from '@modelcontextprotocol/sdk/types.js';
import type { Core, CoreOptions } from './core.js';
import { readToolList } from './tool-list.js';

export const INSTRUCTIONS = [
  'subagents: delegate work to other agents as background runs that outlive this conversation turn and this server.',
  '1. agents lists what can be launched. 2. launch returns a runId at once. 3. status { runId, waitMs: 30000 } blocks until the run changes',
  '(repeat until it is completed, failed or cancelled) — use it instead of sleeping between polls. 4. Read the output in that status;',
  'long output is cut to head and tail there, the whole of it is the resource named by output.uri (subagents://runs/{runId}/output, paged with ?offset=&length=).',
  'Parallel work: launch { tasks: [...] }; pipelines: launch { chain: [...] } with "{previous}", and append to add steps to a running chain.',
  'When every slot is busy, launch answers state "queued": the run starts by itself, so it needs nothing but the same status wait (no retries).',
  'dismiss hides a finished run from status listings; cancel stops one.',
  'Every result carries this session\'s sessionId. When you summarise or compact the conversation, carry the newest sessionId along:',
  'after a client restart or in a resumed conversation, call restore { lineage: [that sessionId] } to see those runs again',
  '(its earlier sessions come along; run ids alone do not grant access to another session\'s runs).',
].join(' ');

export interface ServerHandle {
  server: Server;
  /** The core (context, handlers, watcher, sweeper), loaded once. */
  core: () => Promise<Core>;
  close: () => Promise<void>;
  /**
   * For shutdown: stops the core's watcher and sweeper, then waits (at most `maxWaitMs`) for the tool calls under way
   * to answer: aborted launches record their abandonment meanwhile. The transport stays open for their answers.
   */
  stop: (maxWaitMs: number) => Promise<void>;
}

/**
 * Builds the MCP server: the only module that wires the SDK to the manager. Start-up loads the SDK and this file only:
 * tools/list is served from the list the build rendered, and the core (./core.js) loads right after the client's
 * `initialized`, or at the first request that needs it, whichever comes first.
 */
export function createServer(o: Omit<CoreOptions, 'server'> & {
  version: string;
  onClient?: (name: string, version: string) => void;
  /** Settles once the session is in the registry: the core loads after it (every answer naming the session does). */
  registered?: Promise<unknown>;
}): ServerHandle {
  const server = new Server({ name: 'subagents', version: o.version }, {
    capabilities: {
      tools: { listChanged: false },
      resources: { subscribe: true, listChanged: true },
      logging: {},
      completions: {},
      // MCP Tasks for a task-augmented launch (docs/clients.md): handled over runs in ./tasks.ts, not by an SDK task store.
      tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } },
    },
    instructions: INSTRUCTIONS,
    // The SDK validates JSON Schemas only for answers to elicitation requests, which this server never sends. Its
    // default builds Ajv with every format (idle RSS and cold start), and the bundle leaves Ajv out altogether.
    jsonSchemaValidator: { getValidator: () => { throw new Error('this server sends no elicitation requests, so it validates no answers to them'); } },
  });
  let loading: Promise<Core> | null = null;
  let loaded: Core | null = null;
  let closed = false;
  const core = (): Promise<Core> => {
    loading ??= Promise.resolve(o.registered).then(() => import('./core.js')).then((m) => {
      loaded = m.startCore({ ...o, server });
      if (closed) loaded.stop();
      return loaded;
    });
    return loading;
  };

  server.oninitialized = () => {
    const v = server.getClientVersion();
    if (v) o.onClient?.(v.name, v.version);
    // After the answers already queued (tools/list usually follows initialized at once): the core is not needed for them.
    setImmediate(() => { void core().catch((e: unknown) => o.log(`could not load the server core: ${(e as Error).message}`)); });
  };
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: readToolList() ?? (await import('./tools/all.js')).renderToolList(),
  }));
  const calls = new Set<Promise<unknown>>();
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const args = req.params.arguments ?? {};
    const call = core().then((c): Promise<CallToolResult | CreateTaskResult> =>
      (req.params.task ? c.createTask(req.params.name, args, extra) : c.callTool(req.params.name, args, extra)));
    calls.add(call);
    void call.catch(() => {}).finally(() => calls.delete(call));
    return call;
  });
  server.setRequestHandler(GetTaskRequestSchema, async (req) => (await core()).getTask(req.params.taskId));
  server.setRequestHandler(GetTaskPayloadRequestSchema, async (req, extra) => (await core()).taskResult(req.params.taskId, extra));
  server.setRequestHandler(ListTasksRequestSchema, async (req) => (await core()).listTasks(req.params?.cursor));
  server.setRequestHandler(CancelTaskRequestSchema, async (req) => (await core()).cancelTask(req.params.taskId));
  server.setRequestHandler(ListResourcesRequestSchema, async (req) => (await core()).listResources(req.params?.cursor));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: (await core()).resourceTemplates }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => (await core()).readResource(req.params.uri));
  server.setRequestHandler(SubscribeRequestSchema, async (req) => { await (await core()).subscribe(req.params.uri); return {}; });
  server.setRequestHandler(UnsubscribeRequestSchema, async (req) => { (await core()).unsubscribe(req.params.uri); return {}; });
  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const arg = req.params.argument;
    const { values, total } = req.params.ref.type === 'ref/resource'
      ? await (await core()).complete(arg.name, arg.value, req.params.context?.arguments) : { values: [], total: 0 };
    return { completion: { values, total, hasMore: total > values.length } };
  });
  return {
    server,
    core,
    close: async () => { closed = true; loaded?.stop(); await server.close().catch(() => {}); },
    stop: async (maxWaitMs) => {
      closed = true;
      loaded?.stop();
      if (calls.size === 0) return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.allSettled([...calls]), new Promise((r) => { timer = setTimeout(r, maxWaitMs); })]);
      clearTimeout(timer);
    },
  };
}
