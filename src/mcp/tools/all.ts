import { toJsonSchema } from '../schemas.js';
import type { ListedTool } from '../tool-list.js';
import type { ToolDefinition } from '../tool.js';
import { agentsTool } from './agents.js';
import { appendTool } from './append.js';
import { cancelTool } from './cancel.js';
import { dashboardTool } from './dashboard.js';
import { dismissTool } from './dismiss.js';
import { launchTool } from './launch.js';
import { restoreTool } from './restore.js';
import { statusTool } from './status.js';

/** Every tool, in the order tools/list shows them (the build renders the list from these; the server loads each tool lazily: ./lazy.ts). */
export const TOOLS: ToolDefinition[] = [launchTool, statusTool, appendTool, restoreTool, dismissTool, cancelTool, agentsTool, dashboardTool];

/** tools/list as published: each tool's shape, its schemas rendered from zod (the build writes it to a file). */
export function renderToolList(tools: ToolDefinition[] = TOOLS): ListedTool[] {
  return tools.map((t) => ({
    name: t.name, title: t.title, description: t.description, annotations: { ...t.annotations },
    ...(t.execution ? { execution: { ...t.execution } } : {}),
    inputSchema: toJsonSchema(t.input) as ListedTool['inputSchema'], outputSchema: toJsonSchema(t.output) as ListedTool['outputSchema'],
    ...(t.meta ? { _meta: t.meta } : {}),
  }));
}
