import fs from 'node:fs';
import path from 'node:path';
import { FIXTURE_AGENTS, REPO } from '../helpers/paths.js';

/** Fake agent CLIs (test/fixtures/bin/claude speaks Claude Code's stream-json print mode). */
export const FIXTURE_BIN = path.join(REPO, 'test', 'fixtures', 'bin');
export const FAKE_CLAUDE = path.join(FIXTURE_BIN, 'claude');
export const FAKE_AGENT = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

/** A PATH with node on it and, when asked, the fake CLIs first. Nothing else of the test machine's PATH. */
export function pathWith(...dirs: string[]): string {
  return [...dirs, path.dirname(process.execPath), '/usr/bin', '/bin'].join(path.delimiter);
}

/** What the fake claude recorded of one invocation ($CLAUDE_CONFIG_DIR/fake-claude-calls/<pid>.json). */
export interface ClaudeCall {
  pid: number;
  argv: string[];
  cwd: string;
  task: string;
  systemPrompt: string | null;
  systemPromptMode: string | null;
  mcpConfig: { mcpServers: Record<string, { type?: string; command: string; args: string[]; env: Record<string, string> }> } | null;
  mcpConfigMode: string | null;
  envNames: string[];
}

export function claudeCalls(configDir: string): ClaudeCall[] {
  const dir = path.join(configDir, 'fake-claude-calls');
  let names: string[];
  try { names = fs.readdirSync(dir); } catch { return []; }
  return names.map((n) => JSON.parse(fs.readFileSync(path.join(dir, n), 'utf8')) as ClaudeCall);
}

/** The recorded call whose task contains `marker`. */
export function callFor(configDir: string, marker: string): ClaudeCall {
  const found = claudeCalls(configDir).filter((c) => c.task.includes(marker));
  if (found.length !== 1) throw new Error(`expected one fake claude call with ${JSON.stringify(marker)}, found ${found.length}`);
  return found[0]!;
}

/** The value of `--flag=value` in argv (the claude adapter joins every value to its flag). */
export function flag(argv: string[], name: string): string | undefined {
  const hit = argv.find((a) => a.startsWith(`${name}=`));
  return hit === undefined ? undefined : hit.slice(name.length + 1);
}
