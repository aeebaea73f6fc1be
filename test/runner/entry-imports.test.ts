/**
 * The runner's entry loads only Node built-ins before it reports ready (a launch waits for that, and every package
 * costs tens of ms of start-up): checked on the built entry the server starts (the bundled build's CommonJS file),
 * since the bundler decides what ends up in it. The supervisor comes later through a computed require, which a
 * bundler cannot inline and which is allowed here.
 */
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { builtinModules } from 'node:module';
import { describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';

const ENTRY = path.join(REPO, 'dist', 'runner', 'main.cjs');

/** Specifiers of literal `require("x")` calls (minified or not). */
function requiredSpecifiers(code: string): string[] {
  return [...code.matchAll(/(?<![\w$.])require\s*\(\s*(["'`])([^"'`\n]+)\1\s*\)/g)].map((m) => m[2]!);
}

describe('the runner entry (dist/runner/main.cjs)', () => {
  const code = fs.readFileSync(ENTRY, 'utf8');

  it('is the entry the built server starts', async () => {
    const built = (await import(pathToFileURL(path.join(REPO, 'dist', 'paths.js')).href)) as { RUNNER_MAIN: string };
    expect(built.RUNNER_MAIN).toBe(ENTRY);
  });

  it('requires only node: built-ins', () => {
    const specs = requiredSpecifiers(code);
    expect(specs.length, 'no require found: the scan is not reading a CommonJS entry').toBeGreaterThan(0);
    expect(specs).toContain('node:fs'); // the scan sees the requires that are there
    expect(specs.filter((s) => !s.startsWith('node:'))).toEqual([]);
    for (const s of specs) expect(builtinModules, s).toContain(s.slice('node:'.length));
  });

  it('does not load crypto or child_process before ready (each cost ~3-4 ms of every launch)', () => {
    const specs = requiredSpecifiers(code);
    expect(specs).not.toContain('node:crypto');
    expect(specs).not.toContain('node:child_process');
  });

  it('loads nothing else by a literal import; the supervisor comes through a computed require', () => {
    const literalDynamic = [...code.matchAll(/(?<![\w$.])import\s*\(\s*(["'`])([^"'`]*)\1\s*\)/g)].map((m) => m[2]!);
    expect(literalDynamic.filter((s) => !s.startsWith('node:'))).toEqual([]);
    expect(code).not.toMatch(/createRequire/);
    // The deferred supervisor: at least one require whose argument is computed (not a string literal).
    const computed = [...code.matchAll(/(?<![\w$.])require\s*\(\s*(?!["'`])/g)];
    expect(computed.length).toBeGreaterThan(0);
    expect(code).toContain('runner-supervisor.cjs');
  });
});
