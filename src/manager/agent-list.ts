import { locateBackend, loadFullCatalog, catalogFor } from './agent-resolver.js';
import type { ManagerContext } from './context.js';

export interface AgentListing {
  agents: Array<{ name: string; description: string; backend: string; source: string; trusted: boolean; available: boolean; problem?: string; models?: string[] }>;
  refused: Array<{ name?: string; path: string; source: string; reason: string }>;
}

/** The `agents` tool: what can be launched here, and which files were refused (reasons only, never contents). */
export function listAgents(ctx: ManagerContext): AgentListing {
  const full = ctx.nesting ? null : loadFullCatalog(ctx);
  const agents = full ? full.agents : catalogFor(ctx);
  return {
    agents: [...agents.values()].sort((a, b) => a.name.localeCompare(b.name)).map((d) => {
      const { problem } = locateBackend(d, ctx);
      return {
        name: d.name, description: d.description, backend: d.backend, source: d.source, trusted: d.trusted,
        available: problem === null, ...(problem ? { problem } : {}), ...(d.models ? { models: d.models } : {}),
      };
    }),
    refused: (full?.refused ?? []).map((r) => ({ ...(r.name ? { name: r.name } : {}), path: r.path, source: r.source, reason: r.reason })),
  };
}
