/**
 * The tools' contract (docs/contract.md, "Tools") checked in process: the MCP layer over the SDK's in-memory
 * transport, a temp state home, no server process. Shapes, input checks and refusals answer in milliseconds here;
 * what needs real processes (runners, agents, signals) stays in test/e2e and test/faults.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INVALID_INPUT_CASES } from '../helpers/invalid-input.js';
import { writeAgent } from '../helpers/state-home.js';
import { inMemoryServer, textOf, type InMemoryServer } from './in-memory.js';

const TOOLS = ['launch', 'status', 'append', 'restore', 'dismiss', 'cancel', 'agents', 'dashboard'];

describe('tools over the in-memory transport', () => {
  let s: InMemoryServer;
  let outside: string;
  beforeAll(async () => {
    s = await inMemoryServer({}, (t) => {
      writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['/bin/cat'] });
      outside = path.join(t.base, 'outside');
      fs.mkdirSync(outside);
      fs.symlinkSync(outside, path.join(t.root, 'escape'));
    });
  });
  afterAll(async () => s.close());

  /** A call that must be refused with `code`: isError, no structured content, the code first, no stack, nothing written. */
  async function refused(tool: string, args: Record<string, unknown>, code: string): Promise<string> {
    const runsBefore = fs.existsSync(path.join(s.home, 'runs')) ? fs.readdirSync(path.join(s.home, 'runs')) : [];
    const r = await s.call(tool, args);
    const text = textOf(r);
    const what = `${tool} ${JSON.stringify(args).slice(0, 120)} → ${text.slice(0, 200)}`;
    expect(r.isError, what).toBe(true);
    expect(r.structuredContent, what).toBeUndefined();
    expect(text.startsWith(`${code}: `), what).toBe(true);
    expect(text).not.toMatch(/\n\s+at /);
    const runsAfter = fs.existsSync(path.join(s.home, 'runs')) ? fs.readdirSync(path.join(s.home, 'runs')) : [];
    expect(runsAfter).toEqual(runsBefore);
    return text;
  }

  it('lists every tool with a title, a flat input schema, an output schema and annotations', async () => {
    const { tools } = await s.client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...TOOLS].sort());
    for (const t of tools) {
      expect(t.title, t.name).toBeTruthy();
      expect(t.inputSchema.type, t.name).toBe('object');
      for (const k of ['oneOf', 'anyOf', 'allOf', '$ref']) expect(t.inputSchema, `${t.name} ${k}`).not.toHaveProperty(k);
      expect(JSON.stringify(t.inputSchema), t.name).not.toContain('"$ref"');
      expect(t.inputSchema.required ?? [], t.name).toEqual([]);
      expect(t.outputSchema?.type, t.name).toBe('object');
    }
    const by = Object.fromEntries(tools.map((t) => [t.name, t.annotations ?? {}]));
    expect(by.status!.readOnlyHint).toBe(true);
    expect(by.agents!.readOnlyHint).toBe(true);
    expect(by.cancel!.destructiveHint).toBe(true);
    expect(by.dismiss!.destructiveHint).toBe(true);
    for (const n of ['cancel', 'dismiss', 'restore']) expect(by[n]!.idempotentHint, n).toBe(true);
    for (const n of ['launch', 'append']) expect(by[n]!.openWorldHint, n).toBe(true);
  });

  it('answers agents and an empty status list with structured content that matches the output schemas', async () => {
    const agents = await s.call('agents');
    expect(agents.isError).toBeFalsy();
    const list = (agents.structuredContent as { agents: Array<{ name: string; available: boolean }> }).agents;
    expect(list.find((a) => a.name === 'echo')).toMatchObject({ available: true });
    const status = await s.call('status');
    expect(status.isError).toBeFalsy();
    expect(status.structuredContent).toMatchObject({ runs: [] });
    expect(textOf(status).length).toBeGreaterThan(0);
  });

  it('refuses malformed arguments INVALID_INPUT', async () => {
    for (const [tool, args] of INVALID_INPUT_CASES) await refused(tool, args, 'INVALID_INPUT');
  });

  it('refuses an unknown agent, a cwd outside the roots and ids that are not run ids', async () => {
    expect(await refused('launch', { agent: 'nope', task: 'x' }, 'UNKNOWN_AGENT')).toContain('nope');
    await refused('launch', { agent: '../../etc/passwd', task: 'x' }, 'UNKNOWN_AGENT');
    for (const cwd of ['..', outside, '/', 'escape', 'does-not-exist']) {
      expect(await refused('launch', { agent: 'echo', task: 'x', cwd }, 'CWD_NOT_ALLOWED')).toContain(JSON.stringify(cwd));
    }
    for (const runId of ['../../x', `r-${'A'.repeat(24)}`, '%2e%2e%2fx', 'ledger']) {
      await refused('status', { runId }, 'RUN_NOT_FOUND');
      await refused('cancel', { runId }, 'RUN_NOT_FOUND');
      await refused('dismiss', { runId, cancel: true }, 'RUN_NOT_FOUND');
      await refused('append', { runId, step: { agent: 'echo', task: 'x' } }, 'RUN_NOT_FOUND');
    }
  });

  it('restore of unknown sessions reports them and adopts nothing', async () => {
    const r = await s.call('restore', { lineage: ['s-unknown-session-000000'] });
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toMatchObject({ runs: [] });
  });
});
