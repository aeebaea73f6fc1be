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
  /** Set for a tool a client may call as an MCP task (only launch: ./tasks.ts). */
  execution?: { taskSupport: 'optional' };
  /** Published as the tool's `_meta` (the MCP App's resource for `dashboard`). */
  meta?: Record<string, unknown>;
  input: z.ZodType;
  output: z.ZodType;
  handler: (args: unknown, extra: ToolExtra, env: ToolEnv) => Promise<CallToolResult>;
}

/** Before the first progress note: a call that answers sooner sends none. */
export const FIRST_NOTE_AFTER_MS = 1000;
/** Between progress notes while a call keeps waiting. */
export const NOTE_EVERY_MS = 5000;
/**
 * The least time between a progress note and the call's response. The SDK's client handles a response at once and a
 * notification a microtask later, so a note read in the same chunk as its response finds its token gone ("Received a
 * progress notification for an unknown token", which Claude Code logs as a connection error): a response never
 * follows a note this closely.
 */
export const QUIET_BEFORE_RESPONSE_MS = 200;

/**
 * Runs `work`, sending progress notes only while it actually waits (the request must carry a progress token): the
 * first after FIRST_NOTE_AFTER_MS, then every NOTE_EVERY_MS, `progress` being the seconds waited. None once `work`
 * settled, and the response is held back until the last note is flushed and QUIET_BEFORE_RESPONSE_MS old.
 */
export async function whileWaiting<T>(extra: ToolExtra, message: () => string, work: () => Promise<T>): Promise<T> {
  const token = extra._meta?.progressToken;
  if (token === undefined) return work();
  const started = performance.now();
  let lastNoteAt = -Infinity;
  let sending: Promise<unknown> = Promise.resolve();
  let done = false;
  const note = () => {
    if (done) return;
    lastNoteAt = performance.now();
    const seconds = Math.round((lastNoteAt - started) / 1000);
    sending = extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: seconds, message: message() } }).catch(() => {});
    timer = setTimeout(note, NOTE_EVERY_MS);
  };
  let timer = setTimeout(note, FIRST_NOTE_AFTER_MS);
  try {
    return await work();
  } finally {
    done = true;
    clearTimeout(timer);
    await sending;
    const quietMs = QUIET_BEFORE_RESPONSE_MS - (performance.now() - lastNoteAt);
    if (quietMs > 0) await new Promise((r) => setTimeout(r, quietMs));
  }
}

/**
 * Runs `work` with a signal that aborts when either the client cancels the request or the server shuts down; its
 * listeners go when `work` settles. Not `AbortSignal.any`: on Node 20 each call costs ~50 µs of CPU (weak references
 * and a finalization registry on the server-long shutdown signal), two per launch and status, against ~3 µs here.
 */
export async function withCombinedSignal<T>(a: AbortSignal, b: AbortSignal, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const both = new AbortController();
  const onAbort = () => both.abort();
  if (a.aborted || b.aborted) both.abort();
  else {
    a.addEventListener('abort', onAbort);
    b.addEventListener('abort', onAbort);
  }
  try {
    return await work(both.signal);
  } finally {
    a.removeEventListener('abort', onAbort);
    b.removeEventListener('abort', onAbort);
  }
}
