import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderToolList, TOOLS } from '../../src/mcp/tools/all.js';
import { TOOL_NAMES } from '../../src/mcp/tools/lazy.js';
import { readToolList } from '../../src/mcp/tool-list.js';
import { renderSchemas, SCHEMAS_DIR, staleSchemas } from '../../src/scripts/gen-schemas.js';
import { REPO } from '../helpers/paths.js';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, type Started } from '../helpers/server.js';

/** Every `$ref` anywhere in a JSON value, by path. */
function refsIn(v: unknown, at = '$'): string[] {
  if (Array.isArray(v)) return v.flatMap((x, i) => refsIn(x, `${at}[${i}]`));
  if (v && typeof v === 'object') {
    return Object.entries(v).flatMap(([k, x]) => (k === '$ref' ? [at] : refsIn(x, `${at}.${k}`)));
  }
  return [];
}

describe('schemas/', () => {
  it('is up to date with the zod schemas (run `npm run build && npm run schemas` when this fails)', () => {
    expect(staleSchemas()).toEqual([]);
  });

  it('has an input and an output schema for every tool, and the staleness check notices a changed file', () => {
    const names = [...renderSchemas().keys()];
    for (const tool of ['launch', 'status', 'append', 'restore', 'dismiss', 'cancel', 'agents']) {
      expect(names).toContain(`${tool}.input.schema.json`);
      expect(names).toContain(`${tool}.output.schema.json`);
    }
    const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-schemas-'));
    try {
      for (const n of names) fs.copyFileSync(path.join(SCHEMAS_DIR, n), path.join(copy, n));
      expect(staleSchemas(copy)).toEqual([]);
      fs.appendFileSync(path.join(copy, 'status.input.schema.json'), ' ');
      fs.writeFileSync(path.join(copy, 'gone.input.schema.json'), '{}');
      fs.unlinkSync(path.join(copy, 'agents.output.schema.json'));
      expect(staleSchemas(copy).sort()).toEqual(['agents.output.schema.json', 'gone.input.schema.json', 'status.input.schema.json']);
    } finally {
      fs.rmSync(copy, { recursive: true, force: true });
    }
  });
});

describe('dist/tools-list.json (what tools/list serves)', () => {
  it('is what the zod schemas render to, and the built server lists exactly it', async () => {
    const built = readToolList(path.join(REPO, 'dist', 'tools-list.json'));
    expect(built).not.toBeNull();
    expect(built).toEqual(JSON.parse(JSON.stringify(renderToolList())));
    expect(TOOL_NAMES).toEqual(TOOLS.map((t) => t.name)); // the server's lazy loaders name every tool, in order
    const t = tempStateHome();
    const s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
    try {
      expect((await s.client.listTools()).tools).toEqual(built);
    } finally {
      await s.close();
      t.cleanup();
    }
  });
});

describe('published tool schemas (tools/list of the built server)', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let gateFile: string;
  let tools: Array<{ name: string; inputSchema: Record<string, unknown>; outputSchema?: Record<string, unknown>; annotations?: Record<string, unknown>; title?: string }>;
  beforeAll(async () => {
    t = tempStateHome();
    const fake = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', fake, 'echo'] });
    writeAgent(path.join(t.home, 'agents'), 'fails', { backend: 'command', command: ['node', fake, 'exit', '3'] });
    gateFile = path.join(t.base, 'schema-gate');
    writeAgent(path.join(t.home, 'agents'), 'gate', { backend: 'command', command: ['node', fake, 'gate', gateFile] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_SESSION_ID: 'schema-test-session-0001' });
    // After tools/list the SDK client validates every structuredContent against the tool's outputSchema.
    tools = (await s.client.listTools()).tools as typeof tools;
  });
  afterAll(async () => {
    await s.close();
    t.cleanup();
  });

  it('lists the eight tools, each with a title, annotations and an outputSchema', () => {
    expect(tools.map((x) => x.name).sort()).toEqual(['agents', 'append', 'cancel', 'dashboard', 'dismiss', 'launch', 'restore', 'status']);
    for (const tool of tools) {
      expect(tool.title, tool.name).toBeTruthy();
      expect(tool.annotations, tool.name).toBeTruthy();
      expect(tool.outputSchema?.type, tool.name).toBe('object');
    }
    const ann = Object.fromEntries(tools.map((x) => [x.name, x.annotations!]));
    expect(ann.status!.readOnlyHint).toBe(true);
    expect(ann.agents!.readOnlyHint).toBe(true);
    expect(ann.dashboard!.readOnlyHint).toBe(true);
    expect(ann.cancel!.destructiveHint).toBe(true);
    expect(ann.dismiss!.destructiveHint).toBe(true);
    for (const n of ['cancel', 'dismiss', 'restore']) expect(ann[n]!.idempotentHint, n).toBe(true);
    for (const n of ['launch', 'append']) expect(ann[n]!.openWorldHint, n).toBe(true);
  });

  it('every inputSchema is a flat object: no top-level oneOf/anyOf/allOf, no $ref anywhere, every property optional', () => {
    for (const tool of tools) {
      const sch = tool.inputSchema;
      expect(sch.type, tool.name).toBe('object');
      for (const k of ['oneOf', 'anyOf', 'allOf', 'not', '$defs', 'definitions']) expect(sch[k], `${tool.name}.${k}`).toBeUndefined();
      expect(refsIn(sch), tool.name).toEqual([]);
      expect(sch.required ?? [], tool.name).toEqual([]);
      expect(typeof sch.properties, tool.name).toBe('object');
    }
    for (const tool of tools) expect(refsIn(tool.outputSchema), `${tool.name} output`).toEqual([]);
  });

  it('every tool\'s structured result validates against its published outputSchema (single, parallel, chain, failed runs)', async () => {
    const ok = async (tool: string, args: Record<string, unknown>) => {
      const r = await s.call(tool, args); // throws when structuredContent does not match the outputSchema
      expect(r.isError, `${tool}: ${textOf(r)}`).toBeFalsy();
      expect(r.structuredContent, tool).toBeTruthy();
      return sc(r);
    };
    const results: Array<[string, Record<string, any>]> = [];
    const okAll = async (tool: string, args: Record<string, unknown>) => {
      const v = await ok(tool, args);
      results.push([tool, v]);
      return v;
    };
    await okAll('agents', {});
    const launched = [
      await okAll('launch', { agent: 'echo', task: 'one', label: 'single' }),
      await okAll('launch', { tasks: [{ agent: 'echo', task: 'a' }, { agent: 'fails', task: 'b' }] }),
      await okAll('launch', { chain: [{ agent: 'echo', task: 'first' }, { parallel: [{ agent: 'echo', task: '{previous} again' }] }] }),
      await okAll('launch', { agent: 'fails', task: 'x' }),
    ];
    for (const l of launched) {
      let v = await ok('status', { runId: l.runId, waitMs: 20_000, until: 'terminal' });
      while (!['completed', 'failed', 'cancelled'].includes(v.state)) v = await ok('status', { runId: l.runId, waitMs: 20_000, until: 'terminal' });
      await okAll('status', { runId: l.runId, outputBytes: 256 });
    }
    // append needs a chain still running: one held open by a gate file until the step is appended.
    const held = await okAll('launch', { chain: [{ agent: 'gate', task: 'held' }] });
    await okAll('append', { runId: held.runId, step: { agent: 'echo', task: 'after {previous}' } });
    fs.writeFileSync(gateFile, '');
    let h = await ok('status', { runId: held.runId, waitMs: 20_000, until: 'terminal' });
    while (h.state === 'running' || h.state === 'starting') h = await ok('status', { runId: held.runId, waitMs: 20_000, until: 'terminal' });
    expect(h.state).toBe('completed');
    await okAll('status', {});
    await okAll('status', { all: true, waitMs: 100 });
    await okAll('cancel', { runId: launched[0]!.runId });
    await okAll('dismiss', { runId: launched[0]!.runId });
    await okAll('restore', { lineage: ['schema-test-session-0001'] });
    await okAll('dashboard', {});
    await okAll('dashboard', { view: 'run', runId: launched[2]!.runId });
    await okAll('dashboard', { view: 'output', runId: launched[2]!.runId, step: '1.0' });
    // Every success carries the session id (issue 2), so a model can carry it into a resumed conversation.
    for (const l of launched) expect(l.sessionId).toBe('schema-test-session-0001');
    expect(new Set(results.map(([tool]) => tool))).toEqual(new Set(['agents', 'status', 'cancel', 'dismiss', 'restore', 'launch', 'append', 'dashboard']));
    for (const [tool, v] of results) expect(v.sessionId, tool).toBe('schema-test-session-0001');
    for (const tool of tools) {
      expect((tool.outputSchema as { required?: string[] }).required, tool.name).toContain('sessionId');
    }
  });

  it('the files in schemas/ are exactly what tools/list publishes', () => {
    for (const tool of tools) {
      for (const [kind, published] of [['input', tool.inputSchema], ['output', tool.outputSchema]] as const) {
        const file = JSON.parse(fs.readFileSync(path.join(SCHEMAS_DIR, `${tool.name}.${kind}.schema.json`), 'utf8')) as Record<string, unknown>;
        const { $schema: _s, $id: _i, title: _t, ...body } = file;
        expect(body, `${tool.name}.${kind}`).toEqual(published);
      }
    }
  });
});
