/**
 * The runner's entry loads only Node built-ins before it reports ready (a launch waits for that, and every package
 * costs tens of ms of start-up): checked on the built entry, since the bundler decides what ends up in it. The
 * supervisor comes later through a computed dynamic import, which a bundler cannot inline and which is allowed here.
 */
import fs from 'node:fs';
import path from 'node:path';
import { builtinModules } from 'node:module';
import { describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';

const ENTRY = path.join(REPO, 'dist', 'runner', 'main.js');

/** Specifiers of static `import … from "x"`, `import "x"` and `export … from "x"` (minified or not). */
function staticSpecifiers(code: string): string[] {
  const out: string[] = [];
  const patterns = [
    /(?<![\w$.])import\s*(?:[\w$*{}\s,]+?\s*from\s*)?(["'])([^"'\n]+)\1/g,
    /(?<![\w$.])export\s*[\w$*{}\s,]*?\s*from\s*(["'])([^"'\n]+)\1/g,
  ];
  for (const re of patterns) for (const m of code.matchAll(re)) out.push(m[2]!);
  return out;
}

describe('the runner entry (dist/runner/main.js)', () => {
  const code = fs.readFileSync(ENTRY, 'utf8');

  it('imports only node: built-ins statically', () => {
    const specs = staticSpecifiers(code);
    expect(specs.length, 'no static import found: the scan is not reading an ESM entry').toBeGreaterThan(0);
    expect(specs).toContain('node:fs'); // the scan sees the imports that are there
    expect(specs.filter((s) => !s.startsWith('node:'))).toEqual([]);
    for (const s of specs) expect(builtinModules, s).toContain(s.slice('node:'.length));
  });

  it('does not load crypto or child_process before ready (each cost ~3-4 ms of every launch)', () => {
    const specs = staticSpecifiers(code);
    expect(specs).not.toContain('node:crypto');
    expect(specs).not.toContain('node:child_process');
  });

  it('loads nothing else by a literal dynamic import or require; the supervisor comes through a computed import', () => {
    const literalDynamic = [...code.matchAll(/(?<![\w$.])import\s*\(\s*(["'`])([^"'`]*)\1\s*\)/g)].map((m) => m[2]!);
    expect(literalDynamic.filter((s) => !s.startsWith('node:'))).toEqual([]);
    const literalRequire = [...code.matchAll(/(?<![\w$.])require\s*\(\s*(["'`])([^"'`]*)\1\s*\)/g)].map((m) => m[2]!);
    expect(literalRequire.filter((s) => !s.startsWith('node:'))).toEqual([]);
    expect(code).not.toMatch(/createRequire/);
    // The deferred supervisor: at least one dynamic import whose argument is computed (not a string literal).
    const computed = [...code.matchAll(/(?<![\w$.])import\s*\(\s*(?!["'`])/g)];
    expect(computed.length).toBeGreaterThan(0);
    expect(code).toContain('runner-supervisor.js');
  });
});
