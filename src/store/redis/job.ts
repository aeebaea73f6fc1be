/** A BullMQ job's data: what a worker needs to start a run the server accepted (docs/scale-out.md). */
export interface LaunchJob {
  runId: string;
  sessionId: string;
  /** The launch as the tool layer handed it over (src/manager/launch.ts LaunchInput), cwd made absolute. */
  input: Record<string, unknown>;
  /** SUBAGENTS_MAX_ACTIVE_RUNS and SUBAGENTS_MAX_AGENTS of the server that accepted it: the slots it starts under. */
  limit: number;
  maxAgents: number;
  agentSlots: number;
  /** The run tree's budgets set by the accepting server (SUBAGENTS_MAX_SPAWNS_PER_RUN, SUBAGENTS_MAX_DEPTH). */
  treeLimits?: { maxSpawns: number; maxDepth: number };
  /** A nested run (docs/scale-out.md, "Nested delegation"): no active-run slot; its agent slots were taken at acceptance. */
  nested?: boolean;
}
