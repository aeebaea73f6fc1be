import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderSchemas, SCHEMAS_DIR, staleSchemas } from '../../src/scripts/gen-schemas.js';
import { tempStateHome } from '../helpers/state-home.js';
import { startServer, type Started } from '../helpers/server.js';

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

describe('published tool schemas (tools/list of the built server)', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let tools: Array<{ name: string; inputSchema: Record<string, unknown>; outputSchema?: Record<string, unknown>; annotations?: Record<string, unknown>; title?: string }>;
  beforeAll(async () => {
    t = tempStateHome();
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
    tools = (await s.client.listTools()).tools as typeof tools;
  });
  afterAll(async () => {
    await s.close();
    t.cleanup();
  });

  it('lists the seven tools, each with a title, annotations and an outputSchema', () => {
    expect(tools.map((x) => x.name).sort()).toEqual(['agents', 'append', 'cancel', 'dismiss', 'launch', 'restore', 'status']);
    for (const tool of tools) {
      expect(tool.title, tool.name).toBeTruthy();
      expect(tool.annotations, tool.name).toBeTruthy();
      expect(tool.outputSchema?.type, tool.name).toBe('object');
    }
    const ann = Object.fromEntries(tools.map((x) => [x.name, x.annotations!]));
    expect(ann.status!.readOnlyHint).toBe(true);
    expect(ann.agents!.readOnlyHint).toBe(true);
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
