import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveBin } from '../../src/agents/resolve-bin.js';
import { resolverForOneLook } from '../../src/manager/agent-resolver.js';

describe('resolverForOneLook', () => {
  let dir: string;
  beforeEach(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-rfl-')); });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  const tool = (name: string) => {
    const f = path.join(dir, name);
    fs.writeFileSync(f, '#!/bin/sh\n', { mode: 0o700 });
    return f;
  };

  it('answers as resolveBin does, once per name and PATH: a look at a catalog sees one moment', () => {
    const a = tool('agent-cli');
    const look = resolverForOneLook();
    expect(look('agent-cli', { pathEnv: dir })).toBe(a);
    expect(look('missing-cli', { pathEnv: dir })).toBeNull();
    tool('missing-cli');
    fs.rmSync(a);
    // Within the look: the first answers stand (the catalog is resolved as of one moment).
    expect(look('agent-cli', { pathEnv: dir })).toBe(a);
    expect(look('missing-cli', { pathEnv: dir })).toBeNull();
    // Another PATH, or an override, is another question.
    expect(look('missing-cli', { pathEnv: `${dir}${path.delimiter}/nonexistent` })).toBe(path.join(dir, 'missing-cli'));
    expect(look('agent-cli', { override: path.join(dir, 'missing-cli') })).toBe(path.join(dir, 'missing-cli'));
    // The next look sees the files as they are now.
    const next = resolverForOneLook();
    expect(next('agent-cli', { pathEnv: dir })).toBeNull();
    expect(next('missing-cli', { pathEnv: dir })).toBe(resolveBin('missing-cli', { pathEnv: dir }));
  });
});
