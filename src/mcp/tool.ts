import type { CallToolResult, ServerNotification, ServerRequest, ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type * as z from 'zod';
import type { ManagerContext } from '../manager/context.js';
import type { SessionView } from '../manager/sessions.js';

export type ToolExtra = RequestHandlerExtra<ServerRequest, ServerNotification>;

export interface ToolEnv {
  ctx: ManagerContext;
  /** Aborted when the server shuts down (in-flight launches are abandoned cleanly). */
  shutdown: AbortSignal;
  /**
   * Resources changed: a run was launched, or (`existing`) runs already listed changed: adopted by restore, or dismissed.
   */
  onListChanged: (o?: { existing?: boolean }) => void;
  sessions: SessionView | null;
}

/** One tool: its published shape and its handler (which validates its own input). */
export interface ToolDefinition {
  name: string;
  title: string;
  description: string;
  annotations: ToolAnnotations;
  /** Published as the tool's `_meta` (the MCP App's resource for `dashboard`). */
  meta?: Record<string, unknown>;
  input: z.ZodType;
  output: z.ZodType;
  handler: (args: unknown, extra: ToolExtra, env: ToolEnv) => Promise<CallToolResult>;
}

/** Sends a progress notification when the request carried a progress token; never fails the call. */
export function progress(extra: ToolExtra, progressValue: number, message: string, total?: number): void {
  const token = extra._meta?.progressToken;
  if (token === undefined) return;
  void extra.sendNotification({
    method: 'notifications/progress',
    params: { progressToken: token, progress: progressValue, ...(total !== undefined ? { total } : {}), message },
  }).catch(() => {});
}

/** Aborts when either the client cancels the request or the server shuts down. */
export function combinedSignal(a: AbortSignal, b: AbortSignal): AbortSignal {
  return AbortSignal.any([a, b]);
}
