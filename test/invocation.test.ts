/**
 * The command printed for people (demo's closing hint, doctor, refusal texts): `subagents-mcp` only when that name
 * on PATH is this installation, else the exact `node …/dist/main.js` that works. Real files and symlinks, no spawning.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { invocationPrefix } from '../src/invocation.js';

describe('invocationPrefix', () => {
  let base: string;
  let mainJs: string;
  let nodeBin: string;
  beforeAll(() => {
    base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sa-invocation-')));
    mainJs = path.join(base, 'pkg', 'dist', 'main.js');
    fs.mkdirSync(path.dirname(mainJs), { recursive: true });
    fs.writeFileSync(mainJs, '#!/usr/bin/env node\n', { mode: 0o755 });
    // A global install: <prefix>/bin/subagents-mcp → the package's dist/main.js, node beside it.
    fs.mkdirSync(path.join(base, 'global', 'bin'), { recursive: true });
    fs.symlinkSync(mainJs, path.join(base, 'global', 'bin', 'subagents-mcp'));
    nodeBin = path.join(base, 'global', 'bin', 'node');
    fs.symlinkSync(process.execPath, nodeBin);
    // Another installation of the same name elsewhere.
    const other = path.join(base, 'other', 'dist', 'main.js');
    fs.mkdirSync(path.dirname(other), { recursive: true });
    fs.writeFileSync(other, '#!/usr/bin/env node\n', { mode: 0o755 });
    fs.mkdirSync(path.join(base, 'other-bin'));
    fs.symlinkSync(other, path.join(base, 'other-bin', 'subagents-mcp'));
  });
  afterAll(() => fs.rmSync(base, { recursive: true, force: true }));

  it('is the bare name when PATH finds this very installation (through its symlink)', () => {
    expect(invocationPrefix([path.join(base, 'global', 'bin')].join(path.delimiter), mainJs, process.execPath)).toBe('subagents-mcp');
  });

  it('is node and the absolute entry when the name on PATH is another installation, or missing', () => {
    const nodeDir = path.join(base, 'global', 'bin');
    for (const pathEnv of [[path.join(base, 'other-bin'), nodeDir], [path.join(base, 'nowhere'), 'relative/bin']]) {
      const p = invocationPrefix(pathEnv.join(path.delimiter), mainJs, process.execPath);
      expect(p.endsWith(` ${mainJs}`), p).toBe(true);
    }
    // The first entry wins, as in a shell.
    expect(invocationPrefix([path.join(base, 'other-bin'), nodeDir].join(path.delimiter), mainJs, process.execPath)).toBe(`node ${mainJs}`);
  });

  it('names the running node by its absolute path when `node` on PATH is another one', () => {
    expect(invocationPrefix(path.join(base, 'nowhere'), mainJs, process.execPath)).toBe(`${process.execPath} ${mainJs}`);
  });

  it('quotes paths a shell would split', () => {
    const spaced = path.join(base, 'my pkg', 'dist', 'main.js');
    fs.mkdirSync(path.dirname(spaced), { recursive: true });
    fs.writeFileSync(spaced, '', { mode: 0o755 });
    expect(invocationPrefix(path.join(base, 'global', 'bin'), spaced, process.execPath)).toBe(`node '${spaced}'`);
  });
});
