import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { loadSettings } from '../config.js';

const MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'main.js');

function say(line: string): void {
  process.stdout.write(`${line}\n`);
}

/**
 * A real MCP client session against this server: list agents, launch the bundled example agent, wait with
 * progress, print the output and where the run's files are. Needs no agent CLI.
 */
export async function runDemo(_args: string[]): Promise<number> {
  const settings = loadSettings(process.env);
  const workspace = fs.mkdtempSync(path.join(os.tmpdir(), 'subagents-demo-'));
  fs.writeFileSync(path.join(workspace, 'NOTES.md'), 'A scratch workspace made by subagents-mcp demo.\n');
  const tty = process.stdout.isTTY;
  say(`subagents-mcp demo — state home ${settings.home}`);
  const client = new Client({ name: 'subagents-demo', version: '1' });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [MAIN, 'serve'],
    env: { ...getDefaultEnvironment(), ...pick(process.env, ['SUBAGENTS_HOME', 'XDG_STATE_HOME', 'LANG', 'TMPDIR']), SUBAGENTS_ROOTS: workspace },
    stderr: 'pipe',
  });
  try {
    await client.connect(transport);
    const agents = await client.callTool({ name: 'agents', arguments: {} });
    const list = (agents.structuredContent as { agents: Array<{ name: string; available: boolean }> }).agents;
    say(`agents: ${list.map((a) => `${a.name}${a.available ? '' : ' (unavailable)'}`).join(', ')}`);
    const task = 'Review this plan: launch returns a run id at once, status waits for changes, and the run survives restarts.';
    const launched = await client.callTool({ name: 'launch', arguments: { agent: 'demo-summarizer', task, label: 'demo' } });
    if (launched.isError) {
      say(`launch refused: ${(launched.content as Array<{ text: string }>)[0]?.text}`);
      return 1;
    }
    const { runId, sessionId } = launched.structuredContent as { runId: string; sessionId: string };
    say(`launched ${runId} (session ${sessionId})`);
    let state = 'starting';
    let status: Record<string, unknown> = {};
    const started = Date.now();
    while (!['completed', 'failed', 'cancelled'].includes(state)) {
      const r = await client.callTool({ name: 'status', arguments: { runId, waitMs: 10000 } });
      status = r.structuredContent as Record<string, unknown>;
      state = status.state as string;
      const secs = ((Date.now() - started) / 1000).toFixed(1);
      const step = (status.steps as Array<{ output: { bytes: number } }>)[0];
      const line = `  ${state} after ${secs}s, ${step?.output.bytes ?? 0} bytes of output`;
      if (tty) process.stdout.write(`\r${line}   `);
      else say(line);
    }
    if (tty) process.stdout.write('\n');
    const output = (status.output as { text: string }).text;
    say(`run ${runId} ${state}. Output:\n`);
    say(output.trimEnd().split('\n').map((l) => `  ${l}`).join('\n'));
    say(`\nThe run's files: ${path.join(settings.home, 'runs', runId)}`);
    say(`Try: subagents-mcp show ${runId}`);
    return state === 'completed' ? 0 : 1;
  } finally {
    await client.close().catch(() => {});
    fs.rmSync(workspace, { recursive: true, force: true });
  }
}

function pick(env: NodeJS.ProcessEnv, names: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const n of names) if (env[n]) out[n] = env[n]!;
  return out;
}
