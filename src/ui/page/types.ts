// The shapes the page receives: the server's own types (src/ui/model.ts), imported as types only.
import type { Gauges, ListPage, ListQuery, RunDetail, RunRow, StepView, TreeNode } from '../model.js';

export type { Gauges, ListPage, ListQuery, RunDetail, RunRow, StepView, TreeNode };

export interface OutputTail { key: string; text: string; bytes: number; from: number }

/** What the server announces: runs whose files changed, runs with new output, the gauges now. */
export interface Change { runs: string[]; output: string[]; gauges?: Gauges; /** Refresh whatever is shown (the MCP App's poll). */ all?: boolean }

export type ActionResult = { error?: { code: string; message: string } } & Record<string, unknown>;

/**
 * Where the page gets its data: the dashboard's HTTP server (fetch and server-sent events), or an MCP host through
 * the MCP Apps bridge (tool calls). The view does not know which.
 */
export interface Backend {
  list(q: ListQuery): Promise<ListPage>;
  /** null: the run is not there (removed, or never existed). */
  detail(runId: string): Promise<RunDetail | null>;
  output(runId: string, key: string, bytes: number): Promise<OutputTail | null>;
  act(runId: string, action: 'cancel' | 'dismiss'): Promise<ActionResult>;
  subscribe(onChange: (c: Change) => void, onLive: (live: boolean) => void): void;
}
