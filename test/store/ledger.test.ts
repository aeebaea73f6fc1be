import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { overrideFsPort } from '../../src/store/fs-port.js';
import { Layout } from '../../src/store/layout.js';
import { readLedger, withLedger } from '../../src/lifecycle/ledger.js';
import type { Ledger } from '../../src/store/ledger.js';
import { REPO } from '../helpers/paths.js';

const run = promisify(execFile);
const me = { pid: process.pid, startTime: 'test' };
const take = (key: string) => (l: Ledger) => {
  l.roots[key] = { at: new Date().toISOString(), server: me, runner: null };
  return Object.keys(l.roots).length;
};

describe('withLedger', () => {
  let home: string;
  let layout: Layout;
  let restore: (() => void) | undefined;
  beforeEach(() => {
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-ledger-'));
    layout = new Layout(home);
  });
  afterEach(() => {
    restore?.();
    restore = undefined;
    fs.rmSync(home, { recursive: true, force: true });
  });

  it('applies every change asked for at once, in order, each answered with its own result', async () => {
    const results = await Promise.all(Array.from({ length: 40 }, (_, i) => withLedger(layout, take(`r${i}`))));
    // Each change saw those asked for before it: the results are 1..40 in call order, whatever the batching.
    expect(results).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    expect(Object.keys(readLedger(layout).roots)).toHaveLength(40);
  });

  it('a change that throws is refused and undone alone; the rest of its batch stands', async () => {
    const failing = withLedger(layout, (l) => {
      l.roots.half = { at: 'x', server: me, runner: null }; // written before it throws: must not survive
      throw new Error('refused');
    });
    const [a, failed, b] = await Promise.allSettled([withLedger(layout, take('a')), failing, withLedger(layout, take('b'))]);
    expect(failed).toMatchObject({ status: 'rejected', reason: { message: 'refused' } });
    expect(a).toMatchObject({ status: 'fulfilled', value: 1 });
    expect(b).toMatchObject({ status: 'fulfilled', value: 2 });
    expect(Object.keys(readLedger(layout).roots).sort()).toEqual(['a', 'b']);
  });

  it('a write that fails refuses every change of its batch and leaves the ledger as it was; the next change works', async () => {
    await withLedger(layout, take('before'));
    restore = overrideFsPort({ fsyncSync: () => { throw Object.assign(new Error('ENOSPC: injected'), { code: 'ENOSPC' }); } });
    const batch = await Promise.allSettled([withLedger(layout, take('x')), withLedger(layout, take('y'))]);
    expect(batch.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    restore();
    restore = undefined;
    expect(Object.keys(readLedger(layout).roots)).toEqual(['before']);
    expect(await withLedger(layout, take('after'))).toBe(2);
  });

  it('a ledger that does not parse, in a home with no live run, is rebuilt empty and written back', async () => {
    fs.writeFileSync(layout.ledgerFile, '{"v":1,"roots":{', { mode: 0o600 });
    expect(await withLedger(layout, (l) => Object.keys(l.roots).length)).toBe(0);
    expect(JSON.parse(fs.readFileSync(layout.ledgerFile, 'utf8'))).toEqual({ v: 1, roots: {}, trees: {}, agents: {} });
  });

  it('is exact across processes: concurrent batches of four processes lose no change', async () => {
    const ledgerJs = pathToFileURL(path.join(REPO, 'dist', 'lifecycle', 'ledger.js')).href;
    const layoutJs = pathToFileURL(path.join(REPO, 'dist', 'store', 'layout.js')).href;
    // Each process asks for 25 changes at once (so they batch), 4 times over; every change is one counter increment.
    const script = `
      const { withLedger } = await import(${JSON.stringify(ledgerJs)});
      const { Layout } = await import(${JSON.stringify(layoutJs)});
      const layout = new Layout(process.argv[1]);
      for (let round = 0; round < 4; round++) {
        await Promise.all(Array.from({ length: 25 }, () => withLedger(layout, (l) => {
          const t = (l.trees.count ??= { used: 0, limit: 1e9, maxDepth: 1 });
          t.used++;
        })));
      }`;
    await Promise.all(Array.from({ length: 4 }, () => run(process.execPath, ['--input-type=module', '-e', script, home])));
    expect(readLedger(layout).trees.count?.used).toBe(400);
  });
});
