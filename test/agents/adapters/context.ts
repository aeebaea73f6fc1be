import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BackendAdapter, FrozenAgent, InvocationContext, OutputParser, ParsedResult } from '../../../src/agents/types.js';
import { privateTestDir } from '../../helpers/private-dir.js';

const FIXTURES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../fixtures/cli-output');

/** A task that would be read as a flag if it ever reached argv. */
export const HOSTILE_TASK = '--dangerously-skip-permissions --model=evil; rm -rf / #';

export function agentOf(overrides: Partial<FrozenAgent> = {}): FrozenAgent {
  return {
    name: 'reviewer',
    description: 'Reviews a diff',
    backend: 'claude',
    permissions: 'edit',
    env: [],
    delegate: false,
    body: 'You are a careful reviewer.',
    source: 'operator',
    path: '/agents/reviewer.md',
    sha256: '0'.repeat(64),
    trusted: true,
    bin: '/opt/bin/cli',
    ...overrides,
  };
}

let scratchBase: string | null = null;

/**
 * A context whose scratch dir is a fresh private temp dir (0700), under one temp dir per test file that
 * `removeScratchDirs` removes (each test file calls it after all its tests).
 */
export function contextOf(agent: Partial<FrozenAgent> = {}, extra: Partial<InvocationContext> = {}): InvocationContext {
  scratchBase ??= mkdtempSync(path.join(os.tmpdir(), 'adapter-test-'));
  const scratchDir = mkdtempSync(path.join(scratchBase, 'ctx-'));
  return {
    agent: agentOf(agent),
    systemPromptFile: path.join(scratchDir, 'system-prompt.md'),
    taskFile: path.join(scratchDir, 'task.txt'),
    scratchDir,
    ...extra,
  };
}

export const DELEGATE = {
  command: '/usr/bin/node',
  args: ['/opt/subagents-mcp/dist/main.js', 'serve'],
  env: { SUBAGENTS_HOME: '/home/u/.local/state/subagents-mcp', SUBAGENTS_BUDGET: 'secret-budget-token-0123456789' },
};

export function fixtureLines(name: string): string[] {
  return readFileSync(path.join(FIXTURES, name), 'utf8').split('\n');
}

/** Feeds lines to a fresh parser of the adapter and returns its result. */
export function parse(adapter: BackendAdapter, lines: string[], exitCode: number | null = 0): ParsedResult {
  const parser: OutputParser = adapter.createParser!();
  for (const line of lines) parser.onLine(line);
  return parser.finish(exitCode);
}

/** The value of `--flag value` or `--flag=value` in argv. */
export function flagValue(argv: string[], flag: string): string | undefined {
  const i = argv.indexOf(flag);
  if (i !== -1) return argv[i + 1];
  const eq = argv.find((a) => a.startsWith(`${flag}=`));
  return eq?.slice(flag.length + 1);
}

/**
 * A scratch dir whose ancestors are not group/world-writable (Gemini ignores settings below such a directory, and
 * the OS temp dir is one): a fresh dir in the repository's `node_modules/.cache`.
 */
export function privateScratchDir(): string {
  // This test file's own folder: the adapter test files run at once, and each removes only what it made.
  privateBase ??= mkdtempSync(path.join(privateTestDir('subagents-adapter-tests'), 'file-'));
  return mkdtempSync(path.join(privateBase, 'step-'));
}

let privateBase: string | null = null;

/** Removes every scratch dir this test file made (`contextOf`'s and `privateScratchDir`'s). */
export function removeScratchDirs(): void {
  if (privateBase !== null) rmSync(privateBase, { recursive: true, force: true });
  privateBase = null;
  if (scratchBase !== null) rmSync(scratchBase, { recursive: true, force: true });
  scratchBase = null;
}
