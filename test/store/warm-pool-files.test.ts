import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { WarmPoolFiles } from '../../src/store/warm-pool.js';

/**
 * The warm pool's claim file (docs/architecture.md, "Warm runners"): created in place, so the runner it was written for
 * must take a claim it finds cut short for none, and a planted name is never written through.
 */
let dir: string;
beforeEach(() => { dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sa-warm-files-'))); });
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const id = { pid: 4242, startTime: '123456' };
const claim = { runDir: '/state/runs/r-x', env: { PATH: '/usr/bin', SECRET_TOKEN: 'x'.repeat(6000) }, pool: { size: 2, maxRuns: 64 } };

describe('warm pool claim', () => {
  it('a claim still being written is no claim yet and is left in place; the whole one is consumed and removed', () => {
    const files = new WarmPoolFiles(dir);
    const key = files.announce(id, 'build@1');
    expect(files.take(key)).toBe(true);
    const whole = JSON.stringify(claim);
    const file = path.join(dir, `${key}.claim`);
    for (const cut of [0, 1, 4096, whole.length - 1]) {
      fs.writeFileSync(file, whole.slice(0, cut), { mode: 0o600 });
      expect(files.consumeClaim(key)).toBeNull();
      expect(fs.existsSync(file)).toBe(true);
      expect(fs.existsSync(path.join(dir, `${key}.taken`))).toBe(true);
    }
    fs.rmSync(file);
    files.writeClaim(key, claim);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(files.consumeClaim(key)).toEqual(claim);
    expect(fs.readdirSync(dir).filter((n) => n.startsWith(`${key}.`))).toEqual([]);
  });

  it('a name planted where the claim goes is never written through', () => {
    const files = new WarmPoolFiles(dir);
    const key = files.announce(id, 'build@1');
    expect(files.take(key)).toBe(true);
    const target = path.join(dir, 'elsewhere');
    fs.writeFileSync(target, 'untouched');
    fs.symlinkSync(target, path.join(dir, `${key}.claim`));
    expect(() => files.writeClaim(key, claim)).toThrow();
    expect(fs.readFileSync(target, 'utf8')).toBe('untouched');
  });
});

describe('a runner that died on its way back to the pool', () => {
  it('forgetting it removes its return log and that log\'s copy, and nothing of another runner', () => {
    const files = new WarmPoolFiles(dir);
    const key = WarmPoolFiles.keyOf(id);
    const other = { pid: 4243, startTime: '123456' };
    const mine = files.returnLog(id, 3);
    const theirs = files.returnLog(other, 3);
    for (const f of [mine, `${mine}.copy`, theirs, `${theirs}.copy`]) fs.writeFileSync(f, 'log', { mode: 0o600 });
    expect(path.basename(mine).startsWith(`boot-${key}-run`)).toBe(true);
    files.forget(key);
    expect(fs.readdirSync(dir).sort()).toEqual([path.basename(theirs), `${path.basename(theirs)}.copy`].sort());
  });
});
