import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveBin } from '../../src/agents/resolve-bin.js';

let tmp: string;
beforeEach(() => {
  tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'resolve-bin-')));
});
afterEach(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

function file(rel: string, mode: number): string {
  const p = path.join(tmp, rel);
  fs.mkdirSync(path.dirname(p), { recursive: true });
  fs.writeFileSync(p, '#!/bin/sh\necho hi\n', { mode });
  fs.chmodSync(p, mode);
  return p;
}

describe.skipIf(process.platform === 'win32')('resolveBin', () => {
  it('finds a bare name in the first PATH directory that has it executable', () => {
    const a = path.join(tmp, 'a');
    const b = path.join(tmp, 'b');
    file('a/tool', 0o644); // present but not executable: skipped
    const inB = file('b/tool', 0o755);
    file('c/tool', 0o755);
    expect(resolveBin('tool', { pathEnv: [a, b, path.join(tmp, 'c')].join(path.delimiter) })).toBe(inB);
  });

  it('returns null when nothing is found', () => {
    expect(resolveBin('no-such-tool-xyz', { pathEnv: tmp })).toBeNull();
    expect(resolveBin('tool', { pathEnv: '' })).toBeNull();
    expect(resolveBin('', { pathEnv: tmp })).toBeNull();
  });

  it('skips empty and relative PATH entries (they would resolve in the working directory)', () => {
    file('rel/tool', 0o755);
    const cwd = process.cwd();
    process.chdir(tmp);
    try {
      expect(resolveBin('tool', { pathEnv: ['', '.', 'rel', './rel'].join(path.delimiter) })).toBeNull();
      fs.writeFileSync(path.join(tmp, 'tool'), '#!/bin/sh\n', { mode: 0o755 });
      expect(resolveBin('tool', { pathEnv: `${path.delimiter}` })).toBeNull();
    } finally {
      process.chdir(cwd);
    }
  });

  it('does not accept a directory named like the tool', () => {
    fs.mkdirSync(path.join(tmp, 'd', 'tool'), { recursive: true });
    fs.chmodSync(path.join(tmp, 'd', 'tool'), 0o755);
    expect(resolveBin('tool', { pathEnv: path.join(tmp, 'd') })).toBeNull();
  });

  it('follows a symlink to an executable (how npm and Homebrew install CLIs)', () => {
    const real = file('pkg/cli.js', 0o755);
    fs.mkdirSync(path.join(tmp, 'bin'));
    fs.symlinkSync(real, path.join(tmp, 'bin', 'cli'));
    expect(resolveBin('cli', { pathEnv: path.join(tmp, 'bin') })).toBe(path.join(tmp, 'bin', 'cli'));
    fs.symlinkSync(path.join(tmp, 'missing'), path.join(tmp, 'bin', 'dangling'));
    expect(resolveBin('dangling', { pathEnv: path.join(tmp, 'bin') })).toBeNull();
  });

  it('uses an absolute override only, without falling back to PATH', () => {
    const onPath = file('p/claude', 0o755);
    const custom = file('custom/claude-bin', 0o755);
    const pathEnv = path.join(tmp, 'p');
    expect(resolveBin('claude', { override: custom, pathEnv })).toBe(custom);
    expect(resolveBin('claude', { override: path.join(tmp, 'custom', 'missing'), pathEnv })).toBeNull();
    expect(resolveBin('claude', { override: file('custom/noexec', 0o644), pathEnv })).toBeNull();
    expect(resolveBin('claude', { override: 'custom/claude-bin', pathEnv })).toBeNull();
    expect(resolveBin('claude', { override: 'claude', pathEnv })).toBeNull();
    expect(resolveBin('claude', { override: '', pathEnv })).toBe(onPath); // empty = not set
  });

  it('a name with a slash must be absolute', () => {
    const p = file('x/run', 0o755);
    expect(resolveBin(p, { pathEnv: '' })).toBe(p);
    expect(resolveBin('x/run', { pathEnv: tmp })).toBeNull();
    expect(resolveBin('./run', { pathEnv: path.join(tmp, 'x') })).toBeNull();
  });

  it('uses process.env.PATH when no PATH is given', () => {
    expect(resolveBin('sh')).toMatch(/\/sh$/);
  });
});
