import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult, ClientCapabilities, JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { MAIN_JS } from './paths.js';

export interface Started {
  client: Client;
  transport: StdioClientTransport;
  /** Everything the server wrote to stderr so far. */
  stderr: () => string;
  pid: number;
  close: () => Promise<void>;
  call: (name: string, args?: Record<string, unknown>, opts?: { onprogress?: (p: unknown) => void; signal?: AbortSignal; timeout?: number }) => Promise<CallToolResult>;
  /**
   * Every message the client received, in wire order. Assert what the server sent here, not through `onprogress`:
   * the SDK client runs notification handlers a microtask late but responses at once, so a progress notification
   * read in the same chunk as its response reaches no handler (its handler is gone with the response).
   */
  received: () => JSONRPCMessage[];
}

/**
 * Starts the built server as a real child process and connects the SDK client over stdio, with exactly the
 * environment given (plus the SDK's minimal defaults).
 */
export async function startServer(env: Record<string, string>, o: { args?: string[]; cwd?: string; name?: string; umask?: string; capabilities?: ClientCapabilities } = {}): Promise<Started> {
  const argv = [MAIN_JS, 'serve', ...(o.args ?? [])];
  // With `umask` (octal, e.g. '027'), a shell sets it and execs the server in its place (same pid): the umask the user
  // started it with, which the server must hand on to its agents.
  if (o.umask !== undefined && !/^[0-7]{3,4}$/.test(o.umask)) throw new Error(`bad umask ${o.umask}`);
  const transport = new StdioClientTransport({
    command: o.umask === undefined ? process.execPath : '/bin/sh',
    args: o.umask === undefined ? argv : ['-c', `umask ${o.umask} && exec "$0" "$@"`, process.execPath, ...argv],
    env: { ...getDefaultEnvironment(), ...env },
    cwd: o.cwd,
    stderr: 'pipe',
  });
  let err = '';
  transport.stderr?.on('data', (c: Buffer) => { err += c.toString(); });
  const client = new Client({ name: o.name ?? 'test-client', version: '1.0.0' }, { capabilities: o.capabilities ?? {} });
  await client.connect(transport);
  const received: JSONRPCMessage[] = [];
  const deliver = transport.onmessage;
  transport.onmessage = (m, extra) => { received.push(m); deliver?.(m, extra); };
  // A request served by the server's core (loaded after `initialized`): once it answers, the session is registered
  // and the core's start-up writes are done, so a test's snapshot of the state home never catches one half-done (CI
  // once saw the session file's temp file in a "before" tree).
  await client.listResourceTemplates();
  const call = async (name: string, args: Record<string, unknown> = {}, opts: { onprogress?: (p: unknown) => void; signal?: AbortSignal; timeout?: number } = {}) =>
    (await client.callTool({ name, arguments: args }, undefined, { timeout: opts.timeout ?? 55_000, onprogress: opts.onprogress, signal: opts.signal })) as CallToolResult;
  return {
    client, transport, stderr: () => err, pid: transport.pid!,
    close: async () => { await client.close().catch(() => {}); },
    call,
    received: () => received,
  };
}

/** The text of a tool result's first content block. */
export function textOf(r: CallToolResult): string {
  const c = r.content[0];
  return c && c.type === 'text' ? c.text : '';
}

/** structuredContent typed loosely for assertions. */
export function sc<T = Record<string, any>>(r: CallToolResult): T {
  return r.structuredContent as T;
}

/** Waits (via status long-polls) until the run is terminal; returns the final status. */
export async function waitTerminal(s: Started, runId: string, maxMs = 60_000): Promise<Record<string, any>> {
  const end = Date.now() + maxMs;
  for (;;) {
    const r = await s.call('status', { runId, waitMs: 20_000, until: 'terminal' });
    const v = sc(r);
    if (r.isError) throw new Error(`status failed: ${textOf(r)}`);
    if (['completed', 'failed', 'cancelled'].includes(v.state)) return v;
    if (Date.now() > end) throw new Error(`run ${runId} not terminal after ${maxMs} ms (state ${v.state})`);
  }
}
