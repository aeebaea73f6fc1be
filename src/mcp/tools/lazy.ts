import type { ToolDefinition } from '../tool.js';

/**
 * Each tool's module, loaded at its first call: an idle server holds only what it has used (a tool's module brings its
 * zod schemas and its part of the manager). The order is tools/list's; a test checks it against ./all.ts.
 */
const LOADERS: Record<string, () => Promise<ToolDefinition>> = {
  launch: async () => (await import('./launch.js')).launchTool,
  status: async () => (await import('./status.js')).statusTool,
  append: async () => (await import('./append.js')).appendTool,
  restore: async () => (await import('./restore.js')).restoreTool,
  dismiss: async () => (await import('./dismiss.js')).dismissTool,
  cancel: async () => (await import('./cancel.js')).cancelTool,
  agents: async () => (await import('./agents.js')).agentsTool,
  dashboard: async () => (await import('./dashboard.js')).dashboardTool,
};

export const TOOL_NAMES: readonly string[] = Object.keys(LOADERS);

const loaded = new Map<string, Promise<ToolDefinition>>();

/** The tool named `name`, or null when there is no such tool. */
export function loadTool(name: string): Promise<ToolDefinition> | null {
  if (!Object.hasOwn(LOADERS, name)) return null;
  let p = loaded.get(name);
  if (!p) {
    p = LOADERS[name]!();
    loaded.set(name, p);
  }
  return p;
}
