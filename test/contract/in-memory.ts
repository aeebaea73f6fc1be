import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { tempStateHome } from '../helpers/state-home.js';

const REPO = path.resolve(import.meta.dirname, '../..');
/** The built modules (paths to the tool list and the runner derive from dist/, as in the shipped server). */
const dist = async <T>(rel: string): Promise<T> => (await import(pathToFileURL(path.join(REPO, 'dist', rel)).href)) as T;

export interface InMemoryServer {
  client: Client;
  home: string;
  root: string;
  base: string;
  /** Calls a tool; the client checks a success's structured content against the tool's output schema. */
  call: (name: string, args?: Record<string, unknown>) => Promise<CallToolResult>;
  close: () => Promise<void>;
}

/**
 * This server's MCP layer in this process, over the SDK's in-memory transport and a temp state home: the protocol
 * surface, the tools' input checks and refusals, with no process spawned. `env` adds settings (SUBAGENTS_*).
 */
export async function inMemoryServer(env: Record<string, string> = {}, prepare?: (t: { home: string; root: string; base: string }) => void): Promise<InMemoryServer> {
  const t = tempStateHome('sa-contract-');
  prepare?.(t);
  const { loadSettings } = await dist<typeof import('../../src/config.js')>('config.js');
  const { openStateHome } = await dist<typeof import('../../src/store/state-home.js')>('store/state-home.js');
  const { createServer } = await dist<typeof import('../../src/mcp/server.js')>('mcp/server.js');
  const { newSessionId } = await dist<typeof import('../../src/ids.js')>('ids.js');
  const fullEnv = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env };
  const settings = { ...loadSettings(fullEnv, {}, t.root), sessionId: newSessionId() };
  openStateHome(settings.home);
  const shutdown = new AbortController();
  const handle = createServer({ version: '0.0.0-test', settings, env: fullEnv, clientRoots: () => null, shutdown: shutdown.signal, log: () => {} });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await handle.server.connect(serverSide);
  const client = new Client({ name: 'contract-test', version: '1' });
  await client.connect(clientSide);
  return {
    client, ...t,
    call: async (name, args = {}) => (await client.callTool({ name, arguments: args })) as CallToolResult,
    close: async () => {
      shutdown.abort();
      await client.close();
      await handle.close();
      t.cleanup();
    },
  };
}

export const textOf = (r: CallToolResult): string => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('');
