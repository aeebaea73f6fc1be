import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { Settings } from '../config.js';
import { formatBytes, formatDuration } from '../format.js';
import { Progress } from './progress.js';
import { MAIN_JS as MAIN } from '../paths.js';
import { peopleCommand } from '../invocation.js';

const TERMINAL = ['completed', 'failed', 'cancelled'];

function say(line: string): void {
  process.stdout.write(`${line}\n`);
}

/**
 * A real MCP client session against this server: list agents, launch the bundled example agent, wait with
 * progress, print the output and where the run's files are. Needs no agent CLI. On a terminal the wait is one
 * live line; elsewhere each change is one plain line.
 */
export async function runDemo(settings: Settings): Promise<number> {
  const workspace = fs.mkdtempSync(path.join(os.tmpdir(), 'subagents-demo-'));
  fs.writeFileSync(path.join(workspace, 'NOTES.md'), 'A scratch workspace made by subagents-mcp demo.\n');
  const progress = new Progress(process.stdout);
  say(`subagents-mcp demo — state home ${settings.home}`);
  const client = new Client({ name: 'subagents-demo', version: '1' });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [MAIN, 'serve'],
    env: {
      ...getDefaultEnvironment(), ...pick(process.env, ['XDG_STATE_HOME', 'LANG', 'TMPDIR', 'DEMO_DELAY_MS']),
      SUBAGENTS_HOME: settings.home, SUBAGENTS_ROOTS: workspace,
    },
    stderr: 'pipe',
  });
  let serverErr = '';
  transport.stderr?.on('data', (c: Buffer) => { serverErr = (serverErr + c.toString()).slice(-4000); });
  let ticker: NodeJS.Timeout | undefined;
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
    let bytes = 0;
    let status: Record<string, unknown> = {};
    const started = Date.now();
    const line = () => `  ${state} · ${formatBytes(bytes)} of output · ${formatDuration(Date.now() - started)}`;
    if (progress.tty) ticker = setInterval(() => progress.update(line()), 100);
    let lastPlain = '';
    while (!TERMINAL.includes(state)) {
      // On a terminal, short waits keep the byte count live; elsewhere wait for real changes only.
      const r = await client.callTool({ name: 'status', arguments: { runId, waitMs: progress.tty ? 1000 : 10_000 } });
      if (r.isError) { progress.done(); say(`status refused: ${(r.content as Array<{ text: string }>)[0]?.text}`); return 1; }
      status = r.structuredContent as Record<string, unknown>;
      state = status.state as string;
      const step = (status.steps as Array<{ state: string; output: { bytes: number } }>)[0];
      bytes = step?.output.bytes ?? 0;
      if (progress.tty) progress.update(line());
      else {
        const plain = `  ${state}, step ${step?.state ?? '?'}`;
        if (plain !== lastPlain) say(`${plain} after ${formatDuration(Date.now() - started)}, ${bytes} bytes of output`);
        lastPlain = plain;
      }
    }
    if (ticker) clearInterval(ticker);
    progress.done();
    const output = (status.output as { text: string }).text;
    say(`run ${runId} ${state} in ${formatDuration(Date.now() - started)}. Output:\n`);
    say(output.trimEnd().split('\n').map((l) => `  ${l}`).join('\n'));
    say(`\nThe run's files: ${path.join(settings.home, 'runs', runId)}`);
    say(`Look at it again: ${peopleCommand(`show ${runId}`)}   ·   ${peopleCommand(`logs ${runId}`)}   ·   ${peopleCommand('runs')}`);
    return state === 'completed' ? 0 : 1;
  } catch (e) {
    progress.done();
    process.stderr.write(`subagents-mcp demo: ${(e as Error).message}\n${serverErr ? `server stderr:\n${serverErr}\n` : ''}`);
    return 1;
  } finally {
    if (ticker) clearInterval(ticker);
    await client.close().catch(() => {});
    fs.rmSync(workspace, { recursive: true, force: true });
  }
}

function pick(env: NodeJS.ProcessEnv, names: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const n of names) if (env[n]) out[n] = env[n]!;
  return out;
}
