/**
 * The layer rule of docs/architecture.md ("The layers"), checked on every import in src/: a folder imports only the
 * folders below it. A wrong import fails here with the file, the import and which layers that layer may use.
 *
 * (A library such as dependency-cruiser would need TypeScript's compiler API, which TypeScript 7 does not ship, and
 * Node 22; the imports of this code base are plain `import … from '…'` lines, which this reads.)
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = path.resolve(import.meta.dirname, '..', 'src');

/** Top-level modules shared by every layer (settings, errors, ids, package paths): they import nothing of ours. */
const BASE = 'base';

/** Which layers each layer may import (its own always). Type-only imports: `typesFrom` as well. */
const RULES: Record<string, { imports: string[]; typesFrom?: string[]; why: string }> = {
  bin: { imports: ['server', 'cli', BASE], why: 'the bin picks the server or the command line' },
  server: { imports: ['mcp', BASE], why: "the server's entry: the MCP layer alone, never the command line" },
  scripts: { imports: ['mcp', BASE], why: 'build scripts render what the MCP layer declares' },
  cli: { imports: ['manager', 'mcp', 'ui', 'server', 'worker', BASE], typesFrom: ['store', 'process'], why: 'the command line uses the use cases (and starts the server)' },
  mcp: { imports: ['manager', 'ui', BASE], typesFrom: ['store', 'process'], why: 'the protocol layer translates tool calls into use cases' },
  ui: { imports: ['manager', 'store', BASE], typesFrom: ['process'], why: "the dashboard: its server over the use cases, its view model and row cache over the home's files" },
  worker: { imports: ['manager', 'store', 'process', BASE], why: 'the distributed worker program: local runs through the use cases, mirrored into Redis' },
  manager: { imports: ['lifecycle', 'store', 'process', 'agents', BASE], why: 'policy over the mechanisms' },
  runner: { imports: ['lifecycle', 'store', 'process', 'agents', BASE], why: 'the detached program; beside the manager, never importing it' },
  lifecycle: { imports: ['store', 'process', BASE], why: "a run's life shared by the server and the runner" },
  agents: { imports: [BASE], why: 'agent files and adapters: argv and output parsing only' },
  store: { imports: [BASE], typesFrom: ['process', 'agents'], why: 'files of the state home; no process liveness' },
  process: { imports: [BASE], why: 'OS facts about processes' },
  [BASE]: { imports: [], why: 'shared by everyone' },
};

/**
 * Modules every layer may import: the run vocabulary (record and status shapes, the terminal-state predicates) is
 * data, not mechanism.
 */
const SHARED_MODULES = new Set(['store/run-types.ts']);

function layerOf(rel: string): string {
  if (rel === 'main.ts' || rel === 'server-load.ts') return 'bin'; // server-load.ts: how the bin loads the server
  if (rel === 'server-entry.ts') return 'server';
  const top = rel.split('/')[0]!;
  return rel.includes('/') ? top : BASE;
}

function* sourceFiles(dir: string): Generator<{ rel: string; text: string }> {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) yield* sourceFiles(p);
    else if (e.name.endsWith('.ts')) yield { rel: path.relative(SRC, p).split(path.sep).join('/'), text: fs.readFileSync(p, 'utf8') };
  }
}

interface Import { from: string; to: string; typeOnly: boolean; line: number }

/** Relative imports of a file: static (`import … from`, `export … from`) and dynamic (`import('…')`). */
function importsOf(rel: string, text: string): Import[] {
  const out: Import[] = [];
  const re = /(?:^|\n)\s*(import|export)\s+(type\s+)?[^'";]*?\sfrom\s+'(\.[^']+)'|import\(\s*'(\.[^']+)'\s*\)/g;
  for (let m; (m = re.exec(text)); ) {
    const spec = m[3] ?? m[4]!;
    const target = path.posix.normalize(path.posix.join(path.posix.dirname(rel), spec)).replace(/\.(c|m)?js$/, '.ts');
    out.push({ from: rel, to: target, typeOnly: Boolean(m[2]), line: text.slice(0, m.index + m[0].length - m[0].trimStart().length).split('\n').length });
  }
  return out;
}

/** Every import that breaks the rule, as a message; `files` are paths under src/ with their text. */
function violations(files: Iterable<{ rel: string; text: string }>): string[] {
  const found: string[] = [];
  for (const { rel, text } of files) {
    for (const imp of importsOf(rel, text)) {
      const from = layerOf(imp.from);
      const to = layerOf(imp.to);
      if (from === to || SHARED_MODULES.has(imp.to)) continue;
      const rule = RULES[from];
      if (!rule) { found.push(`src/${imp.from}: the folder ${from}/ has no rule in test/layers.test.ts (and docs/architecture.md): say which layers it may import`); continue; }
      if (rule.imports.includes(to) || (imp.typeOnly && rule.typesFrom?.includes(to))) continue;
      found.push(`src/${imp.from}:${imp.line} imports src/${imp.to}: ${from}/ may import only ${[...rule.imports, ...(rule.typesFrom ?? []).map((t) => `${t} (types)`)].join(', ') || 'nothing of ours'} (${rule.why})`);
    }
  }
  return found;
}

describe('layers', () => {
  it('every import in src/ goes to a layer its layer may use', () => {
    expect(violations(sourceFiles(SRC))).toEqual([]);
  });

  it('names the file, the import and the rule when one does not', () => {
    // A wrong import, as a file under src/store/ would write it.
    expect(violations([{ rel: 'store/probe.ts', text: "import fs from 'node:fs';\nimport { launch } from '../manager/launch.js';\n" }])).toEqual([
      'src/store/probe.ts:2 imports src/manager/launch.ts: store/ may import only base, process (types), agents (types) (files of the state home; no process liveness)',
    ]);
    expect(violations([{ rel: 'store/probe.ts', text: "import type { ProcessIdentity } from '../process/identity.js';\n" }])).toEqual([]);
  });
});
