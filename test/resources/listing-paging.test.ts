import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PAGE_SIZE } from '../../src/mcp/resources.js';
import { sc, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { launchOk, world, type World } from '../sessions/session-helpers.js';
import { writeAgent } from '../helpers/state-home.js';

const text = (r: { contents: unknown[] }) => (r.contents[0] as { text: string }).text;
const meta = (r: { contents: unknown[] }) => (r.contents[0] as { _meta: { offset: number; bytes: number; next?: string } })._meta;

/** Follows `_meta.next` from `uri` to the end; returns the pages' texts. */
async function readAll(s: Started, uri: string): Promise<string[]> {
  const pages: string[] = [];
  let next: string | undefined = uri;
  while (next) {
    const r = await s.client.readResource({ uri: next });
    pages.push(text(r));
    const n: string | undefined = meta(r).next;
    expect(n === undefined || n !== next).toBe(true);
    next = n;
    if (pages.length > 10_000) throw new Error('paging does not advance');
  }
  return pages;
}

describe('resources: list pagination, completion, paged reads', () => {
  let w: World;
  let s: Started;
  let flood: string;
  let multi: string;
  let first: string;
  const clones: string[] = [];
  const MULTI = 'aé€😀'.repeat(25) + '\nend';

  beforeAll(async () => {
    w = world();
    s = await w.start();
    const original = await launchOk(s, { agent: 'echo', task: 'the original' });
    first = original.runId;
    flood = (await launchOk(s, { agent: 'flood', task: 'x' })).runId;
    multi = (await launchOk(s, { agent: 'echo', task: MULTI })).runId;
    for (const id of [first, flood, multi]) expect((await waitTerminal(s, id)).state).toBe('completed');
    // More runs than a page, cheaply: copies of a finished run's directory under new ids, each older than the last.
    const runs = path.join(w.t.home, 'runs');
    const rec = JSON.parse(fs.readFileSync(path.join(runs, first, 'run.json'), 'utf8'));
    const base = Date.parse('2020-01-01T00:00:00.000Z');
    for (let i = 0; i < PAGE_SIZE * 2 + 31; i++) {
      const id = `r-${randomBytes(18).toString('base64url')}`;
      // Built aside and renamed in whole, as the server watches the runs directory.
      const tmp = path.join(w.t.base, id);
      fs.cpSync(path.join(runs, first), tmp, { recursive: true });
      fs.writeFileSync(path.join(tmp, 'run.json'), JSON.stringify({ ...rec, runId: id, rootRunId: id, createdAt: new Date(base - i * 1000).toISOString() }));
      const st = JSON.parse(fs.readFileSync(path.join(tmp, 'status.json'), 'utf8'));
      fs.writeFileSync(path.join(tmp, 'status.json'), JSON.stringify({ ...st, runId: id }));
      fs.renameSync(tmp, path.join(runs, id));
      clones.push(id);
    }
    // Listed through the session's run index, as a launch's runs are (runs/ itself is re-read at most every 2 s).
    fs.appendFileSync(path.join(w.t.home, 'index', `${encodeURIComponent(original.sessionId)}.runs`), clones.map((id) => `${id}\n`).join(''));
  });
  afterAll(async () => { await w.cleanup(); });

  it('status {} lists the newest 200 runs inline and counts the rest as omitted', async () => {
    const r = await s.call('status', {});
    expect(r.isError, textOf(r)).toBeFalsy();
    const v = sc(r);
    expect(v.runs.length).toBe(200);
    expect(v.omitted).toBe(3 + clones.length - 200);
    expect(v.runs.slice(3).map((x: any) => x.runId)).toEqual(clones.slice(0, 197));
  });

  it('resources/list pages the session\'s runs newest first; a run launched between pages shifts nothing', async () => {
    const p1 = await s.client.listResources();
    expect(p1.resources.length).toBe(PAGE_SIZE);
    expect(p1.nextCursor).toBeTruthy();
    const late = (await launchOk(s, { agent: 'echo', task: 'launched between pages' })).runId;
    const names = p1.resources.map((r) => r.name);
    let cursor = p1.nextCursor;
    while (cursor) {
      const p = await s.client.listResources({ cursor });
      names.push(...p.resources.map((r) => r.name));
      cursor = p.nextCursor;
    }
    expect(names.length).toBe(new Set(names).size);
    expect(names.slice(0, 3).sort()).toEqual([first, flood, multi].sort());
    expect(names.slice(3)).toEqual(clones);
    expect(names).not.toContain(late);
    const fresh = await s.client.listResources();
    expect(fresh.resources[0]!.name).toBe(late);
    expect(fresh.resources[0]!.uri).toBe(`subagents://runs/${late}`);
    await expect(s.client.listResources({ cursor: 'not-a-cursor' })).rejects.toThrow(/cursor/i);
    await waitTerminal(s, late);
  });

  it('completion offers the session\'s run ids (at most 100) and a run\'s step keys', async () => {
    const ref = { type: 'ref/resource' as const, uri: 'subagents://runs/{runId}/output' };
    const all = await s.client.complete({ ref, argument: { name: 'runId', value: 'r-' } });
    expect(all.completion.values.length).toBe(100);
    expect(all.completion.hasMore).toBe(true);
    expect(all.completion.total).toBeGreaterThan(PAGE_SIZE * 2);
    const one = await s.client.complete({ ref, argument: { name: 'runId', value: flood.slice(0, 12) } });
    expect(one.completion.values).toContain(flood);
    expect(one.completion.values.every((v) => v.startsWith(flood.slice(0, 12)))).toBe(true);
    const steps = await s.client.complete({
      ref: { type: 'ref/resource', uri: 'subagents://runs/{runId}/steps/{index}/output' },
      argument: { name: 'index', value: '' }, context: { arguments: { runId: flood } },
    });
    expect(steps.completion.values).toEqual(['0']);
  });

  it('output over 4 MiB is paged; pages follow _meta.next and join to the whole output', async () => {
    const uri = `subagents://runs/${flood}/output`;
    const pages = await readAll(s, uri);
    expect(pages.length).toBe(2);
    expect(Buffer.byteLength(pages[0]!)).toBe(4 * 1024 * 1024);
    expect(pages.join('').length).toBe(4_500_000);
    const step = await readAll(s, `subagents://runs/${flood}/steps/0/output?offset=4000000`);
    expect(step.join('')).toBe(pages.join('').slice(4_000_000));
    const head = await s.client.readResource({ uri: `${uri}?length=100` });
    expect(meta(head)).toMatchObject({ offset: 0, bytes: 4_500_000, next: `${uri}?offset=100&length=100` });
    const mid = await s.client.readResource({ uri: `${uri}?offset=1024&length=10` });
    expect(text(mid)).toBe('x'.repeat(10));
    expect(meta(mid)).toMatchObject({ offset: 1024, next: `${uri}?offset=1034&length=10` });
    const past = await s.client.readResource({ uri: `${uri}?offset=9999999` });
    expect(text(past)).toBe('');
    expect(meta(past).next).toBeUndefined();
  });

  it('pages never split a multi-byte character, whatever the length', async () => {
    for (const length of [1, 2, 3, 5, 7, 1000]) {
      const pages = await readAll(s, `subagents://runs/${multi}/output?length=${length}`);
      expect(pages.join('')).toBe(MULTI);
      expect(pages.some((p) => p.includes('\uFFFD'))).toBe(false);
    }
    // An offset inside a character moves to the next whole one.
    const inside = await s.client.readResource({ uri: `subagents://runs/${multi}/output?offset=2&length=6` });
    expect(meta(inside).offset).toBe(3);
    expect(text(inside)).toBe('€😀'.slice(0, 1));
  });

  it('status\'s inline head and tail of a long output never split a multi-byte character', async () => {
    for (const outputBytes of [256, 300, 333, 401]) {
      const v = sc(await s.call('status', { runId: multi, outputBytes }));
      for (const view of [v.output, v.steps[0].output] as Array<{ text: string; bytes: number; truncated: boolean }>) {
        expect(view.truncated).toBe(true);
        expect(view.bytes).toBe(Buffer.byteLength(MULTI));
        const [head, tail] = view.text.split(/\n…\[\d+ of \d+ bytes omitted; read the output resource for all of it\]…\n/);
        expect(MULTI.startsWith(head!)).toBe(true);
        expect(MULTI.endsWith(tail!)).toBe(true);
        const omitted = Number(/…\[(\d+) of/.exec(view.text)![1]);
        expect(Buffer.byteLength(head!) + omitted + Buffer.byteLength(tail!)).toBe(Buffer.byteLength(MULTI));
      }
    }
  });

  it('output that is not UTF-8: the text says so (_meta.utf8 false), and ?encoding=base64 pages give its exact bytes', async () => {
    const BYTES = Buffer.from([0x6f, 0x6b, 0xff, 0xfe, 0x80, 0x62, 0x61, 0x64, 0x0a]);
    // In a session of its own: the other cases count this session's runs.
    writeAgent(path.join(w.t.home, 'agents'), 'binary', { backend: 'command', command: ['sh', '-c', "printf 'ok\\377\\376\\200bad\\n'"] });
    const own = await w.start();
    const binary = (await launchOk(own, { agent: 'binary', task: 'x' })).runId;
    expect((await waitTerminal(own, binary)).state).toBe('completed');
    const asText = await own.client.readResource({ uri: `subagents://runs/${binary}/output` });
    expect((asText.contents[0] as { _meta: { utf8?: boolean } })._meta.utf8).toBe(false);
    expect((await s.client.readResource({ uri: `subagents://runs/${multi}/output` })).contents[0]).not.toHaveProperty('_meta.utf8');
    for (const uri of [`subagents://runs/${binary}/output`, `subagents://runs/${binary}/steps/0/output`]) {
      const got: Buffer[] = [];
      let next: string | undefined = `${uri}?length=4&encoding=base64`;
      while (next) {
        const c = (await own.client.readResource({ uri: next })).contents[0] as { blob: string; mimeType: string; _meta: { next?: string; bytes: number } };
        expect(c.mimeType).toBe('application/octet-stream');
        expect(c._meta.bytes).toBe(BYTES.length);
        got.push(Buffer.from(c.blob, 'base64'));
        next = c._meta.next;
      }
      expect(Buffer.concat(got)).toEqual(BYTES);
    }
    await expect(own.client.readResource({ uri: `subagents://runs/${binary}/output?encoding=hex` })).rejects.toThrow(/use encoding=base64/);
  });

  it('events are JSON lines, paged on line boundaries', async () => {
    const uri = `subagents://runs/${first}/events`;
    const whole = text(await s.client.readResource({ uri }));
    const lines = whole.split('\n');
    expect(lines.length).toBeGreaterThan(2);
    for (const line of lines) expect(typeof JSON.parse(line).type).toBe('string');
    const pages = await readAll(s, `${uri}?length=${Math.ceil(Buffer.byteLength(whole) / 3)}`);
    expect(pages.length).toBeGreaterThan(1);
    expect(pages.join('\n')).toBe(whole);
    const status = JSON.parse(text(await s.client.readResource({ uri: `subagents://runs/${first}` })));
    expect(status).toMatchObject({ runId: first, state: 'completed', output: { text: 'the original' } });
  });
});
