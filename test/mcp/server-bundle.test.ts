/**
 * The built server's shape, which the bundler decides (scripts/bundle.mjs): `serve` resolves one module, dist/server.js,
 * with the YAML parser beside it as the only file it loads later. Chunks made the server resolve ~30 modules at start,
 * and that path work had V8 optimize Node's URL and path helpers at idle (+4 MiB of RSS; docs/performance.md).
 * Servers started from dist/main.js in the other tests check that the bundle works; this checks that it stays one file.
 */
import fs from 'node:fs';
import { isBuiltin } from 'node:module';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';

const DIST = path.join(REPO, 'dist');

function imports(code: string): { statics: string[]; dynamics: string[] } {
  const statics = [
    ...code.matchAll(/(?<![\w$.])import\s*(?:[\w$*{}\s,]+?\s*from\s*)?(["'])([^"'\n]+)\1/g),
    ...code.matchAll(/(?<![\w$.])export\s*[\w$*{}\s,]*?\s*from\s*(["'])([^"'\n]+)\1/g),
  ].map((m) => m[2]!);
  const dynamics = [...code.matchAll(/(?<![\w$.])import\s*\(\s*(["'`])([^"'`]*)\1\s*\)/g)].map((m) => m[2]!);
  return { statics, dynamics };
}

describe.skipIf(!fs.existsSync(path.join(DIST, 'server.js')))('the bundled server (dist/server.js)', () => {
  it('imports only Node built-ins statically, and later only the YAML parser and, in distributed mode, its executor', () => {
    const { statics, dynamics } = imports(fs.readFileSync(path.join(DIST, 'server.js'), 'utf8'));
    expect(statics).toContain('node:fs'); // the scan sees the imports that are there
    expect(statics.filter((s) => !s.startsWith('node:'))).toEqual([]);
    expect(dynamics.filter((s) => !s.startsWith('node:')).sort()).toEqual(['./distributed.js', './yaml.js']);
  });

  it('has a CommonJS twin (dist/server.cjs, for Node 20\'s code cache) that requires only built-ins and has no import() of its own', () => {
    const code = fs.readFileSync(path.join(DIST, 'server.cjs'), 'utf8');
    const required = [...code.matchAll(/(?<![\w$.])require\("([^"]+)"\)/g)].map((m) => m[1]!);
    expect(required).toContain('node:fs');
    expect(required.filter((id) => !isBuiltin(id))).toEqual([]);
    // src/server-load.ts compiles it without a dynamic import callback: the linked files come through its `__load`.
    expect(imports(code).dynamics).toEqual([]);
    expect([...code.matchAll(/__load\("([^"]+)"\)/g)].map((m) => m[1]).sort()).toEqual(['./distributed.js', './yaml.js']);
  });

  it('distributed mode\'s executor (dist/distributed.js) carries BullMQ and ioredis inside: it imports only Node built-ins', () => {
    const { statics, dynamics } = imports(fs.readFileSync(path.join(DIST, 'distributed.js'), 'utf8'));
    expect([...statics, ...dynamics].filter((s) => !s.startsWith('node:'))).toEqual([]);
  });

  it('is what dist/main.js loads to serve, and the command line loads it for `serve` too', () => {
    expect(imports(fs.readFileSync(path.join(DIST, 'main.js'), 'utf8')).dynamics).toEqual(expect.arrayContaining(['./server.js', './cli.js']));
    expect(imports(fs.readFileSync(path.join(DIST, 'cli.js'), 'utf8')).dynamics).toContain('./server.js');
  });

  it('leaves Ajv out (the SDK needs it only to check elicitation answers, and this server sends no elicitation)', () => {
    const code = fs.readFileSync(path.join(DIST, 'server.js'), 'utf8');
    expect(code).toContain('sends no elicitation requests'); // our validator stand-in is there
    expect(code).not.toMatch(/ajv-formats|json-schema-traverse|fast-uri/);
  });
});
