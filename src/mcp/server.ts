import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema, CompleteRequestSchema, ListResourcesRequestSchema, ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema, ReadResourceRequestSchema, SubscribeRequestSchema, UnsubscribeRequestSchema,
  type CallToolResult,
} from '@modelcontextprotocol/sdk/types.js';
import type { ManagerContext } from '../manager/context.js';
import type { SessionView } from '../manager/sessions.js';
import { refusal } from './results.js';
import { completeArgument, listResources, readResource, requireResource, RESOURCE_TEMPLATES } from './resources.js';
import { toJsonSchema } from './schemas.js';
import { RunWatcher } from './run-watcher.js';
import type { ToolDefinition, ToolEnv } from './tool.js';
import { agentsTool } from './tools/agents.js';
import { appendTool } from './tools/append.js';
import { cancelTool } from './tools/cancel.js';
import { dismissTool } from './tools/dismiss.js';
import { launchTool } from './tools/launch.js';
import { restoreTool } from './tools/restore.js';
import { statusTool } from './tools/status.js';

export const TOOLS: ToolDefinition[] = [launchTool, statusTool, appendTool, restoreTool, dismissTool, cancelTool, agentsTool];

export const INSTRUCTIONS = [
  'subagents: delegate work to other agents as background runs that outlive this conversation turn and this server.',
  '1. agents lists what can be launched. 2. launch returns a runId at once. 3. status { runId, waitMs: 30000 } blocks until the run changes',
  '(repeat until it is completed, failed or cancelled) — use it instead of sleeping between polls. 4. Read the output in that status;',
  'long output is cut to head and tail there, the whole of it is the resource named by output.uri (subagents://runs/{runId}/output, paged with ?offset=&length=).',
  'Parallel work: launch { tasks: [...] }; pipelines: launch { chain: [...] } with "{previous}", and append to add steps to a running chain.',
  'dismiss hides a finished run from status listings; cancel stops one.',
  'Every result carries this session\'s sessionId. When you summarise or compact the conversation, carry the newest sessionId along:',
  'after a client restart or in a resumed conversation, call restore { lineage: [that sessionId] } to see those runs again',
  '(its earlier sessions come along; run ids alone do not grant access to another session\'s runs).',
].join(' ');

export interface ServerHandle {
  server: Server;
  watcher: RunWatcher;
  close: () => Promise<void>;
}

/** Builds the MCP server: the only module that wires the SDK to the manager. */
export function createServer(ctx: ManagerContext, o: { version: string; shutdown: AbortSignal; sessions: SessionView | null; onClient?: (name: string, version: string) => void }): ServerHandle {
  const server = new Server({ name: 'subagents', version: o.version }, {
    capabilities: {
      tools: { listChanged: false },
      resources: { subscribe: true, listChanged: true },
      logging: {},
      completions: {},
    },
    instructions: INSTRUCTIONS,
  });
  const watcher = new RunWatcher(ctx, server);
  const env: ToolEnv = { ctx, shutdown: o.shutdown, sessions: o.sessions, onListChanged: () => watcher.listChanged() };
  const byName = new Map(TOOLS.map((t) => [t.name, t]));

  server.oninitialized = () => {
    const v = server.getClientVersion();
    if (v) o.onClient?.(v.name, v.version);
  };
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: TOOLS.map((t) => ({
      name: t.name, title: t.title, description: t.description, annotations: t.annotations,
      inputSchema: toJsonSchema(t.input) as { type: 'object' }, outputSchema: toJsonSchema(t.output) as { type: 'object' },
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra): Promise<CallToolResult> => {
    const tool = byName.get(req.params.name);
    if (!tool) return refusal(new (await import('../errors.js')).SubagentError('INVALID_INPUT', `no tool named ${JSON.stringify(req.params.name.slice(0, 64))}; the tools are ${TOOLS.map((t) => t.name).join(', ')}.`), ctx.log);
    const result = await tool.handler(req.params.arguments ?? {}, extra, env);
    watcher.poke();
    return result;
  });
  server.setRequestHandler(ListResourcesRequestSchema, async (req) => listResources(ctx, req.params?.cursor));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: RESOURCE_TEMPLATES }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => readResource(ctx, req.params.uri));
  // Subscribing to a run this session cannot see answers the same not-found error as reading it.
  server.setRequestHandler(SubscribeRequestSchema, async (req) => { requireResource(ctx, req.params.uri); watcher.subscribe(req.params.uri); return {}; });
  server.setRequestHandler(UnsubscribeRequestSchema, async (req) => { watcher.unsubscribe(req.params.uri); return {}; });
  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const arg = req.params.argument;
    const { values, total } = req.params.ref.type === 'ref/resource'
      ? completeArgument(ctx, arg.name, arg.value, req.params.context?.arguments) : { values: [], total: 0 };
    return { completion: { values, total, hasMore: total > values.length } };
  });
  return {
    server,
    watcher,
    close: async () => { watcher.stop(); await server.close().catch(() => {}); },
  };
}
